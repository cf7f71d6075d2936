"""The local backend: every workload replica as a process on this machine, beside a private memory server.

``launch``: the checks before a run starts, its folder, the foreground or detached orchestrator; ``run``: the
orchestrator of one run (``LocalRun``: start, supervise, scale, stop, summarise); ``control``: the same run seen
from another command (``status``, ``stop``, ``scale``), through its run folder and its services' control
endpoints.
"""

from __future__ import annotations

from drl.config import ExperimentConfig
from drl.errors import UserError
from orchestrator.backends.base import Deployment
from orchestrator.backends.local.launch import DEFAULT_OUTPUT


class LocalBackend:
    """``orchestrator.backends.base.Backend`` on this machine; runs are found by name in ``--output``."""

    name = "local"

    def check(self, deployment: Deployment, resume: bool = False) -> None:
        given = [
            name
            for name in ("namespace", "image", "s3_image", "s3_storage", "s3_storage_class", "profile", "resources")
            if getattr(deployment, name)
        ]
        if deployment.pending_timeout is not None:
            given.append("pending_timeout")
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} applies to --backend kubernetes only")

    def run(self, cfg: ExperimentConfig, deployment: Deployment, resume: bool = False) -> int:
        from orchestrator.backends.local.launch import start

        return start(cfg, resume=resume, detach=deployment.detach)

    def render(self, cfg: ExperimentConfig, deployment: Deployment) -> str:
        raise UserError("render prints Kubernetes manifests; --backend local has none")

    def status(self, run: str | None, deployment: Deployment) -> int:
        from orchestrator.backends.local import control

        return control.status(run, deployment.output or DEFAULT_OUTPUT)

    def stop(self, run: str, deployment: Deployment, timeout: float) -> int:
        from orchestrator.backends.local import control

        return control.stop(run, deployment.output or DEFAULT_OUTPUT, timeout)

    def scale(self, run: str, workers: int, deployment: Deployment, timeout: float) -> int:
        from orchestrator.backends.local import scaling

        return scaling.scale(run, workers, deployment.output or DEFAULT_OUTPUT, timeout)

    def delete(self, run: str, deployment: Deployment) -> int:
        raise UserError(
            f"delete removes a Kubernetes run's objects; a local run's files stay in its folder in "
            f"--output (end a running one with drl-orchestrate stop {run})"
        )
