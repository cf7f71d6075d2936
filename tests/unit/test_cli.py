"""The command line as a newcomer meets it: one clear line for bad input, help that lists what exists, commands
that can be copied as printed, and output that can be piped into ``head``."""

from __future__ import annotations

import pytest

from orchestrator.cli import main


def cli(argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_bad_steps_is_one_clause_not_two(capsys):
    code, _, err = cli(["--steps", "-5"], capsys)
    assert code == 2
    assert err.strip() == "drl-orchestrate: error: --steps must be a positive integer, got -5"
    code, _, err = cli(["--steps", "3", "--workers", "4"], capsys)
    assert code == 2 and "--workers (4) exceeds --steps (3)" in err


@pytest.mark.parametrize("below", ["", "sub"])
def test_output_that_is_a_file_is_blamed_as_output_not_as_the_store(tmp_path, capsys, below):
    afile = tmp_path / "afile"
    afile.write_text("")
    code, _, err = cli(["--steps", "1000", "--output", str(afile / below)], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"--output {afile / below} " in err and str(afile) in err and "store" not in err


@pytest.mark.parametrize("argv", [["presets"], ["status", "--output", "{tmp}"]])
def test_output_into_a_closed_pipe_ends_quietly(tmp_path, argv):
    """``drl-orchestrate presets | head -1``: the reader is gone before the output is written."""
    import os
    import subprocess
    import sys

    from orchestrator.state import RunState, write_state
    from tests.conftest import ROOT

    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    write_state(run_dir, RunState(run="r1", orchestrator_pid=2 ** 22 + 12345, memory_url="redis://127.0.0.1:1/0",
                                  state="finished", exit_reason="steps_done"))
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run([sys.executable, "-m", "orchestrator.cli", *[a.format(tmp=tmp_path) for a in argv]],
                          stdout=write_end, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120)
    os.close(write_end)
    assert proc.stderr == "" and proc.returncode == 141, proc.stderr
