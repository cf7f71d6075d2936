"""Fault campaign: whole runs through the real command line, each with random processes SIGKILLed at random
moments, and every run judged on how it ended and whether its summary balances.

Each run is ``drl-orchestrate`` in the foreground (a private Valkey server started by the orchestrator, a local
data store) with the small SAC flags of the test suite, ``--workers W --steps S`` in ASYNC or SYNC mode. While it
runs, ``--victims`` kills are made: for each, a moment is drawn as a fraction of the run's progress (uniform in
0.05-0.98 of the steps, read from the trainer's status; each kill after the first comes, one time in three, right
after the one before it), then a random delay of up to 1.5 s, so two kills often land within a second or two of
each other (the trainer and the memory server lost together, say). The victim is drawn among the trainer, the
rollout workers, the evaluator and the memory server (``--roles`` narrows it, e.g. to ``trainer,memory``) and gets
SIGKILL. The orchestrator restarts what died (``--max-restarts`` allows all the kills).

A run **passes** when

- it ended by itself within ``--timeout`` seconds (no hang), with exit 0 and ``steps_done``, or with exit 1 and a
  clear reason (``failed: ...``) and no traceback on stderr;
- its summary counts at least the transitions the trainer was seen to consume during the run (a summary read
  from a memory server that lost its data would count fewer);
- its ``summary.json`` balances: produced = consumed + unconsumed + every counted drop (``balance``), and with
  ``steps_done`` produced equals ``--steps`` (nothing counted twice, nothing lost uncounted);
- no process of the run is left once the orchestrator has exited.

    python -m bench.fault_campaign --runs 20 --json /tmp/campaign.json

prints one line per run and a table of the totals; the exit code is 1 when any run failed.

``--faults twin,kill`` draws each fault among the kinds listed: ``kill`` is the SIGKILL above; ``twin`` starts a
second process with the victim's identity (its command and environment from the run's plan, as an operator or a
Job's replacement pod would start it; the memory server gets a kill instead), and one time in two first pauses
the victim (SIGSTOP) for ``TWIN_PAUSE_S``, longer than its claim's lease, so the twin takes the identity over and
the victim, SIGCONTed, is superseded. A run with twins passes as above, with every twin ended by itself (exit 0,
or ``EXIT_SUPERSEDED`` for one superseded in its turn) within ``TWIN_END_S`` of the orchestrator, and no more
consumed than produced.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drl.errors import EXIT_SUPERSEDED

ROOT = Path(__file__).resolve().parents[1]

SMALL = [
    "--sac.hidden",
    "16,16",
    "--sac.batch-size",
    "32",
    "--eval-episodes",
    "1",
    "--learning-starts",
    "300",
    "--random-steps",
    "300",
    "--updates-per-transition",
    "0.25",
    "--checkpoint-every-s",
    "1",
    "--publish-every-updates",
    "25",
    "--sync-steps-per-iteration",
    "600",
]
ROLES = ("trainer", "rollout", "evaluator", "memory")
FAULTS = ("kill", "twin")
TWIN_PAUSE_S = 17.0
"""How long a twin's victim is paused when it is: past the claim's 15 s lease (``services.common.CLAIM_S``)."""
TWIN_LATEST = 0.7
"""A twin is started by 70% of the run at the latest (its moment drawn as a kill's, scaled): a second process
needs a few seconds to start, and one that starts after the run ended finds no run to take part in (a local
run's memory server went with its orchestrator)."""
TWIN_END_S = 30.0
"""How long a twin may take to end after the orchestrator exited (a waiter looks at the run once a second)."""


def drops(summary: dict) -> int:
    """Every drop the run counted (``dropped``: stale, dead-lettered, lost in a gap that could never fill)."""
    return sum((summary.get("dropped") or {}).values())


def balance(summary: dict) -> int:
    """produced - (consumed + unconsumed + drops): zero when the summary accounts for every transition."""
    return summary["transitions_produced"] - (
        summary["transitions_consumed"] + summary["transitions_unconsumed"] + drops(summary)
    )


@dataclass
class Kill:
    at_fraction: float
    delay_s: float
    victim: str
    pid: int | None = None
    at_steps: int | None = None
    at_s: float | None = None
    fault: str = "kill"
    paused: bool = False
    twin_pid: int | None = None
    twin_exit: int | None = None


@dataclass
class Outcome:
    run: str
    mode: str
    seed: int
    kills: list[Kill]
    exit_code: int | None = None
    exit_reason: str = ""
    wall_s: float = 0.0
    summary: dict = field(default_factory=dict)
    seen_steps: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems


class Campaign:
    def __init__(
        self,
        output: Path,
        steps: int,
        workers: int,
        victims: int,
        timeout: float,
        python: str,
        roles: tuple[str, ...] = ROLES,
        faults: tuple[str, ...] = ("kill",),
    ):
        self.output, self.steps, self.workers, self.victims = output, steps, workers, victims
        self.timeout, self.python, self.roles, self.faults = timeout, python, roles, faults
        self.twins: list[subprocess.Popen] = []

    def schedule(self, rng: random.Random) -> list[Kill]:
        names = [r for r in ("trainer", "evaluator", "memory") if r in self.roles]
        if "rollout" in self.roles:
            names += [f"rollout-{i}" for i in range(self.workers)]
        fractions = sorted(rng.uniform(0.05, 0.98) for _ in range(self.victims))
        for i in range(1, len(fractions)):
            if rng.random() < 1 / 3:
                fractions[i] = fractions[i - 1]
        kills = [Kill(f, rng.uniform(0.0, 1.5), rng.choice(names)) for f in fractions]
        for kill in kills:
            kill.fault = rng.choice(self.faults)
            if kill.fault == "twin" and kill.victim == "memory":
                kill.fault = "kill"
            if kill.fault == "twin":
                kill.at_fraction *= TWIN_LATEST
                kill.paused = rng.random() < 0.5
        kills.sort(key=lambda k: k.at_fraction)
        return kills

    def run_one(self, index: int, mode: str, seed: int) -> Outcome:
        rng = random.Random(seed)
        name = f"campaign-{index:02d}-{mode}"
        outcome = Outcome(name, mode, seed, self.schedule(rng))
        run_dir = self.output / name
        args = [
            self.python,
            "-m",
            "orchestrator.cli",
            *SMALL,
            "--mode",
            mode,
            "--workers",
            str(self.workers),
            "--steps",
            str(self.steps),
            "--seed",
            str(seed),
            "--max-restarts",
            str(self.victims + 2),
            "--output",
            str(self.output),
            "--run-name",
            name,
        ]
        started = time.monotonic()
        stderr_path = run_dir.with_suffix(".stderr")
        with open(stderr_path, "w") as err:
            proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True)
            try:
                self._kill_on_schedule(proc, run_dir, outcome, started)
                proc.wait(timeout=max(1.0, self.timeout - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                outcome.problems.append(f"hung: still running after {self.timeout:.0f} s")
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        outcome.wall_s = round(time.monotonic() - started, 1)
        outcome.exit_code = proc.returncode
        self._end_twins(outcome)
        self._judge(outcome, run_dir, stderr_path.read_text(errors="replace"))
        return outcome

    def _end_twins(self, outcome: Outcome) -> None:
        """Waits for every twin to end by itself (``TWIN_END_S``), notes its exit code, kills one that did not."""
        deadline = time.monotonic() + TWIN_END_S
        for kill, twin in zip([k for k in outcome.kills if k.twin_pid], self.twins):
            try:
                kill.twin_exit = twin.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                outcome.problems.append(
                    f"the twin of {kill.victim} did not end within {TWIN_END_S:.0f} s of the orchestrator"
                )
                twin.kill()
                twin.wait()
                continue
            if kill.twin_exit not in (0, EXIT_SUPERSEDED):
                outcome.problems.append(f"the twin of {kill.victim} exited with {kill.twin_exit}")
        self.twins = []

    def _kill_on_schedule(self, proc: subprocess.Popen, run_dir: Path, outcome: Outcome, started: float) -> None:
        for kill in outcome.kills:
            target = int(kill.at_fraction * self.steps)
            while proc.poll() is None and (steps := self._steps(run_dir)) < target:
                outcome.seen_steps = max(outcome.seen_steps, steps)
                if time.monotonic() - started > self.timeout:
                    return
                time.sleep(0.1)
            outcome.seen_steps = max(outcome.seen_steps, steps)
            if proc.poll() is not None:
                return
            time.sleep(kill.delay_s)
            deadline = time.monotonic() + 5
            while (pid := self._pid(run_dir, kill.victim)) is None and time.monotonic() < deadline:
                time.sleep(0.1)
            kill.pid = pid
            kill.at_steps, kill.at_s = steps, round(time.monotonic() - started, 1)
            if kill.pid is None:
                continue
            try:
                if kill.fault == "twin":
                    self._twin(run_dir, kill, proc)
                else:
                    os.kill(kill.pid, signal.SIGKILL)
            except ProcessLookupError:
                kill.pid = None

    def _twin(self, run_dir: Path, kill: Kill, proc: subprocess.Popen) -> None:
        """Starts a second process with the victim's identity; when ``kill.paused``, the victim is paused from
        just before until ``TWIN_PAUSE_S`` after."""
        if kill.paused:
            os.kill(kill.pid, signal.SIGSTOP)
        try:
            command, env = replica_launch(run_dir, kill.victim)
            with open(run_dir / "logs" / f"twin-{kill.victim}-{len(self.twins)}.log", "ab") as log:
                twin = subprocess.Popen(
                    command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
                )
            self.twins.append(twin)
            kill.twin_pid = twin.pid
            if kill.paused:
                until = time.monotonic() + TWIN_PAUSE_S
                while time.monotonic() < until and proc.poll() is None:
                    time.sleep(0.1)
        finally:
            if kill.paused:
                os.kill(kill.pid, signal.SIGCONT)

    @staticmethod
    def _state(run_dir: Path) -> dict:
        try:
            return json.loads((run_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}

    def _steps(self, run_dir: Path) -> int:
        """The trainer's consumed steps as its status reports them; 0 while the run or its server is unreachable."""
        from drl.memory import open_memory, private_env

        state = self._state(run_dir)
        if not state.get("memory_url"):
            return 0
        try:
            memory = open_memory(
                state["memory_url"], state["run"], retry_s=0, env=private_env(run_dir / "memory.password")
            )
            try:
                return int(memory.control().status("trainer").get("env_steps") or 0)
            finally:
                memory.close()
        except Exception:
            return 0

    def _pid(self, run_dir: Path, victim: str) -> int | None:
        if victim == "memory":
            return memory_server_pid(run_dir)
        for p in self._state(run_dir).get("processes", []):
            if p["name"] == victim and p.get("exit_code") is None:
                return int(p["pid"])
        return None

    def _judge(self, outcome: Outcome, run_dir: Path, stderr: str) -> None:
        problems = outcome.problems
        if "Traceback" in stderr:
            problems.append("a traceback reached the user's terminal")
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except (OSError, ValueError) as exc:
            problems.append(f"no summary: {exc}")
            summary = {}
        outcome.summary = summary
        outcome.exit_reason = summary.get("exit_reason", "")
        if summary:
            if outcome.exit_code == 0:
                if outcome.exit_reason != "steps_done":
                    problems.append(f"exit 0 with reason {outcome.exit_reason!r}")
                elif summary["transitions_produced"] != self.steps:
                    problems.append(f"produced {summary['transitions_produced']} of {self.steps} steps")
            elif not outcome.exit_reason.startswith("failed: "):
                problems.append(f"exit {outcome.exit_code} without a clear reason ({outcome.exit_reason!r})")
            if int(summary.get("transitions_consumed") or 0) < outcome.seen_steps:
                problems.append(
                    f"summary counts {summary.get('transitions_consumed')} consumed, but the trainer "
                    f"had reported {outcome.seen_steps} during the run"
                )
            if int(summary.get("transitions_consumed") or 0) > int(summary.get("transitions_produced") or 0):
                problems.append("more consumed than produced: transitions counted twice")
            try:
                off = balance(summary)
            except (KeyError, TypeError) as exc:
                problems.append(f"summary lacks a counter: {exc}")
            else:
                if off:
                    problems.append(f"summary does not balance: produced - consumed - unconsumed - drops = {off}")
        left = processes_of(outcome.run)
        if left:
            problems.append(f"{len(left)} processes left after the orchestrator exited: {left[:3]}")
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def replica_launch(run_dir: Path, name: str) -> tuple[list[str], dict[str, str]]:
    """The command and environment of the run's process ``name`` (``trainer``, ``rollout-<i>``, ``learner-<r>``,
    ``evaluator``) as its plan gives them, with the run's memory server and its password file: what a second
    process with that identity needs."""
    from drl.presets import resolve
    from orchestrator.plan import plan

    state = json.loads((run_dir / "state.json").read_text())
    cfg = resolve(json.loads((run_dir / "config.json").read_text()), "config.json")
    role, _, index = name.rpartition("-") if name[-1].isdigit() else (name, "", "0")
    workload = next(
        w
        for w in plan(
            cfg,
            run=state["run"],
            run_dir=str(run_dir),
            memory_url=state["memory_url"],
            store_url=str(run_dir.parent),
            python=sys.executable,
        )
        if w.role == ("trainer" if role == "learner" else role)
    )
    env = {**os.environ, **workload.replica_env(int(index)), "PYTHONUNBUFFERED": "1"}
    secret = run_dir / "memory.password"
    if secret.exists():
        env["DRL_MEMORY_PASSWORD_FILE"] = str(secret)
    return list(workload.command), env


def memory_server_pid(run_dir: Path) -> int | None:
    """The private server's pid as ``state.json`` names it (rewritten when the orchestrator starts it again),
    while that process lives and is the run's server (``ownership.belongs_to_run``)."""
    from orchestrator.backends.local.ownership import belongs_to_run

    try:
        pid = json.loads((run_dir / "state.json").read_text()).get("memory_pid")
    except (OSError, ValueError):
        return None
    return pid if isinstance(pid, int) and belongs_to_run(pid, run_dir) else None


def processes_of(run: str) -> list[int]:
    """Pids of live processes whose environment names the run (every service gets ``DRL_RUN``)."""
    marker = f"DRL_RUN={run}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker in (entry / "environ").read_bytes() and (entry / "stat").read_text().split()[2] != "Z":
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def describe(o: Outcome) -> str:
    s = o.summary
    kills = ", ".join(
        ("twin of " if k.fault == "twin" else "")
        + f"{k.victim}@{k.at_steps}"
        + (" (paused)" if k.paused else "")
        + ("" if k.pid else " (gone)")
        + (f" [twin exit {k.twin_exit}]" if k.twin_pid else "")
        for k in o.kills
    )
    counts = (
        f"produced {s.get('transitions_produced')} consumed {s.get('transitions_consumed')} unconsumed "
        f"{s.get('transitions_unconsumed')} drops {drops(s)} duplicates {s.get('duplicates_dropped')}"
        if s
        else "no summary"
    )
    verdict = "ok" if o.passed else "FAIL: " + "; ".join(o.problems)
    return f"{o.run}: exit {o.exit_code} {o.exit_reason!r} in {o.wall_s} s | kills {kills} | {counts} | {verdict}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fault_campaign", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--modes", default="async,sync", help="modes, taken in turn (default async,sync)")
    ap.add_argument("--victims", type=int, default=3, help="SIGKILLs per run (default 3)")
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds after which a run counts as hung")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first run; run i uses seed + i")
    ap.add_argument("--output", type=Path, help="where the runs go (default: a temporary folder)")
    ap.add_argument("--json", type=Path, help="write every run's outcome here")
    ap.add_argument(
        "--faults", default="kill", help="the faults drawn for each victim (default kill; kill,twin draws among both)"
    )
    ap.add_argument(
        "--roles",
        default=",".join(ROLES),
        help="the roles victims are drawn from (default all: trainer,rollout,evaluator,memory)",
    )
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    roles = tuple(r for r in args.roles.split(",") if r)
    if args.runs < 1 or args.victims < 0 or not modes or any(m not in ("async", "sync") for m in modes):
        ap.error("--runs must be >= 1, --victims >= 0, --modes a list of async/sync")
    if not roles or any(r not in ROLES for r in roles):
        ap.error(f"--roles must be a list of {', '.join(ROLES)}")
    faults = tuple(f for f in args.faults.split(",") if f)
    if not faults or any(f not in FAULTS for f in faults):
        ap.error(f"--faults must be a list of {', '.join(FAULTS)}")
    output = args.output or Path(tempfile.mkdtemp(prefix="drl-campaign-"))
    output.mkdir(parents=True, exist_ok=True)
    campaign = Campaign(output, args.steps, args.workers, args.victims, args.timeout, sys.executable, roles, faults)
    outcomes = []
    for i in range(args.runs):
        outcome = campaign.run_one(i, modes[i % len(modes)], args.seed + i)
        outcomes.append(outcome)
        print(describe(outcome), flush=True)
    print(report(outcomes))
    if args.json:
        args.json.write_text(json.dumps([{**asdict(o), "passed": o.passed} for o in outcomes], indent=2) + "\n")
    return 0 if all(o.passed for o in outcomes) else 1


def report(outcomes: list[Outcome]) -> str:
    rows = [
        "| mode | runs | passed | steps_done | ended with a reason | hung "
        "| kills (trainer/rollout/evaluator/memory) | twins (paused) | duplicates dropped | median wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for mode in sorted({o.mode for o in outcomes}):
        group = [o for o in outcomes if o.mode == mode]
        victims = [k.victim.split("-")[0] for o in group for k in o.kills if k.pid and k.fault == "kill"]
        twins = [k for o in group for k in o.kills if k.twin_pid]
        walls = sorted(o.wall_s for o in group)
        rows.append(
            f"| {mode} | {len(group)} | {sum(o.passed for o in group)} "
            f"| {sum(o.exit_reason == 'steps_done' for o in group)} "
            f"| {sum(o.exit_reason.startswith('failed: ') for o in group)} "
            f"| {sum(any(p.startswith('hung') for p in o.problems) for o in group)} "
            f"| {'/'.join(str(victims.count(r)) for r in ROLES)} "
            f"| {len(twins)} ({sum(k.paused for k in twins)}) "
            f"| {sum(int(o.summary.get('duplicates_dropped') or 0) for o in group)} "
            f"| {walls[len(walls) // 2]} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
