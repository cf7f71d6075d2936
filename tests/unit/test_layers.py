"""Layer rules: who may import what. Algorithms are pure math; services are thin shells over the library and call
the memory backend, the data store and the algorithms only through their interfaces; only the Redis implementation
talks Redis and only the Kubernetes backend talks Kubernetes; nothing reads untrusted data with pickle.

Every import counts, at the top of a module or inside a function."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ("drl", "services", "orchestrator")
FORBIDDEN_IN_ALGORITHMS = {"redis", "grpc", "kubernetes", "minio", "socket", "subprocess", "multiprocessing",
                           "services", "orchestrator", "drl.memory", "drl.store", "torch.distributed"}
NEVER = {"pickle", "cloudpickle", "dill", "marshal", "shelve"}
SERVICES = ("trainer", "rollout", "evaluator")
REDIS_IMPLEMENTATION = ROOT / "drl" / "memory" / "redis"
KUBERNETES_BACKEND = ROOT / "orchestrator" / "backends" / "kubernetes"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _python(*folders: str) -> list[Path]:
    return sorted(p for d in folders for p in (ROOT / d).rglob("*.py") if "_proto" not in p.parts)


def _violations(paths, forbidden, exempt: Path | None = None) -> list[str]:
    out = []
    for path in paths:
        if exempt is not None and exempt in path.parents:
            continue
        for name in _imports(path):
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                out.append(f"{path.relative_to(ROOT)} imports {name}")
    return out


def test_algorithms_import_no_process_network_or_storage_code():
    files = _python("drl/algorithms")
    assert files
    assert _violations(files, FORBIDDEN_IN_ALGORITHMS) == []


def test_the_library_imports_no_service_and_no_orchestrator():
    assert _violations(_python("drl"), {"services", "orchestrator"}) == []


def test_services_import_no_orchestrator():
    assert _violations(_python("services"), {"orchestrator"}) == []


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_no_other_service(service):
    others = {f"services.{name}" for name in SERVICES if name != service}
    files = _python(f"services/{service}")
    assert files
    assert _violations(files, others) == []


def test_only_the_redis_implementation_imports_redis():
    assert _violations(_python(*SHIPPED), {"redis"}, exempt=REDIS_IMPLEMENTATION) == []


def test_services_and_the_orchestrator_use_the_memory_protocols_not_the_redis_implementation():
    assert _violations(_python("services", "orchestrator"), {"drl.memory.redis", "drl.memory.inproc"}) == []


def test_only_the_kubernetes_backend_imports_kubernetes():
    assert _violations(_python(*SHIPPED), {"kubernetes"}, exempt=KUBERNETES_BACKEND) == []


def test_the_rules_see_imports_inside_functions(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    import redis\n    from kubernetes import client\n")
    assert _imports(module) == {"redis", "kubernetes"}


def test_no_pickle_anywhere_in_shipped_code():
    files = _python(*SHIPPED)
    assert _violations(files, NEVER) == []
    for path in files:
        text = path.read_text()
        assert "torch.load(" not in text, f"{path}: torch.load unpickles; weights travel as safetensors"
