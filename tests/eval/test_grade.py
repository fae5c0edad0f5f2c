"""eval.grade on fixture repositories (local backend): verdicts, the harness's report shape, bad input, resume."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval import grade
from eval.fixtures.repos import (
    BUGGY_LINE,
    FIXED_LINE,
    OPS_BUGGY,
    _diff,
    git_commit_all,
    make_calc_repo,
    write_dataset,
)

BREAKS_ADD = OPS_BUGGY.replace(BUGGY_LINE, FIXED_LINE).replace("return a + b", "return a - b")
NOT_APPLYING = _diff(OPS_BUGGY.replace("Sum of two", "Total of two"), OPS_BUGGY, "calc/ops.py")
# The harness's report.json entry, as swebench's get_eval_report writes it.
HARNESS_KEYS = {"patch_is_None", "patch_exists", "patch_successfully_applied", "resolved"}
TESTS_STATUS_KEYS = {"FAIL_TO_PASS", "PASS_TO_PASS", "FAIL_TO_FAIL", "PASS_TO_FAIL"}


def _setup(tmp_path: Path, names: list[str]) -> tuple[Path, Path, list[dict[str, Any]]]:
    mirrors = tmp_path / "mirrors"
    insts = [make_calc_repo(mirrors, name=n) for n in names]
    return mirrors, write_dataset(tmp_path / "data.jsonl", insts), insts


def _preds(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "m/x", "model_patch": p}) + "\n"
                            for i, p in rows))
    return path


def _args(tmp_path: Path, mirrors: Path, dataset: Path, preds: Path, *extra: str) -> list[str]:
    return ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors), "--backend", "local",
            "--cache-dir", str(tmp_path / "cache"), "--logs", str(tmp_path / "logs"),
            "--report-dir", str(tmp_path / "reports"), "--run-id", "r1", "--timeout", "120", "--no-progress", *extra]


@pytest.mark.slow
def test_fix_break_and_no_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, dataset, insts = _setup(tmp_path, ["calc", "calcb", "calcc"])
    fix, brk, bad = insts
    preds = _preds(tmp_path / "p.jsonl", [
        (fix["instance_id"], fix["patch"]),
        (brk["instance_id"], _diff(OPS_BUGGY, BREAKS_ADD, "calc/ops.py")),
        (bad["instance_id"], NOT_APPLYING),
    ])
    assert grade.main(_args(tmp_path, mirrors, dataset, preds)) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-2] == "grader: local (local), not the official harness"
    assert out[-1] == "resolved=1 unresolved=1 patch_failed=1 not_runnable=0 empty=0 of=3"
    base = tmp_path / "logs" / "r1" / "m__x"
    reports = {i["instance_id"]: json.loads((base / i["instance_id"] / "report.json").read_text()) for i in insts}
    for iid, rep in reports.items():
        assert list(rep) == [iid]
        assert HARNESS_KEYS <= set(rep[iid]) and rep[iid]["grader"] == "local (local), not the official harness"
    ok = reports[fix["instance_id"]][fix["instance_id"]]
    assert ok["resolved"] and ok["patch_successfully_applied"]
    assert set(ok["tests_status"]) == TESTS_STATUS_KEYS
    assert ok["tests_status"]["FAIL_TO_PASS"] == {"success": ["tests/test_ops.py::test_mean"], "failure": []}
    broken = reports[brk["instance_id"]][brk["instance_id"]]
    assert not broken["resolved"]
    assert broken["tests_status"]["PASS_TO_PASS"]["failure"] == ["tests/test_ops.py::test_add"]
    assert broken["tests_status"]["FAIL_TO_PASS"]["failure"] == []
    failed = reports[bad["instance_id"]][bad["instance_id"]]
    assert not failed["resolved"] and not failed["patch_successfully_applied"]
    assert ">>>>> Patch Apply Failed" in (base / bad["instance_id"] / "test_output.txt").read_text()
    summary = json.loads((tmp_path / "reports" / "m__x.r1.json").read_text())
    assert summary["resolved_ids"] == [fix["instance_id"]] and summary["error_ids"] == [bad["instance_id"]]
    assert summary["grader"].endswith("not the official harness")
    # resumes: nothing graded twice; without --resume the run id is refused
    assert grade.main(_args(tmp_path, mirrors, dataset, preds)) == 2
    assert "pass --resume" in capsys.readouterr().err
    stamp = (base / fix["instance_id"] / "grade.json").stat().st_mtime_ns
    assert grade.main(_args(tmp_path, mirrors, dataset, preds, "--resume")) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == out[-1]
    assert (base / fix["instance_id"] / "grade.json").stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_bad_rows_each_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, dataset, insts = _setup(tmp_path, ["calc", "calcb", "calcc", "calcd"])
    a, b, c, d = (i["instance_id"] for i in insts)
    crlf = insts[1]["patch"].replace("\n", "\r\n")
    binary = ("diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..1111111\n"
              "Binary files /dev/null and b/logo.png differ\n")
    preds = _preds(tmp_path / "p.jsonl", [(a, insts[0]["patch"]), ("nobody__nothing-1", "x"), (a, "dup"),
                                          (b, crlf), (c, binary), (d, "  \n")])
    assert grade.main(_args(tmp_path, mirrors, dataset, preds)) == 0
    cap = capsys.readouterr()
    warnings = [ln for ln in cap.err.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 3
    assert "unknown instance id 'nobody__nothing-1'" in warnings[0]
    assert "duplicate instance id" in warnings[1] and "empty patch" in warnings[2]
    assert cap.out.strip().splitlines()[-1].endswith("empty=1 of=4")
    base = tmp_path / "logs" / "r1" / "m__x"
    crlf_grade = json.loads((base / b / "grade.json").read_text())
    assert any("CRLF" in n for n in crlf_grade["notes"]) and crlf_grade["status"] in ("resolved", "patch_failed")
    bin_grade = json.loads((base / c / "grade.json").read_text())
    # taken as is, as the harness takes it: no fix in it either way
    assert bin_grade["status"] in ("unresolved", "patch_failed") and any("binary" in n for n in bin_grade["notes"])


@pytest.mark.slow
def test_a_repository_without_specs_is_graded_in_its_inferred_env(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, dataset, insts = _setup(tmp_path, ["calc"])
    preds = _preds(tmp_path / "p.jsonl", [(insts[0]["instance_id"], insts[0]["patch"])])
    args = _args(tmp_path, mirrors, dataset, preds)
    args[args.index("local")] = "venv"  # the fixture's repo has no swebench spec: its env is inferred
    assert grade.main(args) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "resolved=1 unresolved=0 patch_failed=0 not_runnable=0 empty=0 of=1"


@pytest.mark.parametrize("extra, message", [
    (["--workers", "0"], "eval.grade: error: --workers must be at least 1"),
    (["--predictions", "nope.jsonl"], "eval.grade: error: predictions file not found: nope.jsonl"),
])
def test_bad_input_is_one_line(tmp_path: Path, extra: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, dataset, insts = _setup(tmp_path, ["calc"])
    preds = _preds(tmp_path / "p.jsonl", [(insts[0]["instance_id"], insts[0]["patch"])])
    assert grade.main([*_args(tmp_path, mirrors, dataset, preds), *extra]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [message]


@pytest.mark.slow
def test_imported_run_reuses_another_runs_grades(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A predictions file imported as a run folder; its grades copied from a run that graded the same
    patches (nothing graded again), a changed patch graded afresh."""
    from eval import import_predictions

    mirrors, dataset, insts = _setup(tmp_path, ["calc", "calcb"])
    a, b = insts
    rows = [{"instance_id": a["instance_id"], "system": "sysx", "model_patch": a["patch"], "resolved": True},
            {"instance_id": b["instance_id"], "system": "sysx", "model_patch": b["patch"], "resolved": True}]
    first = tmp_path / "first.jsonl"
    first.write_text("".join(json.dumps({**r, "model_name_or_path": "sysx"}) + "\n" for r in rows[:1]))
    assert grade.main(_args(tmp_path, mirrors, dataset, first)) == 0  # graded under logs/r1/sysx/
    capsys.readouterr()
    shared = tmp_path / "sysx.jsonl"
    shared.write_text("".join(json.dumps(r) + "\n" for r in rows))
    runs = tmp_path / "runs"
    assert import_predictions.main([str(shared), "--runs-dir", str(runs)]) == 0
    rec = json.loads((runs / "sysx" / "records" / f"{a['instance_id']}.json").read_text())
    assert rec["final"] and rec["status"] == "patched" and rec["model_name_or_path"] == "sysx"
    preds = runs / "sysx" / "predictions" / "sysx.jsonl"
    args = [*_args(tmp_path, mirrors, dataset, preds), "--reuse-from", str(tmp_path / "logs" / "r1")]
    args[args.index("r1")] = "sysx"
    assert grade.main(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        "resolved=2 unresolved=0 patch_failed=0 not_runnable=0 empty=0 of=2"
    copied = json.loads((tmp_path / "logs" / "sysx" / "sysx" / a["instance_id"] / "grade.json").read_text())
    assert copied["reused_from"].endswith(a["instance_id"])
    fresh = json.loads((tmp_path / "logs" / "sysx" / "sysx" / b["instance_id"] / "grade.json").read_text())
    assert "reused_from" not in fresh
    assert import_predictions.main([str(tmp_path / "none.jsonl")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"eval.import_predictions: error: predictions file not found: {tmp_path / 'none.jsonl'}"


IMAGE_TEST = '''def image_comparison(*args, **kwargs):  # matplotlib.testing.decorators' name
    return lambda fn: fn


@image_comparison(["drawn.png"])
def test_drawn():
    assert False, "the pixels differ"  # as a baseline rendered with another FreeType does here


@image_comparison(["plain.png"])
def test_drawn_the_same():
    pass  # no text: it matches here, so it runs and is graded
'''
TOOL_TEST = '''import shutil


def test_needs_latex():
    assert shutil.which("fixgraph-no-such-latex"), "no LaTeX here"  # the harness's image has it
'''


@pytest.mark.slow
def test_matplotlib_image_comparisons_are_set_aside_not_graded(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    mirrors = tmp_path / "mirrors"
    inst = make_calc_repo(mirrors, owner="matplotlib", name="matplotlib")
    repo = mirrors / "matplotlib+matplotlib"
    (repo / "tests" / "test_img.py").write_text(IMAGE_TEST)
    inst["base_commit"] = git_commit_all(repo, "an image comparison")
    # Tests the grader runs are the test patch's files: these two come with it, as new files do.
    from tests.helpers.testrun_helpers import diff_for
    inst["test_patch"] += (diff_for(tmp_path, "tests/test_tool.py", None, TOOL_TEST)
                           + diff_for(tmp_path, "tests/test_img2.py", None, IMAGE_TEST))
    inst["PASS_TO_PASS"] = json.dumps([*json.loads(inst["PASS_TO_PASS"]), "tests/test_img.py::test_drawn",
                                       "tests/test_img2.py::test_drawn", "tests/test_img2.py::test_drawn_the_same",
                                       "tests/test_tool.py::test_needs_latex"])
    dataset = write_dataset(tmp_path / "data.jsonl", [inst])
    preds = _preds(tmp_path / "p.jsonl", [(inst["instance_id"], inst["patch"])])
    assert grade.main(_args(tmp_path, mirrors, dataset, preds)) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        "resolved=1 unresolved=0 patch_failed=0 not_runnable=0 empty=0 of=1"
    report = json.loads((tmp_path / "logs" / "r1" / "m__x" / inst["instance_id"] / "report.json").read_text())
    entry = report[inst["instance_id"]]
    assert "image comparison" in entry["not_runnable_here"]["tests/test_img.py::test_drawn"]
    assert "tests/test_img.py::test_drawn" not in entry["tests_status"]["PASS_TO_PASS"]["failure"]
    # An image comparison that passes without the patch here is graded like any test.
    assert "image comparison" in entry["not_runnable_here"]["tests/test_img2.py::test_drawn"]
    assert "tests/test_img2.py::test_drawn_the_same" in entry["tests_status"]["PASS_TO_PASS"]["success"]
    # A PASS_TO_PASS test that fails here without the patch too meets what this machine lacks.
    assert "where the harness's image passes it" in entry["not_runnable_here"]["tests/test_tool.py::test_needs_latex"]
