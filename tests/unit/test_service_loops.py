"""The service loops themselves, trainer, rollout workers and evaluator, run as threads of this process against the
in-process memory backend (``memory://``, ``tests/memory_inproc.py``): fast, and a proof that the services need nothing
of the memory server beyond the protocols of ``drl.memory.base``. The same loops run as processes against a real
Valkey in ``tests/integration``."""

from __future__ import annotations

import threading
import uuid

import pytest

from drl.algorithms.dqn.config import DQNConfig
from drl.algorithms.ppo.config import PPOConfig
from drl.memory import open_memory
from services.common import ServiceContext
from services.evaluator.evaluator import Evaluator
from services.rollout.worker import RolloutWorker
from services.trainer.trainer import Trainer
from tests import memory_inproc as inproc
from tests.harness import fast_config

LOOP_TIMEOUT_S = 240


class Run:
    """One run's services as threads; an exception in any of them fails the test with its traceback."""

    def __init__(self, cfg, tmp_path):
        self.cfg, self.run = cfg.validate(), "loops"
        self.name = f"loops-{uuid.uuid4().hex[:8]}"
        self.url = f"memory://{self.name}"
        self.tmp_path = tmp_path
        self.errors: list[BaseException] = []

    def ctx(self, role: str, index: int = 0) -> ServiceContext:
        return ServiceContext(role, self.cfg, self.run, self.tmp_path, self.url, str(self.tmp_path / "store"), index)

    def go(self) -> dict:
        trainer = Trainer(self.ctx("trainer"))
        services = [
            trainer,
            *(RolloutWorker(self.ctx("rollout", i)) for i in range(self.cfg.workers)),
            Evaluator(self.ctx("evaluator")),
        ]
        threads = [threading.Thread(target=self._guard, args=(s.run,), daemon=True) for s in services]
        for t in threads:
            t.start()
        for t in threads:
            t.join(LOOP_TIMEOUT_S)
        if self.errors:
            raise self.errors[0]
        assert not any(t.is_alive() for t in threads), "a service loop did not end"
        control = open_memory(self.url, self.run).control()
        try:
            return {
                "trainer": trainer,
                "produced": sum(control.produced().values()),
                "status": control.status("trainer"),
                "unconsumed": control.unconsumed(),
                "done": control.workers_done(),
                "evaluator": control.status("evaluator"),
                "trainer_done": control.trainer_done(),
            }
        finally:
            inproc.discard(self.name)

    def _guard(self, body) -> None:
        try:
            assert body() == 0
        except BaseException as exc:  # handed to the test's thread
            self.errors.append(exc)


def _balanced(result: dict, steps: int) -> None:
    ledger = result["trainer"].ledger
    assert result["produced"] == steps
    assert ledger.consumed + ledger.stale == steps and result["unconsumed"] == 0
    assert ledger.duplicates == 0 and ledger.dead_letters == 0
    assert result["status"]["state"] == "finished" and result["status"]["exit_reason"] == "steps_done"
    assert sum(result["done"].values()) == steps


def test_an_async_sac_run_of_threads_consumes_every_transition_once(tmp_path):
    cfg = fast_config(workers=2, steps=3000, random_steps=500, learning_starts=300, updates_per_transition=0.05)
    result = Run(cfg, tmp_path).go()
    _balanced(result, 3000)
    trainer = result["trainer"]
    assert trainer.updates > 0 and trainer.version >= 1 and trainer.learning.size() == 3000
    assert result["trainer_done"] == trainer.version
    assert int(result["evaluator"]["policy_version"]) == trainer.version, "the evaluator missed the last version"


def test_a_sync_ppo_run_of_threads_trains_once_per_iteration(tmp_path):
    cfg = fast_config(
        algorithm="ppo",
        env="CartPole-v1",
        mode="sync",
        workers=2,
        steps=2048,
        random_steps=0,
        learning_starts=0,
        sync_steps_per_iteration=512,
        envs_per_worker=2,
        ppo=PPOConfig(hidden=(16, 16), epochs=2, minibatches=2),
    )
    result = Run(cfg, tmp_path).go()
    _balanced(result, 2048)
    trainer = result["trainer"]
    assert trainer.version == 2048 // 512 and trainer.updates == (2048 // 512) * 2 * 2
    assert result["trainer"].learning.size() == 0


def test_an_async_dqn_run_folds_n_steps_and_sends_worker_priorities(tmp_path):
    cfg = fast_config(
        algorithm="dqn",
        env="CartPole-v1",
        workers=2,
        steps=3000,
        random_steps=300,
        learning_starts=300,
        updates_per_transition=0.05,
        prioritized=True,
        worker_priorities=True,
        envs_per_worker=2,
        dqn=DQNConfig(hidden=(16, 16), batch_size=32, n_step=3),
    )
    result = Run(cfg, tmp_path).go()
    _balanced(result, 3000)
    replay = result["trainer"].learning.replay
    stored = replay.data["nsteps"][: len(replay)]
    assert set(stored.tolist()) <= {1.0, 2.0, 3.0} and (stored == 3.0).mean() > 0.5
    assert replay.max_priority != 1.0, "no worker priority reached the replay"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stop_request_ends_the_loops_with_everything_sent_consumed(tmp_path, mode):
    cfg = fast_config(workers=2, steps=10**6, mode=mode, random_steps=10**6, learning_starts=10**6)
    run = Run(cfg, tmp_path)
    control = open_memory(run.url, run.run).control()
    timer = threading.Timer(3.0, lambda: control.request_stop("stopped"))
    timer.start()
    try:
        result = run.go()
    finally:
        timer.cancel()
    ledger = result["trainer"].ledger
    assert result["status"]["exit_reason"] == "stopped"
    assert 0 < result["produced"] < 10**6
    assert result["produced"] == ledger.consumed + ledger.stale + result["unconsumed"]
