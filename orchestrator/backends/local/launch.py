"""Starting a local run from the command line: the checks before anything starts, the run folder and its
``config.json``, then the run's orchestrator in the foreground or detached.

With ``--detach`` the orchestrator runs again as a child in its own session (``DETACHED_COMMAND``, output in
``<run dir>/orchestrator.log``), and the command prints the run's name once the child has started the
processes.

The run's lock (``ownership.RunLock``) is taken before anything is written to the run folder, so a second
orchestrator of a running run (``--resume RUN`` while RUN runs) is refused with one line; a detached run's
orchestrator inherits the lock from this command. Resuming a run whose orchestrator died first ends what that
orchestrator left running (``ownership.end_orphans``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from drl.algorithms import get
from drl.config import ExperimentConfig
from drl.errors import UserError
from drl.naming import default_run_name
from orchestrator.backends.base import check_tracking, note_a_large_policy_lag, warn_if_too_short_to_learn
from orchestrator.backends.local.ownership import RunLock, end_orphans

DEFAULT_OUTPUT = "runs"
DETACHED_COMMAND = "_run-detached"
DETACH_START_S = 120.0
SUMMARY_KEYS = (
    "exit_reason",
    "env_steps",
    "updates",
    "policy_version",
    "transitions_produced",
    "transitions_consumed",
    "duplicates_dropped",
    "best_eval_return",
    "last_eval_return",
    "wall_seconds",
)


def store_url(cfg: ExperimentConfig) -> str:
    return cfg.store or str(Path(cfg.output).resolve())


def preflight_memory(cfg: ExperimentConfig) -> None:
    """Fails before anything starts when the memory backend cannot be had: unreachable URL, no server binary."""
    from drl.memory import check_url, find_server_binary

    if cfg.memory:
        check_url(cfg.memory, cfg.memory_shards)
    else:
        find_server_binary()


def resume_point(cfg: ExperimentConfig, run: str) -> int:
    """Env steps the newest checkpoint of the run covers; refuses runs with nothing to resume."""
    from drl.store import run_store
    from drl.store.checkpoint import CheckpointStore

    latest = CheckpointStore(run_store(store_url(cfg), run), run).latest()
    if latest is None:
        raise UserError(f"run {run!r} has no checkpoint in {store_url(cfg)} to resume from")
    done = int(latest[0].env_steps)
    if done >= cfg.steps:
        raise UserError(
            f"run {run!r} already did {done:,} of its {cfg.steps:,} steps; pass --steps N with N > "
            f"{done} to train longer"
        )
    return done


RAM_LIMIT_VARIABLE = "DRL_RAM_LIMIT"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def memory_limit() -> tuple[int, str] | None:
    """The bytes a local run may allocate, and where that figure comes from: ``DRL_RAM_LIMIT`` (bytes, or with
    a K, M, G or T suffix) when set, else the kernel's estimate of the memory available without swapping
    (MemAvailable); None when neither can be read."""
    given = os.environ.get(RAM_LIMIT_VARIABLE, "").strip().upper().removesuffix("B").removesuffix("I")
    if given:
        number, unit = (given[:-1], given[-1]) if given[-1] in _UNITS else (given, "")
        try:
            return int(float(number) * _UNITS[unit]), RAM_LIMIT_VARIABLE
        except ValueError:
            raise UserError(
                f"{RAM_LIMIT_VARIABLE} must be a size in bytes (e.g. 64G), got {os.environ[RAM_LIMIT_VARIABLE]!r}"
            ) from None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024, "available memory"
    except (OSError, ValueError, IndexError):
        pass
    return None


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def check_memory(cfg: ExperimentConfig) -> None:
    """Refuses a run whose replay and networks (``Algorithm.memory_needs``) would not fit in this machine's
    memory, naming the option behind the largest part: such a run would otherwise start, fail to allocate in
    the trainer (or be killed for memory) and be restarted until it gives up."""
    from drl.envs import space_spec

    limit = memory_limit()
    if limit is None:
        return
    needs = get(cfg.algorithm).memory_needs(space_spec(cfg.env), cfg)
    total = sum(n.bytes for n in needs)
    if total <= limit[0]:
        return
    biggest = max(needs, key=lambda n: n.bytes)
    rest = f" (the whole run about {_size(total)})" if total > biggest.bytes * 1.05 else ""
    raise UserError(
        f"{biggest.option} {biggest.value} needs about {_size(biggest.bytes)} for {biggest.what}"
        f"{rest}, more than the {_size(limit[0])} of {limit[1]} on this machine; lower it (or set "
        f"{RAM_LIMIT_VARIABLE} to the bytes the run may use)"
    )


def check_output(output: str) -> None:
    """``--output`` must be a folder or a path one can become (its first existing part a folder): said here, a
    file in the way is not blamed on the store, which defaults to the same folder."""
    path = Path(output).resolve()
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        what = "is a file" if existing == path else f"cannot be a folder: {existing} is a file"
        raise UserError(f"--output {output} {what}; name a folder (each run gets a folder in it)")


def start(cfg: ExperimentConfig, resume: bool, detach: bool) -> int:
    """Checks that the run can start, takes its lock, writes ``<run dir>/config.json`` and runs it (or starts it
    detached)."""
    from drl.store import open_store

    check_output(cfg.output)
    check_memory(cfg)
    check_tracking(cfg, local=True)
    preflight_memory(cfg)
    open_store(store_url(cfg))
    run = cfg.run_name or default_run_name(cfg.preset, cfg.env, cfg.mode)
    run_dir = Path(cfg.output).resolve() / run
    if not resume:
        refuse_existing(run_dir, run)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"output directory {run_dir} cannot be created: {exc.strerror}") from None
    lock = RunLock.acquire(run_dir, run)
    try:
        return _start_locked(cfg, run, run_dir, lock, resume, detach)
    finally:
        lock.release()


def refuse_existing(run_dir: Path, run: str) -> None:
    """A new run never takes over the folder of another (checked before the folder is made, and again under the
    lock, for two commands starting the same name at once)."""
    if (run_dir / "summary.json").exists() or (run_dir / "config.json").exists():
        raise UserError(f"run {run!r} already exists in {run_dir.parent}; pick another --run-name or --resume {run}")


def end_previous(run_dir: Path, run: str) -> None:
    """Ends what the previous orchestrator of a resumed run left running (its lock is ours, so it is gone)."""
    from orchestrator.state import read_state

    try:
        state = read_state(run_dir)
    except UserError:
        return
    if state is None:
        return
    ended = end_orphans(run_dir, state)
    if ended:
        print(
            f"drl: ended what the previous orchestrator of run {run} (pid {state.orchestrator_pid}) left "
            f"running: {', '.join(sorted(ended))}",
            file=sys.stderr,
        )


def _start_locked(cfg: ExperimentConfig, run: str, run_dir: Path, lock: RunLock, resume: bool, detach: bool) -> int:
    steps_done = 0
    if resume:
        end_previous(run_dir, run)
        steps_done = resume_point(cfg, run)
    else:
        refuse_existing(run_dir, run)
    cfg = dataclasses.replace(cfg, run_name=run)
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    what = f"resuming at {steps_done:,} of" if resume else "with"
    warn_if_too_short_to_learn(cfg)
    note_a_large_policy_lag(cfg)
    print(
        f"drl: run {run} ({cfg.algorithm} on {cfg.env}, {cfg.mode}, {cfg.workers} workers, {what} "
        f"{cfg.steps:,} steps) -> {run_dir}",
        file=sys.stderr,
    )
    if detach:
        return start_detached(run, run_dir, steps_done, resume, cfg.output, lock)
    from orchestrator.backends.local.run import run_local

    code, summary = run_local(cfg, run, run_dir, steps_done=steps_done, resume=resume)
    print(json.dumps({k: summary.get(k) for k in SUMMARY_KEYS}))
    if _written(run_dir / "summary.json", summary):
        print(f"drl: summary written to {run_dir / 'summary.json'}", file=sys.stderr)
    warn_if_too_short_to_learn(cfg, ended=summary)
    output = shlex.quote(str(Path(cfg.output)))
    print(
        f"drl: curves: drl-orchestrate plot {shlex.quote(run)} --output {output} (evaluation returns), "
        f"tensorboard --logdir {shlex.quote(str(run_dir / 'tensorboard'))}",
        file=sys.stderr,
    )
    return code


def _written(path: Path, summary: dict) -> bool:
    try:
        return json.loads(path.read_text()) == summary
    except (OSError, ValueError):
        return False


def follow_up(run: str, output: str) -> str:
    """The ``status`` and ``stop`` commands of a detached run, ready to copy: with ``--output`` unless the runs
    are in the default folder."""
    where = "" if Path(output).resolve() == Path(DEFAULT_OUTPUT).resolve() else f" --output {shlex.quote(output)}"
    return f"drl-orchestrate status {shlex.quote(run)}{where} / drl-orchestrate stop {shlex.quote(run)}{where}"


def start_detached(
    run: str, run_dir: Path, steps_done: int, resume: bool, output: str = DEFAULT_OUTPUT, lock: RunLock | None = None
) -> int:
    """Starts the run's orchestrator as a child that outlives this command: its own session (no terminal
    signals), no parent-death signal, stdin closed, output to ``<run dir>/orchestrator.log``, the run's lock
    passed on (its open file, named by ``--lock-fd``). Returns once the child has written state.json for this
    run (its processes exist), or with 1 if it ended first."""
    from orchestrator.state import read_state

    log_path = run_dir / "orchestrator.log"
    command = [sys.executable, "-m", "orchestrator.cli", DETACHED_COMMAND, str(run_dir), str(steps_done)]
    if resume:
        command.append("--resume")
    if lock is not None:
        command += ["--lock-fd", str(lock.fd)]
    (run_dir / "state.json").unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=os.getcwd(),
            pass_fds=(lock.fd,) if lock else (),
        )
    deadline = time.monotonic() + DETACH_START_S
    while time.monotonic() < deadline:
        state = read_state(run_dir)
        if state is not None and state.orchestrator_pid == child.pid:
            break
        if child.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:]
            print(
                f"drl-orchestrate: error: the run ended at once (code {child.returncode}): "
                f"{tail[0] if tail else 'no output'} (log: {log_path})",
                file=sys.stderr,
            )
            return 1
        time.sleep(0.1)
    else:
        print(
            f"drl: the run's processes are not started after {DETACH_START_S:.0f}s; it goes on in the background",
            file=sys.stderr,
        )
    print(
        f"drl: run {run} goes on in the background (orchestrator pid {child.pid}, log {log_path}); "
        f"{follow_up(run, output)}",
        file=sys.stderr,
    )
    print(run)
    return 0


def run_detached(argv: list[str]) -> int:
    """The detached orchestrator (started by ``start_detached``): runs the configuration ``start`` already
    checked and wrote to ``<run dir>/config.json``."""
    from orchestrator.backends.local.run import run_local

    if len(argv) < 2 or not argv[1].isdigit():
        raise UserError(
            f"{DETACHED_COMMAND} is started by --detach: {DETACHED_COMMAND} RUN_DIR STEPS_DONE [--resume] [--lock-fd N]"
        )
    run_dir, steps_done = Path(argv[0]), int(argv[1])
    rest = argv[2:]
    lock = RunLock.inherit(run_dir, rest[rest.index("--lock-fd") + 1] if "--lock-fd" in rest[:-1] else None)
    try:
        cfg = ExperimentConfig.from_json((run_dir / "config.json").read_text())
        code, summary = run_local(
            cfg, cfg.run_name, run_dir, steps_done=steps_done, resume="--resume" in rest, detached=True
        )
    finally:
        if lock is not None:
            lock.release()
    print(json.dumps(summary), flush=True)
    return code
