"""The local backend's fork server (``orchestrator.backends.local.forkserver``): a service forked from it is
started as ``subprocess.Popen`` would start its command (``DRL_FORKSERVER=0``), and ends with its orchestrator.

Each case runs a small driver process, not pytest itself, because the launcher makes its caller a child
subreaper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from drl.process import pid_alive
from tests.conftest import ROOT

DRIVER = r"""
import json, os, signal, sys, time
from orchestrator.backends.local.forkserver import ForkedProcess, Launcher
launcher = Launcher(enabled=sys.argv[1] == "fork")
launcher.warm({**os.environ, "OMP_NUM_THREADS": "1"})
env = {**{k: v for k, v in os.environ.items() if k != "STRAY"}, "PROBE": "seen", "OMP_NUM_THREADS": sys.argv[3]}
os.chdir(sys.argv[4])
with open(sys.argv[5], "ab") as log:
    child = launcher.start([sys.executable, "-m", "tests.integration.forkserver_probe", sys.argv[2], "x"], env, log,
                           nice=3, nice_session=True, name="drl-probe")
print(json.dumps({"pid": child.pid, "forked": isinstance(child, ForkedProcess),
                  "server": launcher.server.pid if launcher.server else None}), flush=True)
if sys.argv[2] == "wait":
    if sys.argv[6] == "orphan":
        time.sleep(60)
    while "to stderr" not in open(sys.argv[5]).read():
        time.sleep(0.05)
    child.terminate()
print(json.dumps({"code": child.wait(30), "me": os.getpid()}), flush=True)
launcher.close()
"""


def _drive(tmp_path, how: str, code: str, threads: str = "1", after: str = "0"):
    log = tmp_path / f"{how}.log"
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", DRIVER, how, code, threads, str(cwd), str(log), after],
        cwd=ROOT,
        env={**os.environ, "STRAY": "from the orchestrator", "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, log


def _observed(tmp_path, how: str, code: str, threads: str = "1", after: str = "0") -> tuple[dict, dict, dict, str]:
    proc, log = _drive(tmp_path, how, code, threads, after)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    started, ended = (json.loads(line) for line in out.splitlines())
    text = log.read_text()
    return started, ended, json.loads(text.splitlines()[0]), text


@pytest.mark.parametrize("threads", ["1", "2"])
def test_a_forked_service_sees_what_a_popen_started_one_sees(tmp_path, threads):
    forked = _observed(tmp_path, "fork", "7", threads)
    popened = _observed(tmp_path, "popen", "7", threads)
    assert forked[0]["forked"] and not popened[0]["forked"]
    for _started, ended, seen, text in (forked, popened):
        assert ended["code"] == 7
        assert seen["ppid"] == ended["me"], "the service is not the orchestrator's own child"
        assert text.splitlines()[1] == "to stderr"
    assert {**forked[2], "ppid": 0} == {**popened[2], "ppid": 0}, "a forked service differs from a Popen-started one"
    seen = forked[2]
    assert seen == {
        **seen,
        "argv": ["7", "x"],
        "main": "__main__",
        "session_leader": True,
        "nice": 3,
        "group_nice": 3 if os.path.exists("/proc/self/autogroup") else None,
        "probe": "seen",
        "stray": None,
        "threads": int(threads),
        "stdin": "",
        "argv0": "forkserver_probe.py",
        "cwd": str(tmp_path / "cwd"),
    }


def test_a_forked_service_is_signalled_and_reaped_like_a_popen_one(tmp_path):
    for how in ("fork", "popen"):
        started, ended, seen, _ = _observed(tmp_path, how, "wait", after="started")
        assert ended["code"] == 5, how
        assert not pid_alive(started["pid"])


def test_a_forked_service_ends_with_its_orchestrator(tmp_path):
    proc, log = _drive(tmp_path, "fork", "wait", after="orphan")
    started = json.loads(proc.stdout.readline())
    pid, server = started["pid"], started["server"]
    assert started["forked"] and server
    deadline = time.monotonic() + 30
    while not log.exists() or not log.read_text():
        assert time.monotonic() < deadline, "the probe did not start"
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while pid_alive(pid) or pid_alive(server):
        assert time.monotonic() < deadline, "the forked service or its fork server outlived their orchestrator"
        time.sleep(0.1)


def test_a_service_whose_import_time_environment_differs_is_started_as_a_new_process(tmp_path):
    """Search paths and thread pools are read while modules are imported: the server's imports would not be the
    service's, so it is not forked. Plugins are not: a service loads its own after it starts, so it is forked."""
    code = (
        "import os, sys\n"
        "from orchestrator.backends.local.forkserver import ForkedProcess, Launcher\n"
        "launcher = Launcher()\n"
        "launcher.warm({**os.environ, 'OMP_NUM_THREADS': '1'})\n"
        "command = [sys.executable, '-m', 'tests.integration.forkserver_probe', '0']\n"
        "kinds = []\n"
        "for extra in ({}, {'OMP_NUM_THREADS': '3'}, {'DRL_PLUGINS': 'x'}, {'PYTHONPATH': '/nowhere'}):\n"
        "    with open(sys.argv[1], 'ab') as log:\n"
        "        child = launcher.start(command, {**os.environ, 'OMP_NUM_THREADS': '1', **extra}, log)\n"
        "    kinds.append(isinstance(child, ForkedProcess))\n"
        "    assert child.wait(60) == 0\n"
        "print(kinds)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "log")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[True, True, True, False]"
