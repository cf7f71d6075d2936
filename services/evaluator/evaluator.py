"""The evaluator's process shell: evaluate the newest published version, record it, maybe stop the run.

It always jumps to the newest version (intermediate ones are skipped when training outpaces evaluation),
appends one ``drl.v1.EvaluationResult`` per evaluated version to ``<run dir>/evaluations.jsonl``, and sets the
run's stop flag once ``--target-return`` is reached. It ends after evaluating the trainer's final version.
Each result is also a TensorBoard point, against env steps and against wall seconds (``eval/*`` tags), and with
``--track mlflow`` an MLflow metric (``services.evaluator.tracking``), the last version exported there at the end.
"""

from __future__ import annotations

import json
import logging
import time

import numpy as np

from drl._proto import evaluation_pb2
from drl.acting.evaluation import message_to_record, run_episodes
from drl.algorithms import make_actor
from drl.envs import space_spec
from drl.errors import EXIT_INTERRUPTED
from drl.store import ManifestError
from drl.tensorboard import ScalarLog
from services.common import TERMINATED, Service, ServiceContext, StatusWriter, stop_on_sigterm
from services.telemetry import TELEMETRY

log = logging.getLogger("drl.evaluator")


class Evaluator(Service):
    def __init__(self, ctx: ServiceContext):
        super().__init__(ctx)
        cfg = self.cfg
        self.policies = ctx.policy_store()
        self.spec = space_spec(cfg.env)
        self.actor = make_actor(cfg.algorithm, self.spec, cfg, seed=cfg.seed)
        self.status = StatusWriter(self.control, "evaluator", every=0.0)
        self.results_path = ctx.run_dir / "evaluations.jsonl"
        self.tensorboard = ScalarLog(ctx.run_dir / "tensorboard" / "evaluator")
        self.started = self.control.started_at() or time.time()
        self.best = -float("inf")
        self.evaluated = -1
        self.count = 0
        self.continue_from(self.control.status("evaluator"))
        self.last: tuple[int, int, dict[str, np.ndarray]] | None = None
        self.tracker = self.start_tracking()

    def start_tracking(self):
        """The MLflow tracker (``--track mlflow``), or None; a server that cannot be reached costs the run its
        tracking, said once, not its training."""
        if self.cfg.track != "mlflow":
            return None
        from services.evaluator.tracking import MlflowTracker

        try:
            return MlflowTracker(self.cfg, self.ctx.run, self.policies.store)
        except Exception as exc:  # an HTTP or client error of MLflow's, whatever its class
            log.error("--track mlflow: tracking is off for this process: %s", exc)
            return None

    def nothing_left(self) -> str | None:
        """A replacement waiting for the identity still has work once the trainer finished: the final version,
        unless its predecessor recorded it (a predecessor killed first would otherwise leave it unevaluated, when
        the trainer finishes before the dead process's claim runs out). A stop request ends the wait."""
        reason = self.control.stop_reason()
        if reason is not None:
            return f"the run is stopping ({reason})"
        done = self.control.trainer_done()
        if done is None:
            return None
        try:
            evaluated = int(self.control.status("evaluator").get("policy_version", "-1"))
        except ValueError:
            evaluated = -1
        return f"the trainer finished and its final version {done} is evaluated" if evaluated >= done else None

    def continue_from(self, status: dict[str, str]) -> None:
        """Goes on from the last evaluation recorded in this identity's status (a process that took the identity
        over from another, or was restarted), so that no version's result is recorded twice: the status is
        written, fenced, before each result (``record``). A value that does not parse counts as none."""
        try:
            evaluated, count = int(status.get("policy_version", "")), int(status.get("evaluations", ""))
            best = float(status.get("best_eval_return", ""))
        except ValueError:
            return
        self.evaluated, self.count, self.best = evaluated, count, best
        log.info("continuing after version %d (%d evaluations recorded)", evaluated, count)

    def evaluate(self, version: int) -> evaluation_pb2.EvaluationResult | None:
        try:
            manifest, weights = self.policies.load(version)
            self.actor.load(weights)
            self.last = (version, manifest.env_steps, weights)
        except (ManifestError, ValueError) as exc:
            log.error("version %d not evaluated: %s", version, exc)
            return None
        returns = run_episodes(self.cfg.env, self.actor, self.cfg.eval_episodes, seed=self.cfg.seed + 1_000_000)
        result = evaluation_pb2.EvaluationResult(
            run=self.ctx.run,
            version=version,
            env_steps=manifest.env_steps,
            updates=manifest.updates,
            episodes=len(returns),
            mean_return=float(np.mean(returns)),
            std_return=float(np.std(returns)),
            returns=returns,
            wall_seconds=time.time() - self.started,
            created_at=time.time(),
        )
        self.best = max(self.best, result.mean_return)
        self.count += 1
        self.status.write(
            {
                "role": "evaluator",
                "policy_version": version,
                "env_steps": manifest.env_steps,
                "last_eval_return": result.mean_return,
                "best_eval_return": self.best,
                "evaluations": self.count,
            }
        )
        self.record(result)
        self.tensorboard.scalars(
            {
                "eval/mean_return": result.mean_return,
                "eval/std_return": result.std_return,
                "eval/best_return": self.best,
            },
            step=manifest.env_steps,
        )
        self.tensorboard.scalars(
            {"eval/mean_return_by_wall_s": result.mean_return}, step=int(round(result.wall_seconds))
        )
        self.tensorboard.flush()
        self.track(result)
        log.info(
            "version %d (%d env steps): return %.1f +- %.1f",
            version,
            manifest.env_steps,
            result.mean_return,
            result.std_return,
        )
        return result

    def track(self, result: evaluation_pb2.EvaluationResult) -> None:
        if self.tracker is None:
            return
        try:
            self.tracker.evaluation(result, self.best, self.control.status("trainer"))
        except Exception as exc:  # an HTTP or client error of MLflow's, whatever its class
            log.warning("--track mlflow: version %d not logged: %s", result.version, exc)

    def finish_tracking(self, code: int) -> None:
        """Ends the MLflow run with the last evaluated version exported as ONNX; a process that a replacement
        continues (``EXIT_INTERRUPTED``) leaves it running."""
        if self.tracker is None or code == EXIT_INTERRUPTED:
            return
        exported = None
        if self.last is not None:
            from drl.algorithms.exporting import exported as export_bytes
            from drl.algorithms.exporting import signature

            version, env_steps, weights = self.last
            try:
                data, difference = export_bytes(self.spec, self.cfg, weights, self.actor, "onnx")
                about = {
                    "run": self.ctx.run,
                    "version": version,
                    "env_steps": env_steps,
                    "algorithm": self.cfg.algorithm,
                    "env": self.cfg.env,
                    **signature(self.spec),
                    "max_difference": difference,
                }
                exported = (data, about)
            except Exception as exc:  # the exporter's errors are many; the run's results stand without the file
                log.warning("--track mlflow: version %d not exported: %s", version, exc)
        try:
            self.tracker.finish(exported, "FINISHED" if code == 0 else "FAILED")
        except Exception as exc:  # an HTTP or client error of MLflow's, whatever its class
            log.warning("--track mlflow: the run's end not logged: %s", exc)

    def record(self, result: evaluation_pb2.EvaluationResult) -> None:
        """Appends the result to ``evaluations.jsonl`` and copies the file to the store. It follows the status
        write, which is refused once another process took the identity, so a superseded evaluator records
        nothing more; a file missing here (a new pod) starts from the store's copy, so the copy keeps every
        earlier result."""
        if not self.results_path.exists():
            kept = self.policies.store.get_optional("evaluations.jsonl")
            if kept:
                self.results_path.parent.mkdir(parents=True, exist_ok=True)
                self.results_path.write_bytes(kept)
        with open(self.results_path, "a") as fh:
            fh.write(json.dumps(message_to_record(result)) + "\n")
        self.policies.store.put("evaluations.jsonl", self.results_path.read_bytes())

    def run(self) -> int:
        target = self.cfg.target_return
        while True:
            latest = self.announcer.latest()
            if latest > self.evaluated:
                result = self.evaluate(latest)
                self.evaluated = latest
                if result is not None and target is not None and result.mean_return >= target:
                    log.info("target return %.1f reached by version %d; stopping the run", target, latest)
                    self.control.request_stop(f"target_reached:{latest}")
                    return 0
                continue
            done = self.control.trainer_done()
            if done is not None and self.evaluated >= done:
                return 0
            if TERMINATED.is_set() and self.control.stop_reason() is None:
                log.info(
                    "terminated while the run goes on, after version %d; a replacement continues (exit code %d)",
                    self.evaluated,
                    EXIT_INTERRUPTED,
                )
                return EXIT_INTERRUPTED
            if TELEMETRY.stop.is_set() or self.control.stop_reason() is not None:
                return 0
            self.announcer.wait_for(self.evaluated + 1, timeout=1.0, should_stop=lambda: False)


def serve(ctx: ServiceContext) -> int:
    """SIGTERM (a pod deleted, evicted or drained) ends the evaluator after the version it is evaluating; while
    the run goes on it exits ``EXIT_INTERRUPTED``, so that its Job starts a replacement (one that exited 0 would
    complete the Job, and the run's later versions would go unevaluated)."""
    stop_on_sigterm()
    evaluator = Evaluator(ctx)
    code = 1
    try:
        code = evaluator.run()
        return code
    finally:
        evaluator.finish_tracking(code)
        evaluator.tensorboard.close()
        evaluator.close()
