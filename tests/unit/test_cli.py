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
    write_state(
        run_dir,
        RunState(
            run="r1",
            orchestrator_pid=2**22 + 12345,
            memory_url="redis://127.0.0.1:1/0",
            state="finished",
            exit_reason="steps_done",
        ),
    )
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *[a.format(tmp=tmp_path) for a in argv]],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    os.close(write_end)
    assert proc.stderr == "" and proc.returncode == 141, proc.stderr


def public_commands() -> list[str]:
    from orchestrator.cli import COMMANDS

    return sorted(name for name in COMMANDS if not name.startswith("_"))


def test_top_level_help_lists_every_command(capsys):
    import re

    code, out, _ = cli(["--help"], capsys)
    assert code == 0
    missing = [name for name in public_commands() if not re.search(rf"^\s+{name}\b", out, re.M)]
    assert not missing, out[:1500]


class _Parsed(Exception):
    pass


@pytest.mark.parametrize("command", [c for c in public_commands() if c != "presets"])
def test_every_commands_help_is_plain_text_and_explains_every_option(command, monkeypatch, capsys):
    import argparse

    code, out, _ = cli([command, "--help"], capsys)
    assert code == 0 and "``" not in out, out
    parsers = []

    def capture(self, args=None, namespace=None):
        parsers.append(self)
        raise _Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", capture)
    with pytest.raises(_Parsed):
        main([command])
    unexplained = [a.option_strings or a.dest for a in parsers[-1]._actions if a.help in (None, "", argparse.SUPPRESS)]
    assert not unexplained


@pytest.mark.parametrize("argv", [["stop", "nosuch"], ["stop", "nosuch", "--namespace", "ns"]])
def test_stop_errors_suggest_only_what_stop_can_do(tmp_path, capsys, argv):
    code, _, err = cli([*argv, "--output", str(tmp_path)] if "--namespace" not in argv else argv, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "pass --namespace" not in err and "drl-orchestrate delete nosuch --namespace" in err, err


def test_evaluate_finds_runs_in_output_like_status_stop_scale_and_plot(tmp_path, capsys):
    code, _, err = cli(["evaluate", "--run", "ghost", "--output", str(tmp_path)], capsys)
    assert code == 2 and f"no run 'ghost' in {tmp_path}" in err, err
    code, _, err = cli(
        ["evaluate", "--run", "ghost", "--output", str(tmp_path), "--store", str(tmp_path / "s")], capsys
    )
    assert code == 2 and f"no run 'ghost' in {tmp_path / 's'}" in err, err


def test_a_detached_runs_follow_up_commands_name_its_output(tmp_path, monkeypatch):
    from orchestrator.backends.local.launch import follow_up

    monkeypatch.chdir(tmp_path)
    assert follow_up("r1", "runs") == "drl-orchestrate status r1 / drl-orchestrate stop r1"
    assert follow_up("r1", str(tmp_path / "runs")) == "drl-orchestrate status r1 / drl-orchestrate stop r1"
    assert follow_up("r1", "my runs") == (
        "drl-orchestrate status r1 --output 'my runs' / drl-orchestrate stop r1 --output 'my runs'"
    )
