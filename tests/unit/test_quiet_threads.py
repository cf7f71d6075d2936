"""A service's endpoint threads sleep while its main loop works.

A thread that wakes by itself has to take the GIL, and while the main loop lets the GIL go and takes it back at
every numpy call, the waiting thread is woken at each release: thousands of wake-ups a second, paid by the
service (measured with the thread pool gRPC server and ``prometheus_client.start_http_server``, which wake 5 and 2
times a second). The check counts the voluntary context switches of every thread but the main one while the main
thread steps Pendulum with the SAC actor, like a rollout worker, in a fresh process so that no other test's threads count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SCRIPT = r"""
import json, os, sys, threading, time
from services.control import serve
from services.metrics import start_metrics
from services.telemetry import Telemetry

server, control_port = serve(Telemetry(), "127.0.0.1", 0)
metrics_port = start_metrics()
time.sleep(0.5)

def switches():
    counts = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) == threading.main_thread().native_id:
            continue
        with open(f"/proc/self/task/{tid}/status") as status:
            for line in status:
                if line.startswith("voluntary_ctxt_switches"):
                    counts[tid] = int(line.split()[1])
    return counts

from drl.algorithms import make_actor
from drl.envs import VecEnv
from drl.presets import get_preset
cfg = get_preset("sac", "Pendulum-v1")
envs = VecEnv(cfg.env, 1, seed=0)
actor = make_actor(cfg.algorithm, envs.spec, cfg, seed=0)
before = switches()
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(100):
        envs.step(actor.act(envs.obs))
after = switches()
server.stop(0)
print(json.dumps({"threads": len(after), "ports": [control_port, metrics_port],
                  "woken": sum(after[t] - before.get(t, 0) for t in after)}))
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts context switches through Linux's /proc")
def test_endpoint_threads_stay_asleep_while_the_main_loop_computes():
    out = subprocess.run([sys.executable, "-c", SCRIPT, "2.0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(result["ports"]) and result["threads"] >= 2
    assert result["woken"] < 200, result
