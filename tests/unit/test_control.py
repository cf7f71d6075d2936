"""The control plane without a run: the gRPC endpoint in this process, state.json, the status table."""

from __future__ import annotations

import importlib.util
import json
import os

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from drl._proto.drl.v1 import control_pb2, control_pb2_grpc
from drl.errors import UserError
from drl.process import pid_alive
from drl.status import status_message
from orchestrator.backends.local.control import local_rows
from orchestrator.cli import main
from orchestrator.state import ProcessState, RunState, read_state, state_path, write_state
from orchestrator.status import Row, format_table, get_status, stop_service
from services.control import listen_address, serve
from services.telemetry import Telemetry
from tests.conftest import ROOT

TRAINER_FIELDS = {
    "role": "trainer",
    "state": "running",
    "exit_reason": "",
    "policy_version": 7,
    "env_steps": 4000,
    "transitions_consumed": 4000,
    "updates": 3000,
    "transitions_per_s": 512.5,
    "backlog": 3,
    "critic_loss": 0.25,
}


@pytest.fixture
def endpoint():
    telemetry = Telemetry()
    telemetry.role, telemetry.name, telemetry.run = "trainer", "trainer", "r1"
    telemetry.update(TRAINER_FIELDS)
    server, port = serve(telemetry, "127.0.0.1", 0)
    yield telemetry, port
    server.stop(0)


def test_get_status_answers_with_the_latest_fields(endpoint):
    telemetry, port = endpoint
    status = get_status(port)
    assert (status.role, status.id, status.run, status.state) == ("trainer", "trainer", "r1", "running")
    assert (status.policy_version, status.env_steps, status.updates, status.backlog) == (7, 4000, 3000, 3)
    assert status.transitions_per_s == 512.5
    assert status.uptime_s >= 0
    assert status.fields["critic_loss"] == "0.25"
    assert status.fields["control_port"] == str(port)
    assert "policy_version" not in status.fields
    telemetry.update({"policy_version": 8})
    assert get_status(port).policy_version == 8


def test_stop_sets_the_event_and_health_turns_not_serving(endpoint):
    telemetry, port = endpoint
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "drl.v1.Control"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reply = control_pb2_grpc.ControlStub(channel).Stop(control_pb2.StopRequest(reason="test"), timeout=2)
        assert reply.accepted and telemetry.stop.is_set()
        assert not control_pb2_grpc.ControlStub(channel).Stop(control_pb2.StopRequest(), timeout=2).accepted
        for service in ("", "drl.v1.Control"):
            answer = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
            assert answer.status == health_pb2.HealthCheckResponse.NOT_SERVING
    assert get_status(port).state == "stopping"


def test_a_closed_port_is_no_answer_not_an_error():
    from drl.process import free_port

    port = free_port()
    assert get_status(port, timeout=1) is None
    assert stop_service(port, timeout=1) is False


def test_status_message_maps_each_roles_counters():
    worker = status_message(
        {
            "role": "rollout",
            "id": "rollout-1",
            "produced": 640,
            "policy_version": 2,
            "uptime_s": 10.0,
            "seq": 10,
            "episode_return": "",
        }
    )
    assert (worker.env_steps, worker.transitions_per_s, worker.policy_version) == (640, 64.0, 2)
    assert worker.fields["produced"] == "640" and worker.fields["seq"] == "10"
    fresh = status_message({"role": "evaluator", "id": "evaluator"})
    assert (fresh.policy_version, fresh.env_steps, fresh.state) == (-1, 0, "running")
    done = status_message({"role": "trainer", "state": "finished"}, stopping=True)
    assert done.state == "finished"
    assert status_message({"role": "trainer", "state": "running"}, stopping=True).state == "stopping"


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, ("127.0.0.1", 0)),
        ({"DRL_CONTROL_PORT": "50051"}, ("127.0.0.1", 50051)),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, ("0.0.0.0", 0)),
        ({"DRL_CONTROL_HOST": "0.0.0.0", "DRL_CONTROL_PORT": ""}, ("0.0.0.0", 0)),
    ],
)
def test_listen_address(monkeypatch, env, expected):
    for var in ("DRL_CONTROL_PORT", "DRL_CONTROL_HOST", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert listen_address() == expected


@pytest.mark.parametrize("port", ["http", "70000", "-1"])
def test_bad_control_port_is_a_user_error(monkeypatch, port):
    monkeypatch.setenv("DRL_CONTROL_PORT", port)
    with pytest.raises(UserError, match="DRL_CONTROL_PORT"):
        listen_address()


def test_grpc_stubs_are_current(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_proto", ROOT / "scripts" / "gen_proto.py")
    gen_proto = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_proto)
    written = gen_proto.generate_services(tmp_path)
    assert [p.name for p in written] == ["control_pb2_grpc.py"]
    committed = ROOT / "drl" / "_proto" / "drl" / "v1" / "control_pb2_grpc.py"
    assert written[0].read_bytes() == committed.read_bytes(), "run `python scripts/gen_proto.py` and commit drl/_proto"
    assert "from drl._proto.drl.v1 import control_pb2" in committed.read_text()


def sample_state() -> RunState:
    return RunState(
        run="r1",
        orchestrator_pid=4242,
        memory_url="redis://user:secret@127.0.0.1:6379/0",
        started_at=1700000000.5,
        detached=True,
        processes=[
            ProcessState("trainer", "trainer", 11, 40001, "/runs/r1/logs/trainer.log"),
            ProcessState(
                "rollout-0",
                "rollout",
                12,
                None,
                "/runs/r1/logs/rollout-0.log",
                exit_code=0,
                last_status={"produced": "640"},
            ),
        ],
    )


def test_state_file_round_trip_without_password(tmp_path):
    state = sample_state()
    write_state(tmp_path, state)
    text = state_path(tmp_path).read_text()
    assert "secret" not in text
    loaded = read_state(tmp_path)
    assert loaded == state
    assert loaded.memory_url == "redis://user@127.0.0.1:6379/0"
    assert loaded.process("rollout-0").last_status == {"produced": "640"}
    assert loaded.process("evaluator") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"], "a temporary file was left behind"
    loaded.process("trainer").control_port = 40002
    loaded.state = "finished"
    write_state(tmp_path, loaded)
    assert read_state(tmp_path).process("trainer").control_port == 40002
    assert json.loads(state_path(tmp_path).read_text())["state"] == "finished"


def test_state_file_missing_and_unknown_fields(tmp_path):
    assert read_state(tmp_path) is None
    data = sample_state().to_dict()
    data["added_later"] = 1
    data["processes"][0]["also_later"] = "x"
    state_path(tmp_path).write_text(json.dumps(data))
    assert read_state(tmp_path).process("trainer").pid == 11


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(0)
    assert not pid_alive(2**22 + 12345)


def test_status_table_aligns_and_marks_unknowns():
    rows = [
        Row("trainer", "trainer", "running", 12, 123456, 512.25, 0, ""),
        Row("rollout-0", "rollout", "exited (0)", 11, 61728, None, None, ""),
        Row("evaluator", "evaluator", "unreachable", -1, None, None, 1, "RuntimeError: " + "x" * 100),
    ]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == [
        "NAME",
        "ROLE",
        "STATE",
        "POLICY",
        "ENV",
        "STEPS",
        "RATE/S",
        "RESTARTS",
        "LAST",
        "ERROR",
    ]
    assert lines[1].split() == ["trainer", "trainer", "running", "12", "123,456", "512.2", "0", "-"]
    assert lines[2].split() == ["rollout-0", "rollout", "exited", "(0)", "11", "61,728", "-", "-", "-"]
    assert lines[3].split()[:7] == ["evaluator", "evaluator", "unreachable", "-", "-", "-", "1"]
    assert lines[3].endswith("...") and len(lines[3].split("  ")[-1]) <= 60
    policy_end = lines[0].index("POLICY") + len("POLICY")
    assert all(line[policy_end - 1] != " " for line in lines), "numbers are right-aligned under their header"


def test_local_rows_ask_live_services_and_describe_the_others(endpoint):
    telemetry, port = endpoint
    state = RunState(
        run="r1",
        orchestrator_pid=os.getpid(),
        memory_url="redis://127.0.0.1:1/0",
        processes=[
            ProcessState("trainer", "trainer", os.getpid(), port),
            ProcessState(
                "rollout-0",
                "rollout",
                2**22 + 12345,
                1,
                exit_code=0,
                last_status={"role": "rollout", "produced": "640", "policy_version": "3"},
            ),
            ProcessState("evaluator", "evaluator", os.getpid(), port),
        ],
    )
    trainer, worker, evaluator = local_rows(state)
    assert (trainer.state, trainer.policy_version, trainer.env_steps, trainer.rate) == ("running", 7, 4000, 512.5)
    assert (worker.state, worker.env_steps, worker.policy_version) == ("exited (0)", 640, 3)
    assert evaluator.state == "unreachable", "an answer from another service on the port is not this one's"


def test_status_and_stop_of_unknown_runs_are_one_line_and_exit_2(tmp_path, capsys):
    for argv in (
        ["status", "nosuch", "--output", str(tmp_path)],
        ["status", "--output", str(tmp_path)],
        ["stop", "nosuch", "--output", str(tmp_path)],
        ["stop"],
        ["status", "--namespace", "ns"],
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2, argv
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("drl-orchestrate: error: "), (argv, lines)


def test_a_busy_port_is_a_user_error(endpoint):
    _, port = endpoint
    with pytest.raises(UserError, match=f"cannot listen on 127.0.0.1:{port}"):
        serve(Telemetry(), "127.0.0.1", port)
