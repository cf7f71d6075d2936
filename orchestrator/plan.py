"""Config -> workloads: the exact command and environment of every process of a run.

The local backend starts these commands as processes; a Kubernetes backend would turn the same workloads
into pod specs. Services receive nothing but this command and this environment.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from drl.config import ExperimentConfig

TRAINER, LEARNER = "trainer", "learner"


@dataclass(frozen=True)
class Workload:
    """One role's processes: ``replicas`` of one command and environment, replica ``i`` told its index in
    ``per_replica_env``. The trainer's K replicas are the group of learners: rank 0 is the process named
    ``trainer``, ranks 1 .. K-1 are named ``learner-<r>`` and play the role ``learner``."""

    role: str
    replicas: int
    command: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    per_replica_env: str = ""  # name of the variable holding the replica index, if any
    first_index: int = 0  # the first replica's index (learners: 1, learner 0 being the trainer)

    def indices(self) -> range:
        return range(self.first_index, self.first_index + self.replicas)

    def replica_role(self, index: int) -> str:
        return LEARNER if self.role == TRAINER and index > 0 else self.role

    def replica_env(self, index: int) -> dict[str, str]:
        env = dict(self.env)
        if self.per_replica_env:
            env[self.per_replica_env] = str(index)
        return env

    def replica_name(self, index: int) -> str:
        if self.role == TRAINER:
            return TRAINER if index == 0 else f"{LEARNER}-{index}"
        return f"{self.role}-{index}" if self.replicas > 1 or self.per_replica_env else self.role


def plan(
    cfg: ExperimentConfig,
    *,
    run: str,
    run_dir: str,
    memory_url: str,
    store_url: str,
    python: str = "python",
    steps_done: int = 0,
    learner_address: str = "127.0.0.1",
    learner_port: int = 0,
    trainer_writes_run_files: bool = False,
    tracking_uri: str = "",
) -> list[Workload]:
    """The workloads of a run: the trainer, ``cfg.workers`` rollout workers and one evaluator. With
    ``cfg.learners`` K > 1 the trainer has K replicas, ranks 0 to K - 1 of one group (``DRL_LEARNER_RANK``; rank 0
    is the trainer, ranks 1 .. K - 1 its learners ``learner-1`` ...), meeting at ``learner_address:learner_port`` (``MASTER_ADDR``/``MASTER_PORT``, as torchrun
    names them; the trainer, rank 0, hosts the rendezvous).

    ``steps_done`` (a resumed run) is what the newest checkpoint already covers; workers share the rest.
    ``trainer_writes_run_files``: the backend has nobody beside the run to write its ``config.json`` and
    ``summary.json`` (Kubernetes), so the trainer does (``DRL_RUN_FILES=trainer``).
    ``tracking_uri``: with ``--track mlflow``, the evaluator's ``MLFLOW_TRACKING_URI`` (local processes inherit
    the orchestrator's environment anyway).
    """
    common = {
        "DRL_CONFIG": cfg.to_json(),
        "DRL_RUN": run,
        "DRL_RUN_DIR": run_dir,
        "DRL_MEMORY_URL": memory_url,
        "DRL_STORE": store_url,
        "DRL_STEPS_DONE": str(steps_done),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    }
    trainer_env = dict(common)
    if cfg.trainer_threads:
        trainer_env["OMP_NUM_THREADS"] = str(cfg.trainer_threads)
    else:
        del trainer_env["OMP_NUM_THREADS"]  # the trainer sizes its threads itself (drl.process.usable_cpus)
    if cfg.learners > 1:
        trainer_env.update({"MASTER_ADDR": learner_address, "MASTER_PORT": str(learner_port)})
    if trainer_writes_run_files:
        trainer_env["DRL_RUN_FILES"] = "trainer"
    workloads = [
        Workload(
            TRAINER,
            cfg.learners,
            (python, "-m", "services.trainer"),
            trainer_env,
            "DRL_LEARNER_RANK" if cfg.learners > 1 else "",
        ),
        Workload("rollout", cfg.workers, (python, "-m", "services.rollout"), common, "DRL_WORKER_INDEX"),
        Workload(
            "evaluator",
            1,
            (python, "-m", "services.evaluator"),
            {**common, "MLFLOW_TRACKING_URI": tracking_uri} if cfg.track == "mlflow" and tracking_uri else common,
        ),
    ]
    return workloads
