"""V-trace targets and advantages (Espeholt et al. 2018, section 4.1), on time-major arrays of shape (T, B).

Each column is one segment, oldest step first; a segment shorter than T is padded after its end, and its
last real step is marked in ``cut`` like a step that ended an episode. Every step carries the value of its own
next observation (``next_value``), so that no target ever reaches across a segment's end or an episode's:

    rho_s   = min(rho-bar, pi(a_s|x_s) / mu(a_s|x_s)),   c_s = lambda min(c-bar, pi / mu)
    delta_s = rho_s (r_s + gamma (1 - terminated_s) V(x'_s) - V(x_s))
    v_s     = V(x_s) + delta_s + gamma c_s (1 - cut_s) (v_{s+1} - V(x_{s+1}))
    A_s     = rho_s (r_s + gamma (1 - terminated_s) v'_s - V(x_s)),  v'_s = V(x'_s) if cut_s else v_{s+1}

``cut_s`` is 1 where the segment ends, the episode terminated or it was truncated. A terminated step
bootstraps from nothing; a truncated one and a segment's last step bootstrap from the value of their next
observation. With pi = mu (rho = c = 1) the targets are n-step returns, and with lambda < 1 they are GAE(lambda)
returns, which the unit tests hold them to.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VTrace:
    targets: np.ndarray
    """v_s: the value function's regression targets."""
    advantages: np.ndarray
    """A_s: the policy gradient's advantages (rho-weighted)."""
    rho: np.ndarray
    """The truncated importance weights rho_s."""


def vtrace(
    log_ratio: np.ndarray,
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    cut: np.ndarray,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    lam: float = 1.0,
) -> VTrace:
    """V-trace over (T, B) arrays; ``log_ratio`` is log pi(a_s|x_s) - log mu(a_s|x_s)."""
    ratio = np.exp(np.asarray(log_ratio, np.float64))
    rho = np.minimum(rho_bar, ratio)
    c = lam * np.minimum(c_bar, ratio)
    reward, value, next_value = (np.asarray(a, np.float64) for a in (reward, value, next_value))
    alive = 1.0 - np.asarray(terminated, np.float64)
    keep = 1.0 - np.asarray(cut, np.float64)
    delta = rho * (reward + gamma * alive * next_value - value)
    correction = np.zeros_like(value)
    running = np.zeros(value.shape[1:])
    for t in range(len(value) - 1, -1, -1):
        running = delta[t] + gamma * c[t] * keep[t] * running
        correction[t] = running
    targets = value + correction
    following = np.concatenate([targets[1:], np.zeros_like(targets[:1])])
    bootstrap = np.where(keep > 0, following, next_value)
    advantages = rho * (reward + gamma * alive * bootstrap - value)
    return VTrace(targets, advantages, rho)
