"""Environment ids a default install cannot make: the message says which package provides their family."""

from __future__ import annotations

import sys

import pytest

from drl.envs import check_env_id
from drl.errors import UserError


@pytest.mark.parametrize(
    "env_id, module, install",
    [
        ("ALE/Pong-v5", "ale_py", "pip install 'drl[atari]'"),
        ("MinAtar/Breakout-v1", "minatar", "pip install 'drl[atari]'"),
        ("Humanoid-v9", "mujoco", "pip install 'gymnasium[mujoco]'"),
    ],
)
def test_an_id_of_a_family_that_is_not_installed_names_its_package(monkeypatch, env_id, module, install):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed, whatever this machine has
    with pytest.raises(UserError) as error:
        check_env_id(env_id)
    message = str(error.value)
    assert message.startswith(f"unknown environment id {env_id!r}") and install in message, message
    assert "\n" not in message


def test_a_typo_in_an_installed_family_suggests_close_ids_only():
    with pytest.raises(UserError) as error:
        check_env_id("Humanoid-v9")
    assert "did you mean Humanoid-v5" in str(error.value) and "pip install" not in str(error.value)
    check_env_id("Pendulum-v1")
