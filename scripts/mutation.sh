#!/usr/bin/env bash
# Mutation testing of the modules whose bugs would silently lose or double-count data or mislead a user (the list
# and the tests that judge them: [tool.mutmut] in pyproject.toml). Installs mutmut into the project's venv (run
# scripts/setup.sh --test first), mutates a copy under mutants/, and prints the kill rate per module; the last
# result and the accepted survivors are in tests/README.md. About 30 minutes on 2 cores (stream.py's mutants are
# judged against a real server).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/python ]]; then
    echo "mutation.sh: no .venv here; run: bash scripts/setup.sh --test" >&2
    exit 2
fi
.venv/bin/python -m pip install --quiet "mutmut>=3.8,<4"
rm -rf mutants
.venv/bin/mutmut run >/dev/null 2>&1 || true
.venv/bin/mutmut results --all true | .venv/bin/python scripts/mutation_report.py
