"""eval.critic_bench on a fixture mirror: SWEDE labelling, both methods in one run, the headline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eval.critic_bench import Tally, main
from eval.critic_repo import edit, make_repo

OVERRIDE = "\n\nclass Big(Circle):\n    def area(self, scale):\n        return 2\n"


def test_bench_labels_rows_and_compares_with_redo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_repo(tmp_path / "src")
    patches = [
        # Positive: a NameError whose message already occurs in legacy(); REDO's set misses it.
        ("runtime_error", edit(src, "pkg/shapes.py", 'return "circle of radius %s" % c.r',
                               'return "circle of radius %s" % undefined_helper(c)')),
        # Negative: an incompatible override is a new pyright error for REDO, not a crash.
        ("assertion_failure", edit(src, "pkg/shapes.py", "    return undefined_helper(c)\n",
                                   "    return undefined_helper(c)\n" + OVERRIDE)),
        ("resolved", edit(src, "pkg/shapes.py", "return Circle(self.r * k)", "return Circle(r=self.r * k)")),
        ("unknown_failure", edit(src, "pkg/shapes.py", "self.r ** 2", "self.r * self.r")),
        ("resolved", "diff --git a/pkg/nope.py b/pkg/nope.py\n--- a/pkg/nope.py\n+++ b/pkg/nope.py\n"
                     "@@ -1 +1 @@\n-a\n+b\n"),
    ]
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(src.path), str(mirrors / "demo+shapes" / "repo")], check=True)
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    with dataset.open("w") as ds, preds.open("w") as pr:
        for n, (kind, patch) in enumerate(patches):
            iid = f"demo__shapes-{n}"
            ds.write(json.dumps({"instance_id": iid, "repo": "demo/shapes", "base_commit": src.base,
                                 "problem_statement": "p"}) + "\n")
            pr.write(json.dumps({"instance_id": iid, "system": "agent", "model_patch": patch,
                                 "failure_kind": kind}) + "\n")
    rows = tmp_path / "rows.jsonl"
    code = main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(rows)])
    assert code == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("F1=1.000 F1_redo_static=0.000 median_s=")
    table = {line.split()[0]: line.split() for line in out if line.startswith(("redo_static", "ours_static"))}
    # rows TP FP FN TN: four labelled rows, one not applying (counted, not flagged)
    assert table["ours_static"][1:6] == ["4", "1", "0", "0", "3"]
    assert table["redo_static"][1:6] == ["4", "0", "1", "1", "2"]
    recs = [json.loads(line) for line in rows.read_text().splitlines()]
    assert len(recs) == 4 and "not_applied" in recs[-1]

    # --resume counts what is recorded instead of judging again.
    assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
                 "--cache-dir", str(tmp_path / "cache"), "-o", str(rows), "--resume"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("F1=1.000 F1_redo_static=0.000")
    assert len(rows.read_text().splitlines()) == 4

    # Two shards side by side, concatenated, and counted with --resume: the same figures.
    shards = [tmp_path / f"shard{i}.jsonl" for i in range(2)]
    for i, part in enumerate(shards):
        assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
                     "--cache-dir", str(tmp_path / f"cache{i}"), "-o", str(part), "--shard", f"{i}/2"]) == 0
    capsys.readouterr()
    both = tmp_path / "both.jsonl"
    both.write_text("".join(part.read_text() for part in shards))
    assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
                 "-o", str(both), "--resume"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("F1=1.000 F1_redo_static=0.000")
    assert {line.split()[0]: line.split()[1:6] for line in out if line.startswith(("redo_", "ours_"))} == {
        "redo_static": ["4", "0", "1", "1", "2"], "ours_static": ["4", "1", "0", "0", "3"]}
    assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
                 "--shard", "2/2"]) == 2
    assert "--shard: need 0 <= I < N" in capsys.readouterr().err


def test_unlabelled_predictions_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_repo(tmp_path / "src")
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    dataset.write_text(json.dumps({"instance_id": "a", "repo": "demo/shapes", "base_commit": src.base,
                                   "problem_statement": "p"}) + "\n")
    preds.write_text(json.dumps({"instance_id": "a", "model_patch": ""}) + "\n")
    assert main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(tmp_path)]) == 2
    assert "no failure_kind label" in capsys.readouterr().err


def test_tally_figures() -> None:
    t = Tally("x")
    for truth, flagged, s in [(True, True, 1.0), (True, False, 2.0), (False, True, 3.0), (False, False, 4.0)]:
        t.add(truth, flagged, s)
    assert (t.precision, t.recall, t.f1, t.accuracy, t.median_s, t.p95_s) == (0.5, 0.5, 0.5, 0.5, 2.5, 4.0)
