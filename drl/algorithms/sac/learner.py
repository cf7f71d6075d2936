"""SAC gradient updates (Haarnoja et al. 2018, with the learned temperature of the 2019 version).

Pure math: it takes batches of tensors and returns metrics; replay, transport and storage live elsewhere.

The losses, with ``alpha`` the temperature before this step's update and B the batch size:

- critics: ``mean(w (q1(s, a) - y)^2) + mean(w (q2(s, a) - y)^2)`` with ``y = r + gamma (1 - d) (min(q1', q2')(s',
  a') - alpha logp(a'|s'))``, ``a' ~ pi(.|s')``, target critics q1', q2', and w the batch's importance-sampling
  weights (``batch["weight"]``, prioritised replay) or 1;
- actor, after the critics' step: ``mean(alpha logp(a~|s) - min(q1, q2)(s, a~))``, ``a~ ~ pi(.|s)``
  reparameterised, the critics held fixed;
- temperature: ``-mean(log_alpha (logp(a~|s) + target_entropy))``; then Polyak averaging of the target critics.

``Actor.sample`` and ``TwinCritic.forward`` are these functions written for autograd. ``update`` computes the same
gradients by hand instead (derivations inline), because on a CPU with a few cores the autograd version spends about
as long on overhead as on the matrix products that any exact implementation must do:

- no autograd graph is built or walked (the arithmetic runs in inference mode), and layer-sized intermediate
  results go to buffers reused across updates (``_Workspace``);
- the actor runs once over next observations and observations stacked (its parameters do not change before its
  own step), and both critics run as one batched product per layer (``TwinCritic`` stacks their weights);
- for the actor loss only the critics' gradient with respect to the action is computed, not their parameters';
- each optimiser sees one flat parameter (the modules' parameters are views of it) whose gradient the backward
  pass writes in place, so Adam (the fused kernel where PyTorch has it on CPU) and the Polyak average are one
  operation per network. The temperature shares the actor's flat tensor and optimiser: Adam works element by
  element, and both have the same settings and step together, so this is the same update as a separate optimiser.

The sampling noise is drawn as ``Actor.sample`` draws it (next observations first), so with the same torch seed
the update follows the autograd formulation to float32 rounding; ``tests/unit/test_sac_fast_update.py`` checks it.
After each update ``td_errors`` holds ``0.5 (|q1 - y| + |q2 - y|)`` per transition (critics before their step),
for prioritised replay.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from drl.algorithms.common import FlatParams, action_scale, flat_adam, load_training_state, on_device, training_state
from drl.algorithms.sac.config import SACConfig
from drl.algorithms.sac.networks import LOG_STD_MAX, LOG_STD_MIN, Actor, TwinCritic
from drl.core import SOLO, Collective
from drl.envs import SpaceSpec

_LOG_STD_HALF_RANGE = 0.5 * (LOG_STD_MAX - LOG_STD_MIN)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2)
LOW_PRECISION_MIN = 64
MATMUL_DTYPES = {"float32": None, "bfloat16": torch.bfloat16}


class _Products:
    """The update's matrix products, in float32, or with ``--sac.matmul bfloat16`` the wide ones (every size at
    least ``LOW_PRECISION_MIN``: the hidden-to-hidden layers, where the time goes) in bfloat16. CPUs with bfloat16
    instructions (AVX512-BF16, AMX) do such a product about twice as fast; its inputs and its result keep 8
    significant bits (PyTorch's CPU products have no float32 output for bfloat16 inputs), its sums are accumulated
    in float32, and everything else (biases, activations' derivatives, losses, Adam, the Polyak average, the
    weights themselves) stays float32."""

    def __init__(self, low: torch.dtype | None):
        self.low = low

    def _wide(self, a: torch.Tensor, b: torch.Tensor) -> bool:
        return self.low is not None and min(a.shape[-2], a.shape[-1], b.shape[-1]) >= LOW_PRECISION_MIN

    def mm(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if not self._wide(a, b):
            return torch.mm(a, b, out=out)
        product = torch.mm(a.to(self.low), b.to(self.low))
        return product.float() if out is None else out.copy_(product)

    def bmm(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if not self._wide(a, b):
            return torch.bmm(a, b, out=out)
        product = torch.bmm(a.to(self.low), b.to(self.low))
        return product.float() if out is None else out.copy_(product)

    def addmm(
        self, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        if not self._wide(a, b):
            return torch.addmm(bias, a, b, out=out)
        return torch.add(torch.mm(a.to(self.low), b.to(self.low)), bias, out=out)

    def baddbmm(
        self, bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        if not self._wide(a, b):
            return torch.baddbmm(bias, a, b, out=out)
        return torch.add(torch.bmm(a.to(self.low), b.to(self.low)), bias, out=out)


class _Workspace:
    """Outputs of the update's layer-sized intermediate results, allocated once per batch size and reused.

    Fresh tensors of these sizes (hundreds of KiB) come from the C allocator as new pages, and the page faults
    on first writing them cost as much as the arithmetic. Each ReLU's derivative (0 where its output is 0, else 1:
    the sign of the output) overwrites that output in place once nothing else needs it.
    """

    def __init__(self, n: int, hidden: tuple[int, ...], act_dim: int, dtype: torch.dtype, device: torch.device):
        self.key = (n, dtype)
        on: dict[str, Any] = dict(dtype=dtype, device=device)
        self.actor = [torch.empty(2 * n, h, **on) for h in hidden]
        self.actor_grad = [torch.empty(n, h, **on) for h in hidden]
        self.critic = [torch.empty(2, n, h, **on) for h in hidden]
        self.spare = [torch.empty(2, n, h, **on) for h in hidden]
        self.critic_grad = [torch.empty(2, n, h, **on) for h in hidden]
        self.grad_head = torch.empty(n, 2 * act_dim, **on)
        self.tie_grad = torch.full((2, 1), -0.5 / n, **on)
        self.side_grad = torch.tensor([[-0.5 / n], [0.5 / n]], **on)
        self.half_range = torch.tensor(_LOG_STD_HALF_RANGE, **on)


class SACLearner:
    collective: Collective = SOLO
    """The learners this one averages its gradients with (``drl.core.Collective``; alone by default)."""

    def __init__(self, spec: SpaceSpec, cfg: SACConfig, seed: int, device: torch.device | str = "cpu"):
        torch.manual_seed(seed)
        self.cfg = cfg
        self.device = torch.device(device)
        obs_dim = int(np.prod(spec.obs_shape))
        act_dim = int(np.prod(spec.act_shape))
        self.actor = Actor(obs_dim, act_dim, cfg.hidden).to(self.device)
        self.critic = TwinCritic(obs_dim, act_dim, cfg.hidden).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(cfg.init_alpha)), device=self.device, requires_grad=True)
        self.target_entropy = cfg.target_entropy if cfg.target_entropy is not None else -float(act_dim)
        self.center, self.half = (t.to(self.device) for t in action_scale(spec))
        self.updates = 0
        self.batch_size = cfg.batch_size
        self._td_errors: torch.Tensor | None = None
        self._obs_dim, self._act_dim = obs_dim, act_dim

        actor = self.actor
        self._trunk = [m for m in actor.trunk if isinstance(m, nn.Linear)]
        trunk_params = [p for m in self._trunk for p in (m.weight, m.bias)]
        head = [actor.mean.weight, actor.log_std.weight, actor.mean.bias, actor.log_std.bias]
        self._actor_flat = FlatParams([*trunk_params, *head, self.log_alpha], grads=True)
        self._critic_flat = FlatParams(list(self.critic.parameters()), grads=True)
        self._target_flat = FlatParams(list(self.critic_target.parameters()), grads=False)
        self.actor_opt = flat_adam(self._actor_flat.param, cfg.lr)
        self.critic_opt = flat_adam(self._critic_flat.param, cfg.lr)

        af, cf = self._actor_flat, self._critic_flat
        width = 2 * act_dim
        hidden = cfg.hidden[-1]
        self._trunk_grads = [(af.grad(m.weight, m.weight.shape), af.grad(m.bias, m.bias.shape)) for m in self._trunk]
        self._head = (af.value(actor.mean.weight, (width, hidden)), af.value(actor.mean.bias, (width,)))
        self._head_grads = (af.grad(actor.mean.weight, (width, hidden)), af.grad(actor.mean.bias, (width,)))
        self._alpha_grad = af.grad(self.log_alpha, ())
        self._critic_grads = [
            (cf.grad(w, w.shape), cf.grad(b, b.shape)) for w, b in zip(self.critic.weights, self.critic.biases)
        ]
        self._ws: _Workspace | None = None
        self._p = _Products(MATMUL_DTYPES[cfg.matmul])

    @property
    def td_errors(self) -> np.ndarray:
        """``0.5 (|q1 - y| + |q2 - y|)`` of the last batch (host memory, copied from the device when first read)."""
        if self._td_errors is None:
            return np.zeros(0, dtype=np.float32)
        return self._td_errors.cpu().numpy()

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        """One gradient step of critics, actor and temperature on a batch from replay."""
        batch = on_device(batch, self.device)
        # Inference mode (no autograd bookkeeping at all) for the arithmetic; the optimisers step outside it so
        # that the moments they create on their first step are ordinary tensors.
        with torch.inference_mode():
            sample = self._critic_gradients(batch)
        self.collective.mean_(self._critic_flat.gradient)
        self.critic_opt.step()
        with torch.inference_mode():
            metrics = self._actor_gradients(*sample)
        self.collective.mean_(self._actor_flat.gradient)
        self.actor_opt.step()
        with torch.no_grad():
            self._target_flat.param.lerp_(self._critic_flat.param, self.cfg.tau)
        self.updates += 1
        return metrics

    def _critic_gradients(self, batch: dict[str, torch.Tensor]) -> tuple:
        """Samples the policy on s' and s, writes the critics' gradients; returns what the actor's step needs."""
        cfg = self.cfg
        obs = batch["obs"].flatten(1)
        next_obs = batch["next_obs"].flatten(1)
        action = ((batch["action"] - self.center) / self.half).flatten(1).clamp(-1.0, 1.0)
        reward, done, weight = batch["reward"], batch["terminated"], batch.get("weight")
        n, act_dim = obs.shape[0], self._act_dim
        ws = self._workspace(n, obs.dtype)
        alpha = self.log_alpha.exp().item()

        # Actor on s' (rows :n) and s (rows n:) at once, as Actor.sample computes it, with
        # logp = sum(-noise^2 / 2 - log_std - log(2 pi) / 2 - 2 (log 2 - pre - softplus(-2 pre))).
        h = torch.cat([next_obs, obs])
        for layer, out in zip(self._trunk, ws.actor):
            h = self._p.addmm(layer.bias, h, layer.weight.t(), out=out).relu_()
        head_w, head_b = self._head
        head = self._p.addmm(head_b, h, head_w.t())
        mean, squashed = head[:, :act_dim], head[:, act_dim:].tanh()
        log_std = squashed.mul(_LOG_STD_HALF_RANGE).add_(LOG_STD_MIN + _LOG_STD_HALF_RANGE)
        noise = self._noise(mean, n)
        std_noise = log_std.exp().mul_(noise)
        pre = mean + std_noise
        sampled = pre.tanh()
        log_prob = nn.functional.softplus(pre * -2.0).add_(pre).mul_(2.0).sub_(log_std)
        log_prob = log_prob.addcmul_(noise, noise, value=-0.5).sum(-1).sub_(act_dim * (_HALF_LOG_2PI + 2 * _LOG_2))

        q_t = self._critic_forward(self.critic_target, torch.cat([next_obs, sampled[:n]], 1), ws.spare)[-1]
        soft_value = torch.min(q_t[0, :, 0], q_t[1, :, 0]).sub_(log_prob[:n], alpha=alpha)
        target = torch.addcmul(reward, done.mul(-cfg.gamma).add_(cfg.gamma), soft_value)

        # Critics: d loss / d q_k = 2 w (q_k - y) / B, then back through both MLPs at once.
        x = torch.cat([obs, action], 1)
        outputs = self._critic_forward(self.critic, x, ws.critic)
        error = outputs.pop().squeeze(-1).sub_(target)
        self._td_errors = error.abs().mean(0).float()
        grad_q = error * (2.0 / n) if weight is None else (error * weight).mul_(2.0 / n)
        twice_loss = torch.dot(grad_q.view(-1), error.view(-1))
        self._critic_backward([x.expand(2, *x.shape), *outputs], grad_q.unsqueeze(-1), ws)
        return obs, h[n:], sampled[n:], log_prob[n:], std_noise[n:], squashed[n:], alpha, twice_loss

    def _actor_gradients(
        self,
        obs: torch.Tensor,
        h: torch.Tensor,
        action: torch.Tensor,
        logp: torch.Tensor,
        std_noise: torch.Tensor,
        squashed: torch.Tensor,
        alpha: float,
        twice_critic_loss: torch.Tensor,
    ) -> dict[str, float]:
        """Writes the actor's and the temperature's gradients (with the critics after their step); metrics."""
        n, act_dim = obs.shape[0], self._act_dim
        ws = self._ws
        assert ws is not None  # the critics' step made it for this batch
        # d loss / d q_k = -1/B where q_k is the smaller, -1/(2B) each at ties (as autograd's minimum); only the
        # critics' gradient with respect to the action is needed.
        outputs = self._critic_forward(self.critic, torch.cat([obs, action], 1), ws.spare)
        q = outputs.pop().squeeze(-1)
        q_min_sum = torch.min(q[0], q[1]).sum()
        grad_q = torch.addcmul(ws.tie_grad, ws.side_grad, torch.sign(q[1] - q[0]))
        grad_action = self._action_grad(outputs, grad_q.unsqueeze(-1), ws)

        # Through the squashed Gaussian: action = tanh(pre), pre = mean + exp(log_std) noise, d logp / d pre =
        # 2 tanh(pre), d logp / d log_std = -1 (noise held fixed), log_std = MIN + c (tanh(raw) + 1).
        grad_head = ws.grad_head
        grad_pre = torch.addcmul(grad_action, grad_action, action * action, value=-1.0, out=grad_head[:, :act_dim])
        grad_pre.add_(action, alpha=2.0 * alpha / n)
        grad_raw = torch.mul(grad_pre, std_noise, out=grad_head[:, act_dim:]).sub_(alpha / n)
        grad_raw.mul_(torch.addcmul(ws.half_range, squashed, squashed, value=-_LOG_STD_HALF_RANGE))
        self._p.mm(grad_head.t(), h, out=self._head_grads[0])
        torch.sum(grad_head, 0, out=self._head_grads[1])
        grad = self._p.mm(grad_head, self._head[0], out=ws.actor_grad[-1]).mul_(h.sign_())
        for i in range(len(self._trunk) - 1, -1, -1):
            layer, (grad_w, grad_b) = self._trunk[i], self._trunk_grads[i]
            layer_in = ws.actor[i - 1][n:] if i > 0 else obs
            if layer_in.shape[1] < grad.shape[1]:
                # A narrow input (the observations): BLAS is several times faster at x^T g than at g^T x.
                grad_w.copy_(self._p.mm(layer_in.t(), grad).t())
            else:
                self._p.mm(grad.t(), layer_in, out=grad_w)
            torch.sum(grad, 0, out=grad_b)
            if i > 0:
                grad = self._p.mm(grad, layer.weight, out=ws.actor_grad[i - 1]).mul_(layer_in.sign_())

        critic_loss, logp_sum, q_min_sum = torch.stack([twice_critic_loss / 2, logp.sum(), q_min_sum]).tolist()
        self._alpha_grad.fill_(-(logp_sum / n + self.target_entropy))
        return {
            "critic_loss": critic_loss,
            "actor_loss": (alpha * logp_sum - q_min_sum) / n,
            "alpha": alpha,
            "entropy": -logp_sum / n,
        }

    def _noise(self, mean: torch.Tensor, n: int) -> torch.Tensor:
        """The policy's standard normal noise for s' (rows :n) and s (rows n:), drawn in that order."""
        noise = torch.empty_like(mean)
        noise[:n].normal_()
        noise[n:].normal_()
        return noise

    def _workspace(self, n: int, dtype: torch.dtype) -> _Workspace:
        ws = self._ws
        if ws is None or ws.key != (n, dtype):
            ws = self._ws = _Workspace(n, self.cfg.hidden, self._act_dim, dtype, self.device)
        return ws

    def _critic_forward(self, critic: TwinCritic, x: torch.Tensor, hidden: list[torch.Tensor]) -> list[torch.Tensor]:
        """Every layer's output of both critics: the hidden layers' (after the ReLU) written into ``hidden``,
        then the Q-values, [2, B, 1]."""
        h = x.expand(2, *x.shape)
        outputs = []
        for w, b, out in zip(critic.weights, critic.biases, hidden):
            h = self._p.baddbmm(b, h, w, out=out).relu_()
            outputs.append(h)
        # The Q layer as [2, 1, B] = w^T h^T, which has the memory layout of [2, B, 1]: BLAS is several times faster
        # at this row vector times matrix than at the matrix times column vector.
        q = self._p.baddbmm(critic.biases[-1], critic.weights[-1].transpose(1, 2), h.transpose(1, 2))
        outputs.append(q.view(q.shape[0], -1, 1))
        return outputs

    def _critic_backward(self, inputs: list[torch.Tensor], grad: torch.Tensor, ws: _Workspace) -> None:
        """Writes both critics' parameter gradients, given ``grad`` [2, B, 1] at their outputs and each layer's
        input (``inputs[i]``, [2, B, in]; the hidden ones are overwritten with their ReLU's derivative)."""
        weights = self.critic.weights
        for i in range(len(weights) - 1, -1, -1):
            grad_w, grad_b = self._critic_grads[i]
            if grad.shape[2] == 1:
                # The Q layer's [2, in, 1] gradient has the memory layout of [2, 1, in]: BLAS is many times faster
                # at the row vector times matrix than at the transposed matrix times column vector.
                self._p.bmm(grad.transpose(1, 2), inputs[i], out=grad_w.view(grad_w.shape[0], 1, -1))
            else:
                self._p.bmm(inputs[i].transpose(1, 2), grad, out=grad_w)
            torch.sum(grad, 1, keepdim=True, out=grad_b)
            if i > 0:
                grad = self._input_grad(grad, weights[i], ws.critic_grad[i - 1]).mul_(inputs[i].sign_())

    def _action_grad(self, outputs: list[torch.Tensor], grad: torch.Tensor, ws: _Workspace) -> torch.Tensor:
        """Gradient with respect to the action columns of the critics' input, summed over both critics, given
        ``grad`` [2, B, 1] at their outputs and the hidden layers' outputs (overwritten)."""
        weights = self.critic.weights
        for i in range(len(weights) - 1, 0, -1):
            grad = self._input_grad(grad, weights[i], ws.critic_grad[i - 1]).mul_(outputs[i - 1].sign_())
        return self._p.bmm(grad, weights[0][:, self._obs_dim :].transpose(1, 2)).sum(0)

    def _input_grad(self, grad: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``grad @ weight^T`` per critic into ``out``; with one output column (the Q layer) a broadcast product,
        exact too."""
        if weight.shape[2] == 1:
            return torch.mul(grad, weight.transpose(1, 2), out=out)
        return self._p.bmm(grad, weight.transpose(1, 2), out=out)

    def _modules(self) -> dict:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def _optimizers(self) -> dict:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt}

    def state(self) -> tuple[dict[str, np.ndarray], dict]:
        """Everything needed to continue training: tensors (networks, optimiser moments) and JSON-able meta."""
        tensors, optimizers = training_state(self._modules(), self._optimizers())
        tensors["log_alpha"] = self.log_alpha.detach().cpu().numpy().copy()
        return tensors, {"updates": self.updates, "optimizers": optimizers}

    def load_state(self, tensors: dict[str, np.ndarray], meta: dict) -> None:
        """Restores what ``state`` returned; raises ValueError when it does not fit these networks."""
        try:
            load_training_state(self._modules(), self._optimizers(), tensors, meta["optimizers"])
            with torch.no_grad():
                self.log_alpha.copy_(torch.from_numpy(np.array(tensors["log_alpha"])))
            updates = int(meta["updates"])
        except (KeyError, RuntimeError, TypeError, ValueError) as exc:
            raise ValueError(f"checkpoint does not fit the SAC networks: {exc}") from None
        self.updates = updates

    def policy_weights(self) -> dict[str, np.ndarray]:
        """What rollout workers and the evaluator need to act: the actor's parameters."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.actor.state_dict().items()}
