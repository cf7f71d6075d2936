"""``drl-orchestrate plot`` on synthetic runs, and the foreground progress bar."""

from __future__ import annotations

import io
import json
import struct

import pytest

from orchestrator import cli
from orchestrator.plot import DPI, FIGSIZE, read_curve
from orchestrator.progress import BAR_WIDTH, Progress, bar

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_run(output, name, algorithm="sac", mode="async", workers=2, evaluations=5, resumed_at=None):
    run_dir = output / name
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"algorithm": algorithm, "mode": mode, "workers": workers}))
    lines = []
    for i in range(evaluations):
        wall = 10.0 * i if resumed_at is None or i < resumed_at else 10.0 * (i - resumed_at)
        lines.append(
            json.dumps(
                {
                    "version": i,
                    "env_steps": 1000 * i,
                    "wall_seconds": wall,
                    "mean_return": -1200.0 + 150 * i,
                    "std_return": 20.0,
                    "returns": [],
                }
            )
        )
    (run_dir / "evaluations.jsonl").write_text("\n".join(lines) + "\n")
    return run_dir


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def run_main(argv):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    return exit_info.value.code


def test_compare_two_runs_writes_one_png(tmp_path, capsys):
    make_run(tmp_path, "a")
    make_run(tmp_path, "b", algorithm="td3", mode="sync", workers=4, evaluations=3)
    assert run_main(["plot", "a", "--compare", "b", "--output", str(tmp_path)]) == 0
    out = tmp_path / "a" / "compare.png"
    assert capsys.readouterr().out.strip() == str(out)
    assert out.stat().st_size > 10_000
    assert png_size(out) == (int(FIGSIZE[0] * DPI), int(FIGSIZE[1] * DPI))


def test_single_run_default_file_and_explicit_out(tmp_path):
    make_run(tmp_path, "a")
    assert run_main(["plot", "a", "--output", str(tmp_path)]) == 0
    png_size(tmp_path / "a" / "learning_curve.png")
    target = tmp_path / "figures" / "curve.png"
    assert run_main(["plot", "a", "--output", str(tmp_path), "--out", str(target)]) == 0
    png_size(target)


def test_label_and_resumed_wall_clock(tmp_path):
    make_run(tmp_path, "r", resumed_at=3)
    curve = read_curve(tmp_path, "r")
    assert curve.label == "r (sac, async, 2 workers)"
    assert curve.wall_seconds == [0.0, 10.0, 20.0, 20.0, 30.0]
    assert curve.env_steps == [0.0, 1000.0, 2000.0, 3000.0, 4000.0]


def test_label_of_a_scaled_run_shows_its_worker_counts(tmp_path):
    run_dir = make_run(tmp_path, "r", workers=2)
    history = [
        {"wall_seconds": t, "env_steps": steps, "workers": n}
        for t, steps, n in ((0.0, 0, 2), (6.0, 900, 3), (9.0, 1500, 1))
    ]
    (run_dir / "summary.json").write_text(json.dumps({"workers": 1, "workers_history": history}))
    assert read_curve(tmp_path, "r").label == "r (sac, async, 2 -> 3 -> 1 workers)"
    (run_dir / "summary.json").write_text(json.dumps({"workers": 2, "workers_history": history[:1]}))
    assert read_curve(tmp_path, "r").label == "r (sac, async, 2 workers)"
    (run_dir / "summary.json").write_text("{not json")
    assert read_curve(tmp_path, "r").label == "r (sac, async, 2 workers)"


@pytest.mark.parametrize("case", ["missing", "no_evaluations", "missing_compare"])
def test_bad_runs_are_one_line_and_exit_2(tmp_path, capsys, case):
    make_run(tmp_path, "a")
    if case == "no_evaluations":
        make_run(tmp_path, "empty", evaluations=0)
    argv = {
        "missing": ["plot", "nope"],
        "no_evaluations": ["plot", "empty"],
        "missing_compare": ["plot", "a", "--compare", "nope"],
    }[case]
    assert run_main([*argv, "--output", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("drl-orchestrate: error: ") and "\n" not in err
    assert ("no evaluations" in err) if case == "no_evaluations" else ("no run 'nope'" in err)
    assert not list(tmp_path.rglob("*.png"))


class _Log(io.StringIO):
    def isatty(self):
        return False


def test_progress_is_a_fixed_width_bar():
    assert bar(0.0) == "[" + "-" * BAR_WIDTH + "]"
    assert bar(0.5) == "[" + "#" * (BAR_WIDTH // 2) + "-" * (BAR_WIDTH // 2) + "]"
    assert bar(2.0) == "[" + "#" * BAR_WIDTH + "]"
    stream = _Log()
    progress = Progress(10_000, stream=stream, every_log=0)
    progress.started -= 10
    progress.show(steps=2_500, version=3, updates=400, last_eval=-900.0, best_eval=-850.0, backlog=1)
    progress.show(steps=5_000, version=4, updates=900, last_eval=None, best_eval=None, backlog=0)
    first, second = stream.getvalue().splitlines()
    assert first.startswith(
        bar(0.25) + "  25% 2,500/10,000 steps | 250 steps/s | 0:00:30 left | eval -900.0 "
        "(best -850.0) | policy v3 | 400 updates | backlog 1 | 0:00:10 elapsed"
    )
    assert second.startswith(bar(0.5) + "  50% 5,000/10,000 steps")
    assert first.index("%") == second.index("%")


def test_an_atari_run_shows_its_rate_in_emulator_frames_too():
    from drl.envs import frames_per_step

    assert frames_per_step("ALE/Pong-v5") == 4 and frames_per_step("Pendulum-v1") == 1
    stream = _Log()
    progress = Progress(10_000, stream=stream, every_log=0, frames_per_step=frames_per_step("ALE/Pong-v5"))
    progress.started -= 10
    progress.show(steps=2_500, version=3, updates=400, last_eval=None, best_eval=None, backlog=0)
    assert "| 250 steps/s (1,000 frames/s) |" in stream.getvalue()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def screen(text: str) -> list[str]:
    """What a terminal shows after ``text``: carriage returns, cursor-up and erase-line escapes applied."""
    import re

    rows, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[\d*[A-Za-z]|\r|\n|[^\x1b\r\n]+", text):
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            rows += [""] * (row + 1 - len(rows))
        elif token.startswith("\x1b["):
            count, code = token[2:-1] or "1", token[-1]
            if code == "A":
                row = max(0, row - int(count))
            elif code == "K":
                rows[row] = rows[row][:col]
            elif code == "J":
                rows[row] = rows[row][:col]
                del rows[row + 1 :]
        else:
            rows[row] = rows[row][:col].ljust(col) + token + rows[row][col + len(token) :]
            col += len(token)
    return [r for r in rows if r]


@pytest.mark.parametrize("columns", [80, 200])
def test_progress_on_a_terminal_shows_the_useful_fields_whatever_its_width(monkeypatch, columns):
    import os

    monkeypatch.setattr("orchestrator.progress.shutil.get_terminal_size", lambda: os.terminal_size((columns, 24)))
    stream = _Terminal()
    progress = Progress(1_000_000, stream=stream, every_tty=0)
    progress.started -= 10
    progress.show(steps=123_456, version=3, updates=400, last_eval=-1234.5, best_eval=-1000.0, backlog=1)
    progress.show(steps=123_457, version=3, updates=401, last_eval=-1234.5, best_eval=-1000.0, backlog=1)
    rows = screen(stream.getvalue())
    assert 1 <= len(rows) <= 2 and all(len(row) < columns for row in rows), rows
    shown = " ".join(rows)
    fields = [
        "123,457/1,000,000 steps",
        "steps/s",
        "left",
        "eval -1234.5 (best -1000.0)",
        "policy v3",
        "401 updates",
        "backlog 1",
        "elapsed",
    ]
    for field in fields if columns > 80 else fields[:-1]:  # with numbers this long, 80 columns cut the last one
        assert field in shown, (field, rows)
    progress.note("drl: a message")
    progress.show(steps=200_000, version=4, updates=500, last_eval=None, best_eval=None, backlog=0)
    progress.close()
    rows = screen(stream.getvalue())
    assert rows[0] == "drl: a message" and "200,000/1,000,000 steps" in rows[1], rows


def test_progress_of_a_resumed_run_starts_where_it_resumed_and_counts_only_new_steps(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("orchestrator.progress.time.monotonic", lambda: now[0])
    stream = _Log()
    progress = Progress(30_000, stream=stream, every_log=0, start=20_000)
    progress.show(steps=0, version=0, updates=0, last_eval=None, best_eval=None, backlog=0)
    assert "20,000/30,000 steps" in stream.getvalue().splitlines()[-1]
    for second in range(10, 100, 10):
        now[0] = 1000.0 + second
        progress.show(steps=20_000 + 50 * second, version=1, updates=1, last_eval=None, best_eval=None, backlog=0)
        assert " 50 steps/s" in stream.getvalue().splitlines()[-1], stream.getvalue().splitlines()[-1]
