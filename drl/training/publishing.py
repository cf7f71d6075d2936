"""The policy versions a learner publishes.

Every learner of a group counts the versions, so that all agree on the current one; learner 0 alone writes them to
the data store (``PolicyStore``: tensors first, manifest last) and announces them, and keeps the newest
``keep`` of them. A version is published only when the learner changed since the last one, unless forced.
A version announced to a memory server that lost its data would point workers at a position the server no longer
holds, so then the lost state is put back (``reset``) with the version instead of a bare announcement.
"""

from __future__ import annotations

import logging
from typing import Callable

from drl.envs import SpaceSpec
from drl.memory import Announcements
from drl.store import PolicyStore

log = logging.getLogger("drl.trainer")


class Publisher:
    def __init__(
        self,
        policies: PolicyStore,
        announcer: Announcements,
        learning,
        spec: SpaceSpec,
        algorithm: str,
        rank: int,
        keep: int,
        env_steps: Callable[[], int],
        lost: Callable[[], bool],
        reset: Callable[[int], None],
    ):
        self.policies, self.announcer, self.learning, self.spec = policies, announcer, learning, spec
        self.algorithm, self.rank, self.keep = algorithm, rank, keep
        self.env_steps, self.lost, self.reset = env_steps, lost, reset
        self.version = self.published_updates = -1

    @property
    def version(self) -> int:
        """The newest published policy version, which the learning measures policy lag against."""
        return self._version

    @version.setter
    def version(self, value: int) -> None:
        self._version = self.learning.policy_version = value

    @property
    def updates(self) -> int:
        return self.learning.learner.updates

    def publish(self, force: bool = False) -> bool:
        """Publishes the learner's policy as the next version unless nothing changed since the last one; whether
        it did."""
        if not force and self.updates == self.published_updates:
            return False
        version = self.version + 1
        if self.rank == 0:
            self.write(version)
        self.version, self.published_updates = version, self.updates
        if self.rank == 0:
            self.policies.retain(self.keep)
        return True

    def write(self, version: int) -> None:
        self.policies.publish(
            version,
            self.learning.learner.policy_weights(),
            algorithm=self.algorithm,
            env_steps=self.env_steps(),
            updates=self.updates,
            observation_space=self.spec.observation_space,
            action_space=self.spec.action_space,
        )
        if self.lost():
            self.reset(version)
            return
        self.announcer.announce(version)

    def keep_published(self) -> bool:
        """SYNC: the workers wait for the current version; if it is gone from the store, publishes it again, so
        that they load it instead of failing: the same version (same weights) when the learner has not changed
        since it published it, else the next version. Returns True when the version changed."""
        if self.rank != 0 or self.version < 0 or self.policies.present(self.version):
            return False
        if self.updates == self.published_updates:
            log.warning("policy version %d is missing from the store; publishing it again", self.version)
            self.write(self.version)
            return False
        log.warning(
            "policy version %d is missing from the store; publishing version %d", self.version, self.version + 1
        )
        return self.publish(force=True)
