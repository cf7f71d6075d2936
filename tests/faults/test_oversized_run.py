"""Sizes a machine cannot hold (a replay of 1e11 transitions, networks of 200,000-unit layers) are refused
before anything starts, with one line and exit 2, instead of a trainer that fails to allocate and is restarted
until the run gives up; the presets as shipped pass the same check."""

from __future__ import annotations

import time

import pytest

from drl.algorithms import ALGORITHMS, get
from drl.envs import space_spec
from drl.errors import EXIT_USAGE
from drl.presets import PRESETS
from orchestrator.backends.local.launch import check_memory, memory_limit
from tests.conftest import processes_mentioning, run_cli


@pytest.mark.parametrize(
    "flags, option",
    [
        (["--replay-size", "1e11"], "--replay-size 100000000000"),
        (["--sac.hidden", "200000,200000"], "--sac.hidden 200000,200000"),
    ],
)
def test_an_oversized_run_is_refused_with_one_line_before_it_starts(tmp_path, flags, option):
    name = f"oversized-{flags[0].strip('-').replace('.', '-')}"
    started = time.monotonic()
    shown = run_cli(
        ["--preset", "sac", "--steps", "2000", *flags, "--output", str(tmp_path), "--run-name", name], timeout=120
    )
    took = time.monotonic() - started
    lines = shown.stderr.strip().splitlines()
    assert shown.returncode == EXIT_USAGE, shown.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in shown.stderr, shown.stderr[-3000:]
    assert lines[0].startswith("drl-orchestrate: error: " + option), lines[0]
    assert "needs about" in lines[0] and "TiB" in lines[0], lines[0]
    assert took < 30, f"the refusal took {took:.0f} s: the run was started"
    assert not (tmp_path / name).exists(), "the run folder was created for a refused run"
    assert not processes_mentioning(f"DRL_RUN={name}")


def test_an_atari_replay_that_does_not_fit_is_refused(tmp_path):
    """A frame replay is sized by its frames (about 7.7 KiB a transition for 84x84 frames stacked 4 deep), not
    by whole stacks: 4 million transitions need about 29 GiB, more than this machine has; 100,000 fit."""
    shown = run_cli(
        [
            "--preset",
            "dqn",
            "--env",
            "ALE/Pong-v5",
            "--replay-size",
            "4000000",
            "--output",
            str(tmp_path),
            "--run-name",
            "atari-replay",
        ],
        timeout=120,
    )
    lines = shown.stderr.strip().splitlines()
    assert shown.returncode == EXIT_USAGE and len(lines) == 1, shown.stderr[-3000:]
    assert lines[0].startswith("drl-orchestrate: error: --replay-size 4000000 needs about 29."), lines[0]
    assert "GiB for the replay buffer" in lines[0], lines[0]
    assert not (tmp_path / "atari-replay").exists()
    spec = space_spec("ALE/Pong-v5")
    from drl.config import ExperimentConfig, replace

    cfg = replace(ExperimentConfig(algorithm="dqn", env="ALE/Pong-v5"), replay_size=100_000)
    replay = next(n for n in get("dqn").memory_needs(spec, cfg) if n.option == "--replay-size")
    assert 7.5 * 2**10 * 100_000 < replay.bytes < 8 * 2**10 * 100_000


def test_the_limit_can_be_set_and_names_its_source(tmp_path):
    shown = run_cli(
        ["--preset", "sac", "--steps", "2000", "--output", str(tmp_path), "--run-name", "limited"],
        env={"DRL_RAM_LIMIT": "1M"},
        timeout=120,
    )
    assert shown.returncode == EXIT_USAGE, shown.stderr[-3000:]
    assert shown.stderr.strip().splitlines() == [
        line
        for line in shown.stderr.strip().splitlines()
        if "--replay-size 1000000 needs about 34.3 MiB" in line and "1.0 MiB of DRL_RAM_LIMIT" in line
    ], shown.stderr


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_passes_the_memory_check(preset, monkeypatch):
    monkeypatch.delenv("DRL_RAM_LIMIT", raising=False)
    assert memory_limit() is not None, "MemAvailable could not be read: the check would never refuse anything"
    check_memory(PRESETS[preset](None))


def test_every_algorithm_counts_its_parameters_exactly():
    """The counts come from arithmetic (nothing may be built before the check); they must be what the learners
    really build."""
    import numpy as np

    from drl.config import ExperimentConfig

    def numel(module) -> int:
        return sum(int(np.prod(p.shape)) for p in module.parameters())

    for name, env in (
        ("sac", "Pendulum-v1"),
        ("td3", "Pendulum-v1"),
        ("dqn", "CartPole-v1"),
        ("ppo", "CartPole-v1"),
        ("ppo", "Pendulum-v1"),
    ):
        builder, spec = get(name), space_spec(env)
        cfg = ExperimentConfig(algorithm=name, env=env)
        counts = builder.parameters(spec, cfg)
        learner = builder.make_learner(spec, cfg, seed=0)
        held = sum(numel(m) for m in learner._modules().values()) + (1 if name == "sac" else 0)
        assert counts is not None and counts.trained + counts.frozen == held, (name, env, counts, held)
        actor = builder.make_actor(spec, cfg, seed=0)
        weights = learner.policy_weights()
        assert counts.acting == sum(int(np.prod(w.shape)) for k, w in weights.items() if not k.startswith("norm.")), (
            name,
            env,
            counts,
        )
        assert actor is not None
    assert set(ALGORITHMS) >= {"sac", "td3", "dqn", "ppo"}
