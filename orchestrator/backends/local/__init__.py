"""The local backend: every workload replica as a process on this machine, beside a private memory server.

``run``: the orchestrator of one run (``LocalRun``: start, supervise, scale, stop, summarise);
``control``: the same run seen from another command (``status``, ``stop``, ``scale``), through its run folder and
its services' control endpoints.
"""
