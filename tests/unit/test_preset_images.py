"""Presets for image observations: dqn-atari and ppo-atari hold CleanRL's Atari values, dqn and ppo pick MinAtar
and Atari settings by the env id (without creating the env), all valid and reachable by name."""

from __future__ import annotations

import dataclasses

import pytest

from drl.config import ExperimentConfig
from drl.presets import PRESETS, get_preset, resolve


def test_dqn_atari_holds_cleanrls_values():
    cfg = get_preset("dqn-atari")
    assert isinstance(cfg, ExperimentConfig) and cfg.validate() is cfg
    assert (cfg.algorithm, cfg.env, cfg.preset) == ("dqn", "ALE/Pong-v5", "dqn-atari")
    assert (cfg.steps, cfg.replay_size, cfg.learning_starts, cfg.updates_per_transition) == (
        10_000_000,
        1_000_000,
        80_000,
        0.25,
    )
    d = cfg.dqn
    assert (d.encoder, d.lr, d.gamma, d.batch_size, d.n_step) == ("nature", 1e-4, 0.99, 32, 3)
    assert d.target_update_every / cfg.updates_per_transition == 1000  # CleanRL: every 1,000 env steps
    assert (d.eps_start, d.eps_end, d.eps_decay_fraction) == (1.0, 0.01, 0.1)


def test_ppo_atari_holds_cleanrls_values():
    cfg = get_preset("ppo-atari")
    assert cfg.validate() is cfg
    assert (cfg.algorithm, cfg.env, cfg.preset, cfg.mode) == ("ppo", "ALE/Breakout-v5", "ppo-atari", "sync")
    assert cfg.workers * cfg.envs_per_worker == 8 and cfg.sync_steps_per_iteration == 8 * 128
    p = cfg.ppo
    assert (p.encoder, p.lr, p.anneal_lr, p.gamma, p.gae_lambda) == ("nature", 2.5e-4, True, 0.99, 0.95)
    assert (p.minibatches, p.epochs, p.clip, p.ent_coef, p.vf_coef, p.max_grad_norm) == (4, 4, 0.1, 0.01, 0.5, 0.5)
    assert not p.normalize_obs


@pytest.mark.parametrize("name", ["dqn", "ppo"])
def test_dqn_and_ppo_pick_image_settings_by_env_id_without_creating_it(name, monkeypatch):
    import importlib

    def refuse(env_id):
        raise AssertionError(f"the preset created {env_id}")

    monkeypatch.setattr(importlib.import_module("drl.presets.ppo"), "space_spec", refuse)
    minatar = get_preset(name, "MinAtar/Breakout-v1").validate()
    block = getattr(minatar, name)
    assert (minatar.preset, minatar.env, block.encoder) == (name, "MinAtar/Breakout-v1", "minatar")
    if name == "dqn":
        assert (minatar.replay_size, block.batch_size, block.target_update_every, block.eps_end) == (
            100_000,
            32,
            1_000,
            0.1,
        )
    atari = get_preset(name, "ALE/Breakout-v5")  # the -atari values under the preset's own name
    assert atari == dataclasses.replace(get_preset(f"{name}-atari", "ALE/Breakout-v5"), preset=name)
    assert get_preset("dqn", "ALE/Pong-ram-v5").dqn.encoder == "auto"  # RAM bytes are a vector


def test_atari_presets_are_listed_and_resolve_from_a_partial_configuration():
    assert {"dqn-atari", "ppo-atari"} <= set(PRESETS)
    cfg = resolve({"preset": "dqn-atari", "workers": 8, "mode": "async"})
    assert (cfg.workers, cfg.mode, cfg.dqn.encoder, cfg.env) == (8, "async", "nature", "ALE/Pong-v5")
    assert resolve({"preset": "ppo-atari", "env": "ALE/Pong-v5"}).env == "ALE/Pong-v5"
