"""docs/configuration.md is what scripts/gen_config_docs.py generates, and what it says holds: every option is
listed with its flag, every flag it names is one the real parser accepts (with the documented default), the
config file example resolves, and every ``DRL_*`` variable the code reads is described."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from drl.config import iter_options
from drl.presets import PRESETS, get_preset, resolve
from orchestrator.cli import build_parser, resolve_config

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
HINT = "docs/configuration.md is stale: run `python scripts/gen_config_docs.py` and commit docs/configuration.md"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?:\.[a-z][a-z0-9-]*)?(?!\.?\w)")


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


@pytest.fixture(autouse=True)
def _no_memory_url(monkeypatch):
    """resolve_config takes --memory from $DRL_MEMORY_URL; the documented defaults assume it is unset."""
    monkeypatch.delenv("DRL_MEMORY_URL", raising=False)


def _doc() -> str:
    return DOC.read_text()


def _option_row(name: str) -> re.Match | None:
    return re.search(
        rf"^\| `{re.escape(gen.flag(name))}` \| `{re.escape(name)}` \| [^|]+ \| `([^`]*)` \|", _doc(), re.MULTILINE
    )


def test_committed_doc_is_current():
    assert DOC.exists(), HINT
    assert _doc() == gen.render(), HINT


def test_every_option_is_documented_with_its_flag_and_key():
    missing = [name for name, *_ in iter_options() if _option_row(name) is None]
    assert not missing, f"options without a row `--flag` | `key` in docs/configuration.md: {missing}"


@pytest.mark.parametrize("name", [name for name, *_ in iter_options()])
def test_documented_flag_and_default_are_accepted_by_the_cli(name):
    """The documented spelling and default, given to the real resolver (parse, coerce, validate; no run),
    yield the documented default."""
    row = _option_row(name)
    assert row is not None, f"no row for {name}"
    text = "" if row.group(1) == '""' else row.group(1)
    default = next(d for n, _tp, d, *_ in iter_options() if n == name)
    cfg = resolve_config(["--preset", "sac", gen.flag(name), text])
    assert gen.value_of(cfg, name) == default


def test_every_flag_named_in_the_doc_exists():
    parser = build_parser(get_preset("sac"))
    text = re.sub(r"<!--.*?-->", "", _doc(), flags=re.DOTALL)
    named = set(FLAG.findall(text))
    unknown = sorted(named - set(parser._option_string_actions))
    assert named and not unknown, f"docs/configuration.md names flags drl-orchestrate does not accept: {unknown}"


def test_config_file_example_resolves(tmp_path):
    example = re.search(r"```json\n(.*?)```", _doc(), re.DOTALL)
    assert example, "docs/configuration.md has no JSON config file example"
    data = json.loads(example.group(1))
    path = tmp_path / "config.json"
    path.write_text(example.group(1))
    cfg = resolve_config(["--config", str(path)])
    assert (cfg.workers, cfg.mode, cfg.sac.lr, cfg.sac.hidden) == (4, "async", 0.001, (64, 64))
    assert resolve(data) == cfg


def test_every_preset_has_a_section():
    for name in PRESETS:
        assert f"### `--preset {name}`" in _doc(), f"preset {name} missing from docs/configuration.md"


def test_every_drl_variable_in_the_code_is_documented():
    assert not gen.problems(), "\n".join(gen.problems())
    doc = _doc()
    undocumented = sorted(name for name in gen.code_variables() if f"| `{name}` |" not in doc)
    assert not undocumented, f"DRL_* variables read by the code but missing from docs/configuration.md: {undocumented}"


def test_variable_scan_finds_new_names(tmp_path, monkeypatch):
    """A variable only the code knows is reported, naming the file that reads it."""
    (tmp_path / "drl").mkdir()
    (tmp_path / "drl" / "x.py").write_text(
        'import os\nos.environ.get("DRL_BRAND_NEW")\n"""the DRL_MEMORY_* family"""\n'
    )
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.undocumented_variables() == {"DRL_BRAND_NEW": ["drl/x.py"]}


def test_check_fails_when_a_help_text_changes(tmp_path, monkeypatch, capsys):
    """A changed help string makes the committed page stale, and --check says so with exit code 1."""

    def drifted():
        for name, tp, default, doc, choices in iter_options():
            yield name, tp, default, doc + (" (changed)" if name == "workers" else ""), choices

    (tmp_path / "configuration.md").write_text(gen.render())
    monkeypatch.setattr(gen, "OUTPUT", tmp_path / "configuration.md")
    monkeypatch.setattr(gen, "ROOT", tmp_path.parent)
    monkeypatch.setattr(gen, "problems", lambda: [])
    assert gen.main(["--check"]) == 0
    monkeypatch.setattr(gen, "iter_options", drifted)
    assert gen.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().err
