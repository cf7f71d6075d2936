"""The algorithm builders: what each one hands the services, checked against what the services did themselves
before (wire fields, folding, priorities, schedules, learning kind, config checks)."""

from __future__ import annotations

import numpy as np
import pytest

from drl.acting.nstep import NSTEP_FIELDS, NStepFolder
from drl.algorithms import (
    ALGORITHMS,
    ActorBase,
    Algorithm,
    check_spaces,
    get,
    make_actor,
    make_learner,
    register,
    wire_extras,
)
from drl.algorithms.dqn.builder import PRIORITY_FIELD
from drl.config import ExperimentConfig, replace
from drl.envs import TRAJECTORY_FIELDS, space_spec
from drl.errors import UserError
from drl.memory import codec
from drl.training.learning import ReplayLearning, RolloutLearning
from drl.training.replay import PrioritizedReplay


@pytest.fixture(scope="module")
def pendulum():
    return space_spec("Pendulum-v1")


@pytest.fixture(scope="module")
def cartpole():
    return space_spec("CartPole-v1")


def cfg_for(algorithm: str, **changes):
    env = "CartPole-v1" if algorithm in ("dqn", "ppo") else "Pendulum-v1"
    return replace(ExperimentConfig(), algorithm=algorithm, env=env, **changes)


def test_built_in_algorithms_register_in_order_with_their_blocks():
    assert list(ALGORITHMS)[:4] == ["sac", "td3", "ppo", "dqn"]
    for name in ("sac", "td3", "ppo", "dqn"):
        builder = get(name)
        assert isinstance(builder, Algorithm) and builder.name == name
        assert builder.doc == f"{name.upper()} hyperparameters."
        assert builder.hyper(ExperimentConfig()) == builder.config()


def test_unknown_algorithm_names_the_accepted_ones():
    with pytest.raises(UserError, match=r"unknown algorithm 'a2c'; accepted: appo, dqn, ppo, sac, td3"):
        get("a2c")


def test_wire_fields_are_the_layouts_the_services_built():
    assert wire_extras(cfg_for("sac")) == wire_extras(cfg_for("td3")) == {}
    assert wire_extras(cfg_for("sac", prioritized=True, worker_priorities=True)) == {}
    assert wire_extras(cfg_for("ppo", random_steps=0)) == TRAJECTORY_FIELDS
    assert wire_extras(cfg_for("dqn")) == NSTEP_FIELDS == {"nsteps": ("|u1", ())}
    assert wire_extras(cfg_for("dqn", worker_priorities=True)) == NSTEP_FIELDS  # refused by validate anyway
    fields = wire_extras(cfg_for("dqn", prioritized=True, worker_priorities=True))
    assert list(fields) == ["nsteps", "priority"] and fields["priority"] == PRIORITY_FIELD["priority"] == ("<f4", ())
    assert TRAJECTORY_FIELDS == {"truncated": ("|u1", ()), "env_index": ("<u2", ())}


def test_layouts_keep_their_wire_order(cartpole):
    layout = codec.expected_layout(cartpole, wire_extras(cfg_for("dqn", prioritized=True, worker_priorities=True)))
    assert list(layout) == ["obs", "action", "reward", "next_obs", "terminated", "nsteps", "priority"]
    layout = codec.expected_layout(cartpole, wire_extras(cfg_for("ppo", random_steps=0)))
    assert list(layout) == ["obs", "action", "reward", "next_obs", "terminated", "truncated", "env_index"]
    with pytest.raises(ValueError, match="reward"):
        codec.expected_layout(cartpole, {"reward": ("<f8", ())})


def test_only_dqn_folds_transitions():
    folder = get("dqn").make_folder(cfg_for("dqn", envs_per_worker=3, **{"dqn.n_step": 5, "dqn.gamma": 0.9}))
    assert isinstance(folder, NStepFolder)
    assert (folder.n, folder.gamma, len(folder.windows)) == (5, 0.9, 3)
    for name in ("sac", "td3", "ppo"):
        assert get(name).make_folder(cfg_for(name)) is None


def test_actors_default_to_no_schedule_and_no_annotation(pendulum, cartpole):
    for name, spec in (("sac", pendulum), ("td3", pendulum), ("ppo", cartpole), ("dqn", cartpole)):
        actor = make_actor(name, spec, cfg_for(name), seed=0)
        assert isinstance(actor, ActorBase)
        assert actor.set_progress(0.5) is None
        assert actor.annotates == () and actor.annotate({"obs": np.zeros((2, *spec.obs_shape))}) == {}


def test_dqn_annotates_its_priorities_with_worker_priorities(cartpole):
    cfg = cfg_for("dqn", prioritized=True, worker_priorities=True, **{"dqn.hidden": (8,)})
    actor = make_actor("dqn", cartpole, cfg, seed=0)
    rng = np.random.default_rng(0)
    actor.load({k: rng.standard_normal(v.shape).astype(np.float32) for k, v in actor.weights.items()})
    arrays = {
        "obs": rng.standard_normal((5, 4)).astype(np.float32),
        "action": rng.integers(0, 2, 5),
        "reward": rng.standard_normal(5).astype(np.float32),
        "next_obs": rng.standard_normal((5, 4)).astype(np.float32),
        "terminated": np.zeros(5, np.uint8),
        "nsteps": np.array([3, 3, 2, 1, 3], np.uint8),
    }
    assert actor.annotates == ("priority",)
    annotated = actor.annotate(arrays)
    assert list(annotated) == ["priority"] and annotated["priority"].dtype == np.float32
    np.testing.assert_array_equal(annotated["priority"], actor.priorities(arrays))
    assert actor.epsilon == cfg.dqn.eps_start
    actor.set_progress(1.0)
    assert actor.epsilon == pytest.approx(cfg.dqn.eps_end)


def test_learning_kind_follows_the_algorithm(pendulum, cartpole):
    assert isinstance(get("ppo").make_learning(cartpole, cfg_for("ppo", random_steps=0), 0), RolloutLearning)
    for name, spec in (("sac", pendulum), ("td3", pendulum), ("dqn", cartpole)):
        learning = get(name).make_learning(spec, cfg_for(name, replay_size=100), 0)
        assert isinstance(learning, ReplayLearning) and not isinstance(learning.replay, PrioritizedReplay)
    learning = get("dqn").make_learning(
        cartpole, cfg_for("dqn", replay_size=100, prioritized=True, worker_priorities=True), 0
    )
    assert isinstance(learning.replay, PrioritizedReplay)
    assert "nsteps" in learning.replay.data and "priority" not in learning.replay.data
    assert type(learning.learner) is type(make_learner("dqn", cartpole, cfg_for("dqn"), 0))


@pytest.mark.parametrize(
    "changes, expected",
    [
        (
            {"algorithm": "ppo", "mode": "async", "random_steps": 5, "prioritized": True, "worker_priorities": True},
            "ppo is on-policy and runs only in --mode sync (it has no off-policy correction for the policy lag of async "
            "collection); --random-steps must be 0 for ppo: it learns only from its own policy's actions (got 5); "
            "--prioritized applies to replay-based algorithms; ppo trains on each iteration's rollout; "
            "--worker-priorities: ppo's rollout workers have no value estimate to compute priorities with (supported: "
            "dqn); the trainer gives new transitions the largest priority instead",
        ),
        (
            {"algorithm": "ppo", "worker_priorities": True, "random_steps": 0},
            "--worker-priorities needs --prioritized true",
        ),
        (
            {"worker_priorities": True, "prioritized": True},
            "--worker-priorities: sac's rollout workers have no value estimate to compute priorities with (supported: "
            "dqn); the trainer gives new transitions the largest priority instead",
        ),
    ],
)
def test_algorithm_checks_keep_their_messages(changes, expected):
    with pytest.raises(UserError) as info:
        replace(ExperimentConfig(), **changes).validate()
    assert str(info.value) == expected


def test_algorithm_checks_accept_what_they_did():
    replace(ExperimentConfig(), algorithm="dqn", prioritized=True, worker_priorities=True).validate()
    replace(ExperimentConfig(), algorithm="ppo", random_steps=0).validate()
    assert get("ppo").problems(cfg_for("ppo", random_steps=0)) == []


def test_spaces_are_checked_as_before(pendulum, cartpole):
    check_spaces("sac", pendulum, "Pendulum-v1")
    check_spaces("ppo", cartpole, "CartPole-v1")
    check_spaces("ppo", pendulum, "Pendulum-v1")
    with pytest.raises(UserError, match=r"^algorithm sac needs continuous \(Box\) actions, but CartPole-v1 has "):
        check_spaces("sac", cartpole, "CartPole-v1")
    with pytest.raises(UserError, match=r"^algorithm dqn needs discrete actions, but Pendulum-v1 has .*CartPole-v1$"):
        check_spaces("dqn", pendulum, "Pendulum-v1")
    unbounded = type(pendulum)(**{**pendulum.__dict__, "act_low": (-np.inf,), "act_high": (np.inf,)})
    with pytest.raises(UserError, match="algorithm td3 needs bounded actions, but X has"):
        check_spaces("td3", unbounded, "X")
    check_spaces("ppo", unbounded, "X")


def test_register_refuses_a_second_class_under_a_taken_name():
    class Impostor(Algorithm):
        name = "sac"

    with pytest.raises(ValueError, match="registered twice"):
        register(Impostor())
    with pytest.raises(ValueError, match="identifier"):
        register(type("Dashed", (Algorithm,), {"name": "my-algo"})())
    assert register(ALGORITHMS["sac"]) is ALGORITHMS["sac"]  # the same builder again: a module imported twice
