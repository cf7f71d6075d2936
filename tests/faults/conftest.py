"""Every run of the fault suite must leave a summary that balances (``tests.harness.assert_balanced``): checked
after each test for every ``summary.json`` the test's runs wrote, whatever their exit reason."""

from __future__ import annotations

import json

import pytest

from tests.harness import assert_balanced


@pytest.fixture(autouse=True)
def every_summary_balances(tmp_path):
    yield
    for path in sorted(tmp_path.rglob("summary.json")):
        try:
            summary = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise AssertionError(f"{path} cannot be read: {exc}") from None
        assert_balanced(summary)
