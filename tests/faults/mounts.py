"""Real file-system faults for the fault tests: a folder made read-only, a disk that fills. Both are mounts (the
suite runs as root, in CI too): ``chmod`` does not stop root, and only a real file system reports a full disk
the way a run meets it. A mount that fails fails the test with the reason, rather than skipping it."""

from __future__ import annotations

import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path


def _run(args: list[str], busy_s: float = 0.0) -> None:
    """Runs a mount command; ``busy_s`` seconds of retries while the kernel answers that the mount is busy
    (a read-only remount is refused while a file on the mount is open for writing, and the run writes its store
    now and then)."""
    deadline = time.monotonic() + busy_s
    while True:
        done = subprocess.run(args, capture_output=True, text=True, timeout=30)
        if done.returncode == 0 or "busy" not in done.stderr or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} failed ({done.stderr.strip() or done.returncode}): this fault test "
            "needs to mount file systems (run it as root, or in a container with CAP_SYS_ADMIN)"
        )


@contextmanager
def read_only(path: Path):
    """``path`` read-only, for root too, inside the block: a read-only bind mount of the folder over itself."""
    path.mkdir(parents=True, exist_ok=True)
    _run(["mount", "--bind", str(path), str(path)])
    try:
        _run(["mount", "-o", "remount,bind,ro", str(path)], busy_s=20.0)
        yield path
    finally:
        _run(["umount", "-l", str(path)])


@contextmanager
def small_disk(path: Path, size_kib: int):
    """A file system of ``size_kib`` KiB (tmpfs) mounted at ``path`` inside the block."""
    path.mkdir(parents=True, exist_ok=True)
    _run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(path)])
    try:
        yield path
    finally:
        _run(["umount", "-l", str(path)])


def fill(path: Path) -> None:
    """Fills the file system holding ``path`` to its last byte (a file of zeros under ``path``; none if it is
    full already)."""
    try:
        fd = os.open(path / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    except OSError:
        return
    try:
        for chunk in (65536, 1):
            while True:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
