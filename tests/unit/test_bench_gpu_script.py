"""``bench/gpu_pong.sh`` is run where a GPU machine is lent, for a few minutes at a time, and nowhere else: these
tests hold it to the command line it would give drl there, so that a renamed flag is found here, not in those
minutes. Its whole run is rehearsed with ``--device cpu`` (bench/README.md); here only what takes seconds."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from orchestrator.cli import deployment_options, resolve_config

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gpu_pong.sh"


def _defaults(text: str) -> dict[str, str]:
    """The script's variables as its top-level assignments set them."""
    lines = [line for line in text.splitlines() if re.match(r"[A-Z_]+=", line)]
    return {name: value.strip('"') for line in lines for name, value in re.findall(r'(\w+)=("[^"]*"|\S+)', line)}


def _drl_argv(text: str, out: str) -> list[str]:
    """The arguments the script gives ``orchestrator.cli``, its variables at their defaults."""
    command = text.split("-m orchestrator.cli", 1)[1].split(">", 1)[0].replace("\\\n", " ")
    values = {**_defaults(text), "OUTDIR": out}
    command = command.replace('"${EXTRA[@]}"', "")
    command = re.sub(r"\$(\w+)|\$\{(\w+)\}", lambda m: values[m.group(1) or m.group(2)], command)
    return shlex.split(command)


def test_the_gpu_script_gives_drl_flags_its_cli_accepts(tmp_path):
    text = SCRIPT.read_text()
    argv = _drl_argv(text, str(tmp_path))
    cfg = resolve_config(argv)
    assert cfg.preset == "appo-atari"
    assert cfg.env == "ALE/Pong-v5"
    assert cfg.device == "cuda"
    assert cfg.compile == "auto"
    assert cfg.trainer_threads == 0
    assert cfg.target_return == 18
    assert (cfg.workers, cfg.envs_per_worker) == (12, 2)
    assert cfg.output == f"{tmp_path}/runs"
    assert cfg.run_name == "pong"
    deployment_options(argv)


def test_the_gpu_script_fits_one_device_call():
    """The device tool gives a command 600 s: the run's minutes, the stop's grace and a cold venv fit in it."""
    text = SCRIPT.read_text()
    minutes = int(_defaults(text)["MINUTES"])
    kill_after = int(re.search(r"--kill-after=(\d+)", text).group(1))
    assert minutes * 60 + kill_after + 30 <= 600


def test_the_gpu_script_rehearses_on_the_cpu_and_refuses_unknown_arguments(tmp_path):
    env = {**os.environ, "VENV": str(Path(sys.executable).parents[1])}
    ran = subprocess.run(
        ["bash", str(SCRIPT), "--device", "cpu", "--minutes", "0", "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert "a rehearsal on device cpu" in (tmp_path / "report.txt").read_text()
    assert not (tmp_path / "runs").exists()
    wrong = subprocess.run(["bash", str(SCRIPT), "--minuets", "3"], capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2
    assert "unknown argument --minuets" in wrong.stderr


def test_the_gpu_script_runs_without_the_large_lag_note(tmp_path):
    from orchestrator.backends.base import policy_lag_note

    assert policy_lag_note(resolve_config(_drl_argv(SCRIPT.read_text(), str(tmp_path)))) is None
