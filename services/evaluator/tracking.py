"""Experiment tracking on MLflow (``--track mlflow``), done by the evaluator: the one process of every deployment
(local, Kubernetes, the chart) that sees each evaluated policy version, for the whole run.

A run of drl is one MLflow run in the experiment ``--track-experiment``, named as the drl run: its resolved
configuration as parameters (nested blocks as dotted keys), each evaluation's mean, spread and best return and
the trainer's throughput then (from its status) as metrics whose step is the env steps the version was trained
on, and, when the evaluator ends, the last evaluated version exported as ONNX (``drl.algorithms.exporting``)
with a small JSON that says what it holds. The MLflow run's id is kept in the run's data store
(``tracking.json``), so that a replaced evaluator and a resumed run log into the same MLflow run instead of a
new one. The server is the one ``MLFLOW_TRACKING_URI`` names, as in every MLflow client; MLflow's own variables
(tokens, TLS) apply.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from drl.errors import UserError

log = logging.getLogger("drl.evaluator")

KEPT = "tracking.json"
THROUGHPUT = ("transitions_per_s", "updates", "replay_size", "backlog", "duplicates_dropped", "lost")
"""The trainer's status fields logged (as ``trainer/<field>``) with each evaluation."""
PARAM_CHUNK = 100


def flat_params(data: dict, prefix: str = "") -> dict[str, str]:
    """A configuration's JSON form as MLflow parameters: nested blocks as dotted keys, values as text (lists
    comma-separated, None as an empty string)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            out[name] = ",".join(str(v) for v in value)
        else:
            out[name] = "" if value is None else str(value)
    return out


class MlflowTracker:
    """Logs a drl run to an MLflow tracking server through ``MlflowClient`` (no global MLflow state)."""

    def __init__(self, cfg, run: str, store, tracking_uri: str | None = None):
        try:
            from mlflow.entities import Metric, Param
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise UserError("--track mlflow needs MLflow's client: pip install 'drl[track]'") from None
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            raise UserError("--track mlflow needs MLFLOW_TRACKING_URI (the tracking server's address)")
        self.cfg, self.run, self.store, self.uri = cfg, run, store, uri
        self.Metric, self.Param = Metric, Param
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = self._attach()

    def _attach(self) -> str:
        """The MLflow run of this drl run: the one ``tracking.json`` names when it is on this server (marked
        running again), else a new one with the configuration as its parameters."""
        kept = self.store.get_optional(KEPT)
        if kept:
            try:
                record = json.loads(kept)
            except ValueError:
                record = {}
            if record.get("tracking_uri") == self.uri and record.get("mlflow_run_id"):
                run_id = str(record["mlflow_run_id"])
                self.client.update_run(run_id, status="RUNNING")
                log.info("tracking on MLflow %s: continuing run %s", self.uri, run_id)
                return run_id
        experiment = self.client.get_experiment_by_name(self.cfg.track_experiment)
        experiment_id = (
            experiment.experiment_id
            if experiment is not None
            else self.client.create_experiment(self.cfg.track_experiment)
        )
        created = self.client.create_run(
            experiment_id,
            run_name=self.run,
            tags={"drl.run": self.run, "drl.algorithm": self.cfg.algorithm, "drl.env": self.cfg.env},
        )
        run_id = created.info.run_id
        params = [self.Param(k, v) for k, v in sorted(flat_params(self.cfg.to_dict()).items())]
        for i in range(0, len(params), PARAM_CHUNK):
            self.client.log_batch(run_id, params=params[i : i + PARAM_CHUNK])
        self.store.put(KEPT, json.dumps({"tracking_uri": self.uri, "mlflow_run_id": run_id}).encode())
        log.info("tracking on MLflow %s: run %s in experiment %r", self.uri, run_id, self.cfg.track_experiment)
        return run_id

    def evaluation(self, result, best: float, trainer: dict[str, str]) -> None:
        """One evaluation (``drl.v1.EvaluationResult``) and the trainer's throughput, at the version's env steps."""
        now = int(time.time() * 1000)
        step = int(result.env_steps)
        values: dict[str, float] = {
            "eval/mean_return": result.mean_return,
            "eval/std_return": result.std_return,
            "eval/best_return": best,
            "eval/policy_version": float(result.version),
            "eval/wall_seconds": result.wall_seconds,
        }
        for field in THROUGHPUT:
            try:
                values[f"trainer/{field}"] = float(trainer[field])
            except (KeyError, ValueError):
                continue
        metrics = [self.Metric(k, float(v), now, step) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def finish(self, exported: tuple[bytes, dict[str, Any]] | None, status: str) -> None:
        """Logs the exported policy (ONNX bytes and what they hold) under ``policy/`` and ends the MLflow run
        with ``status`` (FINISHED, KILLED or FAILED)."""
        if exported is not None:
            data, about = exported
            with tempfile.TemporaryDirectory() as folder:
                (Path(folder) / "policy.onnx").write_bytes(data)
                (Path(folder) / "policy.json").write_text(json.dumps(about, indent=2) + "\n")
                self.client.log_artifacts(self.run_id, folder, artifact_path="policy")
        self.client.set_terminated(self.run_id, status=status)
