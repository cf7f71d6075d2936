"""The benchmark report (``bench/run_all.py --from-results``) renders the committed figures: every section, no
renderer failure, the plots, and a headline that says how many seeds missed the target."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bench import run_all

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "benchmarks" / "results.json"


def test_report_renders_every_committed_section(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(COMMITTED, data / "results.json")
    doc = tmp_path / "benchmarks.md"
    assert run_all.main(["--from-results", "--doc", str(doc), "--data", str(data)]) == 0
    text = doc.read_text()
    saved = json.loads(COMMITTED.read_text())
    assert saved["results"], "no figures committed"
    for result in saved["results"]:
        assert f"## {result['title']}" in text
    assert "could not render" not in text
    assert sorted(p.name for p in data.glob("*.png")), "no plot written"


def test_time_to_score_headline_counts_the_seeds_that_missed(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    saved = json.loads(COMMITTED.read_text())
    tts = next(r for r in saved["results"] if r["name"] == "time_to_score")
    runs = [{"side": "drl", "seed": s, "reached": t is not None, "time_to_score_s": t}
            for s, t in enumerate((536.5, 146.3, None))]
    tts = {**tts, "figures": {**tts["figures"], "runs": runs, "drl_median_s": 536.5, "sb3_median_s": None}}
    (data / "results.json").write_text(json.dumps({**saved, "results": [tts]}))
    doc = tmp_path / "benchmarks.md"
    assert run_all.main(["--from-results", "--doc", str(doc), "--data", str(data)]) == 0
    assert "drl 536.5 s (median; 1 of 3 seeds missed the target)" in doc.read_text()
