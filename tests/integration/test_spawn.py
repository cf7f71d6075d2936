"""``drl.process.spawn``: children start and exec even while this process holds busy gRPC channels (grpcio's
fork handlers abort a child forked with a ``preexec_fn`` now and then), and still get the parent-death signal
and the niceness that a ``preexec_fn`` used to give them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from drl.process import pid_alive, spawn


@pytest.fixture
def busy_grpc():
    """An in-process gRPC server and a channel to it, with a thread calling it without pause."""
    server = grpc.server(futures.ThreadPoolExecutor(2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = health_pb2_grpc.HealthStub(channel)
    stop = threading.Event()
    calls = [0]

    def call():
        while not stop.is_set():
            stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
            calls[0] += 1

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    yield calls
    stop.set()
    caller.join(10)
    channel.close()
    server.stop(None)


def test_children_started_beside_a_busy_grpc_channel_all_run_their_command(busy_grpc):
    outcomes = []
    for i in range(150):
        proc = spawn(["sh", "-c", f"echo started {i}"], nice=1, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = proc.communicate(timeout=30)
        outcomes.append((proc.returncode, out.decode().strip()))
    assert busy_grpc[0] > 0
    failed = [(i, rc, out) for i, (rc, out) in enumerate(outcomes) if (rc, out) != (0, f"started {i}")]
    assert not failed, f"{len(failed)} of 150 children did not run their command: {failed[:3]}"


def test_the_child_gets_the_niceness_asked_for():
    probe = [sys.executable, "-c", "import os; print(os.nice(0))"]
    base = int(subprocess.run(probe, capture_output=True, text=True, check=True).stdout)
    out = spawn(probe, nice=3, stdout=subprocess.PIPE, text=True).communicate(timeout=30)[0]
    assert int(out) == min(base + 3, 19)


BUSY = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
    "start = float(sys.argv[1])\n"
    "time.sleep(max(0.0, start - time.time()))\n"
    "t = os.times()\n"
    "while time.time() < start + 3: pass\n"
    "u = os.times()\n"
    "print(u.user + u.system - t.user - t.system)\n"
)


def test_a_niced_child_in_a_session_of_its_own_leaves_the_cpu_to_another_session():
    """Two busy loops on one CPU over the same 3 s, each in a session of its own (as the local backend starts its
    services): the one spawned 19 steps nicer, its session too, gets a small share of the CPU, whether or not the
    kernel groups sessions."""
    kwargs = {"stdout": subprocess.PIPE, "text": True, "start_new_session": True}
    start = str(time.time() + 5)
    normal = spawn([sys.executable, "-c", BUSY, start], **kwargs)
    niced = spawn([sys.executable, "-c", BUSY, start], nice=19, nice_session=True, **kwargs)
    normal_s, niced_s = (float(p.communicate(timeout=60)[0]) for p in (normal, niced))
    assert niced_s < 0.25 * normal_s, f"niced child {niced_s:.2f} s of CPU beside {normal_s:.2f} s"


def test_a_niced_child_in_its_parents_session_leaves_the_sessions_niceness_alone():
    group = Path("/proc/self/autogroup")
    if not group.exists():
        pytest.skip("this kernel does not group processes by session (no /proc/self/autogroup)")
    before = group.read_text()
    probe = [sys.executable, "-c", "import os; print(os.nice(0))"]
    out = spawn(probe, nice=3, nice_session=True, stdout=subprocess.PIPE, text=True)
    assert int(out.communicate(timeout=30)[0]) >= 3
    assert group.read_text() == before


def _orphan(die_with_parent: bool) -> int:
    """The pid of a ``sleep`` that a short-lived Python process started with ``spawn`` and then left."""
    parent = (
        "import subprocess, sys\n"
        "from drl.process import spawn\n"
        f"child = spawn(['sleep', '60'], die_with_parent={die_with_parent}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(child.pid, flush=True)\n"
    )
    out = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, check=True, timeout=60)
    return int(out.stdout)


def test_the_child_dies_with_its_parent_unless_told_otherwise():
    dying = _orphan(die_with_parent=True)
    deadline = time.monotonic() + 10
    while pid_alive(dying) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(dying), "the child outlived its parent"

    surviving = _orphan(die_with_parent=False)
    try:
        time.sleep(0.5)
        assert pid_alive(surviving)
    finally:
        os.kill(surviving, 9)


def test_a_missing_program_raises_as_popen_does():
    with pytest.raises(FileNotFoundError) as raised:
        spawn(["drl-no-such-program"], stdout=subprocess.DEVNULL)
    assert raised.value.filename == "drl-no-such-program"
    with pytest.raises(FileNotFoundError):
        spawn(["/nonexistent/bin/x"], die_with_parent=False)
