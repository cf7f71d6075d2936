"""``--sac.matmul bfloat16``: the wide products in bfloat16 give the float32 update's gradients to bfloat16's
precision (8 significant bits per input and result, float32 sums), and the narrow ones and everything else stay
float32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from drl.algorithms.sac import SACConfig, SACLearner
from drl.algorithms.sac.learner import LOW_PRECISION_MIN, _Products
from drl.envs import space_spec

SPEC = space_spec("LunarLanderContinuous-v3")


def _batch(n: int, seed: int) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((n, 8)).astype(np.float32)
    return {
        "obs": torch.from_numpy(obs),
        "next_obs": torch.from_numpy(obs + 0.1),
        "action": torch.from_numpy(rng.uniform(-1, 1, (n, 2)).astype(np.float32)),
        "reward": torch.from_numpy(rng.standard_normal(n).astype(np.float32)),
        "terminated": torch.from_numpy((rng.random(n) < 0.05).astype(np.float32)),
    }


def _after_updates(matmul: str, updates: int = 3) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[dict]]:
    learner = SACLearner(SPEC, SACConfig(hidden=(128, 96), batch_size=128, matmul=matmul), seed=5)
    grads, metrics = [], []
    for i in range(updates):
        torch.manual_seed(100 + i)
        metrics.append(learner.update(_batch(128, i)))
        grads.append((learner._critic_flat.param.grad.clone(), learner._actor_flat.param.grad.clone()))
    return grads, metrics


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_bfloat16_gradients_match_float32_to_bfloat16_precision():
    low_grads, low_metrics = _after_updates("bfloat16")
    grads, metrics = _after_updates("float32")
    for (low_critic, low_actor), (critic, actor) in zip(low_grads, grads):
        assert not torch.equal(low_critic, critic), "the bfloat16 products were not used"
        assert _relative(low_critic, critic) < 0.03
        assert _relative(low_actor, actor) < 0.03
    for low, ref in zip(low_metrics, metrics):
        assert low["critic_loss"] == pytest.approx(ref["critic_loss"], rel=0.02)
        assert low["entropy"] == pytest.approx(ref["entropy"], rel=0.02, abs=0.02)


def test_only_wide_products_are_rounded():
    products = _Products(torch.bfloat16)
    rng = torch.Generator().manual_seed(0)
    wide = torch.randn(LOW_PRECISION_MIN, LOW_PRECISION_MIN, generator=rng)
    narrow = torch.randn(LOW_PRECISION_MIN, 8, generator=rng)
    assert torch.equal(products.mm(wide, narrow), torch.mm(wide, narrow))
    rounded = products.mm(wide, wide)
    assert rounded.dtype == torch.float32
    assert not torch.equal(rounded, torch.mm(wide, wide))
    assert _relative(rounded, torch.mm(wide, wide)) < 0.01
    bias = torch.randn(LOW_PRECISION_MIN, generator=rng)
    out = torch.empty(LOW_PRECISION_MIN, LOW_PRECISION_MIN)
    products.addmm(bias, wide, wide, out=out)
    assert _relative(out, torch.addmm(bias, wide, wide)) < 0.01
    batched = torch.stack([wide, wide.t().contiguous()])
    assert _relative(products.baddbmm(bias, batched, batched), torch.baddbmm(bias, batched, batched)) < 0.01
    assert torch.equal(_Products(None).mm(wide, wide), torch.mm(wide, wide))


def test_an_unknown_precision_is_refused():
    assert SACConfig(matmul="float16").problems("--sac.") == [
        "--sac.matmul must be one of float32, bfloat16, got 'float16'"
    ]
