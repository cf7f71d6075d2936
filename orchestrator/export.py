"""``drl-orchestrate export``: a published policy as one self-contained file for serving without drl.

    drl-orchestrate export RUN [--version latest] --format onnx|torchscript --to FILE
        [--output runs | --store s3://bucket/drl]

The file holds the algorithm's acting network (``Algorithm.acting_network``): a batch of observations, as the
environment returns them, in; the deterministic action (what ``evaluate`` takes), in the environment's units,
out. The observation statistics, pixel scaling and action bounds are folded in. ONNX files have one input
``obs`` and one output ``action``, both with a variable batch dimension; TorchScript files load with
``torch.jit.load``. Before the file is written the exported network is checked against the run's own actor on
random observations (``check``), so a file that acts differently is never left behind.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.evaluate import StoredPolicy


@dataclass(frozen=True)
class Exported:
    """What ``export_policy`` wrote: the file, its format, the policy it holds and how far its actions were
    from the actor's on the check's observations."""

    path: Path
    format: str
    run: str
    version: int
    env_steps: int
    algorithm: str
    env: str
    signature: dict
    max_difference: float


def parse(argv: list[str], parser_cls: type[argparse.ArgumentParser]) -> argparse.Namespace:
    parser = parser_cls(
        prog="drl-orchestrate export",
        description="Write a published policy of a run as an ONNX or TorchScript file: observations in, the "
        "deterministic action out, with the observation statistics and action bounds folded in.",
    )
    from orchestrator.evaluate import add_source_arguments

    parser.add_argument("run", help="run name")
    add_source_arguments(parser)
    parser.add_argument("--format", required=True, choices=("onnx", "torchscript"), help="file format")
    parser.add_argument("--to", required=True, metavar="FILE", help="the file to write")
    args = parser.parse_args(argv)
    args.store = args.store or args.output
    return args


def export(argv: list[str], parser_cls: type[argparse.ArgumentParser]) -> int:
    from orchestrator.evaluate import load_stored_policy

    args = parse(argv, parser_cls)
    policy = load_stored_policy(args.store, args.run, args.version)
    print(
        f"exporting {args.run} version {policy.version} ({policy.config.algorithm} on {policy.config.env}, "
        f"{policy.env_steps} env steps) as {args.format}",
        file=sys.stderr,
    )
    done = export_policy(policy, args.format, Path(args.to))
    print(
        json.dumps(
            {
                "run": done.run,
                "version": done.version,
                "format": done.format,
                "file": str(done.path),
                **done.signature,
                "max_difference": done.max_difference,
            }
        )
    )
    return 0


def export_policy(policy: StoredPolicy, fmt: str, path: Path) -> Exported:
    """Writes ``policy``'s acting network to ``path`` in ``fmt`` (``FORMATS``) after checking the file's actions
    against the actor's (``check``); UserError for an unknown format, an algorithm without an acting network,
    an exporter that is not installed or a file that acts differently."""
    from drl.algorithms.exporting import exported, signature
    from drl.envs import space_spec

    cfg = policy.config
    spec = space_spec(cfg.env)
    data, difference = exported(spec, cfg, policy.weights, policy.actor, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Exported(
        path,
        fmt,
        policy.run,
        policy.version,
        policy.env_steps,
        cfg.algorithm,
        cfg.env,
        signature(spec),
        difference,
    )
