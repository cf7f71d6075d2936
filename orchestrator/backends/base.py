"""The orchestrator backend interface: what ``drl-orchestrate`` asks of the place where a run's processes live.

Coach names three pluggable interfaces; this is the orchestrator's. Both backends run the same workloads
(``orchestrator.plan``): the local one as processes on this machine, the Kubernetes one as pods. The command
line resolves the configuration and parses each verb's flags once, then calls the backend named by
``--backend`` (``orchestrator.backends.BACKENDS``), so a verb is written once and a backend is one object.

A backend that cannot do a verb (a local run has no manifests to render; a Kubernetes run cannot be stopped
cleanly from outside the cluster yet) raises ``UserError`` with one line saying what to do instead.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from drl.errors import UserError

if TYPE_CHECKING:
    from drl.config import ExperimentConfig


@dataclass(frozen=True)
class Deployment:
    """Where and how a run is deployed, as the command line says: never part of the configuration, so that the
    same configuration runs on either backend."""

    backend: str = ""
    """``local`` or ``kubernetes``; empty when not given (each verb has its default)."""
    namespace: str = ""
    """The Kubernetes namespace; empty: the kubeconfig's current one (else ``default``)."""
    image: str = ""
    """The drl image of a Kubernetes run's pods; empty: ``manifests.DEFAULT_IMAGE``."""
    s3_image: str = ""
    """The image of a Kubernetes run's own S3 server (SeaweedFS); empty: ``manifests.S3_IMAGE``."""
    s3_storage: str = ""
    """The run's own S3 server's ``/data``: the size of its PVC, or ``emptydir`` (lost with its pod); empty:
    ``manifests.S3_STORAGE``."""
    s3_storage_class: str = ""
    """The StorageClass of the S3 server's PVC; empty: the cluster's default class."""
    profile: str = ""
    """Requests and limits of every component, by name (``manifests.PROFILES``); empty: the chart's defaults.
    ``local`` also picks ``manifests.LOCAL_IMAGES`` (never pulled) and no PVC where the flags above name none."""
    resources: tuple[str, ...] = ()
    """``ROLE.requests|limits.cpu|memory=QUANTITY`` settings over the profile (``manifests.resources_for``)."""
    pending_timeout: float | None = None
    """Seconds a pod of a followed Kubernetes run may stay unschedulable or uncreatable before the run is given
    up (exit 1); 0: never; None: ``run.PENDING_TIMEOUT_S``."""
    detach: bool = False
    """Return once the run is started instead of following it."""
    output: str = ""
    """The folder of the local runs, for the verbs that find a run by name; empty: ``runs``."""


class Backend(Protocol):
    """One place runs are deployed to. ``run`` prints progress and returns the command's exit code (0: the run
    reached its steps or target; 1: it failed; 130: interrupted); the other verbs return 0 or 1 and print what
    they did; bad input is a ``UserError``."""

    name: str

    def check(self, deployment: Deployment, resume: bool = False) -> None:
        """Refuses deployment options this backend cannot honour, before the configuration is resolved (which
        may read a run folder or build an environment)."""

    def run(self, cfg: ExperimentConfig, deployment: Deployment, resume: bool = False) -> int:
        """Starts a run of ``cfg`` (with ``resume``: from its newest checkpoint) and, unless detached, follows it
        to its end."""

    def render(self, cfg: ExperimentConfig, deployment: Deployment) -> str:
        """What ``run`` would create, as text (Kubernetes: the manifests as a YAML stream), creating nothing."""

    def status(self, run: str | None, deployment: Deployment) -> int:
        """Prints one line per process of the run (None: the newest run, where the backend can tell)."""

    def stop(self, run: str, deployment: Deployment, timeout: float) -> int:
        """Ends the run cleanly (everything collected is consumed, a final checkpoint written) and prints its
        summary; 1 when it did not end within ``timeout`` seconds."""

    def scale(self, run: str, workers: int, deployment: Deployment, timeout: float) -> int:
        """Brings the running run to ``workers`` rollout workers; removed workers hand in what they collected."""

    def delete(self, run: str, deployment: Deployment) -> int:
        """Removes what the backend created for the run."""


def check_tracking(cfg: ExperimentConfig, local: bool) -> None:
    """Refuses ``--track mlflow`` before a run starts when the evaluator could not track it: no
    ``MLFLOW_TRACKING_URI``, MLflow's client missing here (``local``: the evaluator runs in this environment; a
    Kubernetes run's image must have it, ``drl[track]``), or an HTTP tracking server that does not answer its
    ``/health`` check."""
    if cfg.track != "mlflow":
        return
    uri = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:
        raise UserError("--track mlflow needs MLFLOW_TRACKING_URI (the tracking server's address)")
    if local and importlib.util.find_spec("mlflow") is None:
        raise UserError("--track mlflow needs MLflow's client: pip install 'drl[track]'")
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=10) as reply:
                reply.read()
        except (OSError, ValueError) as exc:
            raise UserError(f"--track mlflow: the MLflow server at {uri} does not answer ({exc})") from None


def warn_if_too_short_to_learn(cfg: ExperimentConfig, ended: dict | None = None) -> None:
    """A line on stderr when a replay learner makes no gradient update: as a run starts, when its
    ``--learning-starts`` is not below ``--steps``; as it ends (``ended``: its summary), when it made none. A first
    short try of a preset otherwise ends with exit 0 and nothing learned."""
    from drl.algorithms import get as get_algorithm

    if not get_algorithm(cfg.algorithm).replay:
        return
    line = None
    if ended is None and cfg.learning_starts >= cfg.steps:
        line = (
            f"--learning-starts {cfg.learning_starts:,} is not below --steps {cfg.steps:,}: the learner makes no "
            "gradient update in this run (lower --learning-starts or raise --steps)"
        )
    elif ended is not None and ended.get("updates") == 0:
        line = (
            f"the learner made no gradient update: it starts after --learning-starts {cfg.learning_starts:,} "
            f"transitions and the run consumed {ended.get('transitions_consumed') or 0:,}"
        )
    if line:
        print(f"drl: warning: {line}", file=sys.stderr)


LARGE_POLICY_LAG = 8.0
"""Versions of policy lag above which a run's start says how old its data will be (``note_a_large_policy_lag``)."""


def policy_lag_note(cfg: ExperimentConfig) -> str | None:
    """How many versions old the run's ASYNC data will be when its trainer is the bound, why, and what changes it;
    None where the algorithm's estimate (``Algorithm.policy_lag``) stays within ``LARGE_POLICY_LAG``. A note, not
    a warning: V-trace corrects for the lag, and what the lag costs or gains depends on the task
    (bench/README.md, "The policy lag on a large machine")."""
    from drl.algorithms import get as get_algorithm

    algorithm = get_algorithm(cfg.algorithm)
    lag = algorithm.policy_lag(cfg)
    if lag is None or lag <= LARGE_POLICY_LAG:
        return None
    return (
        f"{cfg.algorithm}'s data will be about {lag:.0f} policy versions old when the trainer is the bound: "
        f"{cfg.workers} workers each hold an entry of {algorithm.entry_transitions(cfg):,} transitions "
        f"(--envs-per-worker {cfg.envs_per_worker} x --{algorithm.name}.segment {algorithm.segment_steps(cfg)}) "
        f"while the backlog holds {cfg.memory_shards * cfg.max_backlog_entries} more; fewer envs per worker, shorter segments or a "
        "smaller --max-backlog-entries make it fresher, and --max-policy-lag drops what is older"
    )


def note_a_large_policy_lag(cfg: ExperimentConfig) -> None:
    """``policy_lag_note`` on stderr as a run starts."""
    line = policy_lag_note(cfg)
    if line:
        print(f"drl: note: {line}", file=sys.stderr)
