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
FORBIDDEN_IN_ALGORITHMS = {
    "redis",
    "grpc",
    "kubernetes",
    "minio",
    "socket",
    "subprocess",
    "multiprocessing",
    "services",
    "orchestrator",
    "drl.memory",
    "drl.store",
    "torch.distributed",
}
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
    assert _violations(_python("services", "orchestrator"), {"drl.memory.redis", "tests"}) == []


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


FLOORS = (
    (
        "core",
        (
            "drl.core",
            "drl.errors",
            "drl.fields",
            "drl.device",
            "drl.envs",
            "drl.atari",
            "drl.frames",
            "drl.naming",
            "drl.process",
            "drl.status",
            "drl.tensorboard",
            "drl._proto",
        ),
    ),
    ("memory and store", ("drl.memory", "drl.store")),
    ("acting and training", ("drl.acting", "drl.training")),
    ("algorithms", ("drl.algorithms",)),
    ("config and presets", ("drl.config", "drl.presets")),
)
"""The library's floors, lowest first: a module imports its own floor and the ones below, never one above."""
BUILDERS = ("base.py", "builder.py")
"""The files of ``drl/algorithms`` that build what the services run (the ``Algorithm`` base and each
algorithm's builder): the only ones of its floor that may import the acting and training packages."""


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _floor(name: str) -> int:
    if name == "drl":
        return 0
    best, level = -1, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, level = len(prefix), i
    return level


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def _library_imports(path: Path) -> set[str]:
    """The drl modules ``path`` imports when it runs, ``from drl import x`` read as ``drl.x``. Imports under
    ``if TYPE_CHECKING:`` are left out: they name types for the checker and never run, so an algorithm may name
    the config it is given."""
    names: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text())]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names if a.name.startswith("drl.")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "drl":
                names |= {f"drl.{a.name}" for a in node.names}
            elif node.module.startswith("drl."):
                names.add(node.module)
        stack.extend(ast.iter_child_nodes(node))
    return names


def _misplaced(module: str, filename: str, imports: set[str]) -> list[str]:
    out = []
    own = _floor(module)
    for name in sorted(n for n in imports if n == "drl" or n.startswith("drl.")):
        other = _floor(name)
        if other > own:
            out.append(f"{module} ({FLOORS[own][0]}) imports {name} ({FLOORS[other][0]})")
        elif own == other == 2 and name.split(".")[1] != module.split(".")[1]:
            out.append(f"{module} imports {name}: acting and training are apart")
        elif own == 3 and other == 2 and filename not in BUILDERS:
            out.append(f"{module} imports {name}: only builders may import acting and training")
    return out


def test_each_library_floor_imports_only_its_own_and_the_ones_below():
    assert [line for p in _python("drl") for line in _misplaced(_module(p), p.name, _library_imports(p))] == []


def test_the_core_imports_nothing_of_drl():
    assert _library_imports(ROOT / "drl" / "core.py") == set()


def test_every_library_module_has_a_floor():
    assert [_module(p) for p in _python("drl") if _floor(_module(p)) < 0] == []


def test_the_floor_rule_refuses_a_learner_importing_training_and_the_core_importing_memory():
    assert _misplaced("drl.algorithms.sac.learner", "learner.py", {"drl.training.replay"})
    assert not _misplaced("drl.algorithms.sac.builder", "builder.py", {"drl.training.learning"})
    assert _misplaced("drl.frames", "frames.py", {"drl.memory.codec"})
    assert _misplaced("drl.training.ingest", "ingest.py", {"drl.acting.entries"})
    assert _misplaced("drl.memory.codec", "codec.py", {"drl.config"})
    assert not _misplaced("drl.config", "config.py", {"drl.algorithms", "drl.core"})


def test_the_floor_rule_reads_imports_that_run_and_skips_those_for_the_type_checker(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from drl.config import X\n"
        "else:\n    from drl.training import replay\n"
        "def f():\n    from drl import config\n"
    )
    assert _library_imports(module) == {"drl.training", "drl.config"}


def _longest_class(folder: str) -> tuple[int, str]:
    sizes = [
        (n.end_lineno - n.lineno + 1, f"{p.relative_to(ROOT)}:{n.name}")
        for p in _python(folder)
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.ClassDef)
    ]
    return max(sizes)


def test_one_room_per_job_sizes():
    """The sizes that keep a job in its own room: no orchestrator class over 300 lines (``LocalRun`` is made of
    parts), the trainer's shell under 250 (its logic is ``drl.training``'s), drl's top level a dozen modules at
    most besides its packages."""
    assert _longest_class("orchestrator")[0] <= 300, _longest_class("orchestrator")
    assert len((ROOT / "services" / "trainer" / "trainer.py").read_text().splitlines()) < 250
    top = sorted(p.name for p in (ROOT / "drl").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 12, top


def test_shipped_code_imports_nothing_of_the_tests():
    """The in-process memory implementation is the tests' (``tests/memory_inproc.py``): the shipped packages
    reach it only through ``drl.memory.register_scheme``."""
    assert _violations(_python(*SHIPPED), {"tests"}) == []
