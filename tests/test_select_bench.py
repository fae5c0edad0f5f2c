"""eval.select_bench on the calc fixture: candidates from several runs, the rule's pick scored
against `resolved`, bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

from eval import select_bench
from eval.fixtures import make_calc_repo, write_dataset
from tests.test_select import FIX, FIX_AGAIN, WRONG, scratch_patch


def _preds(path: Path, iid: str, patch: str, resolved: bool | None) -> Path:
    row = {"instance_id": iid, "model_patch": patch, "system": path.stem}
    if resolved is not None:
        row["resolved"] = resolved
    path.write_text(json.dumps(row) + "\n")
    return path


def test_bench_picks_by_agreement_and_scores_with_resolved(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FIXGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    inst = make_calc_repo(tmp_path / "mirrors")
    dataset = write_dataset(tmp_path / "lite.jsonl", [inst])
    iid = inst["instance_id"]
    runs = [_preds(tmp_path / "a.jsonl", iid, WRONG, False), _preds(tmp_path / "b.jsonl", iid, FIX, True),
            _preds(tmp_path / "c.jsonl", iid, FIX_AGAIN, True), _preds(tmp_path / "d.jsonl", iid, scratch_patch(), False),
            _preds(tmp_path / "e.jsonl", iid, "", False)]
    out = tmp_path / "rows.jsonl"
    args = ["--predictions", *map(str, runs), "--dataset", str(dataset), "--repos", str(tmp_path / "mirrors"),
            "--no-static", "-o", str(out)]
    assert select_bench.main(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    # The two equal fixes agree; the scratch script and the empty patch are never picked.
    # random: 2 of the 4 non-empty candidates resolved; vote: the fix's group of two.
    assert lines[-1] == "selected=1 oracle=1 vote=1.0 random=0.50 best_single=1 instances=1"
    row = json.loads(out.read_text())
    assert row["signals"]["e"] == {"applies": False, "why": "empty patch"}
    assert row["signals"]["b"]["applies"] and "static" not in row["signals"]["b"]
    # --resume counts the rows already there instead of judging again.
    assert select_bench.main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == lines[-1]
    assert len(out.read_text().splitlines()) == 1


def test_bench_refuses_predictions_without_resolved(tmp_path, capsys):
    inst = make_calc_repo(tmp_path / "mirrors")
    dataset = write_dataset(tmp_path / "lite.jsonl", [inst])
    preds = _preds(tmp_path / "a.jsonl", inst["instance_id"], FIX, None)
    code = select_bench.main(["--predictions", str(preds), "--dataset", str(dataset), "--repos",
                              str(tmp_path / "mirrors"), "--no-static", "-o", str(tmp_path / "rows.jsonl")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "resolved" in err and len(err.splitlines()) == 1
