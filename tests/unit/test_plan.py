"""Config -> workloads: roles, replicas, commands and environments of a run's processes."""

from __future__ import annotations

import pytest

from drl.algorithms.sac import SACConfig
from drl.config import ExperimentConfig, replace
from orchestrator.plan import plan

SECRET = "s3cr3t-p4ss"
MEMORY_URL = f"redis://trainer:{SECRET}@valkey.example:6380/2"


@pytest.fixture(params=[2, 5], ids=["2-workers", "5-workers"])
def cfg(request):
    return ExperimentConfig(
        workers=request.param,
        mode="async",
        trainer_threads=3,
        run_name="r",
        target_return=-150.0,
        sac=SACConfig(hidden=(32, 32), lr=0.01),
    )


def make_plan(cfg, memory_url=MEMORY_URL, **kw):
    return plan(cfg, run="r", run_dir="/runs/r", memory_url=memory_url, store_url="/runs/r/store", **kw)


def by_role(workloads):
    return {w.role: w for w in workloads}


def test_roles_and_replicas(cfg):
    workloads = make_plan(cfg)
    assert [(w.role, w.replicas) for w in workloads] == [("trainer", 1), ("rollout", cfg.workers), ("evaluator", 1)]


def test_commands_run_the_service_modules(cfg):
    for w in make_plan(cfg):
        assert w.command == ("python", "-m", f"services.{w.role}")
    for w in make_plan(cfg, python="/venv/bin/python3"):
        assert w.command == ("/venv/bin/python3", "-m", f"services.{w.role}")


def test_every_workload_receives_the_whole_config(cfg):
    for w in make_plan(cfg):
        assert ExperimentConfig.from_json(w.env["DRL_CONFIG"]) == cfg, w.role
        for i in range(w.replicas):
            assert ExperimentConfig.from_json(w.replica_env(i)["DRL_CONFIG"]) == cfg


def test_common_environment(cfg):
    for w in make_plan(cfg):
        env = w.env
        assert env["DRL_RUN"] == "r"
        assert env["DRL_RUN_DIR"] == "/runs/r"
        assert env["DRL_MEMORY_URL"] == MEMORY_URL
        assert env["DRL_STORE"] == "/runs/r/store"
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    roles = by_role(make_plan(cfg))
    assert roles["trainer"].env["OMP_NUM_THREADS"] == "3"
    assert roles["rollout"].env["OMP_NUM_THREADS"] == "1"


def test_rollout_replicas_get_their_index(cfg):
    rollout = by_role(make_plan(cfg))["rollout"]
    names = set()
    for i in range(cfg.workers):
        env = rollout.replica_env(i)
        assert env["DRL_WORKER_INDEX"] == str(i)
        names.add(rollout.replica_name(i))
    assert names == {f"rollout-{i}" for i in range(cfg.workers)}
    assert "DRL_WORKER_INDEX" not in rollout.env, "replica_env must not modify the shared environment"


def test_single_replica_roles_have_no_index(cfg):
    roles = by_role(make_plan(cfg))
    for role in ("trainer", "evaluator"):
        assert "DRL_WORKER_INDEX" not in roles[role].replica_env(0)
        assert roles[role].replica_name(0) == role


def test_single_rollout_worker_is_still_indexed():
    rollout = by_role(make_plan(ExperimentConfig(workers=1)))["rollout"]
    assert rollout.replica_env(0)["DRL_WORKER_INDEX"] == "0"
    assert rollout.replica_name(0) == "rollout-0"


@pytest.mark.parametrize(
    "memory_url", [MEMORY_URL, f"rediss://:{SECRET}@host:6379/0", f"unix:///tmp/valkey.sock?password={SECRET}"]
)
def test_credentials_never_appear_in_process_arguments(cfg, memory_url):
    for w in make_plan(cfg, memory_url=memory_url):
        joined = " ".join(w.command)
        assert memory_url not in joined, w.role
        assert SECRET not in joined, w.role
        assert all(SECRET not in arg for arg in w.command), w.role
        assert w.env["DRL_MEMORY_URL"] == memory_url


def test_a_group_of_learners_is_the_trainers_replicas(cfg):
    """With --learners K the trainer is one workload of K replicas (no second workload to fold back): rank 0 is
    the process ``trainer``, ranks 1 .. K-1 are ``learner-<r>`` in the role ``learner``, each told its rank, all
    meeting at the rendezvous."""
    from dataclasses import replace

    workloads = make_plan(replace(cfg, learners=3), learner_address="10.0.0.5", learner_port=29500)
    assert [(w.role, w.replicas) for w in workloads] == [("trainer", 3), ("rollout", cfg.workers), ("evaluator", 1)]
    trainer = by_role(workloads)["trainer"]
    assert [trainer.replica_name(i) for i in trainer.indices()] == ["trainer", "learner-1", "learner-2"]
    assert [trainer.replica_role(i) for i in trainer.indices()] == ["trainer", "learner", "learner"]
    assert [trainer.replica_env(i)["DRL_LEARNER_RANK"] for i in trainer.indices()] == ["0", "1", "2"]
    assert {
        (trainer.replica_env(i)["MASTER_ADDR"], trainer.replica_env(i)["MASTER_PORT"]) for i in trainer.indices()
    } == {("10.0.0.5", "29500")}
    alone = by_role(make_plan(cfg))["trainer"]
    assert alone.replicas == 1 and alone.replica_name(0) == "trainer" and "DRL_LEARNER_RANK" not in alone.env


def test_a_tracked_run_gives_the_evaluator_alone_the_tracking_server(cfg):
    """``--track mlflow`` on Kubernetes: the evaluator, the one process that tracks, gets ``MLFLOW_TRACKING_URI``
    (the command's own); no other role gets it, and an untracked run gives it to nobody."""
    uri = "http://mlflow.tracking:5000"
    tracked = replace(cfg, track="mlflow")
    got = {w.role: w.env.get("MLFLOW_TRACKING_URI") for w in make_plan(tracked, tracking_uri=uri)}
    assert got == {"trainer": None, "rollout": None, "evaluator": uri}
    assert all("MLFLOW_TRACKING_URI" not in w.env for w in make_plan(cfg, tracking_uri=uri))
