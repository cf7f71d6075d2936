"""Bad input to drl-orchestrate: one clear line, exit code 2, no traceback, no process left running."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import processes_mentioning, run_cli
from tests.plugins.odd_spaces import SPACES as ODD_SPACES


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CASES = {
    "unknown_preset": (
        ["--preset", "nope"],
        {},
        "unknown preset 'nope'; accepted: appo, appo-atari, dqn, dqn-atari, ppo, ppo-atari, sac, sac-lunar, td3",
    ),
    "unknown_env": (["--env", "Pendulum-v9"], {}, "unknown environment id 'Pendulum-v9'; did you mean"),
    "unknown_mode": (["--mode", "sometimes"], {}, "invalid choice: 'sometimes' (choose from 'sync', 'async')"),
    "zero_workers": (["--workers", "0"], {}, "--workers must be a positive integer, got 0"),
    "negative_workers": (["--workers=-3"], {}, "--workers must be a positive integer, got -3"),
    "non_integer_workers": (["--workers", "two"], {}, "--workers expects int, got 'two'"),
    "unreachable_memory": (["--memory", f"redis://127.0.0.1:{_closed_port()}/0"], {}, "is unreachable"),
    "bad_memory_scheme": (["--memory", "http://127.0.0.1:1/"], {}, "is not valid"),
    "missing_server_binary": (
        [],
        {"DRL_REDIS_SERVER": "/nonexistent/valkey-server"},
        "DRL_REDIS_SERVER=/nonexistent/valkey-server is not an executable file",
    ),
    "discrete_env_for_sac": (["--env", "CartPole-v1"], {}, "algorithm sac needs continuous (Box) actions"),
    "missing_config_file": (
        ["--config", "/nonexistent/drl.json"],
        {},
        "config file /nonexistent/drl.json does not exist",
    ),
    "unknown_flag": (["--wrokers", "2"], {}, "unrecognized arguments: --wrokers 2"),
    "envpool_for_a_non_atari_env": (
        ["--preset", "ppo", "--env", "CartPole-v1", "--vector-env", "envpool"],
        {},
        "--vector-env envpool steps ALE -v5 games (ALE/Pong-v5 ...), not 'CartPole-v1'",
    ),
    "unknown_compile_mode": (
        ["--compile", "sometimes"],
        {},
        "invalid choice: 'sometimes' (choose from 'off', 'auto', 'on')",
    ),
    "ppo_async": (["--preset", "ppo", "--mode", "async"], {}, "ppo is on-policy and runs only in --mode sync"),
    "continuous_env_for_dqn": (
        ["--preset", "dqn", "--env", "Pendulum-v1"],
        {},
        "algorithm dqn needs discrete actions, but Pendulum-v1 has Box",
    ),
    "worker_priorities_for_sac": (
        ["--prioritized", "true", "--worker-priorities", "true"],
        {},
        "--worker-priorities: sac's rollout workers have no value estimate",
    ),
    "prioritized_ppo": (["--preset", "ppo", "--prioritized", "true"], {}, "--prioritized applies to replay-based"),
    **{
        f"observations_{env}": (
            ["--preset", "dqn", "--env", env],
            {"DRL_PLUGINS": "tests.plugins.odd_spaces"},
            f"environment {env!r}: observation space {space!r} is not supported; drl takes Box "
            "observations of at most 3 dimensions (a vector, an HxW, HxWxC or CxHxW image) and "
            "Discrete ones",
        )
        for env, space in ODD_SPACES.items()
    },
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_and_exit_2(tmp_path, case):
    args, env, expected = CASES[case]
    run = f"bad-{case}"
    proc = run_cli([*args, "--steps", "1000", "--output", str(tmp_path), "--run-name", run], timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("drl-orchestrate: error: "), lines[0]
    assert expected in lines[0]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not processes_mentioning(f"DRL_RUN={run}")
    assert not processes_mentioning(str(tmp_path))


def test_invalid_config_file_values(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text('{"workers": 2, "sac": {"gamma": 7}, "colour": "red"}')
    proc = run_cli(["--config", str(path), "--output", str(tmp_path)], timeout=120)
    assert proc.returncode == 2
    assert "unknown configuration key(s): colour" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_run_name_already_used_on_the_memory_server(tmp_path, redis_server, redis_client):
    redis_client.set("drl:{taken}:policy", 3)
    proc = run_cli(["--memory", redis_server.url, "--run-name", "taken", "--output", str(tmp_path)], timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "run 'taken' already has data on the memory server" in proc.stderr
    assert redis_client.get("drl:{taken}:policy") == b"3", "existing data must be left alone"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["evaluate", "--run", "ghost"], "no run 'ghost' in"),
        (["evaluate", "--run", "ghost", "--episodes", "0"], "--episodes must be a positive integer, got 0"),
        (["evaluate"], "the following arguments are required: --run"),
        (["--resume", "ghost"], "no run 'ghost' to resume"),
        (["--resume", "ghost", "--config", "x.json"], "--config cannot be combined with it"),
        (["--store", "gs://bucket/x"], "store URL scheme 'gs' is not supported"),
    ],
)
def test_bad_evaluate_resume_and_store_input(tmp_path, args, expected):
    if args[0] == "evaluate":
        args = [*args, "--store", str(tmp_path)]
    else:
        args = [*args, "--output", str(tmp_path)]
    proc = run_cli(args, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert expected in proc.stderr
    assert "Traceback" not in proc.stderr
