"""The image the tier runs is this tree's: what it installed of the project is the code here, file for file."""

from __future__ import annotations

import hashlib
import json

from tests.conftest import ROOT
from tests.containers.node import AS_A_POD

PACKAGES = ("drl", "services", "orchestrator")
DIGESTS = """
import hashlib, importlib, json, pathlib
out = {}
for name in %r:
    root = pathlib.Path(importlib.import_module(name).__file__).parent.parent
    for path in sorted(root.joinpath(name).rglob("*.py")):
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
print(json.dumps(out))
""" % (PACKAGES,)


def tree_digests() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): hashlib.sha256(path.read_bytes()).hexdigest()
        for name in PACKAGES
        for path in sorted((ROOT / name).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def test_the_image_under_this_trees_tag_runs_this_trees_code(podman, images):
    """A build cache that kept an older layer (a RUN keyed by its text only) would leave the image under this
    tree's content tag with older code: every Python file of the project in the image is the one here."""
    ran = podman(
        "run",
        *AS_A_POD,
        images.drl,
        "python",
        "-I",
        "-c",
        DIGESTS,
        timeout=120,
    )
    inside, here = json.loads(ran.stdout), tree_digests()
    assert inside.keys() == here.keys(), (sorted(inside.keys() - here.keys()), sorted(here.keys() - inside.keys()))
    differ = sorted(path for path in here if inside[path] != here[path])
    assert not differ, f"the image's copies of these files are not this tree's: {differ}"
