"""``drl-orchestrate plot``: learning curves of one run, or of several side by side, as one PNG.

    drl-orchestrate plot RUN [--compare RUN2 ...] [--output runs] [--out FILE.png]

Each run is read from its folder in ``--output``: ``evaluations.jsonl`` (one line per evaluated policy
version: ``env_steps``, ``wall_seconds``, ``mean_return``, ``std_return``) and ``config.json`` (for the label:
algorithm, mode, workers; a scaled run's worker counts come from its ``summary.json``). The figure has two
panels, evaluation return against env steps (sample efficiency) and against wall-clock seconds (what the
distribution buys), one line per run with its standard deviation over the evaluation episodes shaded. It is
drawn on matplotlib's Agg canvas, without pyplot, so no display is needed or touched. The default file is
``<output>/<RUN>/learning_curve.png``, or ``compare.png`` there with ``--compare``.

A resumed run's evaluator counts wall seconds from the resumed start again; those segments are placed after
the time already spent, so the wall-clock axis stays the run's total training time.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from drl.errors import UserError

FIGSIZE = (12.0, 4.5)
DPI = 100


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see drl-orchestrate plot --help)")


@dataclass
class Curve:
    run: str
    label: str
    env_steps: list[float]
    wall_seconds: list[float]
    mean: list[float]
    std: list[float]


def read_curve(output: Path, run: str) -> Curve:
    """One run's evaluations; a missing run or one without evaluations is a ``UserError``."""
    run_dir = output / run
    if not run or not run_dir.is_dir():
        raise UserError(f"no run {run!r} in {output} (is --output right?)")
    path = run_dir / "evaluations.jsonl"
    records = []
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
                records.append(
                    (
                        float(record["env_steps"]),
                        float(record["wall_seconds"]),
                        float(record["mean_return"]),
                        float(record.get("std_return") or 0.0),
                    )
                )
            except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
                continue
    if not records:
        raise UserError(f"run {run!r} has no evaluations to plot ({path} is missing or empty)")
    wall, offset, previous = [], 0.0, 0.0
    for _, seconds, _, _ in records:
        if seconds < previous:
            offset += previous
        previous = seconds
        wall.append(offset + seconds)
    return Curve(
        run,
        label(run, run_dir / "config.json"),
        [r[0] for r in records],
        wall,
        [r[2] for r in records],
        [r[3] for r in records],
    )


def label(run: str, config_path: Path) -> str:
    """``run (algorithm, mode, N workers)``, or ``2 -> 3 -> 1 workers`` for a run that was scaled (its
    ``summary.json``); just the name when the configuration cannot be read."""
    try:
        cfg = json.loads(config_path.read_text())
        counts = worker_counts(config_path.parent / "summary.json") or [int(cfg["workers"])]
        workers = " -> ".join(str(n) for n in counts)
        return f"{run} ({cfg['algorithm']}, {cfg['mode']}, {workers} worker{'s' if counts != [1] else ''})"
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return run


def worker_counts(summary_path: Path) -> list[int]:
    """The rollout worker counts a finished run had, in order (``workers_history``); empty when unknown."""
    try:
        history = json.loads(summary_path.read_text()).get("workers_history") or []
        counts = [int(entry["workers"]) for entry in history]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError):
        return []
    return [n for i, n in enumerate(counts) if i == 0 or n != counts[i - 1]]


def draw(curves: list[Curve], out: Path, title: str) -> None:
    """Writes the two-panel figure to ``out`` (PNG)."""
    import numpy as np
    from matplotlib.figure import Figure

    fig = Figure(figsize=FIGSIZE, dpi=DPI, layout="constrained")
    by_steps, by_wall = fig.subplots(1, 2, sharey=True)
    for curve in curves:
        mean, std = np.asarray(curve.mean), np.asarray(curve.std)
        for ax, x in ((by_steps, curve.env_steps), (by_wall, curve.wall_seconds)):
            (line,) = ax.plot(x, mean, marker="o", markersize=3, linewidth=1.5, label=curve.label)
            ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.15, linewidth=0)
    by_steps.set(
        xlabel="environment steps", ylabel="evaluation return (mean over episodes)", title="return vs environment steps"
    )
    by_wall.set(xlabel="wall-clock seconds", title="return vs wall-clock time")
    for ax in (by_steps, by_wall):
        ax.set_xlim(left=0)
        ax.grid(True, alpha=0.3)
    by_steps.legend(loc="best", fontsize="small")
    fig.suptitle(title)
    fig.savefig(out, format="png")


def main(argv: list[str]) -> int:
    """``drl-orchestrate plot``; bad input raises ``UserError`` (one line and exit 2, by the CLI)."""
    parser = _Parser(
        prog="drl-orchestrate plot",
        description="Plot evaluation return against env steps and wall-clock seconds for a run, "
        "or several runs in one figure, as a PNG.",
    )
    parser.add_argument("run", metavar="RUN", help="the run's name (its folder in --output)")
    parser.add_argument(
        "--compare", metavar="RUN", nargs="+", action="extend", default=[], help="more runs to draw in the same figure"
    )
    parser.add_argument("--output", metavar="DIR", default="runs", help="directory holding the runs' folders")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="PNG to write [default: <output>/RUN/learning_curve.png, or compare.png there with --compare]",
    )
    args = parser.parse_args(argv)
    output = Path(args.output).resolve()
    runs = list(dict.fromkeys([args.run, *args.compare]))
    curves = [read_curve(output, run) for run in runs]
    default_name = "compare.png" if len(runs) > 1 else "learning_curve.png"
    out = Path(args.out) if args.out else output / args.run / default_name
    if out.exists() and out.is_dir():
        raise UserError(f"--out {out} is a directory; name a .png file")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"folder of {out} cannot be created: {exc.strerror}") from None
    names = ", ".join(curve.run for curve in curves)
    title = curves[0].label if len(curves) == 1 else (names if len(names) <= 100 else f"{len(curves)} runs")
    try:
        draw(curves, out, title)
    except OSError as exc:
        raise UserError(f"{out} cannot be written: {exc.strerror}") from None
    print(out)
    return 0
