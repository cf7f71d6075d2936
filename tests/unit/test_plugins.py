"""Algorithm plugins: modules named in DRL_PLUGINS (or the drl.algorithms entry points) register when an entry
point loads them (the command line, every service), before it reads a configuration; one that cannot be imported
is a user error. Importing drl loads none."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import drl.algorithms as algorithms
from drl.errors import UserError

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''
from dataclasses import dataclass

from drl.algorithms import ActorBase, Algorithm, opt, register


@dataclass(frozen=True)
class TinyConfig:
    """Tiny's knobs."""

    knob: int = opt(7, "A knob.")


class Tiny(Algorithm):
    name, config, doc, continuous = "tiny", TinyConfig, "Tiny hyperparameters.", True


register(Tiny())
'''


def _python(code: str, plugins: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DRL_PLUGINS": plugins,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, *(["-c", code] if code else []), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_plugin_modules_are_read_from_the_variable():
    assert algorithms.plugin_modules({"DRL_PLUGINS": " a.b, ,c "}) == ["a.b", "c"]
    assert algorithms.plugin_modules({}) == []


def test_a_missing_plugin_is_a_user_error_naming_it():
    with pytest.raises(
        UserError,
        match=r"^DRL_PLUGINS names 'no_such_plugin_mod', which cannot be imported: "
        r"ModuleNotFoundError",
    ):
        algorithms.load_plugins(["no_such_plugin_mod"])


def test_a_plugin_that_fails_on_import_is_a_user_error(tmp_path, monkeypatch):
    (tmp_path / "broken_plugin_mod.py").write_text("raise RuntimeError('half written')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match="'broken_plugin_mod', which cannot be imported: RuntimeError: half written"):
        algorithms.load_plugins(["broken_plugin_mod"])


def test_an_entry_point_that_fails_is_a_user_error(monkeypatch):
    class Point:
        name, value = "toy", "toy_pkg.algorithm:Toy"

        def load(self):
            raise ImportError("no toy_pkg")

    import importlib.metadata

    monkeypatch.setattr(
        importlib.metadata, "entry_points", lambda group: [Point()] if group == algorithms.ENTRY_POINT_GROUP else []
    )
    with pytest.raises(
        UserError,
        match=r"drl.algorithms entry point 'toy' \(toy_pkg.algorithm:Toy\) cannot be "
        "loaded: ImportError: no toy_pkg",
    ):
        algorithms.load_plugins([])


def test_a_plugin_gets_its_block_and_flags_in_every_process(tmp_path):
    (tmp_path / "tiny_plugin_mod.py").write_text(textwrap.dedent(PLUGIN))
    proc = _python(
        "from drl.algorithms import load_plugins; load_plugins();"
        "from drl.config import ExperimentConfig as C; c = C(algorithm='tiny');"
        'print(c.validate().tiny.knob, C.from_json(\'{"tiny": {"knob": 3}}\').tiny.knob)',
        "tiny_plugin_mod",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["7", "3"]
    proc = _python("", "tiny_plugin_mod", tmp_path, "-m", "orchestrator.cli", "--algorithm", "tiny", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "--tiny.knob" in proc.stdout and "A knob." in proc.stdout


def test_a_missing_plugin_stops_the_command_line_and_services_with_exit_2(tmp_path):
    for args in (
        ("-m", "orchestrator.cli", "presets"),
        ("-m", "services.evaluator"),
        ("-m", "orchestrator.backends.kubernetes.scaler"),
    ):
        proc = _python("", "no_such_plugin_mod", tmp_path, *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("drl: error: DRL_PLUGINS names 'no_such_plugin_mod', which cannot be imported")
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1


def test_importing_drl_loads_no_plugin_and_a_loaded_one_gets_its_block(tmp_path):
    """Importing is free of side effects: a DRL_PLUGINS that names a missing module does not end an import of the
    configuration, the command line or a service; ``load_plugins`` is what reads the variable."""
    (tmp_path / "tiny_plugin_mod.py").write_text(textwrap.dedent(PLUGIN))
    proc = _python(
        "import drl.config, orchestrator.cli, services.common, services.trainer.trainer; print('imported')",
        "no_such_plugin_mod",
        tmp_path,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "imported", proc.stderr
    proc = _python(
        "import sys; from drl.algorithms import ALGORITHMS, load_plugins; from drl.config import "
        "ExperimentConfig as C; before = C(); assert 'tiny' not in ALGORITHMS; "
        "assert 'tiny_plugin_mod' not in sys.modules; load_plugins(); "
        "print(list(before.plugins), C().tiny.knob)",
        "tiny_plugin_mod",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]", "7"]
