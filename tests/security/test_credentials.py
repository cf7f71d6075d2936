"""Credentials never leak: a tiny real run with a password-protected Valkey and an S3 store whose secret key is
distinctive; neither secret may appear in any process's arguments while it runs, in any file of the run folder
(logs, summary.json, state.json, config.json), in any object the run wrote to the store, or in any rendered
Kubernetes object other than the Secret meant to hold them. The scanners are checked to find a planted secret,
so a leak would fail this test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from drl.store import run_store
from tests.conftest import ROOT, processes_mentioning, read_summary, run_cli
from tests.memory_servers import password_server, started


def argv_leaks(secrets: list[str]) -> dict[int, str]:
    """pid -> command line of every process on this machine whose arguments hold one of the secrets."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(s.encode() in cmdline for s in secrets):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def run_pids(run: str) -> dict[int, str]:
    """pid -> command line and name (a service forked by the local backend's fork server shows the server's
    command line and its own name, ``drl-<replica>``) of the processes of a run (their environment names it)."""
    pids = {}
    for line in processes_mentioning(f"DRL_RUN={run}"):
        pid, _, cmdline = line.partition(": ")
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        pids[int(pid)] = f"{cmdline} [{name}]"
    return pids


def file_leaks(root: Path, secrets: list[str]) -> list[str]:
    """Files under root (recursively, binary files too) that hold one of the secrets."""
    return [
        str(p) for p in sorted(root.rglob("*")) if p.is_file() and any(s.encode() in p.read_bytes() for s in secrets)
    ]


def object_leaks(objects: list[dict], secrets: list[str], allowed_kinds=("Secret",)) -> list[str]:
    """Kubernetes objects, other than those of ``allowed_kinds``, whose YAML holds one of the secrets."""
    return [
        f"{o.get('kind')}/{o.get('metadata', {}).get('name')}"
        for o in objects
        if o.get("kind") not in allowed_kinds and any(s in yaml.safe_dump(o) for s in secrets)
    ]


@pytest.fixture
def secrets():
    return {"password": f"pw-{uuid.uuid4().hex}", "s3": f"s3secret-{uuid.uuid4().hex}"}


def test_secrets_stay_out_of_argv_files_store_and_configmaps(tmp_path, s3_server, secrets, monkeypatch):
    run = "secret-run"
    bucket = f"drl-{uuid.uuid4().hex[:8]}"
    store_url = f"s3://{bucket}/drl"
    values = list(secrets.values())
    env = {
        **s3_server.env,
        "AWS_SECRET_ACCESS_KEY": secrets["s3"],
        "DRL_MEMORY_PASSWORD": secrets["password"],
        "DRL_CACHE_DIR": str(tmp_path / "cache"),
    }
    with started(password_server(tmp_path / "valkey", secrets["password"])) as server:
        args = [
            "--workers",
            "1",
            "--steps",
            "300",
            "--random-steps",
            "300",
            "--learning-starts",
            "200",
            "--eval-episodes",
            "1",
            "--memory",
            server.url,
            "--store",
            store_url,
            "--output",
            str(tmp_path / "runs"),
            "--run-name",
            run,
        ]
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen: dict[int, str] = {}
        leaked: dict[int, str] = {}
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            seen.update(run_pids(run))
            leaked.update(argv_leaks(values))
            time.sleep(0.05)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert server.client().exists(f"drl:{{{run}}}:policy"), "the run did not use the password-protected server"

    assert not leaked, f"secrets in process arguments: {leaked}"
    roles = " ".join(seen.values())
    for role in ("trainer", "rollout", "evaluator"):
        assert f"services.{role}" in roles or f"[drl-{role}" in roles, f"the argv scan never saw the {role}: {seen}"
    assert not any(s in out + err for s in values), "a secret was printed by drl-orchestrate"

    run_dir = tmp_path / "runs" / run
    summary = read_summary(run_dir)
    assert summary["exit_reason"] == "steps_done", summary
    for name in ("summary.json", "state.json", "config.json"):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "logs").glob("*.log")), "no logs were written"
    assert not file_leaks(run_dir, values)

    for key, value in {**s3_server.env, "AWS_SECRET_ACCESS_KEY": secrets["s3"]}.items():
        monkeypatch.setenv(key, value)
    store = run_store(store_url, run)
    keys = store.list("")
    assert "config.json" in keys and "evaluations.jsonl" in keys, keys
    assert not [k for k in keys if any(s.encode() in store.get(k) for s in values)]

    rendered = run_cli(
        [
            "render",
            "--memory",
            "redis://drl-valkey:6379/0",
            "--store",
            store_url,
            "--workers",
            "1",
            "--steps",
            "300",
            "--run-name",
            run,
        ],
        timeout=120,
        env=env,
    )
    assert rendered.returncode == 0, rendered.stderr
    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    secret_objects = [o for o in objects if o.get("kind") == "Secret"]
    assert any(secrets["password"] in yaml.safe_dump(o) for o in secret_objects), "the password never reached render"
    assert [o for o in objects if o.get("kind") == "ConfigMap"], "render made no ConfigMap to check"
    assert not object_leaks(objects, values)


def test_the_scanners_find_a_planted_secret(tmp_path, secrets):
    """The checks above would fail on a leak: each scanner finds a secret planted where it looks."""
    values = list(secrets.values())
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    (logs / "trainer.log").write_text("connected\n")
    (tmp_path / "run" / "state.json").write_text('{"memory_url": "redis://127.0.0.1:1/0"}')
    assert not file_leaks(tmp_path / "run", values)
    (tmp_path / "run" / "state.json").write_text(f'{{"memory_url": "redis://:{secrets["password"]}@127.0.0.1:1/0"}}')
    assert file_leaks(tmp_path / "run", values) == [str(tmp_path / "run" / "state.json")]

    config_map = {"kind": "ConfigMap", "metadata": {"name": "drl-x"}, "data": {"config.json": "{}"}}
    secret = {"kind": "Secret", "metadata": {"name": "drl-x"}, "stringData": {"s3-secret-key": secrets["s3"]}}
    assert not object_leaks([config_map, secret], values)
    config_map["data"]["DRL_STORE"] = f"s3://key:{secrets['s3']}@bucket/x"
    assert object_leaks([config_map, secret], values) == ["ConfigMap/drl-x"]

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", secrets["password"]])
    try:
        deadline = time.monotonic() + 5  # the child's command line shows once its exec completed
        while child.pid not in argv_leaks(values) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.pid in argv_leaks(values)
    finally:
        child.kill()
        child.wait()
