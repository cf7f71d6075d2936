"""The heartbeat file the pods' exec probes check: created (with its folder) and kept fresh."""

from __future__ import annotations

import os
import time

from services.common import start_heartbeat


def test_heartbeat_creates_its_folder_and_touches_the_file(tmp_path):
    target = tmp_path / "drl" / "heartbeat"
    start_heartbeat(str(target))
    deadline = time.monotonic() + 5
    while not target.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.exists()
    os.utime(target, (0, 0))
    deadline = time.monotonic() + 10
    while target.stat().st_mtime == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert time.time() - target.stat().st_mtime < 30
