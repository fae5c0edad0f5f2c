"""eval.regression_bench on a fixture mirror: hidden PASS_TO_PASS ground truth against the loop's
own regression check, with a runtime error, a clean patch, a patch that does not apply, and the
harness-agreement report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.regression_bench import main
from tests.testrun_helpers import CALC, calc_instance, diff_for


def test_bench_finds_the_visible_regression_and_records_what_it_cannot_judge(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inst, wt, _ = calc_instance(tmp_path)
    fixed = CALC.replace("return a - b", "return a + b")
    breaks_mul = fixed.replace("return a * b", 'return a * b + "x"')
    rows = [
        ("fixture__calc-1", True, diff_for(tmp_path, "calc.py", CALC, fixed)),
        ("fixture__calc-2", False, diff_for(tmp_path, "calc.py", CALC, breaks_mul)),
        ("fixture__calc-3", False, diff_for(tmp_path, "calc.py", "nothing like it\n", "x\n")),
        ("fixture__calc-4", False, diff_for(tmp_path, "notes.py", None, "NOTE = 1\n")),
    ]
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    with dataset.open("w") as ds, preds.open("w") as pr:
        for iid, resolved, patch in rows:
            ds.write(json.dumps(inst.model_dump() | {"instance_id": iid}) + "\n")
            pr.write(json.dumps({"instance_id": iid, "system": "agent", "model_patch": patch,
                                 "resolved": resolved}) + "\n")
    config = tmp_path / "local.toml"
    config.write_text(f'name = "local"\ncache_dir = "{tmp_path / "cache"}"\n\n[tests]\nbackend = "local"\n')
    out_rows = tmp_path / "rows.jsonl"
    args = ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(tmp_path / "mirrors"),
            "--config", str(config), "-o", str(out_rows)]
    assert main(args) == 0
    out = capsys.readouterr().out.strip().splitlines()
    text = "\n".join(out)
    # Each check says what it saw: this test failed twice in about fifteen runs, uncaptured.
    assert out[-1].startswith("regression_recall=1.000 regression_precision=1.000 median_s="), text
    assert "patches judged: 3; with a visible regression (PASS_TO_PASS): 1; flagged by the loop's check: 1" in text, text
    assert "not_applied: 1" in text and "fixture__calc-3" in text, text
    assert "loop's check could not run on 1" in text, text  # notes.py: no existing test exercises it
    assert "fixture__calc-2: TypeError at calc.py:6 in mul" in text, text
    assert "fixture/calc" in text and "3/3 agree" in text, text
    recs = {r["instance_id"]: r for r in map(json.loads, out_rows.read_text().splitlines())}
    assert recs["fixture__calc-2"]["visible"] == [f"tests/test_calc.py::test_mul_{i}" for i in range(10)], recs
    assert recs["fixture__calc-1"]["resolved_here"] is True and recs["fixture__calc-1"]["flagged"] == [], recs
    # Each patch here is its task's first: it pays the base run, which a later attempt finds cached.
    # The patched run goes beside the base one, so the check can end within the 0.1 s the record
    # rounds to of its base run: part of it, not less.
    assert 0 < recs["fixture__calc-2"]["own_base_seconds"] <= recs["fixture__calc-2"]["own_seconds"], recs
    assert "seconds per later attempt (base run cached): median" in text, text

    # --resume counts what is recorded; nothing runs again.
    assert main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("regression_recall=1.000")
    assert len(out_rows.read_text().splitlines()) == 4


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    preds = tmp_path / "preds.jsonl"
    preds.write_text('{"instance_id": "x", "model_patch": ""}\n')
    for extra, message in ((["--dataset", str(tmp_path / "none.jsonl")], "error: dataset not found"),
                           (["--stride", "0"], "error: --stride must be at least 1")):
        assert main(["--predictions", str(preds), "--repos", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1


def test_critic_bench_runtime_column_adds_what_the_tests_show(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--runtime``: a TypeError no static reading sees (untyped parameters) is caught by the
    selected existing tests; a patch the tests do not notice stays unflagged."""
    from eval.critic_bench import main as critic_main

    inst, wt, _ = calc_instance(tmp_path)
    rows = [("runtime_error", CALC.replace("return a * b", 'return a * b + "x"')),
            ("assertion_failure", CALC.replace("return a - b", "return a - b - 0")),
            ("resolved", CALC.replace("return a - b", "return a + b"))]
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    with dataset.open("w") as ds, preds.open("w") as pr:
        for n, (kind, new) in enumerate(rows):
            iid = f"fixture__calc-{n}"
            ds.write(json.dumps(inst.model_dump() | {"instance_id": iid}) + "\n")
            pr.write(json.dumps({"instance_id": iid, "system": "agent", "failure_kind": kind,
                                 "model_patch": diff_for(tmp_path, "calc.py", CALC, new)}) + "\n")
    config = tmp_path / "local.toml"
    config.write_text(f'name = "local"\ncache_dir = "{tmp_path / "cache"}"\n\n[tests]\nbackend = "local"\n')
    assert critic_main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(tmp_path / "mirrors"),
                        "--config", str(config), "--runtime", "-o", str(tmp_path / "rows.jsonl")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("F1=0.000 F1_redo_static=0.000 F1_runtime=1.000 P_runtime=1.000 median_s=")
    table = {line.split()[0]: line.split() for line in out if line.startswith("ours_static+runtime")}
    assert table["ours_static+runtime"][1:6] == ["3", "1", "0", "0", "2"]


def test_the_tests_a_fix_s_own_test_patch_rewrites_are_named(tmp_path: Path) -> None:
    from eval.hidden import tests_the_test_patch_edits
    from eval.regression_bench import fp_cause
    from tests.testrun_helpers import TEST_FILE

    inst, wt, _ = calc_instance(tmp_path)
    # The fixture's test patch adds test_add: no existing test has it.
    added = ["tests/test_calc.py::test_add", "test_add", "tests/test_calc.py::test_mul_1"]
    assert tests_the_test_patch_edits(inst, wt, added) == added[:2]
    # The fix changes what mul(3, 2) returns on purpose: its test patch rewrites test_mul_3.
    rewritten = TEST_FILE.replace("assert calc.mul(3, 2) == 6", "assert calc.mul(3, 2) == 7")
    inst = inst.model_copy(update={"test_patch": diff_for(tmp_path, "tests/test_calc.py", TEST_FILE, rewritten)})
    ids = ["tests/test_calc.py::test_mul_3", "tests/test_calc.py::test_mul_4", "test_mul_3"]
    assert tests_the_test_patch_edits(inst, wt, ids) == ["tests/test_calc.py::test_mul_3", "test_mul_3"]
    flagged = {"flagged": ids[:1], "edited": ids[:1], "runtime": []}
    assert fp_cause(flagged) == "rewritten"
    assert fp_cause({**flagged, "flagged": ids[:2]}) == "other"  # test_mul_4 is the repository's, unchanged
    assert fp_cause({**flagged, "flagged": ids[:2], "runtime": [{"rule": "TypeError"}]}) == "crash"
