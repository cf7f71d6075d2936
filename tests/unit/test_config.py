"""ExperimentConfig validation and JSON form, and the CLI's preset -> file -> flags resolution."""

from __future__ import annotations

import dataclasses
import json

import pytest

from drl.algorithms.sac import SACConfig
from drl.config import ExperimentConfig, iter_options, replace
from drl.errors import ConfigError, UserError
from drl.presets import get_preset
from orchestrator.cli import build_parser, resolve_config


def test_config_error_is_a_user_error():
    assert issubclass(ConfigError, UserError)


def test_defaults_validate():
    cfg = ExperimentConfig()
    assert cfg.validate() is cfg


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ExperimentConfig().workers = 3


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"workers": 0}, "--workers"),
        ({"steps": -5}, "--steps"),
        ({"envs_per_worker": 0}, "--envs-per-worker"),
        ({"replay_size": 0}, "--replay-size"),
        ({"random_steps": -1}, "--random-steps"),
        ({"learning_starts": -1}, "--learning-starts"),
        ({"updates_per_transition": 0.0}, "--updates-per-transition"),
        ({"sync_deadline_s": -1.0}, "--sync-deadline-s"),
        ({"mode": "turbo"}, "--mode must be one of sync, async, got 'turbo'"),
        ({"algorithm": "a2c"}, "--algorithm must be one of"),
        ({"env": ""}, "--env"),
        ({"run_name": "bad/name"}, "--run-name"),
        ({"run_name": "has space"}, "--run-name"),
        ({"workers": 10, "steps": 5}, "exceeds"),
        ({"sac.hidden": ()}, "--sac.hidden"),
        ({"sac.hidden": (64, 0)}, "--sac.hidden"),
        ({"sac.batch_size": 0}, "--sac.batch-size"),
    ],
)
def test_validate_rejects(changes, fragment):
    cfg = replace(ExperimentConfig(), **changes)
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    assert fragment in str(info.value)


def test_validate_reports_every_problem_at_once():
    cfg = replace(ExperimentConfig(), workers=0, mode="turbo", algorithm="a2c")
    with pytest.raises(ConfigError) as info:
        cfg.validate()
    message = str(info.value)
    assert "--workers" in message and "--mode must be one of" in message and "--algorithm must be one of" in message


def test_good_run_name_is_accepted():
    replace(ExperimentConfig(), run_name="sac_pendulum-1.2").validate()


def test_replace_accepts_dotted_nested_keys():
    cfg = replace(ExperimentConfig(), workers=3, **{"sac.lr": 0.5})
    assert cfg.workers == 3
    assert cfg.sac.lr == 0.5
    assert cfg.sac.hidden == SACConfig().hidden


@pytest.mark.parametrize(
    "cfg",
    [
        ExperimentConfig(),
        ExperimentConfig(
            workers=4,
            mode="async",
            target_return=-200.5,
            run_name="r1",
            sac=SACConfig(hidden=(32, 16, 8), lr=0.01, target_entropy=-3.0),
        ),
        get_preset("sac"),
        get_preset("sac", "HalfCheetah-v5"),
    ],
)
def test_json_round_trip(cfg):
    text = cfg.to_json()
    back = ExperimentConfig.from_json(text)
    assert back == cfg
    assert isinstance(back.sac, SACConfig)
    assert isinstance(back.sac.hidden, tuple)
    assert back.to_json() == text


def test_from_json_accepts_partial_objects():
    cfg = ExperimentConfig.from_json('{"workers": 5, "sac": {"lr": 0.02}}')
    assert cfg.workers == 5
    assert cfg.sac.lr == 0.02
    assert cfg.sac.hidden == SACConfig().hidden
    assert cfg.env == ExperimentConfig().env


@pytest.mark.parametrize(
    "text",
    [
        '{"wrokers": 4}',
        '{"sac": {"learning_rate": 0.1}}',
        '{"workers": 2, "extra": null}',
    ],
)
def test_from_json_rejects_unknown_keys(text):
    with pytest.raises(ConfigError, match="unknown configuration key"):
        ExperimentConfig.from_json(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"workers": "four"}',
        '{"workers": 1.5}',
        '{"workers": null}',
        '{"workers": [1]}',
        '{"steps": {"n": 1}}',
        '{"env": 5}',
        '{"mode": ["sync"]}',
        '{"target_return": "high"}',
        '{"sac": 3}',
        '{"sac": {"hidden": 5}}',
        '{"sac": {"hidden": "a,b"}}',
        '{"sac": {"hidden": [1.5]}}',
        '{"sac": {"lr": "fast"}}',
        "[]",
        '"text"',
        "{not json",
    ],
)
def test_from_json_rejects_wrong_types(text):
    with pytest.raises(ConfigError):
        ExperimentConfig.from_json(text)


def test_every_option_is_documented():
    options = list(iter_options())
    assert {name for name, *_ in options} >= {"workers", "mode", "sac.lr", "sac.hidden"}
    for name, _tp, _default, doc, _choices in options:
        assert doc, f"{name} has no documentation"


# -- orchestrator.cli.resolve_config --------------------------------------------------------------------


def test_no_flags_gives_the_preset():
    assert resolve_config([]) == get_preset("sac")


def test_preset_defaults_apply_per_environment():
    cfg = resolve_config(["--env", "HalfCheetah-v5"])
    assert cfg == get_preset("sac", "HalfCheetah-v5")
    assert cfg.sac.hidden == (256, 256)
    assert cfg.sac.hidden != get_preset("sac").sac.hidden


def test_flags_override_only_what_was_given():
    base = get_preset("sac")
    cfg = resolve_config(["--workers", "4", "--mode", "async", "--sac.lr", "0.01", "--sac.hidden", "32,32"])
    assert cfg.workers == 4
    assert cfg.mode == "async"
    assert cfg.sac.lr == 0.01
    assert cfg.sac.hidden == (32, 32)
    expected = replace(base, workers=4, mode="async", **{"sac.lr": 0.01, "sac.hidden": (32, 32)})
    assert cfg == expected


def test_flag_values_are_coerced():
    cfg = resolve_config(
        ["--steps", "1e5", "--target-return", "-150", "--replay-size", "50_000", "--sac.target-entropy", "none"]
    )
    assert cfg.steps == 100_000 and isinstance(cfg.steps, int)
    assert cfg.target_return == -150.0
    assert cfg.replay_size == 50_000
    assert cfg.sac.target_entropy is None


def test_config_file_is_applied_and_flags_override_it(tmp_path):
    path = tmp_path / "exp.json"
    path.write_text(json.dumps({"workers": 3, "steps": 5000, "sac": {"lr": 0.05, "hidden": [16, 16]}}))

    from_file = resolve_config(["--config", str(path)])
    assert from_file.workers == 3
    assert from_file.steps == 5000
    assert from_file.sac.lr == 0.05
    assert from_file.sac.hidden == (16, 16)
    assert from_file.sac.gamma == get_preset("sac").sac.gamma

    both = resolve_config(["--config", str(path), "--workers", "7", "--sac.lr", "0.001"])
    assert both.workers == 7
    assert both.sac.lr == 0.001
    assert both.steps == 5000
    assert both.sac.hidden == (16, 16)


@pytest.mark.parametrize(
    "content",
    [
        None,
        "{not json",
        "[1, 2]",
        '{"wrokers": 3}',
        '{"workers": "many"}',
        '{"workers": 0}',
        b"\xff\xfe\x00garbage",
    ],
)
def test_bad_config_file_is_a_user_error(tmp_path, content):
    path = tmp_path / "exp.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(UserError):
        resolve_config(["--config", str(path)])


def test_config_file_that_is_a_directory_is_a_user_error(tmp_path):
    with pytest.raises(UserError):
        resolve_config(["--config", str(tmp_path)])


def test_unknown_preset_is_a_user_error():
    with pytest.raises(UserError, match="unknown preset"):
        resolve_config(["--preset", "nope"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-such-flag", "1"],
        ["--workers"],
        ["--mode", "turbo"],
        ["--algorithm", "a2c"],
        ["positional"],
        ["--e", "Pendulum-v1"],
    ],
)
def test_bad_command_line_is_a_user_error_not_an_exit(argv):
    with pytest.raises(UserError):
        resolve_config(argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "four"],
        ["--workers", "0"],
        ["--steps", "2.5"],
        ["--sac.hidden", "32,x"],
        ["--run-name", "a b"],
    ],
)
def test_bad_flag_values_are_config_errors(argv):
    with pytest.raises(ConfigError):
        resolve_config(argv)


def test_help_shows_preset_defaults():
    text = build_parser(get_preset("sac", "HalfCheetah-v5")).format_help()
    assert "--sac.hidden" in text
    assert "256,256" in text


# -- edge cases that once slipped through ----


@pytest.mark.parametrize("argv", [["--workers", "1e999"], ["--steps=-1e400"]])
def test_overflowing_integer_flag_is_a_config_error(argv):
    with pytest.raises(ConfigError):
        resolve_config(argv)


def test_overflowing_integer_in_json_is_a_config_error():
    with pytest.raises(ConfigError):
        ExperimentConfig.from_json('{"workers": "1e999"}')


def test_fractional_scientific_integer_is_refused():
    with pytest.raises(ConfigError):
        resolve_config(["--workers", "1.5e0"])


@pytest.mark.parametrize("flag", ["--updates-per-transition", "--sync-deadline-s"])
def test_nan_is_refused(flag):
    with pytest.raises(ConfigError):
        resolve_config([flag, "nan"])


def test_json_boolean_for_integer_is_refused():
    with pytest.raises(ConfigError):
        ExperimentConfig.from_json('{"workers": true}')


# -- algorithm blocks: typed for the built-in algorithms, from the registry for plugins ------------------------


def test_the_built_in_blocks_are_the_registrys_and_the_algorithms_its_choices():
    import typing

    from drl.algorithms import ALGORITHMS
    from drl.config import BLOCKS

    fields = {f.name: f for f in dataclasses.fields(ExperimentConfig)}
    hints = typing.get_type_hints(ExperimentConfig)
    assert list(BLOCKS) == list(ALGORITHMS) == ["sac", "td3", "ppo", "dqn", "appo"]
    for name in BLOCKS:
        assert hints[name] is ALGORITHMS[name].config and fields[name].metadata["doc"] == ALGORITHMS[name].doc
        assert fields[name].default == ALGORITHMS[name].config()
    assert next(c for n, *_, c in iter_options() if n == "algorithm") == tuple(ALGORITHMS)
    assert list(fields).index("algorithm") == 1
    assert ExperimentConfig().plugin_blocks == {} and "plugin_blocks" not in ExperimentConfig().to_dict()


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    """A toy's knobs."""

    scale: float = dataclasses.field(default=1.0, metadata={"doc": "How much."})

    def problems(self, prefix):
        return [f"{prefix}scale must not be 3"] if self.scale == 3 else []


@pytest.fixture
def toyx(monkeypatch):
    """A plugin algorithm registered for one test."""
    from drl.algorithms import ALGORITHMS, Algorithm

    class Toy(Algorithm):
        name, config, doc, continuous = "toyx", ToyConfig, "Toy hyperparameters.", True

        def problems(self, cfg):
            return ["toyx refuses async"] if cfg.mode == "async" else []

    monkeypatch.setitem(ALGORITHMS, "toyx", Toy())
    return Toy


def test_a_registered_algorithm_gets_its_block_json_options_and_checks(toyx):
    cfg = ExperimentConfig()
    assert cfg.toyx == ToyConfig() and cfg.plugin_blocks == {"toyx": ToyConfig()} and type(cfg) is ExperimentConfig
    cfg = ExperimentConfig.from_json('{"algorithm": "toyx", "toyx": {"scale": 2}}')
    assert cfg.toyx.scale == 2.0 and json.loads(cfg.to_json())["toyx"] == {"scale": 2.0}
    assert ExperimentConfig.from_json(cfg.to_json()) == cfg
    assert replace(cfg, **{"toyx.scale": 5}).toyx.scale == 5.0 and cfg.toyx.scale == 2.0
    options = {name: (default, doc) for name, _tp, default, doc, _choices in iter_options()}
    assert options["toyx.scale"] == (1.0, "How much.") and list(options)[-1] == "toyx.scale"
    assert next(c for n, *_, c in iter_options() if n == "algorithm") == ("sac", "td3", "ppo", "dqn", "appo", "toyx")
    assert cfg.validate() is cfg
    with pytest.raises(ConfigError) as info:
        replace(cfg, mode="async", **{"toyx.scale": 3}).validate()
    assert str(info.value) == "toyx refuses async; --toyx.scale must not be 3"
    with pytest.raises(ConfigError, match="unknown configuration key"):
        ExperimentConfig.from_json('{"toyx": {"size": 2}}')
    with pytest.raises(AttributeError):
        ExperimentConfig().toyy  # noqa: B018


def test_an_algorithm_not_registered_has_no_block_and_is_no_choice():
    with pytest.raises(ConfigError, match="--algorithm must be one of sac, td3, ppo, dqn, appo, got 'toyx'"):
        replace(ExperimentConfig(), algorithm="toyx").validate()
    with pytest.raises(ConfigError, match="unknown configuration key.*toyx"):
        ExperimentConfig.from_json('{"toyx": {"scale": 2}}')
    with pytest.raises(ConfigError, match="unknown configuration key.*toyx"):
        ExperimentConfig(plugin_blocks={"toyx": ToyConfig()})


def test_a_plugin_algorithm_named_like_an_option_is_refused(monkeypatch):
    from drl.algorithms import ALGORITHMS, Algorithm

    monkeypatch.setitem(
        ALGORITHMS, "workers", type("Workers", (Algorithm,), {"name": "workers", "config": ToyConfig})()
    )
    with pytest.raises(ConfigError, match="algorithm 'workers' is named like the option --workers"):
        ExperimentConfig()


def test_plugin_blocks_are_read_only_and_copy_as_the_configuration_does(toyx):
    import copy
    import pickle

    cfg = ExperimentConfig()
    with pytest.raises(TypeError, match="read-only"):
        cfg.plugin_blocks["toyx"] = ToyConfig(scale=2.0)
    with pytest.raises(TypeError, match="read-only"):
        cfg.plugin_blocks.update(toyx=ToyConfig(scale=2.0))
    assert copy.deepcopy(cfg) == cfg and pickle.loads(pickle.dumps(cfg)) == cfg and hash(copy.copy(cfg)) == hash(cfg)
    assert dataclasses.asdict(cfg)["plugin_blocks"] == {"toyx": {"scale": 1.0}}
