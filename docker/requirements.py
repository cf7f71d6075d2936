"""Prints the requirements of the project (``pyproject.toml`` in the working directory) and of the optional groups
named in its argument (comma-separated; a group's references to the project's own groups, ``drl[...]``, are
followed), one per line.

The image installs them in a layer of their own before the project's code is copied, and the project itself without
dependencies and without an index after it: a change to the code installs only the project again, and a requirement
this script left out fails the build's import check instead of being fetched unseen.
"""

from __future__ import annotations

import re
import sys
import tomllib


def requirements(project: dict, extras: str) -> list[str]:
    groups = project.get("optional-dependencies", {})
    own = re.compile(rf"{re.escape(project['name'])}\[([^\]]+)\]")
    out, seen = list(project.get("dependencies", [])), set()
    wanted = [e.strip() for e in extras.split(",") if e.strip()]
    while wanted:
        group = wanted.pop(0)
        if group in seen:
            continue
        if group not in groups:
            raise SystemExit(
                f"docker/requirements.py: pyproject.toml has no optional dependency group {group!r} "
                f"(it has: {', '.join(sorted(groups)) or 'none'})"
            )
        seen.add(group)
        for requirement in groups[group]:
            found = own.fullmatch(requirement.replace(" ", ""))
            if found:
                wanted += found.group(1).split(",")
            elif requirement not in out:
                out.append(requirement)
    return out


if __name__ == "__main__":
    with open("pyproject.toml", "rb") as f:
        print("\n".join(requirements(tomllib.load(f)["project"], sys.argv[1] if len(sys.argv) > 1 else "")))
