"""Generalised advantage estimation over concatenated segments, apart from the learner so that the arithmetic is
tested (and mutation-tested) on its own: ``terminated`` stops bootstrapping from the next value (the episode ended),
``cut`` stops the running sum (the segment ended: truncation or the end of a worker's segment), and the two differ
at a truncation, where the value of the next state still counts."""

from __future__ import annotations

import numpy as np


def gae(
    reward: np.ndarray,
    value: np.ndarray,
    next_value: np.ndarray,
    terminated: np.ndarray,
    cut: np.ndarray,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """Generalised advantage estimates over concatenated segments."""
    delta = reward + gamma * (1.0 - terminated) * next_value - value
    adv = np.zeros_like(delta)
    running = 0.0
    for t in range(len(delta) - 1, -1, -1):
        running = delta[t] + gamma * lam * (1.0 - cut[t]) * running
        adv[t] = running
    return adv
