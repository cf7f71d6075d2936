"""The in-cluster scaler (orchestrator/backends/kubernetes/scaler.py) against a real Valkey/Redis server: membership and shares of a
Kubernetes run through a scale-down and a scale-up, with the workers' side of the protocol played by writing
what rollout workers write (``produced``, their status hash, ``workers:done``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from drl.config import ExperimentConfig
from drl.memory.redis import Keys, RedisMemory
from orchestrator.backends.kubernetes.scaler import RunEnded, Scaler
from tests.conftest import ROOT

RUN = "scale-k8s"
STEPS = 12_000


@pytest.fixture
def keys():
    return Keys(RUN)


def cfg(workers: int = 3) -> ExperimentConfig:
    return ExperimentConfig(workers=workers, steps=STEPS, batch_transitions=10, run_name=RUN)


def hashes(client, keys) -> tuple[dict, dict, set]:
    def read(key):
        return {k.decode(): v.decode() for k, v in client.hgetall(key).items()}

    return (read(keys.members), {k: int(v) for k, v in read(keys.shares).items()}, set(read(keys.workers_done)))


def produce(client, keys, name: str, total: int, done: bool = False) -> None:
    """What a rollout worker leaves behind: its produced count, its status hash, and at exit workers:done."""
    client.hset(keys.produced, name, total)
    client.hset(keys.status(name), mapping={"role": "rollout", "produced": total})
    if done:
        client.hset(keys.workers_done, name, total)


def scaler(client, keys, workers: int = 3, **kw) -> Scaler:
    return Scaler(RedisMemory(client, keys.run).control(), keys.run, cfg(workers), say=lambda text: None, **kw)


def test_scale_down_then_up_keeps_the_shares_summing_to_the_steps(redis_client, keys):
    for i in range(3):
        produce(redis_client, keys, f"rollout-{i}", 1000)
    s = scaler(redis_client, keys)

    assert s.retire(1) == ["rollout-1", "rollout-2"]
    members, shares, _ = hashes(redis_client, keys)
    assert members == {"rollout-0": "active", "rollout-1": "retired", "rollout-2": "retired"}
    assert shares == {"rollout-0": 4000, "rollout-1": 4000, "rollout-2": 4000}, "the even split workers assumed"

    produce(redis_client, keys, "rollout-1", 1200, done=True)
    produce(redis_client, keys, "rollout-2", 1100, done=True)
    produce(redis_client, keys, "rollout-0", 1500)
    down = s.apply(1, job_size=1, hand_in_s=5)
    members, shares, _ = hashes(redis_client, keys)
    assert down["job_size"] == 1 and down["collecting"] == ["rollout-0"] and down["added"] == []
    assert down["remaining"] == STEPS - 1500 - 1200 - 1100
    assert shares == {"rollout-0": STEPS - 2300, "rollout-1": 1200, "rollout-2": 1100}
    assert sum(shares.values()) == STEPS and down["warnings"] == []

    produce(redis_client, keys, "rollout-0", 2500)
    up = s.apply(4, job_size=1, hand_in_s=5)
    members, shares, done = hashes(redis_client, keys)
    assert up["job_size"] == 4
    assert up["added"] == ["rollout-1", "rollout-2", "rollout-3"]
    assert up["returning"] == ["rollout-1", "rollout-2"]
    left = STEPS - 2500 - 1200 - 1100
    assert up["remaining"] == left == 7200
    assert shares == {"rollout-0": 2500 + 1800, "rollout-1": 1200 + 1800, "rollout-2": 1100 + 1800, "rollout-3": 1800}
    assert sum(shares.values()) == STEPS
    assert set(members.values()) == {"active"} and len(members) == 4
    assert done == set(), "returning workers must not look finished"

    again = s.apply(4, job_size=4, hand_in_s=5)
    assert hashes(redis_client, keys)[1] == shares and again["added"] == [] and again["job_size"] == 4


def test_apply_waits_for_removed_workers_to_hand_in(redis_client, keys):
    for i in range(3):
        produce(redis_client, keys, f"rollout-{i}", 1000)
    s = scaler(redis_client, keys)
    s.retire(2)

    def hand_in():
        produce(redis_client, keys, "rollout-2", 1337, done=True)

    timer = threading.Timer(0.7, hand_in)
    timer.start()
    try:
        result = s.apply(2, job_size=2, hand_in_s=20)
    finally:
        timer.cancel()
    shares = hashes(redis_client, keys)[1]
    assert result["warnings"] == []
    assert shares["rollout-2"] == 1337, "the share is counted after the worker handed in everything"
    assert shares["rollout-0"] + shares["rollout-1"] == STEPS - 1337


def test_apply_gives_up_waiting_after_the_timeout_with_a_warning(redis_client, keys):
    for i in range(3):
        produce(redis_client, keys, f"rollout-{i}", 1000)
    ticks = iter(range(0, 10_000))
    s = scaler(redis_client, keys, sleep=lambda _: None, clock=lambda: float(next(ticks)))
    result = s.apply(2, job_size=3, hand_in_s=5)
    assert result["retired"] == ["rollout-2"]
    assert "rollout-2 did not report an exit within 5s" in result["warnings"][0]
    assert hashes(redis_client, keys)[1]["rollout-2"] == 1000


def test_a_worker_that_never_started_is_not_waited_for(redis_client, keys):
    produce(redis_client, keys, "rollout-0", 1000)
    s = scaler(redis_client, keys, sleep=lambda _: pytest.fail("waited for a worker that never ran"))
    result = s.apply(1, job_size=3, hand_in_s=60)
    assert result["retired"] == ["rollout-1", "rollout-2"]
    assert hashes(redis_client, keys)[1] == {"rollout-0": STEPS, "rollout-1": 0, "rollout-2": 0}


def test_scale_up_with_nothing_left_keeps_the_job_size(redis_client, keys):
    for i in range(3):
        produce(redis_client, keys, f"rollout-{i}", 4000)
    result = scaler(redis_client, keys).apply(5, job_size=3)
    assert result["job_size"] == 3 and result["added"] == [] and result["remaining"] == 0
    assert set(hashes(redis_client, keys)[0]) == {"rollout-0", "rollout-1", "rollout-2"}


def test_an_ended_run_is_not_scaled(redis_client, keys):
    redis_client.set(keys.trainer_done, 7)
    with pytest.raises(RunEnded, match="has ended"):
        scaler(redis_client, keys).retire(1)
    redis_client.delete(keys.trainer_done)
    redis_client.set(keys.stop, "stopped")
    with pytest.raises(RunEnded, match="is stopping"):
        scaler(redis_client, keys).apply(1, job_size=1)
    assert not redis_client.exists(keys.members)


def pod_env(redis_server, **extra) -> dict[str, str]:
    """The variables a scaler pod gets (the trainer's): a partial configuration as the chart writes it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRL_")}
    env.update(
        {
            "DRL_CONFIG": json.dumps({"preset": "sac", "workers": 3, "steps": STEPS, "run_name": RUN}),
            "DRL_RUN": RUN,
            "DRL_RUN_DIR": "/tmp/unused",
            "DRL_MEMORY_URL": redis_server.url,
            "DRL_STORE": "s3://drl/runs",
            "DRL_STEPS_DONE": "0",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }
    )
    return env


def run_scaler(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.backends.kubernetes.scaler", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_scaler_module_as_the_pod_runs_it(redis_server, redis_client, keys):
    for i in range(3):
        produce(redis_client, keys, f"rollout-{i}", 1000, done=(i == 2))
    env = pod_env(redis_server)
    retire = run_scaler(["retire", "--workers", "2"], env)
    assert retire.returncode == 0, retire.stderr
    assert json.loads(retire.stdout.strip().splitlines()[-1]) == {
        "phase": "retire",
        "workers": 2,
        "retired": ["rollout-2"],
    }
    apply = run_scaler(["apply", "--workers", "2", "--job-size", "2", "--hand-in-timeout", "10"], env)
    assert apply.returncode == 0, apply.stderr
    result = json.loads(apply.stdout.strip().splitlines()[-1])
    assert result["phase"] == "apply" and result["collecting"] == ["rollout-0", "rollout-1"]
    assert result["shares"] == {"rollout-0": 1000 + 4500, "rollout-1": 1000 + 4500, "rollout-2": 1000}
    assert "drl-scaler: 2 rollout workers share the 9,000 steps left" in apply.stderr


@pytest.mark.parametrize(
    "args, env_change, code, expected",
    [
        (["apply", "--workers", "0", "--job-size", "2"], {}, 2, "--workers must be a positive integer, got 0"),
        (["apply", "--workers", "2"], {}, 2, "apply needs --job-size C"),
        (["grow", "--workers", "2"], {}, 2, "invalid choice: 'grow'"),
        (["retire", "--workers", "2"], {"DRL_CONFIG": ""}, 2, "DRL_CONFIG must be set"),
        (["retire", "--workers", "2"], {"DRL_CONFIG": "{"}, 2, "DRL_CONFIG is not valid JSON"),
    ],
)
def test_scaler_bad_input_is_one_line_and_exit_2(redis_server, args, env_change, code, expected):
    done = run_scaler(args, pod_env(redis_server, **env_change))
    assert done.returncode == code
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("drl-scaler: error: ") and expected in lines[0], done.stderr
    assert done.stdout == ""
