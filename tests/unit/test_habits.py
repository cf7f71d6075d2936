"""The tree's habits, checked in every CI run: ruff's lint rules (pyflakes, import order, bugbear;
``[tool.ruff]`` in pyproject.toml) over the whole Python tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_ruff_finds_nothing():
    result = _ruff("check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_fails_on_an_unused_import_an_unsorted_block_and_a_late_bound_loop_variable(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\n\n\ndef f(xs):\n    return [lambda: x for x in xs]\n")
    found = _ruff("check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), "--output-format", "concise",
                  str(bad)).stdout
    assert "F401" in found and "I001" in found and "B023" in found, found
