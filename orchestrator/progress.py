"""The live progress of a foreground run: a bar of env steps done, then policy version, updates, last
evaluation, rate, backlog and time left.

On a terminal it is one line redrawn in place twice a second, cut to the terminal's width (a wrapped line
could not be redrawn with a carriage return). Anywhere else (a log file, CI) it is a plain line every ten
seconds. The rate is measured over the last ``RATE_WINDOW_S`` seconds, so the time left follows the run's
current speed rather than its average since start (which includes the start-up of every process).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import deque

BAR_WIDTH = 24
RATE_WINDOW_S = 30.0


def fmt_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``[#########---------------]``: ``width`` cells, filled in proportion (clamped to 0..1)."""
    filled = int(round(width * min(1.0, max(0.0, fraction))))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


class Progress:
    def __init__(self, total_steps: int, stream=sys.stderr, every_tty: float = 0.5, every_log: float = 10.0,
                 start: int = 0):
        self.total = total_steps
        self.start = start
        self.stream = stream
        self.tty = stream.isatty()
        self.every = every_tty if self.tty else every_log
        self.started = time.monotonic()
        self._last = 0.0
        self._width = 0
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

    def line(self, steps: int, version: int, updates: int, last_eval: float | None, best_eval: float | None,
             backlog: int) -> str:
        now = time.monotonic()
        elapsed = now - self.started
        rate = self.rate(steps, now)
        left = (self.total - steps) / rate if rate > 0 else float("nan")
        fraction = steps / self.total if self.total else 0.0
        evals = "eval -" if last_eval is None else f"eval {last_eval:.1f} (best {best_eval:.1f})"
        eta = fmt_duration(left) if left == left else "?"
        return (f"{bar(fraction)} {100 * fraction:3.0f}% {steps:,}/{self.total:,} steps | policy v{max(version, 0)} "
                f"| {updates:,} updates | {evals} | {rate:,.0f} steps/s | backlog {backlog} | "
                f"{fmt_duration(elapsed)} elapsed, {eta} left")

    def show(self, force: bool = False, **fields) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        text = self.line(**fields)
        if self.tty:
            text = text[:max(20, shutil.get_terminal_size().columns - 1)]
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A message on its own line, above the progress line (which is redrawn at the next ``show``)."""
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
