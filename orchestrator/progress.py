"""One live progress line for foreground runs: env steps of the total, policy version, last evaluation, rate."""

from __future__ import annotations

import sys
import time


def fmt_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


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

    def line(self, steps: int, version: int, updates: int, last_eval: float | None, best_eval: float | None,
             backlog: int) -> str:
        elapsed = time.monotonic() - self.started
        rate = (steps - self.start) / elapsed if elapsed > 0 else 0.0
        left = (self.total - steps) / rate if rate > 0 else float("nan")
        pct = 100.0 * steps / self.total if self.total else 0.0
        evals = "eval -" if last_eval is None else f"eval {last_eval:.1f} (best {best_eval:.1f})"
        eta = fmt_duration(left) if left == left else "?"
        return (f"{steps:,}/{self.total:,} steps {pct:3.0f}% | policy v{max(version, 0)} | {updates:,} updates | "
                f"{evals} | {rate:,.0f} steps/s | backlog {backlog} | {fmt_duration(elapsed)} elapsed, {eta} left")

    def show(self, force: bool = False, **fields) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return
        self._last = now
        text = self.line(**fields)
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad)
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
