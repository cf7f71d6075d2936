"""The tree's habits, checked in every CI run: ruff's formatter and its lint rules (pyflakes, import order, bugbear;
``[tool.ruff]`` in pyproject.toml) over the whole Python tree, and mypy (``[tool.mypy]``) over the shipped packages
(drl, services, orchestrator)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    result = _ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_tree_is_formatted():
    """``ruff format .`` leaves every file as it is (run it before a commit; CI only checks)."""
    result = _ruff("format", "--check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr


def test_the_format_check_fails_on_an_unformatted_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = {'a':1,\n  'b':2}\n")
    result = _ruff("format", "--check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1 and "bad.py" in result.stdout, result.stdout + result.stderr


def test_ruff_fails_on_an_unused_import_an_unsorted_block_and_a_late_bound_loop_variable(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\n\ndef f(xs):\n    return [lambda: x for x in xs]\n")
    found = _ruff(
        "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), "--output-format", "concise", str(bad)
    ).stdout
    assert "F401" in found and "I001" in found and "B023" in found, found


def _mypy(*args: str) -> subprocess.CompletedProcess:
    """mypy with its cache outside the tree (``$XDG_CACHE_HOME/drl/mypy``): never committed, shared by every clone
    of the tree on the machine; mypy checks again each module whose content or dependencies changed, so a warm run
    checks what changed and a fresh machine checks everything once."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "drl" / "mypy"
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_mypy_finds_nothing_in_the_shipped_packages():
    result = _mypy()
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_mypy_fails_on_a_possibly_missing_attribute_and_a_wrong_return_type(tmp_path):
    """The check above can fail: the configuration's checker finds the two kinds of mistake it was added for."""
    bad = tmp_path / "bad.py"
    bad.write_text("from __future__ import annotations\n\n\ndef f(x: str | None) -> int:\n    return x.upper()\n")
    found = _mypy("--config-file", str(ROOT / "pyproject.toml"), str(bad)).stdout
    assert 'Item "None" of "str | None" has no attribute "upper"' in found, found
    assert "Incompatible return value type" in found, found
