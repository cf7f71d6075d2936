"""drl from Python: the command line's local runs as functions and objects, for scripts, notebooks and tests.

    from orchestrator import api

    summary = api.run(preset="sac", env="Pendulum-v1", steps=20_000, output="runs")
    print(summary.exit_reason, summary.best_eval_return)

    run = api.start(preset="sac", steps=200_000, workers=2, output="runs")
    run.scale(4)
    print(run.status().env_steps)
    summary = run.wait()

    policy = api.load_policy(summary.run_dir)  # or api.load_policy("s3://bucket/prefix", run="NAME")
    action = policy.act(observation)

Options are the command line's (``drl-orchestrate --help``, docs/configuration.md) with ``_`` for ``-``, and an
algorithm's block is a dict (``sac={"lr": 1e-3, "hidden": [64, 64]}``); they resolve as the command line's do (the
preset for the env, then the options, validated; ``--learners N`` alone gives N memory shards). Bad input raises
``drl.errors.UserError`` with the command line's message, never ``SystemExit``. A run started here is the command
line's own local run (its orchestrator a detached process of its own, so a notebook's kernel can go away without
ending it), and ``drl-orchestrate status|scale|stop`` see it as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from drl.config import ExperimentConfig, learner_shards
from drl.errors import UserError
from drl.naming import default_run_name

ERROR_PREFIX = "drl-orchestrate: error: "
POLL_S = 0.5


@dataclass(frozen=True)
class Summary:
    """A finished run's ``summary.json``: what the command line prints at the end, every key in ``data``."""

    run: str
    run_dir: Path
    exit_reason: str
    env_steps: int
    transitions_produced: int
    transitions_consumed: int
    transitions_unconsumed: int
    updates: int
    policy_version: int
    best_eval_return: float | None
    last_eval_return: float | None
    wall_seconds: float
    data: dict[str, Any] = field(repr=False)

    @classmethod
    def read(cls, run_dir: Path) -> Summary:
        data = json.loads((run_dir / "summary.json").read_text())
        return cls(
            run=data["run"],
            run_dir=run_dir,
            exit_reason=data["exit_reason"],
            env_steps=int(data["env_steps"]),
            transitions_produced=int(data["transitions_produced"]),
            transitions_consumed=int(data["transitions_consumed"]),
            transitions_unconsumed=int(data.get("transitions_unconsumed") or 0),
            updates=int(data.get("updates") or 0),
            policy_version=int(data.get("policy_version") or 0),
            best_eval_return=data.get("best_eval_return"),
            last_eval_return=data.get("last_eval_return"),
            wall_seconds=float(data.get("wall_seconds") or 0.0),
            data=data,
        )


@dataclass(frozen=True)
class Status:
    """A run as its folder and its memory server show it: ``running`` while its orchestrator lives, ``finished``
    once its summary is written, ``gone`` when the orchestrator ended without one; the trainer's figures and every
    service's status fields (``services``, by name), live while the run goes on, as recorded at its end after."""

    run: str
    state: str
    env_steps: int
    policy_version: int
    updates: int
    workers: int
    services: dict[str, dict[str, str]] = field(repr=False)


def config(preset: str = "sac", env: str | None = None, **options: Any) -> ExperimentConfig:
    """The configuration the command line would make of ``--preset PRESET --env ENV`` and the options, checked
    against the environment (its id, its spaces) as a run's start checks it."""
    from drl.presets import resolve
    from orchestrator.cli import check_environment

    data: dict[str, Any] = {"preset": preset, **({"env": env} if env is not None else {}), **options}
    data.update(learner_shards(options.get("learners"), options))
    cfg = resolve(data, "the options")
    check_environment(cfg)
    return cfg


def start(cfg: ExperimentConfig | None = None, /, *, output: str | Path = "runs", **options: Any) -> Run:
    """Starts a local run in the background (``cfg``, else ``config(**options)``) and returns its handle; the
    run's name is ``cfg.run_name``, else the command line's default."""
    if cfg is None:
        cfg = config(**options)
    elif options:
        raise UserError(f"start() takes a configuration or options, not both (got {', '.join(sorted(options))})")
    name = cfg.run_name or default_run_name(cfg.preset, cfg.env, cfg.mode)
    output = Path(output)
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=output, prefix=".api-", delete=False) as fh:
        json.dump(cfg.to_dict(), fh)
        path = Path(fh.name)
    try:
        _cli(["--config", str(path), "--output", str(output), "--run-name", name, "--detach"], timeout=300)
    finally:
        path.unlink(missing_ok=True)
    return Run(name, output)


def run(cfg: ExperimentConfig | None = None, /, *, output: str | Path = "runs", **options: Any) -> Summary:
    """Runs a whole experiment (``start`` and ``Run.wait``) and returns its summary; an interrupt (Ctrl-C in a
    notebook) stops the run cleanly before it is raised again."""
    handle = start(cfg, output=output, **options)
    try:
        return handle.wait()
    except KeyboardInterrupt:
        handle.stop()
        raise


class Run:
    """A local run in ``output``, started by ``start`` or by the command line (``Run(name, output)``)."""

    def __init__(self, name: str, output: str | Path = "runs"):
        self.name, self.output = name, Path(output)
        self.run_dir = self.output.resolve() / name

    def __repr__(self) -> str:
        return f"Run({self.name!r}, {str(self.output)!r})"

    def status(self) -> Status:
        from orchestrator.backends.local.control import status_hashes
        from orchestrator.backends.local.ownership import orchestrator_alive
        from orchestrator.state import read_state

        state = read_state(self.run_dir)
        if state is None:
            raise UserError(f"no run {self.name!r} in {self.output} (no state.json yet)")
        services = status_hashes(state, self.run_dir) or {p.name: dict(p.last_status or {}) for p in state.processes}
        trainer = services.get("trainer", {})
        finished = (self.run_dir / "summary.json").exists()
        alive = orchestrator_alive(self.run_dir, state)
        return Status(
            run=self.name,
            state="finished" if finished and not alive else "running" if alive else "gone",
            env_steps=int(float(trainer.get("env_steps") or trainer.get("transitions_consumed") or 0)),
            policy_version=int(float(trainer.get("policy_version") or 0)),
            updates=int(float(trainer.get("updates") or 0)),
            workers=sum(1 for p in state.processes if p.role == "rollout" and p.exit_code is None),
            services=services,
        )

    def wait(self, timeout: float | None = None) -> Summary:
        """Waits for the run to end and returns its summary; UserError when its orchestrator ended without one,
        TimeoutError after ``timeout`` seconds (the run goes on)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status.state == "finished":
                return Summary.read(self.run_dir)
            if status.state == "gone":
                raise UserError(
                    f"run {self.name}'s orchestrator ended without a summary; see {self.run_dir / 'orchestrator.log'}"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.name} still running after {timeout:.0f} s")
            time.sleep(POLL_S)

    def scale(self, workers: int, timeout: float = 120.0) -> None:
        """Changes the number of rollout workers (``drl-orchestrate scale``): removed ones hand in what they
        collected, the steps left are shared out again."""
        _cli(["scale", self.name, "--workers", str(workers), "--output", str(self.output)], timeout=timeout + 60)

    def stop(self, timeout: float = 300.0) -> Summary:
        """Ends the run cleanly (``drl-orchestrate stop``) and returns its summary (``exit_reason`` stopped,
        unless it had ended already)."""
        _cli(["stop", self.name, "--output", str(self.output), "--timeout", str(timeout)], timeout=timeout + 60)
        return self.wait(timeout=60)


class Policy:
    """A published policy version, acting as the run's workers act (deterministically by default)."""

    def __init__(self, stored: Any):
        self._stored = stored
        self.run: str = stored.run
        self.version: int = stored.version
        self.env_steps: int = stored.env_steps
        self.config: ExperimentConfig = stored.config

    def __repr__(self) -> str:
        return f"Policy(run={self.run!r}, version={self.version}, env={self.config.env!r})"

    def act(self, observation: Any, deterministic: bool = True) -> np.ndarray:
        """The action for one observation (as the env returns it)."""
        return self.act_batch(np.asarray(observation)[None], deterministic)[0]

    def act_batch(self, observations: Any, deterministic: bool = True) -> np.ndarray:
        """The actions for a batch of observations (the first axis)."""
        return self._stored.actor.act(np.asarray(observations), deterministic=deterministic)

    def export(self, path: str | Path, format: str = "onnx") -> Path:
        """Writes the policy's deterministic acting network to ``path`` as ``"onnx"`` or ``"torchscript"``
        (``drl-orchestrate export``: observations in, actions out, checked against this policy first)."""
        from orchestrator.export import export_policy

        return export_policy(self._stored, format, Path(path)).path


def load_policy(source: str | Path, *, run: str | None = None, version: int | str = "latest") -> Policy:
    """A published policy: ``source`` a run's folder (``runs/NAME``), or a data store (a folder or
    ``s3://BUCKET/PREFIX``) with ``run`` naming the run; ``version`` a number or ``"latest"``."""
    from orchestrator.evaluate import load_stored_policy

    if run is None:
        folder = Path(source)
        if not (folder / "config.json").exists():
            raise UserError(f"{source} is not a run's folder (no config.json); give a data store and run=NAME")
        store, run = str(folder.resolve().parent), folder.resolve().name
    else:
        store = str(source)
    return Policy(load_stored_policy(store, run, version))


def _cli(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """``drl-orchestrate ARGS`` in a process of its own (this interpreter, this environment); its one-line error
    as UserError."""
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ.copy(),
    )
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        message = next((line for line in reversed(lines) if line.startswith(ERROR_PREFIX)), lines[-1] if lines else "")
        raise UserError(message.removeprefix(ERROR_PREFIX) or f"drl-orchestrate {args[0]} exited {proc.returncode}")
    return proc
