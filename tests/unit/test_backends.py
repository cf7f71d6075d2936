"""The orchestrator backend interface: both backends have every verb, the command line dispatches by lookup, and
a verb a backend cannot do is one line saying what to do instead."""

from __future__ import annotations

import inspect

import pytest

from drl.config import ExperimentConfig
from drl.errors import UserError
from orchestrator.backends import BACKENDS, Deployment
from orchestrator.backends.base import Backend
from orchestrator.cli import main

VERBS = ("check", "run", "render", "status", "stop", "scale", "delete")


def test_both_backends_implement_every_verb_of_the_protocol():
    assert set(BACKENDS) == {"local", "kubernetes"}
    protocol = {n for n, _ in inspect.getmembers(Backend, inspect.isfunction) if not n.startswith("_")}
    assert protocol == set(VERBS)
    for name, backend in BACKENDS.items():
        assert backend.name == name
        for verb in VERBS:
            ours = inspect.signature(getattr(type(backend), verb))
            assert list(ours.parameters) == list(inspect.signature(getattr(Backend, verb)).parameters), (name, verb)


@pytest.mark.parametrize(
    "backend, call, expected",
    [
        (
            "local",
            lambda b: b.render(ExperimentConfig(), Deployment()),
            "render prints Kubernetes manifests; --backend local has none",
        ),
        ("local", lambda b: b.delete("r1", Deployment()), "a local run's files stay in its folder in --output"),
        ("local", lambda b: b.check(Deployment(image="drl:2")), "--image applies to --backend kubernetes only"),
        (
            "kubernetes",
            lambda b: b.stop("r1", Deployment(namespace="ns"), 60.0),
            "drl-orchestrate delete r1 --namespace ns",
        ),
        ("kubernetes", lambda b: b.check(Deployment(output="runs")), "--output applies to local runs"),
        ("kubernetes", lambda b: b.check(Deployment(), resume=True), "--resume applies to local runs"),
        ("kubernetes", lambda b: b.status(None, Deployment()), "needs the run's name"),
    ],
)
def test_what_a_backend_cannot_do_is_one_clear_user_error(backend, call, expected):
    with pytest.raises(UserError) as error:
        call(BACKENDS[backend])
    assert expected in str(error.value) and "\n" not in str(error.value)


class FakeBackend:
    """Records the verbs the command line calls, with their arguments."""

    def __init__(self, name: str):
        self.name = name
        self.calls: list[tuple] = []

    def check(self, deployment, resume=False):
        self.calls.append(("check", deployment, resume))

    def run(self, cfg, deployment, resume=False):
        self.calls.append(("run", cfg.workers, deployment, resume))
        return 0

    def render(self, cfg, deployment):
        self.calls.append(("render", cfg.run_name, deployment))
        return "---\n"

    def status(self, run, deployment):
        self.calls.append(("status", run, deployment))
        return 0

    def stop(self, run, deployment, timeout):
        self.calls.append(("stop", run, deployment, timeout))
        return 0

    def scale(self, run, workers, deployment, timeout):
        self.calls.append(("scale", run, workers, deployment, timeout))
        return 0

    def delete(self, run, deployment):
        self.calls.append(("delete", run, deployment))
        return 0


@pytest.fixture
def fakes(monkeypatch):
    fakes = {name: FakeBackend(name) for name in BACKENDS}
    monkeypatch.setattr("orchestrator.cli.BACKENDS", fakes)
    return fakes


def cli(argv) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code


@pytest.mark.parametrize(
    "argv, backend, call",
    [
        (["status"], "local", ("status", None, Deployment())),
        (["status", "r1", "--output", "out"], "local", ("status", "r1", Deployment(output="out"))),
        (["status", "r1", "--namespace", "ns"], "kubernetes", ("status", "r1", Deployment(namespace="ns"))),
        (
            ["status", "r1", "--namespace", "ns", "--backend", "local"],
            "local",
            ("status", "r1", Deployment(backend="local", namespace="ns")),
        ),
        (["stop", "r1", "--timeout", "9"], "local", ("stop", "r1", Deployment(), 9.0)),
        (["stop", "r1", "--namespace", "ns"], "kubernetes", ("stop", "r1", Deployment(namespace="ns"), 300.0)),
        (["scale", "r1", "--workers", "3"], "local", ("scale", "r1", 3, Deployment(), 120.0)),
        (
            ["scale", "r1", "--workers", "3", "--backend", "kubernetes"],
            "kubernetes",
            ("scale", "r1", 3, Deployment(backend="kubernetes"), 120.0),
        ),
        (["delete", "r1"], "kubernetes", ("delete", "r1", Deployment())),
        (["delete", "r1", "--backend", "local"], "local", ("delete", "r1", Deployment(backend="local"))),
        (["--workers", "3", "--steps", "3000", "--detach"], "local", ("run", 3, Deployment(detach=True), False)),
        (
            ["--workers", "3", "--steps", "3000", "--namespace", "ns"],
            "local",
            ("run", 3, Deployment(namespace="ns"), False),
        ),
        (
            ["--workers", "3", "--steps", "3000", "--backend", "kubernetes"],
            "kubernetes",
            ("run", 3, Deployment(backend="kubernetes"), False),
        ),
        (["render", "--run-name", "x"], "kubernetes", ("render", "x", Deployment())),
    ],
)
def test_cli_dispatches_each_verb_to_the_fake_backend_by_lookup(fakes, argv, backend, call):
    assert cli(argv) == 0
    other = next(name for name in fakes if name != backend)
    assert fakes[other].calls == []
    checked, called = fakes[backend].calls
    assert checked[0] == "check" and called == call
