"""eval.regression_bench on a fixture mirror: hidden PASS_TO_PASS ground truth against the loop's
own regression check, with a runtime error, a clean patch, a patch that does not apply, and the
harness-agreement report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.regression_bench import main
from tests.helpers.testrun_helpers import CALC, calc_instance, diff_for, local_config


@pytest.mark.slow
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
    config = local_config(tmp_path)
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


@pytest.mark.slow
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
    config = local_config(tmp_path)
    assert critic_main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(tmp_path / "mirrors"),
                        "--config", str(config), "--runtime", "-o", str(tmp_path / "rows.jsonl")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("F1=0.000 F1_redo_static=0.000 F1_runtime=1.000 P_runtime=1.000 median_s=")
    table = {line.split()[0]: line.split() for line in out if line.startswith("ours_static+runtime")}
    assert table["ours_static+runtime"][1:6] == ["3", "1", "0", "0", "2"]


def test_the_tests_a_fix_s_own_test_patch_rewrites_are_named(tmp_path: Path) -> None:
    from eval.hidden import tests_the_test_patch_edits
    from eval.regression_bench import fp_cause
    from tests.helpers.testrun_helpers import TEST_FILE

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


SCALE_TEST = "\n\ndef test_scale():\n    assert calc.scale([1, 2], 3) == [3, 6]\n"


@pytest.mark.slow
def test_flags_outside_pass_to_pass_are_checked_with_the_gold_patch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A flag on a test the harness does not run (``test_scale``, outside PASS_TO_PASS) is run
    again with the gold patch and with the candidate, each with the test patch: breakage the gold
    patch does not make is verified, one it makes too is a shared change, and a test the test
    patch rewrites that the candidate then passes is the fix's own change. The strict precision
    stays the last line; the one counting verified breakage is printed beside it."""
    from tests.helpers.testrun_helpers import TEST_FILE, make_repo

    base_tests = TEST_FILE + SCALE_TEST
    mirrors, commit = make_repo(tmp_path, {"calc.py": CALC, "tests/test_calc.py": base_tests})
    fixed = CALC.replace("return a - b", "return a + b")
    reversed_scale = fixed.replace("    return out\n", "    return out[::-1]\n")
    tuple_scale = fixed.replace("    return out\n", "    return tuple(out)\n")
    add_test = "\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n"
    adds_test_add = diff_for(tmp_path, "tests/test_calc.py", base_tests, base_tests + add_test)
    rewrites_scale = diff_for(tmp_path, "tests/test_calc.py", base_tests,
                              base_tests.replace("== [3, 6]", "== (3, 6)") + add_test)
    extends_scale = diff_for(tmp_path, "tests/test_calc.py", base_tests,
                             base_tests.replace("== [3, 6]\n", "== [3, 6]\n    assert calc.scale([], 3) == []\n")
                             + add_test)
    # (instance, gold patch, test patch, FAIL_TO_PASS, candidate)
    rows = [
        ("fixture__calc-1", fixed, adds_test_add, [], reversed_scale),  # breaks scale; the fix does not
        ("fixture__calc-2", tuple_scale, adds_test_add, [], reversed_scale),  # the fix breaks test_scale too
        ("fixture__calc-3", tuple_scale, rewrites_scale, ["tests/test_calc.py::test_scale"], tuple_scale),
        ("fixture__calc-4", fixed, adds_test_add, [], fixed.replace("return a * b", "return a * b + 1")),  # visible
        # The candidate fails the fix's target test: the fix changed what its base version asserts ...
        ("fixture__calc-5", tuple_scale, rewrites_scale, ["tests/test_calc.py::test_scale"], reversed_scale),
        # ... or it kept it, and the candidate broke that.
        ("fixture__calc-6", fixed, extends_scale, ["tests/test_calc.py::test_scale"], reversed_scale),
    ]
    diffs: dict[str, str] = {}  # diff_for makes one scratch repo per content

    def diff(new: str) -> str:
        if new not in diffs:
            diffs[new] = diff_for(tmp_path, "calc.py", CALC, new)
        return diffs[new]

    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    with dataset.open("w") as ds, preds.open("w") as pr:
        for iid, gold, test_patch, f2p, cand in rows:
            ds.write(json.dumps({
                "instance_id": iid, "repo": "fixture/calc", "base_commit": commit, "problem_statement": "add subtracts",
                "version": "", "patch": diff(gold), "test_patch": test_patch,
                "FAIL_TO_PASS": ["tests/test_calc.py::test_add", *f2p],
                "PASS_TO_PASS": [f"tests/test_calc.py::test_mul_{i}" for i in range(10)]}) + "\n")
            pr.write(json.dumps({"instance_id": iid, "system": "agent",
                                 "model_patch": diff(cand)}) + "\n")
    config = local_config(tmp_path)
    out_rows = tmp_path / "rows.jsonl"
    args = ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors),
            "--config", str(config), "-o", str(out_rows)]
    assert main(args) == 0
    text = capsys.readouterr().out.strip()
    lines = text.splitlines()
    recs = {r["instance_id"]: r for r in map(json.loads, out_rows.read_text().splitlines())}
    verdicts = {iid: {t: v["verdict"] for t, v in r.get("extra_check", {}).get("tests", {}).items()}
                for iid, r in recs.items()}
    scale = "tests/test_calc.py::test_scale"
    assert verdicts == {"fixture__calc-1": {scale: "verified"}, "fixture__calc-2": {scale: "fails_with_gold"},
                        "fixture__calc-3": {scale: "passes_with_test_patch"}, "fixture__calc-4": {},
                        "fixture__calc-5": {scale: "fail_to_pass"}, "fixture__calc-6": {scale: "fail_to_pass_base_kept"}}, recs
    assert recs["fixture__calc-1"]["extra_check"]["tests"][scale] == {
        "gold": "PASSED", "candidate": "FAILED", "verdict": "verified"}, recs
    assert recs["fixture__calc-6"]["extra_check"]["tests"][scale]["gold_base"] == "PASSED", recs
    assert recs["fixture__calc-5"]["extra_check"]["tests"][scale]["gold_base"] == "FAILED", recs
    assert "TP 1 FP 5 FN 0 TN 0" in text, text
    assert "verified breakage (passes with the gold patch, fails with the candidate): 1 tests on 1 patches, " \
           "e.g. fixture__calc-1 tests/test_calc.py::test_scale (gold PASSED, candidate FAILED)" in text, text
    assert "fails or is gone with the gold patch too (an intended or shared change): 1 tests on 1 patches" in text, text
    assert "precision counting verified breakage as true (reads the gold patch: not the loop's; 1 false " \
           "positives verified): 0.333" in text, text
    assert "and counting breakage of a FAIL_TO_PASS test's base version that the gold patch keeps (2 false " \
           "positives): 0.500" in text, text
    assert lines[-1].startswith("regression_recall=1.000 regression_precision=0.167 median_s="), text

    # Rows saved before the check: --rescore says so, and --check-extra runs it on them alone.
    saved = [{k: v for k, v in r.items() if k != "extra_check"} for r in recs.values()]
    out_rows.write_text("".join(json.dumps(r) + "\n" for r in saved))
    assert main([*args, "--rescore"]) == 0
    text = capsys.readouterr().out
    assert "not run yet on 5 patches (--rescore --check-extra)" in text, text
    assert "0 false positives verified): 0.167" in text, text
    assert main([*args, "--rescore", "--check-extra"]) == 0
    assert "1 false positives verified): 0.333" in capsys.readouterr().out
    assert main([*args, "--rescore"]) == 0  # the checked rows were appended: a later row of an id wins
    assert "1 false positives verified): 0.333" in capsys.readouterr().out
    assert len(out_rows.read_text().splitlines()) == 6 + 5


def test_extra_reads_pass_to_pass_ids_cut_at_a_space(tmp_path: Path) -> None:
    """SWE-bench lists a parametrized id with a space cut there; the loop's flag of the whole id
    is inside PASS_TO_PASS, not an extra regression."""
    from eval.regression_bench import apply_expected
    from scoring.execution.outcomes import listed_among

    inst, _, _ = calc_instance(tmp_path)
    whole, other = "tests/test_calc.py::test_word[a b-c]", "tests/test_calc.py::test_other[x]"
    inst = inst.model_copy(update={"PASS_TO_PASS": ["tests/test_calc.py::test_word[a"]})
    assert listed_among([whole, other], inst.PASS_TO_PASS) == [whole]
    rec: dict[str, object] = {"broken": [whole, other], "flag_kinds": {}}
    apply_expected(rec, inst, False)
    assert rec["extra"] == [other], rec
