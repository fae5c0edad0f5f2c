"""eval.issue_code_bench on a fixture mirror: the issue's code replayed with the gold patch and with
each prediction (real sandbox, real git, real patches), split by the harness's `resolved`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.issue_code_bench import main
from tests.helpers.testrun_helpers import local_config, make_repo
from tests.scoring.test_replay import (
    FILES,
    GOOD_AREA,
    GOOD_SCALE,
    ISSUE_CLEAN,
    ISSUE_CRASH,
    NOT_A_FIX,
    OTHER_CRASH,
    REPO,
    _patch,
    sandboxed,
)

RAISES_OTHERWISE = _patch(FILES["shapes/core.py"], FILES["shapes/core.py"].replace(
    'raise ValueError("negative side")', 'raise ValueError("sides must not be negative")'))


@pytest.mark.slow
@sandboxed
def test_the_bench_splits_each_verdict_by_resolved_and_checks_the_gold_patch(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, commit = make_repo(tmp_path, FILES, repo=REPO)
    crash, clean = "fixture__shapes-1", "fixture__shapes-2"
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text("".join(json.dumps(row) + "\n" for row in (
        {"instance_id": crash, "repo": REPO, "base_commit": commit, "problem_statement": ISSUE_CRASH, "patch": GOOD_AREA},
        {"instance_id": clean, "repo": REPO, "base_commit": commit, "problem_statement": ISSUE_CLEAN,
         "patch": GOOD_SCALE})))
    preds = tmp_path / "preds.jsonl"
    rows = [(crash, GOOD_AREA, True), (crash, RAISES_OTHERWISE, False), (crash, NOT_A_FIX, False),
            (crash, OTHER_CRASH, False), (crash, "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n"
                                                "@@ -1 +1 @@\n-a\n+b\n", False),
            (clean, GOOD_SCALE, True)]
    preds.write_text("".join(json.dumps({"instance_id": iid, "system": f"agent{n}", "model_patch": patch,
                                         "resolved": resolved}) + "\n"
                             for n, (iid, patch, resolved) in enumerate(rows)))
    config = local_config(tmp_path)
    out_rows = tmp_path / "rows.jsonl"
    args = ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
            "--config", str(config), "-o", str(out_rows)]
    assert main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    recs = {(r["system"], r["instance_id"]): r for r in map(json.loads, out_rows.read_text().splitlines())}
    assert {k: r["verdict"] for k, r in recs.items() if k[1] == crash} == {
        ("gold", crash): "passes", ("agent0", crash): "passes", ("agent1", crash): "fails",
        ("agent2", crash): "unsafe", ("agent3", crash): "unsafe", ("agent4", crash): "not run"}
    assert recs[("agent2", crash)]["kinds"] == ["persists"] and recs[("agent3", crash)]["kinds"] == ["changed"]
    assert "does not apply" in recs[("agent4", crash)]["note"]
    # The clean issue reproduces nothing: no verdict, and it is not counted below.
    assert recs[("agent5", clean)]["verdict"] == "not run" and recs[("agent5", clean)]["crashes"] == 0
    assert out[0].startswith("instances: 2; the issue's code raised the crash the issue reports at the base in 1")
    table = {line.split()[0]: line.split()[1:] for line in out if line.startswith(("agent", "all "))}
    assert table["all"] == ["5", "1/1", "0/1", "0/2", "0/1"]
    assert "gold patch: passes 1, fails 0, unsafe 0, not run 0" in out
    assert out[-1] == "gold_pass=1.000 resolved_if_pass=1.000 resolved_if_not=0.000 base_rate=0.200 rows=4"

    # --resume counts the rows written, replaying nothing again.
    assert main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == out[-1]
    assert len(out_rows.read_text().splitlines()) == len(recs)


def test_predictions_without_the_harness_outcome_are_refused(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    preds = tmp_path / "preds.jsonl"
    preds.write_text(json.dumps({"instance_id": "x__y-1", "model_patch": ""}) + "\n")
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text(json.dumps({"instance_id": "x__y-1", "repo": "x/y", "base_commit": "0" * 40,
                                   "problem_statement": "p"}) + "\n")
    assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "has no `resolved`" in err[0]
