"""The in-cluster half of ``drl-orchestrate scale RUN --workers N --backend kubernetes``.

The orchestrator usually runs outside the cluster and cannot reach the run's memory server, so it starts this
module as a one-off Job (``orchestrator.backends.kubernetes.manifests.scaler_job``: the trainer pod's image,
environment and security context) and patches the rollout Indexed Job itself. Through the memory backend's
``RunControl``, the scaler changes only the membership and the shares (and forgets a returning worker's done
marker), with the rules of ``orchestrator.scaling``:

    python -m orchestrator.backends.kubernetes.scaler retire --workers N
        marks every active worker with an index of N or more ``retired`` (before the Job is scaled down, so
        the SYNC iterations of the others already split over the workers that stay)
    python -m orchestrator.backends.kubernetes.scaler apply --workers N --job-size C [--hand-in-timeout S]
        retires as above (again: a re-run after a failure must not depend on the first half), waits up to S
        seconds until each retired worker of index N or more has exited (marked done, or it never
        produced or reported anything), then spreads the steps left over the workers below N; retired
        workers keep a share equal to what they produced, returning ones get what they produced plus their part

Protocol, as the orchestrator drives it. Scale-down (N < C): ``retire``, patch the Job's completions and
parallelism to N (its pods of index N or more get SIGTERM and hand in everything they collected), ``apply``.
Scale-up (N > C) or a re-run at the same size: ``apply`` first, so the new workers' shares exist before their
pods start, then patch the Job to the printed ``job_size`` (C when nothing is left to produce). Every step is
idempotent, so running the same scale again finishes an interrupted one.

The result is one JSON line on stdout; a problem is one ``drl-scaler: error:`` line on stderr and exit 2 (bad
input, the run has ended) or 1 (the memory server failed). Environment: ``DRL_CONFIG``, ``DRL_RUN``,
``DRL_MEMORY_URL`` (+ ``DRL_MEMORY_PASSWORD`` and the other ``DRL_MEMORY_*``), ``DRL_STEPS_DONE``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Callable, NoReturn

from drl.algorithms import load_plugins_or_exit
from drl.config import ExperimentConfig
from drl.errors import EXIT_USAGE, UserError
from drl.memory import ACTIVE, RETIRED, MemoryBackendError, RunControl, open_memory
from drl.naming import check_workers, worker_index
from orchestrator import scaling

HAND_IN_TIMEOUT_S = 120.0
CONNECT_WAIT_S = 60.0
MEMORY_RETRY_S = 0.0  # a failed call fails the pod with exit 1; its Job tries again (every step is idempotent)


class RunEnded(UserError):
    """The run's trainer finished or its stop flag is set: there is nothing to scale."""


@dataclass
class Scaler:
    control: RunControl
    run: str
    cfg: ExperimentConfig
    steps_done: int = 0
    say: Callable[[str], None] = lambda text: print(f"drl-scaler: {text}", file=sys.stderr, flush=True)
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic

    @property
    def margin(self) -> int:
        return scaling.margin_transitions(self.cfg.batch_transitions)

    def snapshot(self) -> scaling.Snapshot:
        return scaling.Snapshot(*self.control.snapshot())

    def check_running(self) -> None:
        stop, done = self.control.stop_reason(), self.control.trainer_done()
        if done is not None:
            raise RunEnded(f"run {self.run} has ended (its trainer finished); nothing to scale")
        if stop:
            raise RunEnded(f"run {self.run} is stopping ({stop}); nothing to scale")

    def ensure_members(self) -> None:
        """A Kubernetes run starts without membership (every worker assumes the even split of ``--workers``):
        the first scaling registers exactly that, so nothing changes for the workers until shares move."""
        if self.control.members():
            return
        shares = scaling.initial_shares(self.cfg.steps, self.steps_done, self.cfg.workers)
        self.control.register({name: ACTIVE for name in shares}, shares, only_new=True)
        self.say(f"registered the run's {self.cfg.workers} rollout workers as members")

    def retire(self, workers: int) -> list[str]:
        self.check_running()
        self.ensure_members()
        leaving = scaling.plan_indexed_removal(self.snapshot(), workers)
        if leaving:
            self.control.register({n: RETIRED for n in leaving}, {})
            self.say(f"retired {', '.join(leaving)}")
        return leaving

    def gone(self, names: list[str]) -> list[str]:
        """Those of ``names`` that have exited: they are marked done, or never produced nor reported."""
        done, produced = self.control.workers_done(), self.control.produced()
        statuses = self.control.statuses(names)
        return [n for n in names if n in done or not (n in produced or statuses.get(n))]

    def wait_for_exit(self, names: list[str], timeout: float) -> list[str]:
        """Waits until every worker of ``names`` has exited; returns those still there after ``timeout``."""
        deadline = self.clock() + timeout
        left = [n for n in names if n not in self.gone(names)]
        if left:
            self.say(f"waiting up to {timeout:.0f}s for {', '.join(left)} to hand in what they collected")
        while left and self.clock() < deadline:
            self.sleep(0.5)
            left = [n for n in left if n not in self.gone(left)]
        return left

    def apply(self, workers: int, job_size: int, hand_in_s: float = HAND_IN_TIMEOUT_S) -> dict:
        self.retire(workers)
        members = self.snapshot().members
        leaving = [n for n, s in members.items() if s == RETIRED and worker_index(n) >= workers]
        late = self.wait_for_exit(sorted(leaving, key=worker_index), hand_in_s)
        warnings = []
        if late:
            warnings.append(
                f"{', '.join(late)} did not report an exit within {hand_in_s:.0f}s; their share is "
                "what they produced so far (a late entry is still consumed, not lost)"
            )
            self.say("warning: " + warnings[-1])
        self.check_running()
        snap = self.snapshot()
        plan = scaling.plan_indexed_shares(
            snap, steps=self.cfg.steps, steps_done=self.steps_done, workers=workers, margin=self.margin
        )
        self.control.register({n: ACTIVE for n in plan.added}, plan.shares, forget_done=plan.added)
        returning = [n for n in plan.added if snap.members.get(n) == RETIRED]
        grows = workers > job_size and any(worker_index(n) >= job_size for n in plan.names)
        size = workers if workers <= job_size or grows else job_size
        if plan.names:
            self.say(f"{len(plan.names)} rollout workers share the {plan.remaining:,} steps left")
        else:
            self.say("nothing left to produce: no worker gets a new share")
        return {
            "workers": workers,
            "job_size": size,
            "collecting": list(plan.collecting),
            "added": list(plan.added),
            "returning": returning,
            "finishing": list(plan.finishing),
            "retired": list(plan.retired),
            "remaining": plan.remaining,
            "shares": plan.shares,
            "warnings": warnings,
        }


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UserError(
            f"{message} (python -m orchestrator.backends.kubernetes.scaler {{retire,apply}} --workers N ...)"
        )


def parse(argv: list[str]) -> argparse.Namespace:
    parser = _Parser(
        prog="python -m orchestrator.backends.kubernetes.scaler",
        description="Change a Kubernetes run's rollout membership and shares (started by "
        "drl-orchestrate scale as a Job).",
    )
    parser.add_argument("phase", choices=("retire", "apply"))
    parser.add_argument("--workers", type=int, required=True, metavar="N")
    parser.add_argument("--job-size", type=int, metavar="C", help="the rollout Job's completions now (apply)")
    parser.add_argument("--hand-in-timeout", type=float, default=HAND_IN_TIMEOUT_S, metavar="S")
    args = parser.parse_args(argv)
    check_workers(args.workers)
    if args.phase == "apply" and (args.job_size is None or args.job_size < 1):
        raise UserError("apply needs --job-size C, the rollout Job's completions now (a positive integer)")
    if args.hand_in_timeout < 0:
        raise UserError(f"--hand-in-timeout must not be negative, got {args.hand_in_timeout}")
    return args


def from_env(env: dict[str, str] | None = None) -> tuple[ExperimentConfig, str, str, int]:
    """(configuration, run, memory URL, steps done) from the variables every drl pod gets."""
    from drl.presets import resolve

    env = dict(os.environ if env is None else env)
    missing = [k for k in ("DRL_CONFIG", "DRL_RUN", "DRL_MEMORY_URL") if not env.get(k)]
    if missing:
        raise UserError(
            f"environment variable(s) {', '.join(missing)} must be set (the scaler Job gets the "
            "trainer pod's environment)"
        )
    try:
        cfg = resolve(json.loads(env["DRL_CONFIG"]), "DRL_CONFIG")
    except json.JSONDecodeError as exc:
        raise UserError(f"DRL_CONFIG is not valid JSON: {exc}") from None
    try:
        steps_done = int(env.get("DRL_STEPS_DONE") or 0)
    except ValueError:
        raise UserError(f"DRL_STEPS_DONE must be an integer, got {env['DRL_STEPS_DONE']!r}") from None
    return cfg, env["DRL_RUN"], env["DRL_MEMORY_URL"], steps_done


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    load_plugins_or_exit()
    try:
        args = parse(argv)
        cfg, run, url, steps_done = from_env()
        memory = open_memory(url, run, wait_s=CONNECT_WAIT_S, retry_s=MEMORY_RETRY_S, shards=cfg.memory_shards)
        scaler = Scaler(memory.control(), run, cfg, steps_done)
        if args.phase == "retire":
            result = {"workers": args.workers, "retired": scaler.retire(args.workers)}
        else:
            result = scaler.apply(args.workers, args.job_size, args.hand_in_timeout)
    except UserError as exc:
        print(f"drl-scaler: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except MemoryBackendError as exc:
        print(f"drl-scaler: error: the memory server failed: {exc}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps({"phase": args.phase, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
