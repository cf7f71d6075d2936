"""The control plane on tiny detached local runs: real processes, real Valkey, gRPC to every service."""

from __future__ import annotations

import json
import os
import signal
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from drl.memory.redis import Keys
from drl.process import pid_alive
from orchestrator.state import read_state
from orchestrator.status import get_status, stop_service
from tests.conftest import processes_mentioning, read_summary, run_cli, run_client
from tests.harness import FULL_TIER, wait_until

NAMES = ["trainer", "rollout-0", "rollout-1", "evaluator"]


def start_detached(tmp_path, run: str, *flags: str):
    proc = run_cli(
        ["--workers", "2", "--eval-episodes", "1", "--output", str(tmp_path), "--run-name", run, "--detach", *flags],
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == run
    assert (
        f"drl-orchestrate status {run} --output {tmp_path} / drl-orchestrate stop {run} --output {tmp_path}"
        in proc.stderr
    ), "the printed commands work when copied"
    state = read_state(tmp_path / run)
    assert state is not None and state.detached and pid_alive(state.orchestrator_pid)
    return state


def wait_for_ports(tmp_path, run: str, timeout: float = 60.0):
    """The run's state once every service's control port is known and every service answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(tmp_path / run)
        ports = {p.name: p.control_port for p in state.processes}
        if all(ports.values()) and all(get_status(port) is not None for port in ports.values()):
            return state
        time.sleep(0.3)
    raise AssertionError(
        f"control ports not all known: {ports}; log: {(tmp_path / run / 'orchestrator.log').read_text()[-2000:]}"
    )


def test_detached_run_status_health_and_stop(tmp_path):
    run = "ctl-stop"
    state = start_detached(tmp_path, run, "--steps", "200000")
    assert [p.name for p in state.processes] == NAMES
    state = wait_for_ports(tmp_path, run)
    wait_until(lambda: get_status(state.process("trainer").control_port).updates > 0, 60, "the first updates")

    for p in state.processes:
        with grpc.insecure_channel(f"127.0.0.1:{p.control_port}") as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING, p.name
        status = get_status(p.control_port)
        assert (status.id, status.run, status.role, status.state) == (p.name, run, p.role, "running")
        assert status.uptime_s > 0 and status.policy_version >= 0
        assert status.fields["control_port"] == str(p.control_port)

    proc = run_cli(["status", "--output", str(tmp_path)], timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"run {run}: running, orchestrator pid {state.orchestrator_pid}, detached")
    assert lines[1].split()[:3] == ["NAME", "ROLE", "STATE"]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert sorted(rows) == sorted(NAMES)
    for name in NAMES:
        assert rows[name][1] == name.split("-")[0] and rows[name][2] == "running", rows[name]
        assert int(rows[name][3]) >= 0, rows[name]
    assert int(rows["trainer"][4].replace(",", "")) > 0 and float(rows["trainer"][5].replace(",", "")) > 0

    proc = run_cli(["stop", run, "--output", str(tmp_path)], timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary == read_summary(tmp_path / run)
    assert summary["exit_reason"] == "stopped"
    assert summary["transitions_produced"] > 0
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary["stale_dropped"]
    assert summary["transitions_unconsumed"] == 0
    final = read_state(tmp_path / run)
    assert final.state == "finished" and final.exit_reason == "stopped"
    assert [p.exit_code for p in final.processes] == [0, 0, 0, 0]
    assert int(final.process("trainer").last_status["transitions_consumed"]) == summary["transitions_consumed"]
    wait_until(lambda: not pid_alive(state.orchestrator_pid), 30, "the orchestrator to exit")
    assert not processes_mentioning(f"DRL_RUN={run}")
    assert not processes_mentioning(str(tmp_path / run / "redis"))

    proc = run_cli(["status", run, "--output", str(tmp_path)], timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith(f"run {run}: finished (stopped)")
    assert proc.stdout.count("exited (0)") == 4


# A worker is asked to stop once it reported 500 steps (polled every 0.3 s) and must still be short of its share
# then: 6,000 steps, paced by the learner at 4 transitions per update, leave it seconds of collecting to go.
HAND_IN_STEPS = 12_000
HAND_IN_PACE = ("--updates-per-transition", "0.25")


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=FULL_TIER)])
def test_stopping_one_worker_hands_in_its_transitions_and_the_run_goes_on(tmp_path, mode):
    run = f"ctl-worker-{mode}"
    steps = HAND_IN_STEPS
    state = start_detached(tmp_path, run, "--steps", str(steps), "--mode", mode, *HAND_IN_PACE)
    state = wait_for_ports(tmp_path, run)
    port = state.process("rollout-1").control_port
    wait_until(lambda: (get_status(port) or control_answer_gone()).env_steps >= 500, 60, "rollout-1 to produce")
    assert stop_service(port, "test")
    worker = state.process("rollout-1")
    wait_until(lambda: not pid_alive(worker.pid), 60, "rollout-1 to exit")

    client = run_client(tmp_path / run)
    keys = Keys(run)
    handed_in = int(client.hget(keys.workers_done, "rollout-1"))
    trainer_state = {k.decode(): v.decode() for k, v in client.hgetall(keys.consumer_state).items()}
    worker_status = {k.decode(): v.decode() for k, v in client.hgetall(keys.status("rollout-1")).items()}
    client.close()
    assert 0 < handed_in < steps // 2, "rollout-1 did not stop before its share was done"
    assert int(trainer_state["produced:rollout-1"]) == handed_in, "the trainer did not consume all of rollout-1's"
    assert int(trainer_state["seq:rollout-1"].split(",")[0]) == int(worker_status["seq"])

    wait_until(lambda: (tmp_path / run / "summary.json").exists(), 120, "the run to end")
    summary = read_summary(tmp_path / run)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == handed_in + steps // 2
    assert summary["transitions_produced"] == summary["transitions_consumed"] + summary["stale_dropped"]
    assert summary["transitions_unconsumed"] == 0
    final = wait_until(lambda: (s := read_state(tmp_path / run)).state == "finished" and s, 30, "state.json")
    assert final.process("rollout-1").exit_code == 0
    assert int(final.process("rollout-0").last_status["produced"]) == steps // 2


def test_sigterm_makes_a_worker_hand_in_and_its_replacement_finish_the_share(tmp_path):
    """SIGTERM without retirement is a pod deleted under a running run: the worker hands in what it collected
    but does not end its part (no done marker, exit code 143), and the process started in its place produces the
    rest of the share, counted once."""
    run = "ctl-sigterm"
    steps = HAND_IN_STEPS
    start_detached(tmp_path, run, "--steps", str(steps), "--mode", "async", *HAND_IN_PACE)
    state = wait_for_ports(tmp_path, run)
    port = state.process("rollout-1").control_port
    wait_until(lambda: (get_status(port) or control_answer_gone()).env_steps >= 500, 60, "rollout-1 to produce")
    worker = state.process("rollout-1")
    os.kill(worker.pid, signal.SIGTERM)
    wait_until(lambda: not pid_alive(worker.pid), 60, "rollout-1 to exit")
    client = run_client(tmp_path / run)
    done = client.hget(Keys(run).workers_done, "rollout-1")
    handed_in = int(client.hget(Keys(run).consumer_state, "produced:rollout-1") or 0)
    client.close()
    assert done is None, "the terminated worker recorded its part as done"
    assert 0 < handed_in < steps // 2
    wait_until(lambda: (tmp_path / run / "summary.json").exists(), 120, "the run to end")
    summary = read_summary(tmp_path / run)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == steps == summary["transitions_consumed"]
    assert summary["duplicates_dropped"] == 0
    final = wait_until(lambda: (s := read_state(tmp_path / run)).state == "finished" and s, 30, "state.json")
    assert final.process("rollout-1").restarts == 1
    assert final.process("rollout-1").exit_code == 0
    assert int(final.process("rollout-1").last_status["produced"]) == steps // 2


def control_answer_gone():
    raise AssertionError("rollout-1 stopped answering before it was asked to stop")
