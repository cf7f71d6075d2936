"""``--device``: names, resolution, learners on the device they were given, and (on a machine with a CUDA
device) the learners on the GPU against the same learners on the CPU and against SAC's autograd reference.

The GPU tests are skipped here with the reason; on a GPU machine they run as they are
(``pytest tests/unit/test_device.py tests/integration/test_device_runs.py``)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from drl import device
from drl.algorithms import make_learner
from drl.algorithms.appo import APPOConfig
from drl.algorithms.dqn import DQNConfig
from drl.algorithms.ppo import PPOConfig
from drl.algorithms.sac import SACConfig
from drl.algorithms.td3 import TD3Config
from drl.envs import space_spec
from drl.errors import ConfigError, UserError
from drl.presets import get_preset
from tests.unit.test_sac_fast_update import assert_same, run_both

HAS_CUDA = torch.cuda.is_available()
CUDA = pytest.mark.skipif(
    not HAS_CUDA,
    reason="needs a CUDA device: torch.cuda.is_available() is False on this machine (these tests run on a GPU machine)",
)

CASES = {
    "sac": ("Pendulum-v1", dict(sac=SACConfig(hidden=(32, 32), batch_size=64))),
    "td3": ("Pendulum-v1", dict(td3=TD3Config(hidden=(32, 32), batch_size=64, target_noise=0.0))),
    "dqn": ("CartPole-v1", dict(dqn=DQNConfig(hidden=(32, 32), batch_size=64))),
    "ppo": ("CartPole-v1", dict(ppo=PPOConfig(hidden=(32,), epochs=2, minibatches=2))),
    "appo": ("CartPole-v1", dict(appo=APPOConfig(hidden=(32,), epochs=2, minibatches=2, batch_size=64))),
}


def config(algorithm: str, where: str):
    env, blocks = CASES[algorithm]
    preset = {"td3": "td3", "sac": "sac", "dqn": "dqn", "ppo": "ppo", "appo": "appo"}[algorithm]
    return dataclasses.replace(get_preset(preset, env), device=where, **blocks)


def replay_batch(spec, n: int, seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    obs_dim = int(np.prod(spec.obs_shape))
    if spec.discrete_actions:
        action = torch.as_tensor(rng.integers(0, spec.discrete_actions, n))
    else:
        low, high = spec.action_bounds()
        action = torch.as_tensor(rng.uniform(low, high, size=(n, *spec.act_shape)).astype(np.float32))
    return {
        "obs": torch.as_tensor(rng.normal(size=(n, obs_dim)).astype(np.float32)),
        "action": action,
        "reward": torch.as_tensor(rng.normal(size=n).astype(np.float32)),
        "next_obs": torch.as_tensor(rng.normal(size=(n, obs_dim)).astype(np.float32)),
        "terminated": torch.as_tensor((rng.random(n) < 0.1).astype(np.float32)),
    }


def segments(spec, seed: int, count: int = 4, length: int = 16) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    obs_dim = int(np.prod(spec.obs_shape))
    out = []
    for _ in range(count):
        out.append(
            {
                "obs": rng.normal(size=(length, obs_dim)).astype(np.float32),
                "action": rng.integers(0, spec.discrete_actions, length),
                "reward": rng.normal(size=length).astype(np.float32),
                "next_obs": rng.normal(size=(length, obs_dim)).astype(np.float32),
                "terminated": rng.random(length) < 0.05,
                "truncated": np.zeros(length, bool),
                "behaviour_logp": np.log(np.full(length, 0.5, np.float32)),
            }
        )
    return out


def train(learner, algorithm: str, spec, steps: int = 3) -> None:
    for i in range(steps):
        if algorithm in ("ppo", "appo"):
            learner.train(segments(spec, seed=i))
        else:
            learner.update(replay_batch(spec, 64, seed=i))


# -- names and resolution (every machine) ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["auto", "cpu", "cuda", "cuda:0", "cuda:12"])
def test_device_names_are_accepted(name):
    assert device.problem(name) is None


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "CPU", "", "mps", "cuda:0:1"])
def test_other_names_are_refused_by_the_configuration(name):
    with pytest.raises(ConfigError, match="--device must be auto, cpu, cuda or cuda:N"):
        dataclasses.replace(get_preset("sac", "Pendulum-v1"), device=name).validate()


def test_auto_is_the_first_gpu_or_the_cpu():
    assert device.resolve("auto") == (torch.device("cuda", 0) if HAS_CUDA else torch.device("cpu"))
    assert device.resolve("cpu") == torch.device("cpu")
    assert get_preset("sac", "Pendulum-v1").device == "auto"


@pytest.mark.skipif(HAS_CUDA, reason="this machine has a CUDA device: a missing one cannot be shown here")
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_a_gpu_this_process_lacks_is_refused_with_the_reason(name):
    with pytest.raises(UserError, match=f"--device {name}: no CUDA device is available to this process"):
        device.resolve(name)


@CUDA
def test_a_gpu_index_past_the_last_is_refused():
    count = torch.cuda.device_count()
    with pytest.raises(UserError, match=f"sees {count} CUDA device"):
        device.resolve(f"cuda:{count}")


@pytest.mark.parametrize("algorithm", list(CASES))
def test_builders_put_the_learner_on_the_configured_device(algorithm):
    cfg = config(algorithm, "cpu")
    spec = space_spec(cfg.env)
    learner = make_learner(algorithm, spec, cfg, seed=0)
    assert learner.device == torch.device("cpu")
    train(learner, algorithm, spec, steps=1)
    weights = learner.policy_weights()
    assert weights and all(isinstance(v, np.ndarray) for v in weights.values())


# -- on a GPU ------------------------------------------------------------------------------------------------------
@CUDA
@pytest.mark.parametrize("weighted", [False, True], ids=["uniform", "weighted"])
def test_sac_update_on_the_gpu_matches_the_autograd_reference(weighted):
    """SAC's hand-written update on the GPU against the autograd formulation on the same GPU, with the same noise."""
    cfg = SACConfig(hidden=(64, 64), batch_size=64, lr=1e-3)
    learner, reference, history = run_both(cfg, 8, 64, weighted, device="cuda")
    assert learner.actor_opt.state[learner._actor_flat.param]["exp_avg"].is_cuda
    assert_same(learner, reference, history, rtol=1e-4, atol=1e-5)


@CUDA
@pytest.mark.parametrize("algorithm", ["td3", "dqn", "ppo", "appo"])
def test_learners_on_the_gpu_make_the_cpus_steps(algorithm):
    """The same seed and the same data on the GPU and on the CPU: the same weights, to float32 rounding (TD3
    without target noise, whose draws differ between the devices' generators)."""
    spec = space_spec(CASES[algorithm][0])
    cpu = make_learner(algorithm, spec, config(algorithm, "cpu"), seed=3)
    gpu = make_learner(algorithm, spec, config(algorithm, "cuda"), seed=3)
    assert gpu.device.type == "cuda"
    train(cpu, algorithm, spec)
    train(gpu, algorithm, spec)
    a, b = cpu.policy_weights(), gpu.policy_weights()
    assert set(a) == set(b)
    for name in a:
        assert isinstance(b[name], np.ndarray) and b[name].dtype == a[name].dtype
        np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5, err_msg=name)


@CUDA
@pytest.mark.parametrize("algorithm", list(CASES))
def test_checkpoints_move_between_the_gpu_and_the_cpu(algorithm):
    """A checkpoint written by a GPU learner resumes on the CPU and the other way round, with the same weights."""
    spec = space_spec(CASES[algorithm][0])
    gpu = make_learner(algorithm, spec, config(algorithm, "cuda"), seed=1)
    train(gpu, algorithm, spec)
    tensors, meta = gpu.state()
    assert all(isinstance(v, np.ndarray) for v in tensors.values())
    cpu = make_learner(algorithm, spec, config(algorithm, "cpu"), seed=2)
    cpu.load_state(tensors, meta)
    for name, value in gpu.policy_weights().items():
        np.testing.assert_array_equal(cpu.policy_weights()[name], value, err_msg=name)
    train(cpu, algorithm, spec, steps=1)
    back = make_learner(algorithm, spec, config(algorithm, "cuda"), seed=4)
    back.load_state(*cpu.state())
    for name, value in cpu.policy_weights().items():
        np.testing.assert_array_equal(back.policy_weights()[name], value, err_msg=name)
    train(back, algorithm, spec, steps=1)


@pytest.mark.parametrize(
    "name, rank, visible, placed",
    [
        ("cuda", 0, 4, "cuda:0"),
        ("cuda", 3, 4, "cuda:3"),
        ("auto", 1, 2, "cuda:1"),
        ("cuda", 2, 2, "cuda:0"),
        ("cuda:1", 1, 4, "cuda:2"),
        ("cuda:3", 1, 4, "cuda:0"),
        ("cuda", 5, 1, "cuda:0"),
        ("cpu", 1, 4, "cpu"),
        ("auto", 1, 0, "auto"),
        ("cuda", 1, 0, "cuda"),
    ],
)
def test_each_learner_of_a_group_takes_its_own_gpu(name, rank, visible, placed):
    """NCCL takes one GPU per learner: learner r takes the r-th visible device after the named one; a pod given
    one GPU sees it as cuda:0; without a GPU the name is left for ``resolve`` to judge."""
    assert device.for_rank(name, rank, visible) == placed
