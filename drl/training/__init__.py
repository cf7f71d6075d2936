"""The trainer's library: what a trainer process does between the memory backend and a learner.

``ingest`` takes entries from the experience readers (dedupe by (worker, seq), dead letters, the ledgers),
``membership`` knows which workers take part and when all are done, ``pacing`` keeps the samples-per-insert ratio
and the policy lag, ``learning`` and ``replay`` hold what a learner trains on, ``collective`` joins a learner group,
``checkpointing`` and ``accounting`` save and balance the run's counts. Only builders (``drl.algorithms.*.builder``)
and the trainer's shell import it: the algorithms' math stays apart from it.
"""
