"""The sac-lunar preset: rl-baselines3-zoo's LunarLanderContinuous SAC entry, valid, and reachable by name."""

from drl.config import ExperimentConfig
from drl.presets import PRESETS, get_preset, resolve


def test_sac_lunar_preset_holds_the_zoo_values():
    cfg = get_preset("sac-lunar")
    assert isinstance(cfg, ExperimentConfig)
    assert cfg.validate() is cfg
    assert (cfg.algorithm, cfg.env, cfg.preset, cfg.mode) == ("sac", "LunarLanderContinuous-v3", "sac-lunar", "async")
    assert cfg.sac.hidden == (400, 300)
    assert (cfg.sac.lr, cfg.sac.gamma, cfg.sac.tau, cfg.sac.batch_size) == (7.3e-4, 0.99, 0.01, 256)
    assert (cfg.random_steps, cfg.learning_starts, cfg.updates_per_transition) == (10_000, 10_000, 1.0)
    assert (cfg.replay_size, cfg.steps) == (1_000_000, 500_000)


def test_sac_lunar_is_listed_and_resolves_from_a_partial_configuration():
    assert "sac-lunar" in PRESETS
    cfg = resolve({"preset": "sac-lunar", "workers": 4})
    assert cfg.workers == 4 and cfg.sac.hidden == (400, 300)
    assert get_preset("sac-lunar", "LunarLanderContinuous-v3").env == "LunarLanderContinuous-v3"
