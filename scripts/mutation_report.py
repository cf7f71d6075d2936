"""Kill rate per module from ``mutmut results --all true`` on stdin: killed, survived and untested mutants, and
killed over all three (a mutant no selected test reaches counts against the module, as a survivor does). Timeouts
(a mutant that made the tests hang) are shown but left out of the rate."""

from __future__ import annotations

import collections
import re
import sys

LINE = re.compile(r"\s*(\S+?)\.x[_\u01c1]\S*__mutmut_\d+: (.+)$")


def main() -> int:
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in sys.stdin:
        m = LINE.match(line)
        if m:
            counts[m.group(1)][m.group(2).strip()] += 1
    total: collections.Counter = collections.Counter()
    print(f"{'module':36} {'killed':>7} {'survived':>8} {'no tests':>8} {'timeout':>7} {'killed %':>8}")
    for module, c in sorted(counts.items()):
        total.update(c)
        print(row(module, c))
    print(row("all", total))
    return 0


def row(name: str, c: collections.Counter) -> str:
    judged = c["killed"] + c["survived"] + c["no tests"]
    return (
        f"{name:36} {c['killed']:>7} {c['survived']:>8} {c['no tests']:>8} {c['timeout']:>7} "
        f"{100 * c['killed'] / max(1, judged):>7.1f}%"
    )


if __name__ == "__main__":
    sys.exit(main())
