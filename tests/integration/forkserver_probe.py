"""A service stand-in for test_forkserver: prints what a process can observe about how it was started, then
exits with the code its first argument names (or waits for a signal when it is ``wait``)."""

import json
import os
import signal
import sys
import time

import torch


def group_nice() -> int | None:
    """The niceness of this process's scheduling group (its session's autogroup), None where there are none."""
    try:
        with open("/proc/self/autogroup") as fh:
            return int(fh.read().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


print(
    json.dumps(
        {
            "argv": sys.argv[1:],
            "main": __name__,
            "ppid": os.getppid(),
            "session_leader": os.getsid(0) == os.getpid(),
            "nice": os.nice(0),
            "group_nice": group_nice(),
            "cwd": os.getcwd(),
            "probe": os.environ.get("PROBE"),
            "stray": os.environ.get("STRAY"),
            "threads": torch.get_num_threads(),
            "stdin": sys.stdin.read(),
            "argv0": os.path.basename(sys.argv[0]),
        }
    ),
    flush=True,
)
print("to stderr", file=sys.stderr)
if sys.argv[1] == "wait":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))
    while True:
        time.sleep(0.1)
sys.exit(int(sys.argv[1]))
