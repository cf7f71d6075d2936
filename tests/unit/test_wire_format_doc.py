"""docs/wire-format.md quotes the transport's Lua scripts for implementers in other languages; they must be the
scripts the code runs."""

from __future__ import annotations

import re
from pathlib import Path

from drl.memory.redis import scripts

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"


def test_the_documented_lua_scripts_are_the_ones_the_code_runs():
    blocks = re.findall(r"```lua\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks == [scripts.ADD.lstrip("\n"), scripts.COMMIT.lstrip("\n")]
