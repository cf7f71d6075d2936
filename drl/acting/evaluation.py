"""Deterministic evaluation episodes: the same seeds for every version, so versions compare fairly."""

from __future__ import annotations

from typing import Callable

import numpy as np
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from drl.core import Actor
from drl.envs import make_env


def run_episodes(
    env_id: str,
    actor: Actor,
    episodes: int,
    seed: int,
    max_steps: int = 100_000,
    on_frame: Callable[[int, np.ndarray], None] | None = None,
) -> list[float]:
    """Returns of deterministic episodes seeded seed, seed+1, ...; ``on_frame(episode, rgb)`` receives rendered
    frames when given (the env is then made with render_mode="rgb_array", one episode after the other).

    The envs are evaluation envs (``make_env(evaluation=True)``): a return is the game's real score, whatever
    training changes (an Atari game's lost lives and clipped rewards).

    Without frames the episodes run side by side, one policy call for every running episode per step: the same
    episodes and returns, in a fraction of the time, so a run's evaluator reports a version sooner and takes less
    CPU from the trainer."""
    if on_frame is None:
        return _run_together(env_id, actor, episodes, seed, max_steps)
    env = make_env(env_id, render_mode="rgb_array", evaluation=True)
    returns = []
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, done, steps = 0.0, False, 0
            while not done and steps < max_steps:
                on_frame(i, np.asarray(env.render()))
                action = actor.act(np.asarray(obs)[None], deterministic=True)[0]
                obs, reward, terminated, truncated, _ = env.step(action)
                total += float(reward)
                done = terminated or truncated
                steps += 1
            returns.append(total)
    finally:
        env.close()
    return returns


def _run_together(env_id: str, actor: Actor, episodes: int, seed: int, max_steps: int) -> list[float]:
    envs = [make_env(env_id, evaluation=True) for _ in range(episodes)]
    try:
        obs = [np.asarray(env.reset(seed=seed + i)[0]) for i, env in enumerate(envs)]
        totals = [0.0] * episodes
        running = list(range(episodes))
        steps = 0
        while running and steps < max_steps:
            actions = actor.act(np.stack([obs[i] for i in running]), deterministic=True)
            still = []
            for i, action in zip(running, actions):
                o, reward, terminated, truncated, _ = envs[i].step(action)
                obs[i] = np.asarray(o)
                totals[i] += float(reward)
                if not (terminated or truncated):
                    still.append(i)
            running = still
            steps += 1
        return totals
    finally:
        for env in envs:
            env.close()


_INT64 = {
    FieldDescriptor.TYPE_INT64,
    FieldDescriptor.TYPE_UINT64,
    FieldDescriptor.TYPE_SINT64,
    FieldDescriptor.TYPE_FIXED64,
    FieldDescriptor.TYPE_SFIXED64,
}


def message_to_record(message: Message) -> dict:
    """A flat message as a JSON-ready dict with proto field names, 64-bit integers kept as numbers.

    (The canonical proto3 JSON mapping writes 64-bit integers as strings; JSONL readers expect numbers.
    ``json_format.ParseDict`` accepts both, so records still parse back into the message.)
    """
    record = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    for field in message.DESCRIPTOR.fields:
        if field.type in _INT64 and field.name in record and not isinstance(record[field.name], list):
            record[field.name] = int(record[field.name])
    return record
