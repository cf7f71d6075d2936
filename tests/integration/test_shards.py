"""Whole runs whose experience travels in two streams (``--memory-shards 2``): rollout worker i appends to stream
i mod 2, the trainer reads both, and every transition is counted once, per stream and in total; a trainer
SIGKILLed mid-run resumes each stream from what its reader committed. The streams spread over two real servers
(``--memory URL_A,URL_B``) keep each shard's keys on its own server and the run's totals whole."""

from __future__ import annotations

import json
import os
import signal

import pytest
import redis

from drl.errors import UserError
from drl.memory import open_memory
from orchestrator.backends.local.common import latest_checkpoint_meta
from tests.conftest import read_summary, run_cli
from tests.faults.test_supervision import Run, _accounts_for_everything
from tests.harness import FULL_TIER, assert_balanced
from tests.integration.test_memory_contract import consume, send

SMALL = [
    "--preset",
    "sac",
    "--env",
    "Pendulum-v1",
    "--sac.hidden",
    "16,16",
    "--sac.batch-size",
    "32",
    "--eval-episodes",
    "1",
    "--learning-starts",
    "300",
    "--updates-per-transition",
    "0.25",
]


def produced_by_worker(run_dir) -> dict[str, int]:
    state = json.loads((run_dir / "state.json").read_text())
    return {p["name"]: int(p["last_status"]["produced"]) for p in state["processes"] if p["role"] == "rollout"}


def shard_counters(tmp_path, run: str) -> dict[int, dict[str, int]]:
    meta = latest_checkpoint_meta(str(tmp_path), run)
    return {int(s): part["counters"] for s, part in meta["shards"].items()}


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_a_run_over_two_shards_counts_every_transition_once_per_shard(tmp_path, mode):
    steps, run = 6000, f"shards-{mode}"
    proc = run_cli(
        [
            *SMALL,
            "--mode",
            mode,
            "--workers",
            "3",
            "--memory-shards",
            "2",
            "--steps",
            str(steps),
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = read_summary(tmp_path / run)
    assert_balanced(summary)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == steps
    assert summary["duplicates_dropped"] == 0
    produced = produced_by_worker(tmp_path / run)
    shards = shard_counters(tmp_path, run)
    assert set(shards) == {0, 1}
    assert shards[0]["consumed"] == produced["rollout-0"] + produced["rollout-2"] > 0
    assert shards[1]["consumed"] == produced["rollout-1"] > 0
    assert latest_checkpoint_meta(str(tmp_path), run)["counters"]["consumed"] == steps


def test_a_sigkilled_trainer_resumes_both_shards_from_their_committed_state(tmp_path):
    steps = 6000
    run = Run(
        tmp_path,
        "kill-trainer-shards",
        [
            "--mode",
            "async",
            "--workers",
            "3",
            "--memory-shards",
            "2",
            "--steps",
            str(steps),
            "--checkpoint-every-s",
            "1",
            "--publish-every-updates",
            "25",
        ],
    )
    run.wait_until(
        "a checkpoint and 2,000 transitions",
        lambda: run.consumed() >= 2000 and any((run.dir / "checkpoints").glob("c*/manifest.json")),
    )
    os.kill(run.pid("trainer"), signal.SIGKILL)
    summary, _ = run.finish()
    _accounts_for_everything(summary, steps)
    assert summary["restarts"]["trainer"] == 1
    assert "continuing: " in (run.dir / "logs" / "trainer.log").read_text(), "the trainer did not resume"
    shards = shard_counters(tmp_path, run.name)
    assert sum(part["consumed"] for part in shards.values()) == summary["transitions_consumed"]
    produced = produced_by_worker(run.dir)
    assert shards[1]["consumed"] == produced["rollout-1"]


@pytest.fixture
def two_servers(redis_server, redis_server_b):
    clients = [redis.Redis.from_url(s.url) for s in (redis_server, redis_server_b)]
    for client in clients:
        client.flushdb()
    yield f"{redis_server.url},{redis_server_b.url}", clients
    for client in clients:
        client.flushdb()
        client.close()


def test_shards_on_two_servers_keep_their_keys_there_and_the_runs_totals_whole(two_servers):
    """Shard 1 lives on the second server: its stream, reader state, produced counts and dead letters are there,
    none of them on the first; the control state an append reads is on both; the run's produced counts, dead
    letters, ledger and unconsumed count gather both servers."""
    urls, (a, b) = two_servers
    backend = open_memory(urls, "spread", shards=2)
    control = backend.control()
    control.register({"rollout-0": "active", "rollout-1": "active"}, {"rollout-0": 40, "rollout-1": 48})
    backend.announcements().announce(3)
    writers = {w: backend.writer(w, max_entries=10, max_bytes=1 << 20) for w in ("rollout-0", "rollout-1")}
    reply = send(writers["rollout-1"], "rollout-1", 1)
    assert (reply.policy_version, reply.stop, reply.share) == (3, False, 48), "control state mirrored to server b"
    send(writers["rollout-1"], "rollout-1", 2)
    send(writers["rollout-0"], "rollout-0", 1)
    assert b.xlen("drl:{spread}:s1:exp") == 2 and not a.exists("drl:{spread}:s1:exp")
    assert a.xlen("drl:{spread}:exp") == 1 and not b.exists("drl:{spread}:exp")
    assert b.hget("drl:{spread}:produced", "rollout-1") == b"16"
    assert a.hget("drl:{spread}:produced", "rollout-1") is None
    assert control.produced() == {"rollout-0": 8, "rollout-1": 16}
    assert control.unconsumed() == 24

    reader = backend.reader("trainer-0", shard=1)
    first, second = reader.read(10, None)
    reader.commit(
        [(first[0], 100), (second[0], 100)],
        {"consumed": 8, "seq:rollout-1": 1},
        dead=[(second[0], second[1], "undecodable", "planted")],
    )
    assert b.hget("drl:{spread}:dlq:counts", "undecodable") == b"1" and not a.exists("drl:{spread}:dlq:counts")
    assert control.dead_letters() == {"undecodable": 1}
    assert control.ledger()["consumed"] == "8" and control.unconsumed() == 8, "rollout-0's entry on server a"
    consume(backend.reader("trainer-0", shard=0), state={"consumed": 8, "seq:rollout-0": 1})
    assert control.ledger()["consumed"] == "16" and control.unconsumed() == 0

    control.mark_worker_done("rollout-1", 24)
    assert control.produced()["rollout-1"] == 24, "the done marker's count (on server a) is the higher one"
    control.request_stop("planted")
    assert send(writers["rollout-1"], "rollout-1", 3).stop
    assert control.has_data()
    control.clear()
    assert not a.keys("drl:{spread}:*") and not b.keys("drl:{spread}:*")
    backend.close()


def test_more_servers_than_shards_is_refused_in_one_line(two_servers):
    urls, _ = two_servers
    with pytest.raises(UserError, match="2 memory servers for 1 experience shard"):
        open_memory(urls, "spread")
    proc = run_cli(["--preset", "sac", "--memory", urls, "--steps", "100"], timeout=60)
    assert proc.returncode == 2 and "--memory names 2 servers for --memory-shards 1" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_a_run_with_its_shards_on_two_servers_counts_every_transition_once(tmp_path, two_servers, mode):
    urls, (a, b) = two_servers
    steps, run = 4000, f"servers-{mode}"
    proc = run_cli(
        [
            *SMALL,
            "--mode",
            mode,
            "--workers",
            "3",
            "--memory-shards",
            "2",
            "--memory",
            urls,
            "--steps",
            str(steps),
            "--output",
            str(tmp_path),
            "--run-name",
            run,
        ],
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = read_summary(tmp_path / run)
    assert_balanced(summary)
    assert summary["transitions_produced"] == summary["transitions_consumed"] == steps
    produced = produced_by_worker(tmp_path / run)
    shards = shard_counters(tmp_path, run)
    assert shards[1]["consumed"] == produced["rollout-1"] > 0
    assert int(b.hget(f"drl:{{{run}}}:s1:trainer:state", "consumed")) == produced["rollout-1"]
    assert not a.exists(f"drl:{{{run}}}:s1:trainer:state") and not b.exists(f"drl:{{{run}}}:trainer:state")


def test_the_second_server_losing_its_data_mid_run_loses_and_doubles_nothing(tmp_path, two_servers):
    """The server of shard 1 loses everything mid-run (FLUSHDB, as a restart without persistence): shard 1's
    reader resets, its workers re-send what was not consumed, the trainer puts back that server's copy of the
    control state, and the run's totals still balance with every transition counted once."""
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    urls, (a, b) = two_servers
    steps, run = 8000, "servers-loss"
    args = [
        *SMALL,
        "--mode",
        "async",
        "--workers",
        "3",
        "--memory-shards",
        "2",
        "--memory",
        urls,
        "--steps",
        str(steps),
        "--output",
        str(tmp_path),
        "--run-name",
        run,
        "--max-backlog-entries",
        "4",
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    state_key = f"drl:{{{run}}}:s1:trainer:state"
    deadline = time.monotonic() + 120
    while int(b.hget(state_key, "consumed") or 0) < 600 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the server lost its data"
    b.flushdb()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    summary = read_summary(tmp_path / run)
    assert_balanced(summary)
    assert summary["exit_reason"] == "steps_done"
    assert summary["transitions_produced"] == summary["transitions_consumed"] == steps, summary
    assert b.exists(state_key) and a.exists(f"drl:{{{run}}}:trainer:state")
    assert "memory server lost its data" in (tmp_path / run / "logs" / "trainer.log").read_text()
