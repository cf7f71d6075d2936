"""Layer rules: algorithms are pure math; nothing reads untrusted data with pickle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN_IN_ALGORITHMS = {"redis", "grpc", "kubernetes", "minio", "socket", "subprocess", "multiprocessing",
                           "services", "orchestrator", "drl.memory", "drl.store"}
NEVER = {"pickle", "cloudpickle", "dill", "marshal", "shelve"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _violations(paths, forbidden):
    out = []
    for path in paths:
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {name}")
    return out


def test_algorithms_import_no_process_network_or_storage_code():
    files = sorted((ROOT / "drl" / "algorithms").rglob("*.py"))
    assert files
    assert _violations(files, FORBIDDEN_IN_ALGORITHMS) == []


def test_no_pickle_anywhere_in_shipped_code():
    files = [p for d in ("drl", "services", "orchestrator") for p in (ROOT / d).rglob("*.py")]
    assert _violations(files, NEVER) == []
    for path in files:
        text = path.read_text()
        assert "torch.load(" not in text, f"{path}: torch.load unpickles; weights travel as safetensors"
