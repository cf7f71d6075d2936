"""When the trainer's loops end: the run's stop flag, or this process told to stop.

The flag (``RunControl.stop_reason``) is read at most every ``every_s`` seconds unless forced, because the loops
ask between every read and update. A reason once found is kept: what ended the run is the first thing that did.
"""

from __future__ import annotations

import time
from typing import Callable

from drl.memory import RunStop

STOPPED, TARGET_REACHED = "stopped", "target_reached"


class StopCheck:
    """``check()``: the reason to stop ("target_reached", "stopped", or what ``stop`` was told), "" while none."""

    def __init__(self, control: RunStop, stopped: Callable[[], bool], every_s: float = 0.25):
        self.control, self.stopped, self.every_s = control, stopped, every_s
        self.reason = ""
        self._checked = 0.0

    def __call__(self, force: bool = False) -> str:
        now = time.monotonic()
        if not self.reason and self.stopped():
            self.reason = STOPPED
        if not self.reason and (force or now - self._checked > self.every_s):
            self._checked = now
            self.reason = self.flag_reason()
        return self.reason

    def flag_reason(self) -> str:
        """The run's stop flag as an exit reason, "" while it is unset."""
        flag = self.control.stop_reason()
        if flag is None:
            return ""
        return TARGET_REACHED if flag.startswith(TARGET_REACHED) else STOPPED

    def stop(self, reason: str) -> None:
        """Ends the loops at their next check (keeping a reason already found)."""
        self.reason = self.reason or reason
