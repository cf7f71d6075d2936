"""The private memory server SIGKILLed in the trainer's last moments: after the trainer wrote its final version
(announced, and as ``trainer:done``) but before it exited. The orchestrator starts the server again while the
trainer still runs, so the final version is not in the trainer's record yet, and the empty server has lost it;
the evaluator waits for that version to end. The orchestrator must write it back once the trainer has exited 0,
so the run ends at once instead of after the evaluator's grace (``EVALUATOR_GRACE_S``, 300 s)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

from tests.conftest import run_client
from tests.faults.test_supervision import Run, _accounts_for_everything

ENDS_WITHIN_S = 60.0


def _proc_state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _pings(run: Run) -> bool:
    client = run_client(run.dir)
    try:
        return bool(client.ping())
    finally:
        client.close()


def _stop_after_its_final_version(run: Run, trainer: int) -> None:
    """Lets the trainer run in short slices, SIGSTOPped between them, until it is caught stopped with its final
    version written (``trainer:done`` set) and not yet exited."""
    client = run_client(run.dir)
    done_key = f"drl:{{{run.name}}}:trainer:done"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            os.kill(trainer, signal.SIGSTOP)
            while (state := _proc_state(trainer)) not in ("T", "t", "Z", "gone"):
                time.sleep(0.001)
            assert state in ("T", "t"), "the trainer exited before it was caught after its final version"
            if client.get(done_key) is not None:
                return
            os.kill(trainer, signal.SIGCONT)
            time.sleep(0.01)
        raise AssertionError("the trainer never wrote its final version")
    finally:
        client.close()


def test_server_killed_after_the_trainers_final_version_the_run_still_ends(tmp_path):
    steps = 3000
    run = Run(
        tmp_path,
        "server-at-trainer-exit",
        [
            "--mode",
            "sync",
            "--workers",
            "2",
            "--steps",
            str(steps),
            "--sync-steps-per-iteration",
            "600",
            "--checkpoint-every-s",
            "1",
        ],
    )
    try:
        run.wait_until("2,400 transitions consumed", lambda: run.consumed() >= 2400)
        trainer = run.pid("trainer")
        _stop_after_its_final_version(run, trainer)
        server = run.state()["memory_pid"]
        os.kill(server, signal.SIGKILL)
        run.wait_until(
            "the memory server started again", lambda: run.state()["memory_pid"] != server and _pings(run), timeout=30
        )
        os.kill(trainer, signal.SIGCONT)
        ended = time.monotonic()
        try:
            summary, err = run.finish(timeout=ENDS_WITHIN_S)
        except subprocess.TimeoutExpired:
            evaluator = next(p for p in run.state()["processes"] if p["name"] == "evaluator")
            raise AssertionError(
                f"the run did not end within {ENDS_WITHIN_S:.0f} s of the trainer's exit "
                f"(evaluator exit code {evaluator['exit_code']})"
            ) from None
        print(f"ended {time.monotonic() - ended:.1f} s after the trainer went on")
        _accounts_for_everything(summary, steps)
        assert summary["restarts"]["memory"] == 1, summary
        assert "the memory server exited with code -9; starting it again" in err
        assert json.loads((run.dir / "state.json").read_text())["state"] == "finished"
        final = int(re.search(r"policy version (\d+)", (run.dir / "logs" / "trainer.log").read_text()).group(1))
        evaluated = [json.loads(line)["version"] for line in (run.dir / "evaluations.jsonl").read_text().splitlines()]
        assert evaluated[-1] == final, f"the evaluator ended without the final version {final}: {evaluated}"
    finally:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGINT)
            try:
                run.proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                run.proc.kill()
                run.proc.communicate()
