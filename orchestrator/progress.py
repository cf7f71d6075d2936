"""The live progress of a foreground run: a bar of env steps done, then the rate, the time left, the last
evaluation, policy version, updates, backlog and time elapsed, the most useful first.

On a terminal it is redrawn in place twice a second: one line where the terminal is wide enough, else two (the
progress, rate and time left, then the rest), each cut to the terminal's width and redrawn with cursor
movements. Anywhere else (a log file, CI) it is a plain line every ten seconds. The rate is measured over the
last ``RATE_WINDOW_S`` seconds, so the time left follows the run's current speed rather than its average since
start (which includes the start-up of every process). A resumed run counts from where it resumed.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import deque

BAR_WIDTH = 24
MIN_BAR_WIDTH = 10
HEAD_FIELDS = 3  # progress, rate, time left: the first row when the line does not fit
RATE_WINDOW_S = 30.0
UP, ERASE_LINE, ERASE_DOWN = "\x1b[A", "\x1b[K", "\x1b[J"


def fmt_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########---------------]``: ``width`` cells, filled in proportion (clamped to 0..1)."""
    filled = int(round(width * min(1.0, max(0.0, fraction))))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class Progress:
    def __init__(
        self,
        total_steps: int,
        stream=sys.stderr,
        every_tty: float = 0.5,
        every_log: float = 10.0,
        start: int = 0,
        frames_per_step: int = 1,
    ):
        """``frames_per_step`` above 1 (Atari's frame skip) adds the rate in emulator frames, the unit Atari
        results are compared in."""
        self.total = total_steps
        self.start = start
        self.frames_per_step = frames_per_step
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every_tty if self.tty else every_log
        self.started = time.monotonic()
        self._last = 0.0
        self._rows = 0
        self._samples: deque[tuple[float, int]] = deque()

    def rate(self, steps: int, now: float) -> float:
        """Steps per second over the last ``RATE_WINDOW_S`` seconds (since start while the run is younger)."""
        samples = self._samples
        if not samples or steps < samples[-1][1]:
            samples.clear()
            samples.append((self.started, self.start))
        samples.append((now, steps))
        while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_S:
            samples.popleft()
        t0, s0 = samples[0]
        return max(0.0, (steps - s0) / (now - t0)) if now > t0 else 0.0

    def fields(
        self, steps: int, version: int, updates: int, last_eval: float | None, best_eval: float | None, backlog: int
    ) -> tuple[float, list[str]]:
        """(fraction done, the fields of the line, most useful first). Steps below the resume point are the
        trainer not having reported yet: a resumed run has done at least that many."""
        steps = max(steps, self.start)
        now = time.monotonic()
        rate = self.rate(steps, now)
        left = (self.total - steps) / rate if rate > 0 else float("nan")
        fraction = steps / self.total if self.total else 0.0
        evals = "eval -" if last_eval is None else f"eval {last_eval:.1f} (best {best_eval:.1f})"
        return fraction, [
            f"{100 * fraction:3.0f}% {steps:,}/{self.total:,} steps",
            f"{rate:,.0f} steps/s"
            + (f" ({rate * self.frames_per_step:,.0f} frames/s)" if self.frames_per_step > 1 else ""),
            f"{fmt_duration(left) if left == left else '?'} left",
            evals,
            f"policy v{max(version, 0)}",
            f"{updates:,} updates",
            f"backlog {backlog}",
            f"{fmt_duration(now - self.started)} elapsed",
        ]

    def line(self, **fields) -> str:
        fraction, parts = self.fields(**fields)
        return f"{bar(fraction)} " + " | ".join(parts)

    def rows(self, width: int, **fields) -> list[str]:
        """The line, or where it is wider than ``width`` two rows: progress, rate and time left (behind a
        narrower bar), then the rest; each cut to ``width``."""
        fraction, parts = self.fields(**fields)
        full = f"{bar(fraction)} " + " | ".join(parts)
        if len(full) <= width:
            return [full]
        head = " | ".join(parts[:HEAD_FIELDS])
        cells = min(BAR_WIDTH, width - len(head) - 3)
        first = f"{bar(fraction, cells)} {head}" if cells >= MIN_BAR_WIDTH else head.lstrip()
        return [first[:width], " | ".join(parts[HEAD_FIELDS:])[:width]]

    def show(self, force: bool = False, **fields) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        if self.tty:
            rows = self.rows(max(20, shutil.get_terminal_size().columns - 1), **fields)
            text = self._home() + "\n".join(row + ERASE_LINE for row in rows)
            if self._rows > len(rows):
                text += "\n" + ERASE_LINE + UP
            self.stream.write(text)
            self._rows = len(rows)
        else:
            self.stream.write(self.line(**fields) + "\n")
        self.stream.flush()

    def _home(self) -> str:
        """Back to the first column of the first row drawn last."""
        return UP * max(0, self._rows - 1) + "\r"

    def note(self, text: str) -> None:
        """A message on its own line, above the progress (which is redrawn at the next ``show``)."""
        if self.tty and self._rows:
            self.stream.write(self._home() + ERASE_DOWN)
            self._rows = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._rows:
            self.stream.write("\n")
            self.stream.flush()
