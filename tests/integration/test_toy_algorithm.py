"""A toy algorithm from outside drl (tests/plugins/toy_algorithm.py), named in DRL_PLUGINS or --plugins, runs end to end
through the real command line, processes and memory server: adding an algorithm needs no change to services/,
orchestrator/, drl/config.py or the codec.

``test_toy_plugin_reaches_every_layer_but_the_services`` checks what needs no service (registry, config block,
flags, wire layout, the worker's and the trainer's steps done by hand); ``test_toy_algorithm_runs_end_to_end``
runs it for real, named by ``--plugins`` alone: the run's configuration carries it to every service and to
``evaluate``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from drl.store import PolicyStore, run_store
from tests.conftest import ROOT, read_summary, run_cli

PLUGIN = "tests.plugins.toy_algorithm"
PATH = {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
ENV = {"DRL_PLUGINS": PLUGIN, **PATH}

WITHOUT_SERVICES = r"""
import numpy as np
from drl._proto import experience_pb2
from drl.algorithms import ALGORITHMS, check_spaces, get, load_plugins, make_actor, wire_extras
from drl.config import ExperimentConfig, iter_options
from drl.envs import VecEnv
from drl.memory import codec
from drl.training.learning import ReplayLearning
from orchestrator.cli import build_parser, resolve_config

assert list(ALGORITHMS) == ["sac", "td3", "ppo", "dqn", "appo"], list(ALGORITHMS)
load_plugins()
assert list(ALGORITHMS) == ["sac", "td3", "ppo", "dqn", "appo", "toy"], list(ALGORITHMS)
cfg = resolve_config(["--algorithm", "toy", "--toy.action", "0.25", "--toy.batch-size", "8", "--random-steps", "0",
                      "--learning-starts", "16", "--steps", "64", "--workers", "1"])
assert cfg.toy.action == 0.25 and cfg.toy.batch_size == 8 and type(cfg) is ExperimentConfig
assert ExperimentConfig.from_json(cfg.to_json()) == cfg
assert {"toy.action", "toy.batch_size"} <= {name for name, *_ in iter_options()}
help_text = build_parser(cfg).format_help()
assert "--toy.action" in help_text and "--toy.batch-size" in help_text and "toy" in help_text
try:
    resolve_config(["--algorithm", "toy", "--toy.batch-size", "0", "--prioritized", "true"])
    raise AssertionError("refused values were accepted")
except Exception as exc:
    assert "--toy.batch-size must be a positive integer, got 0" in str(exc), exc
    assert "--prioritized: the toy learner" in str(exc), exc

envs = VecEnv("Pendulum-v1", 2, seed=0)
check_spaces("toy", envs.spec, "Pendulum-v1")
layout = codec.expected_layout(envs.spec, wire_extras(cfg))
assert list(layout)[5:] == ["toy_mark"], layout
builder = get("toy")
assert builder.make_folder(cfg) is None

# a worker's steps, by hand
actor = make_actor("toy", envs.spec, cfg, seed=1)
learning = builder.make_learning(envs.spec, cfg, seed=0)
assert isinstance(learning, ReplayLearning) and "toy_mark" in learning.replay.data
actor.set_progress(0.5)
stepped = [name for name in layout if name not in actor.annotates]
consumed = 0
for seq in range(1, 5):
    actor.load({"action": np.array([cfg.toy.action], np.float32)})
    rows = {name: [] for name in stepped}
    for _ in range(4):
        step = envs.step(actor.act(envs.obs))
        for name in stepped:
            rows[name].append(step[name])
    arrays = {name: np.concatenate(parts) for name, parts in rows.items()}
    arrays.update(actor.annotate(arrays))
    h, d = codec.encode(experience_pb2.BatchHeader(run="r", worker_id="rollout-0", seq=seq), arrays)
    batch = codec.decode({b"h": h, b"d": d}, "r", layout)
    assert np.all(batch.arrays["action"] == 0.25)
    # the trainer's steps
    learning.add("rollout-0", seq, batch.arrays)
    consumed += batch.count
    learning.end_iteration(consumed)
    while learning.learner.updates < learning.owed(consumed):
        learning.update(consumed)
assert consumed == 32 and learning.size() == 32
assert learning.learner.updates == 32 - 16, learning.learner.updates
assert learning.metrics == {"toy_action": 0.25, "toy_mark": 0.25}, learning.metrics
tensors, meta = learning.state(with_replay=True)
assert "replay.toy_mark" in tensors and "learner.action" in tensors
print("ok")
"""


def test_toy_plugin_reaches_every_layer_but_the_services():
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_SERVICES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **ENV},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


def test_toy_algorithm_runs_end_to_end(tmp_path):
    run = "toy-pendulum"
    proc = run_cli(
        [
            "--plugins",
            PLUGIN,
            "--algorithm",
            "toy",
            "--env",
            "Pendulum-v1",
            "--workers",
            "2",
            "--steps",
            "2000",
            "--toy.action",
            "0.25",
            "--toy.batch-size",
            "8",
            "--random-steps",
            "0",
            "--learning-starts",
            "400",
            "--updates-per-transition",
            "0.25",
            "--eval-episodes",
            "1",
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
        env=PATH,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = read_summary(tmp_path / run)
    assert summary["algorithm"] == "toy" and summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == 2000
    assert summary["updates"] == int(0.25 * (2000 - 400))
    assert summary["policy_version"] >= 1
    config = json.loads((tmp_path / run / "config.json").read_text())
    assert config["algorithm"] == "toy" and config["toy"] == {"action": 0.25, "batch_size": 8}
    assert config["plugins"] == PLUGIN
    scored = run_cli(["evaluate", "--run", run, "--output", str(tmp_path), "--episodes", "1"], timeout=300, env=PATH)
    assert scored.returncode == 0 and "return" in scored.stdout, scored.stderr[-3000:]

    # --toy.action reached the learner (its metrics, its published policy) and, through the policy, the workers
    # (the mark they computed for every transition came back in the learner's batches)
    state = json.loads((tmp_path / run / "state.json").read_text())
    trainer = next(p for p in state["processes"] if p["role"] == "trainer")["last_status"]
    assert float(trainer["toy_action"]) == 0.25 and float(trainer["toy_mark"]) == 0.25
    _, weights = PolicyStore(run_store(str(tmp_path), run), run).load(summary["policy_version"])
    np.testing.assert_array_equal(weights["action"], np.array([0.25], np.float32))
