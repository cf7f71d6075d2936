"""One plan, three deployments: the command and environment of each role are the same in what the local backend
runs (``orchestrator.plan``), in ``drl-orchestrate render`` (``orchestrator.backends.kubernetes.manifests``) and in
the helm chart rendered by Helm's own engine.

Values that name a place (run directory, memory URL, store) differ by backend, so for them only the name must be
present in all three; every other variable present locally must carry the same value on Kubernetes, and the
configuration every backend hands its services must resolve to the same ExperimentConfig.
"""

from __future__ import annotations

import json
import sys

import pytest

from drl.config import ExperimentConfig, replace
from drl.presets import get_preset, resolve
from orchestrator.backends.kubernetes import manifests as k8s
from orchestrator.plan import plan
from tests.chart.test_chart import render as render_chart

RUN = "parity"
ROLES = ("trainer", "rollout", "evaluator")
PLACES = {"DRL_RUN_DIR", "DRL_MEMORY_URL", "DRL_STORE"}
CASES = {
    "sac-3-workers": ({"preset": "sac", "workers": 3, "config": {"trainer_threads": 2}},
                      lambda: replace(get_preset("sac"), workers=3, trainer_threads=2)),
    "ppo-cartpole": ({"preset": "ppo", "env": "CartPole-v1", "workers": 4, "mode": "sync"},
                     lambda: replace(get_preset("ppo", "CartPole-v1"), workers=4)),
    "dqn-async-prioritized": ({"preset": "dqn", "workers": 2, "mode": "async",
                               "config": {"prioritized": True, "worker_priorities": True}},
                              lambda: replace(get_preset("dqn"), workers=2, mode="async", prioritized=True,
                                              worker_priorities=True)),
    "appo-lag-bound": ({"preset": "appo", "workers": 8, "config": {"max_policy_lag": 20, "appo": {"segment": 64}}},
                       lambda: replace(get_preset("appo"), workers=8, max_policy_lag=20, **{"appo.segment": 64})),
}


def local_roles(cfg: ExperimentConfig) -> dict[str, tuple[list[str], dict[str, str]]]:
    workloads = plan(cfg, run=RUN, run_dir=f"/runs/{RUN}", memory_url="redis://127.0.0.1:1/0",
                     store_url="/runs", python=sys.executable)
    return {w.role: (list(w.command), w.replica_env(0)) for w in workloads}


def k8s_roles(docs: list[dict]) -> dict[str, tuple[list[str], dict[str, dict], dict]]:
    """role -> (command, env by name (value or valueFrom), the ConfigMap's config.json)."""
    configs = [json.loads(d["data"]["config.json"]) for d in docs if d["kind"] == "ConfigMap"]
    assert len(configs) == 1
    out = {}
    for d in docs:
        if d["kind"] != "Job":
            continue
        for c in d["spec"]["template"]["spec"]["containers"]:
            if c["name"] in ROLES:
                out[c["name"]] = (c["command"] + c.get("args", []), {e["name"]: e for e in c["env"]}, configs[0])
    assert set(out) == set(ROLES)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_local_render_and_chart_run_the_same_commands_with_the_same_environment(case):
    values, expected_cfg = CASES[case]
    cfg = expected_cfg().validate()
    local = local_roles(replace(cfg, run_name=RUN))
    rendered = k8s_roles(k8s.manifests(cfg, RUN, namespace="ns", env={}))
    charted = k8s_roles(render_chart({**values, "runName": RUN}))
    for role in ROLES:
        command, env = local[role]
        for name, (k_command, k_env, config) in (("render", rendered[role]), ("chart", charted[role])):
            where = f"{name}/{role}"
            assert k_command[0] == "python" and k_command[1:] == command[1:], where
            assert set(env) <= set(k_env), f"{where}: missing {sorted(set(env) - set(k_env))}"
            for var, value in env.items():
                item = k_env[var]
                if var == "DRL_CONFIG":
                    assert item["valueFrom"]["configMapKeyRef"]["key"] == "config.json", where
                    assert resolve(config) == resolve(json.loads(value)) == replace(cfg, run_name=RUN), where
                elif var == "DRL_WORKER_INDEX":
                    path = item["valueFrom"]["fieldRef"]["fieldPath"]
                    assert path == "metadata.annotations['batch.kubernetes.io/job-completion-index']", where
                elif var not in PLACES:
                    assert item.get("value") == value, f"{where}: {var}"
            assert k_env["DRL_RUN"]["value"] == RUN, where


def test_render_and_chart_agree_on_kubernetes_only_variables():
    values, expected_cfg = CASES["sac-3-workers"]
    rendered = k8s_roles(k8s.manifests(expected_cfg(), RUN, namespace="ns", env={}))
    charted = k8s_roles(render_chart({**values, "runName": RUN}))
    for role in ROLES:
        r_env, c_env = rendered[role][1], charted[role][1]
        assert set(r_env) == set(c_env), role
        for var in ("DRL_HEARTBEAT_FILE", "DRL_CACHE_DIR", "HOME", "PYTHONUNBUFFERED", "OMP_NUM_THREADS",
                    "DRL_CONTROL_HOST", "DRL_CONTROL_PORT", "DRL_METRICS_HOST", "DRL_METRICS_PORT"):
            assert r_env[var].get("value") == c_env[var].get("value"), f"{role}: {var}"
        for var in ("DRL_MEMORY_PASSWORD", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert r_env[var]["valueFrom"]["secretKeyRef"]["key"] == c_env[var]["valueFrom"]["secretKeyRef"]["key"]
