"""A run spread over five hosts (``tests.hosts.harness``): real processes, real servers, real TCP between
namespaces, and what a network does to them: a node cut off, the store unreachable, the memory host restarted,
a capped link, added latency. Each run must end with every transition accounted for once."""

from __future__ import annotations

import time

import pytest

from tests.harness import FULL_TIER, fast_config
from tests.hosts.harness import MEMORY_PORT, HostRun, assert_accounted
from tests.hosts.proxy import DelayProxy

STEPS = 6000
PROXY_PORT = 16379


def finish(run: HostRun, steps: int = STEPS, timeout: float = 300) -> dict:
    run.wait_all(timeout=timeout)
    acc = run.accounts()
    assert_accounted(acc, steps)
    return acc


@pytest.mark.parametrize("mode, capped", [pytest.param("async", False, marks=FULL_TIER), ("sync", True)])
def test_a_run_across_hosts_completes_with_every_transition_consumed(hosts, tmp_path, mode, capped):
    """The SYNC run also has node-a's link capped at 100 Mbit/s both ways (``tc tbf``), the bandwidth of a
    modest cluster network: SYNC waits for every worker's share, so a slow link is on its path. ASYNC runs across
    hosts in every suite through the fault tests below, so its plain run is in the full tier."""
    if capped:
        hosts.cap("node-a", 100)
        shown = hosts.qdisc("node-a")
        assert shown.count("tbf") == 2 and "rate 100Mbit" in shown, shown
    run = HostRun(hosts, fast_config(mode=mode, workers=4), tmp_path, run=f"across-{mode}")
    try:
        run.start_all()
        acc = finish(run)
        assert acc["consumed"] == STEPS and acc["duplicates"] == 0
        assert run.status("trainer")["exit_reason"] == "steps_done"
        assert (tmp_path / "cache-node-a").is_dir() and (tmp_path / "cache-node-b").is_dir(), (
            "each node keeps its own policy cache"
        )
        for i in range(4):
            assert float(run.status(f"rollout-{i}")["policy_sync_ms_p99"]) > 0, "no policy sync measured"
    finally:
        run.stop_all()


def produced_by(run: HostRun) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in run.client().hgetall(run.keys.produced).items()}


@pytest.mark.parametrize("mode", ["async", pytest.param("sync", marks=FULL_TIER)])
def test_a_node_cut_off_for_30s_comes_back_and_nothing_is_lost_or_counted_twice(hosts, tmp_path, mode):
    """node-b's cable pulled for 30 s mid-run. ASYNC: its workers hold what they collected (an append in flight
    waits, TCP retransmits it once the cable is back, or the client reconnects and the worker re-sends what was
    not consumed; nothing is dropped) and go on after the heal. SYNC: the trainer trains without them at the
    iteration's deadline and takes them back when they return."""
    steps = 12000
    run = HostRun(hosts, fast_config(mode=mode, workers=4, steps=steps, sync_deadline_s=8), tmp_path, run=f"cut-{mode}")
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 2000, 120, "2000 transitions consumed")
        hosts.cut("node-b")
        cut_at = produced_by(run)
        time.sleep(30)
        during = produced_by(run)
        hosts.heal("node-b")
        acc = finish(run, steps)
        after = produced_by(run)
        for worker in ("rollout-1", "rollout-3"):
            assert during.get(worker, 0) == cut_at.get(worker, 0), f"{worker} reached the memory server while cut off"
            assert after[worker] > during.get(worker, 0), f"{worker} did not come back"
        assert acc["consumed"] + sum(acc["dropped"].values()) == steps
        if mode == "sync":
            assert "training without them" in run.log_tail("trainer", 500_000)
        else:
            assert acc["consumed"] == steps, "ASYNC drops nothing"
    finally:
        run.stop_all()


def test_the_store_unreachable_for_20s_delays_publication_and_loses_nothing(hosts, tmp_path):
    run = HostRun(hosts, fast_config(workers=4, steps=12000, publish_every_updates=10), tmp_path, run="store-cut")
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 1500, 120, "1500 transitions consumed")
        hosts.cut("store")
        time.sleep(20)
        hosts.heal("store")
        acc = finish(run, 12000)
        assert acc["consumed"] == 12000
        logs = "".join(run.log_tail(name, 500_000) for name in run.procs)
        assert "S3 put" in logs or "S3 get" in logs, "the outage was never noticed: the test did not test it"
    finally:
        run.stop_all()


def test_the_memory_host_restarted_empty_mid_run_loses_nothing(hosts, tmp_path):
    """The memory host's server killed and started again without its data, as a pod without persistence: the
    trainer puts its state back, workers re-send what was not consumed, and the run's totals balance."""
    run = HostRun(hosts, fast_config(workers=4, steps=9000), tmp_path, run="memory-restart")
    try:
        run.start_all()
        run.wait_until(lambda: run.consumed() >= 2000, 120, "2000 transitions consumed")
        run.restart_memory()
        acc = finish(run, 9000)
        assert acc["consumed"] + acc["dropped"]["stale"] == 9000, acc
        status = run.status("trainer")
        assert int(status["memory_resets"]) >= 1 and status["exit_reason"] == "steps_done"
    finally:
        run.stop_all()


@pytest.mark.parametrize("rtt_ms", [pytest.param(1, marks=FULL_TIER), pytest.param(5, marks=FULL_TIER), 20])
def test_added_latency_between_the_nodes_and_memory_slows_nothing_into_loss(hosts, tmp_path, rtt_ms):
    """The nodes reach the memory server through a proxy on the bridge that holds every chunk for half of
    ``rtt_ms`` each way (``tests.hosts.proxy``); the learner host reaches it directly."""
    address = hosts.gateway
    with DelayProxy((address, PROXY_PORT), (hosts.address["memory"], MEMORY_PORT), rtt_ms) as proxy:
        run = HostRun(
            hosts,
            fast_config(workers=4, steps=6000),
            tmp_path,
            run=f"latency-{rtt_ms}",
            node_memory_url=f"redis://{address}:{PROXY_PORT}/0",
        )
        try:
            run.start_all()
            acc = finish(run)
            assert acc["consumed"] == STEPS
            assert proxy.connections >= 4, "the workers did not go through the proxy"
        finally:
            run.stop_all()
