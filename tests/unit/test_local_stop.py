"""How a local run's orchestrator ends its processes (``LocalRun.stop_all``), with stand-in processes: a trainer
that takes a few seconds to write its final checkpoint is waited for, not terminated."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from drl.config import ExperimentConfig
from orchestrator.backends.local.common import STOP_FLAG_GRACE_S, Proc
from orchestrator.backends.local.run import LocalRun

CHECKPOINT_S = STOP_FLAG_GRACE_S + 1.5


def stand_in(tmp_path, name: str, role: str, seconds: float) -> Proc:
    """A process that ends by itself after ``seconds`` (the trainer writing its checkpoint) and dies of SIGTERM
    before, as a trainer does in the last moments of its exit."""
    popen = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    return Proc(name, role, popen, tmp_path / f"{name}.log")


@pytest.fixture
def job(tmp_path):
    job = LocalRun(ExperimentConfig(), "r1", tmp_path)
    job.flags = []
    job.request_stop = lambda reason: job.flags.append(reason) or True
    yield job
    for p in job.procs:
        if p.popen.poll() is None:
            p.popen.kill()
            p.popen.wait()


def test_stop_all_waits_for_the_trainers_final_checkpoint(tmp_path, job):
    trainer = stand_in(tmp_path, "trainer", "trainer", CHECKPOINT_S)
    evaluator = stand_in(tmp_path, "evaluator", "evaluator", 60)
    job.procs = [trainer, evaluator]
    started = time.monotonic()
    job.stop_all()
    assert job.flags == ["orchestrator"]
    assert trainer.popen.returncode == 0, "the trainer finished its checkpoint and exited by itself"
    assert evaluator.popen.returncode == -15, "the others get SIGTERM after the stop flag's grace"
    assert CHECKPOINT_S - 0.5 < time.monotonic() - started < CHECKPOINT_S + 5


def test_a_second_interrupt_stops_waiting_for_the_trainer(tmp_path, job):
    trainer = stand_in(tmp_path, "trainer", "trainer", 60)
    job.procs = [trainer]
    timer = threading.Timer(STOP_FLAG_GRACE_S + 0.5, lambda: setattr(job, "interrupts", job.interrupts + 1))
    timer.start()
    started = time.monotonic()
    job.stop_all()
    timer.join()
    assert trainer.popen.returncode == -15
    assert time.monotonic() - started < STOP_FLAG_GRACE_S + 3
