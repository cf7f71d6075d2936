"""The hosts tier: every test here places a run's parts on network namespaces (``tests.hosts.netns``); where
namespaces cannot be made (not root, no iproute2) the whole tier is skipped with that one reason."""

from __future__ import annotations

import pytest

from tests.hosts.harness import HOSTS
from tests.hosts.netns import REASON, Hosts


def pytest_collection_modifyitems(items):
    if REASON:
        for item in items:
            if "tests/hosts/" in str(item.fspath):
                item.add_marker(pytest.mark.skip(reason=f"hosts tier: {REASON}"))


@pytest.fixture
def hosts():
    with Hosts(HOSTS) as made:
        yield made
