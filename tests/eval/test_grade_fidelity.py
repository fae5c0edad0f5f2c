"""eval.grade_fidelity on fixture repositories (local backend): agreement, a classified disagreement, resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import grade_fidelity
from eval.fixtures.repos import OPS_BUGGY, _diff, make_calc_repo, write_dataset

WRONG = _diff(OPS_BUGGY, OPS_BUGGY.replace("- 1\n", "- 0.5\n"), "calc/ops.py")


@pytest.mark.slow
def test_agreement_and_a_classified_disagreement(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors = tmp_path / "mirrors"
    inst = make_calc_repo(mirrors)
    dataset = write_dataset(tmp_path / "data.jsonl", [inst])
    preds = tmp_path / "preds"
    preds.mkdir()
    iid = inst["instance_id"]
    rows = {"sys_a": (inst["patch"], True), "sys_b": (WRONG, False), "sys_c": (WRONG, True), "sys_d": ("", False)}
    for system, (patch, resolved) in rows.items():
        (preds / f"{system}.jsonl").write_text(json.dumps({"instance_id": iid, "model_name_or_path": system,
                                                           "model_patch": patch, "resolved": resolved}) + "\n")
    args = ["--dataset", str(dataset), "--repos", str(mirrors), "--predictions-dir", str(preds), "--stride", "1",
            "--backend", "local", "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out"),
            "--timeout", "120", "--no-progress"]
    assert grade_fidelity.main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "agreement=0.667 rows=3 disagreements=1 not_runnable=0"
    assert next(ln for ln in out if ln.startswith("fixture/calc")).split()[1:5] == ["3", "3", "2", "0.667"]
    disagreement = next(ln for ln in out if ln.startswith(f"  {iid}, sys_c"))
    assert "resolved -> unresolved, environment drift" in disagreement  # the gold patch is resolved here
    assert "F2P failing: tests/test_ops.py::test_mean" in disagreement
    # the empty patch is not a row; a rerun grades nothing again and says the same
    assert "all systems' non-empty predictions: 3" in out[0]
    assert grade_fidelity.main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == out[-1]
    assert grade_fidelity.main(args) == 0  # all graded: nothing to refuse
    capsys.readouterr()
    # the report alone: every row --out holds, whichever stride chose it
    assert grade_fidelity.main([*args[:-1], "--stride", "7", "--report-only"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == out[-1]


def test_bad_stride_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert grade_fidelity.main(["--dataset", "x", "--repos", str(tmp_path), "--stride", "0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "eval.grade_fidelity: error: --stride must be at least 1"]
