"""A local run seen and ended from outside: ``drl-orchestrate status``, ``stop`` and ``scale`` of a local run.

A local run is found through ``<run dir>/state.json`` (``orchestrator.state``): process ids, and control ports
either recorded there or read from the services' status fields on the memory server (``RunControl.statuses``;
the memory URL is in the state file; the password of a private memory server is in the run folder's
``memory.password``, readable by its owner only; other credentials come from the environment). A
service that does not answer is shown as ``exited`` or ``unreachable``, with its last status fields while the
memory server still has them, never as an error. ``stop`` and ``scale`` leave a request file in the run folder, which the run's orchestrator
(``orchestrator.backends.local.run``) takes up, and wait for its outcome. Whether the orchestrator still runs is
told by the run's lock (``ownership``), not by its pid; ``stop`` of a run whose orchestrator is gone ends the
processes it left (``ownership.end_orphans``).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from drl.errors import UserError
from drl.memory import MemoryBackendError, open_memory, private_env
from drl.naming import memory_servers
from drl.process import pid_alive
from drl.status import status_message
from orchestrator.backends.local.common import PASSWORD_FILE, STOP_REQUEST
from orchestrator.backends.local.ownership import RunLock, end_orphans, orchestrator_alive
from orchestrator.state import STATE_FILE, RunState, read_state, write_state
from orchestrator.status import Row, format_lags, format_table, get_status, row_from_status


def memory_env(run_dir: Path | None) -> dict[str, str] | None:
    """The credentials of the run's private memory server (its password file), or None: this process's
    environment, as for any other memory server."""
    path = Path(run_dir) / PASSWORD_FILE if run_dir is not None else None
    return private_env(path) if path is not None and path.exists() else None


def status_hashes(state: RunState, run_dir: Path | None = None) -> dict[str, dict[str, str]]:
    """name -> status fields of every process, or {} when the memory server is gone (a finished local run) or
    the state file's memory URL cannot be used."""
    try:
        first = (memory_servers(state.memory_url) or [state.memory_url])[0]  # where the status hashes live
        memory = open_memory(first, state.run, retry_s=0.0, timeout=1.0, env=memory_env(run_dir))
    except (UserError, MemoryBackendError, ValueError, TypeError):
        return {}
    try:
        return memory.control().statuses(p.name for p in state.processes)
    except MemoryBackendError:
        return {}
    finally:
        memory.close()


def local_rows(state: RunState, run_dir: Path | None = None) -> list[Row]:
    """One row per process: its live answer, else ``exited``/``unreachable`` with its last known counters."""
    hashes = None
    rows = []
    for p in state.processes:
        port = p.control_port
        if port is None:
            hashes = status_hashes(state, run_dir) if hashes is None else hashes
            text = hashes.get(p.name, {}).get("control_port") or ""
            port = int(text) if text.isascii() and text.isdigit() and 0 < int(text) < 65536 else None
        status = get_status(port) if port and pid_alive(p.pid) else None
        if status is not None and status.run == state.run and status.id == p.name:
            rows.append(row_from_status(p.name, status))
            continue
        alive = pid_alive(p.pid)
        if alive or not p.last_status:
            hashes = status_hashes(state, run_dir) if hashes is None else hashes
        last = (hashes or {}).get(p.name) or p.last_status
        if alive:
            label = "unreachable" if port else "starting"
        else:
            label = "exited" if p.exit_code is None else f"exited ({p.exit_code})"
        if last:
            row = row_from_status(p.name, status_message({"id": p.name, **last}))
            row.state, row.rate, row.restarts = label, None, None
        else:
            row = Row(p.name, p.role, label)
        rows.append(row)
    return rows


def newest_run(output: Path) -> str:
    """The run in ``output`` whose state file says it started last."""
    found = []
    for path in output.glob(f"*/{STATE_FILE}"):
        try:
            started = json.loads(path.read_text()).get("started_at", 0.0)
        except (OSError, ValueError, RecursionError, AttributeError):
            continue
        if isinstance(started, (int, float)) and not isinstance(started, bool):
            found.append((started, path.parent.name))
    if not found:
        raise UserError(
            f"no local run in {output} (no */{STATE_FILE}); pass --output DIR, or RUN --namespace NS "
            "for a Kubernetes run"
        )
    return max(found)[1]


def _age(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def show_local(run_dir: Path, state: RunState, stream=sys.stdout) -> None:
    if state.state == "finished":
        what = f"finished ({state.exit_reason or 'unknown reason'})"
    elif orchestrator_alive(run_dir, state):
        what = f"running, orchestrator pid {state.orchestrator_pid}{', detached' if state.detached else ''}"
    else:
        what = (
            f"orchestrator (pid {state.orchestrator_pid}) gone without a summary (drl-orchestrate stop "
            f"{state.run} ends what it left running)"
        )
    print(f"run {state.run}: {what}; started {_age(time.time() - state.started_at)} ago; {run_dir}", file=stream)
    rows = local_rows(state, run_dir)
    print(format_table(rows), file=stream)
    if format_lags(rows):
        print(format_lags(rows), file=stream)


KUBERNETES_HINT = "for a Kubernetes run pass --namespace NS"


def find_local_run(run: str | None, output: str, elsewhere: str = KUBERNETES_HINT) -> tuple[Path, RunState]:
    """The run's folder and state; ``elsewhere`` tells where else the run may be, in words the calling verb
    accepts."""
    out = Path(output).resolve()
    run = run or newest_run(out)
    state = read_state(out / run)
    if state is None:
        raise UserError(f"no local run {run!r} in {out} (no {STATE_FILE}); {elsewhere}")
    return out / run, state


def status(run: str | None, output: str) -> int:
    run_dir, state = find_local_run(run, output)
    show_local(run_dir, state)
    return 0


def stop(run: str, output: str, timeout: float) -> int:
    """Asks the run's orchestrator for a clean stop (``STOP_REQUEST``), waits for its summary and prints it."""
    run_dir, state = find_local_run(
        run,
        output,
        f"is --output right? A Kubernetes run is not stopped from here; "
        f"drl-orchestrate delete {run} --namespace NS removes it",
    )
    summary_path = run_dir / "summary.json"
    if not summary_path.exists():
        if not orchestrator_alive(run_dir, state):
            return stop_orphaned(run_dir, state)
        (run_dir / STOP_REQUEST).write_text(f"{time.time()}\n")
        print(f"drl: stopping run {state.run}", file=sys.stderr)
        started = time.monotonic()
        next_note = started + 5.0
        while not summary_path.exists():
            now = time.monotonic()
            if now - started > timeout:
                print(
                    f"drl-orchestrate: error: run {state.run} did not end within {timeout:.0f}s; see "
                    f"{run_dir / 'orchestrator.log'}",
                    file=sys.stderr,
                )
                return 1
            if not orchestrator_alive(run_dir, state):
                time.sleep(0.5)
                if summary_path.exists():
                    break
                return stop_orphaned(run_dir, read_state(run_dir) or state)
            if now >= next_note:
                current = read_state(run_dir) or state
                left = [p.name for p in current.processes if pid_alive(p.pid)]
                print(
                    f"drl: waiting for run {state.run} to end ({now - started:.0f}s): still running: "
                    f"{', '.join(left) or 'none'}",
                    file=sys.stderr,
                )
                next_note = now + 5.0
            time.sleep(0.2)
    else:
        print(f"drl: run {state.run} had already ended", file=sys.stderr)
    for _ in range(20):
        try:
            summary = json.loads(summary_path.read_text())
            break
        except ValueError:
            time.sleep(0.1)
    else:
        raise UserError(f"{summary_path} is not valid JSON")
    print(json.dumps(summary, indent=2))
    return 0


def stop_orphaned(run_dir: Path, state: RunState) -> int:
    """``stop`` of a run whose orchestrator is gone: ends what it left running (under the run's lock, so that no
    orchestrator starts meanwhile) and marks the run finished. 0 when it ended something, else 1: the run had
    ended already, without a summary."""
    lock = RunLock.acquire(run_dir, state.run)
    try:
        ended = end_orphans(run_dir, state)
        if state.state != "finished":
            state.state = "finished"
            state.exit_reason = f"failed: the orchestrator (pid {state.orchestrator_pid}) was gone"
            write_state(run_dir, state)
    finally:
        lock.release()
    if not ended:
        print(
            f"drl-orchestrate: error: the orchestrator of run {state.run} (pid {state.orchestrator_pid}) is "
            f"not running and left no summary; see {run_dir / 'orchestrator.log'}",
            file=sys.stderr,
        )
        return 1
    print(
        f"drl: the orchestrator of run {state.run} (pid {state.orchestrator_pid}) was gone; ended what it left "
        f"running: {', '.join(sorted(ended))}. It left no summary; drl-orchestrate --resume {state.run} continues "
        "the run from its newest checkpoint",
        file=sys.stderr,
    )
    return 0
