"""An environment of your own in an image of your own: ``examples/custom_env/Containerfile`` builds FROM this
tree's drl image (``DRL_IMAGE``) and pip-installs the example env's package, as docs/custom-envs.md tells a user
to. A run with ``--env point_env:MyPoint-v0`` then trains, evaluates and scores in a container of that image
(the pods' user, a read-only root, no network), where the module is importable in every process without any
PYTHONPATH."""

from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from tests.conftest import ROOT
from tests.containers.conftest import BUILD_TIMEOUT_S, IMAGE_SH
from tests.containers.node import AS_A_POD

EXAMPLE = ROOT / "examples" / "custom_env"
TARGET = -8.0
"""As tests/integration/test_custom_env.py: a random policy scores about -25."""


@pytest.fixture(scope="module")
def derived(podman, images) -> str:
    """The derived image, tagged by the drl image it is built on and the example's files (built when missing)."""
    digest = hashlib.sha256(images.drl.encode())
    for name in ("Containerfile", "pyproject.toml", "point_env.py"):
        digest.update((EXAMPLE / name).read_bytes())
    tag = f"localhost/drl-point-env:{digest.hexdigest()[:12]}"
    done = subprocess.run(
        [
            "bash",
            str(IMAGE_SH),
            "--engine",
            "podman",
            "--if-missing",
            "--file",
            str(EXAMPLE / "Containerfile"),
            "--context",
            str(EXAMPLE),
            "--tag",
            tag,
            "--build-arg",
            f"DRL_IMAGE={images.drl}",
        ],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        cwd=ROOT,
        env=podman.env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return tag


def test_the_example_env_trains_and_is_scored_in_an_image_built_from_drls(podman, derived):
    train = (
        "drl-orchestrate --preset sac --env point_env:MyPoint-v0 --mode async --workers 1 --steps 3000 "
        "--sac.hidden 32,32 --sac.lr 1e-3 --random-steps 500 --learning-starts 500 --eval-episodes 5 "
        "--output /tmp/runs --run-name point"
    )
    score = "drl-orchestrate evaluate --run point --output /tmp/runs --episodes 3"
    ran = podman(
        "run",
        *AS_A_POD,
        "--tmpfs",
        "/tmp:rw,mode=1777",
        "--env",
        "PYTHONPATH=",
        derived,
        "sh",
        "-c",
        f"{train} && {score}",
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    summary, scored = (json.loads(line) for line in ran.stdout.strip().splitlines()[-2:])
    assert summary["exit_reason"] == "steps_done" and summary["env_steps"] == 3000, summary
    assert summary["transitions_produced"] == summary["transitions_consumed"], summary
    assert summary["best_eval_return"] >= TARGET, f"did not learn in the image: {summary}"
    assert scored["env"] == "point_env:MyPoint-v0" and scored["episodes"] == 3, scored
