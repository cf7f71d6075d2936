"""``drl-orchestrate evaluate``: score a published policy of a run, optionally saving videos.

    drl-orchestrate evaluate --run RUN [--output runs | --store s3://bucket/drl] --version latest --episodes 10
        [--video out/]

The run's configuration (environment, algorithm, network sizes) is read from ``RUN/config.json`` in the store,
the policy from ``RUN/policies/`` (checksums verified). Videos are animated GIFs, one per episode.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from drl.config import ExperimentConfig
from drl.errors import UserError

if TYPE_CHECKING:
    from drl.core import Actor


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """``--output``, ``--store`` and ``--version``: where a published policy is read from (``evaluate``,
    ``export``); after parsing, ``args.store = args.store or args.output``."""
    parser.add_argument(
        "--output",
        default="runs",
        metavar="DIR",
        help="folder of the local runs, which is their data store unless --store names another",
    )
    parser.add_argument("--store", help="the run's data store (directory or s3://BUCKET/PREFIX) [default: --output]")
    parser.add_argument("--version", default="latest", help="policy version number or 'latest'")


def parse(argv: list[str], parser_cls: type[argparse.ArgumentParser]) -> argparse.Namespace:
    parser = parser_cls(
        prog="drl-orchestrate evaluate",
        description="Score a published policy of a run over deterministic episodes, optionally "
        "saving one video per episode.",
    )
    add_source_arguments(parser)
    parser.add_argument("--run", required=True, help="run name")
    parser.add_argument(
        "--episodes",
        type=int,
        default=10,
        metavar="N",
        help="deterministic episodes to run, seeded --seed, --seed + 1, ...",
    )
    parser.add_argument("--seed", type=int, default=1_000_000, help="seed of the first episode")
    parser.add_argument("--video", metavar="DIR", help="save one GIF per episode in DIR")
    args = parser.parse_args(argv)
    args.store = args.store or args.output
    if args.episodes < 1:
        raise UserError(f"--episodes must be a positive integer, got {args.episodes}")
    return args


@dataclass(frozen=True)
class StoredPolicy:
    """A published policy version of a run with the run's configuration and its actor, loaded and ready to act."""

    run: str
    version: int
    env_steps: int
    config: ExperimentConfig
    actor: Actor
    weights: dict[str, np.ndarray]


def load_stored_policy(store_url: str, run: str, version: int | str = "latest", seed: int = 0) -> StoredPolicy:
    """Policy ``version`` (a number or ``"latest"``) of ``run`` in the data store ``store_url`` (a folder or
    ``s3://BUCKET/PREFIX``): its manifest checked, its weights in the actor the run's configuration makes (the
    configuration's plugins imported first). UserError for a run, a version or weights that are not there or do
    not fit."""
    from drl.algorithms import make_actor
    from drl.envs import space_spec
    from drl.store import ManifestError, PolicyStore, run_store

    store = run_store(store_url, run)
    raw = store.get_optional("config.json")
    if raw is None:
        raise UserError(f"no run {run!r} in {store_url} (missing {run}/config.json)")
    cfg = ExperimentConfig.from_json(raw.decode())
    policies = PolicyStore(store, run)
    versions = policies.versions()
    if not versions:
        raise UserError(f"run {run!r} has no published policy in {store_url}")
    if version == "latest":
        number = versions[-1]
    else:
        try:
            number = int(version)
        except ValueError:
            raise UserError(f"--version must be a number or 'latest', got {version!r}") from None
        if number not in versions:
            raise UserError(f"run {run!r} has no version {number}; stored: {versions[0]}..{versions[-1]}")
    try:
        manifest, weights = policies.load(number)
    except ManifestError as exc:
        raise UserError(f"policy version {number} cannot be trusted: {exc}") from None
    actor = make_actor(cfg.algorithm, space_spec(cfg.env), cfg, seed=seed)
    try:
        actor.load(weights)
    except ValueError as exc:
        raise UserError(f"policy version {number} does not fit the run's configuration: {exc}") from None
    return StoredPolicy(run, number, manifest.env_steps, cfg, actor, weights)


def evaluate(argv: list[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    from drl.acting.evaluation import run_episodes

    args = parse(argv, parser_cls)
    policy = load_stored_policy(args.store, args.run, args.version, seed=args.seed)
    cfg, version, actor = policy.config, policy.version, policy.actor
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    frames: dict[int, list[np.ndarray]] = {}
    on_frame = (lambda i, f: frames.setdefault(i, []).append(f)) if args.video else None
    returns = run_episodes(cfg.env, actor, args.episodes, seed=args.seed, on_frame=on_frame)
    videos = save_videos(Path(args.video), args.run, version, frames) if args.video else []
    result = {
        "run": args.run,
        "version": version,
        "env": cfg.env,
        "env_steps": policy.env_steps,
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)),
        "std_return": float(np.std(returns)),
        "returns": returns,
        "videos": [str(v) for v in videos],
    }
    print(
        f"{args.run} v{version} ({policy.env_steps:,} env steps) on {cfg.env}: return "
        f"{result['mean_return']:.1f} +- {result['std_return']:.1f} over {len(returns)} episodes",
        file=sys.stderr,
    )
    print(json.dumps(result))
    return 0


def save_videos(directory: Path, run: str, version: int, frames: dict[int, list[np.ndarray]]) -> list[Path]:
    from PIL import Image

    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for episode, images in sorted(frames.items()):
        path = directory / f"{run}-v{version}-episode{episode}.gif"
        first, *rest = [Image.fromarray(np.asarray(f, dtype=np.uint8)) for f in images]
        first.save(path, save_all=True, append_images=rest, duration=33, loop=0)
        paths.append(path)
    return paths
