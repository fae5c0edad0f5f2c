"""eval.e2e_bench on the calc fixture: a task whose record reaches kind ``tests``, one whose
reproduction test is refused (its test patch has no test file), one whose base commit the mirror
lacks; the rows, the report's last line, ``--resume`` and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.e2e_bench import main, report
from eval.fixtures.repos import write_dataset
from fixgraph.dataset import Instance
from tests.helpers.testrun_helpers import local_config


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["instance_id"]: r for r in map(json.loads, path.read_text().splitlines())}


@pytest.mark.slow
def test_rows_say_each_tasks_score_kind_and_why_not_tests(
        calc: tuple[Path, Instance], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, inst = calc
    base = inst.model_dump()
    dataset = write_dataset(tmp_path / "lite.jsonl", [
        base,
        base | {"instance_id": "fixture__calc-2", "test_patch": ""},
        base | {"instance_id": "fixture__calc-3", "base_commit": "f" * 40},
    ])
    out = tmp_path / "rows" / "e2e.jsonl"
    args = ["--dataset", str(dataset), "--repos", str(mirrors), "--tasks", "all", "--out", str(out),
            "--config", str(local_config(tmp_path)), "--cache-dir", str(tmp_path / "cache")]
    assert main(args) == 0
    text = capsys.readouterr().out
    rows = _rows(out)
    ok, refused, missing = rows["fixture__calc-1"], rows["fixture__calc-2"], rows["fixture__calc-3"]
    assert (ok["outcome"], ok["kind"], ok["test_pass_rate"], ok["no_regression"]) == ("patched", "tests", 1.0, 1.0), ok
    assert ok["tests_run"] and ok["attempts"] == 1 and "why" not in ok, ok
    assert ok["own_test"] == ok["repro_test"] == "tests/test_ops.py", ok
    # No own test file: the oracle's stand-in passes at the base, the Reproducer refuses it, and
    # only the existing tests score the patch.
    assert (refused["outcome"], refused["kind"], refused["repro"]) == ("patched", "partial", "none"), refused
    assert "test_patch has no Python test file" in refused["why"], refused
    assert "reproduction test not accepted (none): it passes on the unfixed code" in refused["why"], refused
    assert (missing["outcome"], missing["kind"]) == ("no_checkout", "none") and "ffffffffffff" in missing["why"], missing
    # The run's records stay beside the rows, not in the repository's predictions/.
    assert list((tmp_path / "rows" / "e2e-runs").glob("*/records/fixture__calc-1.json"))
    lines = text.strip().splitlines()
    assert lines[-1] == "tests=1 of=3 partial=1 other=0 failed=1", text
    assert any(ln.startswith("fixture/calc") and ln.split()[1:6] == ["3", "1", "1", "0", "1"] for ln in lines), text
    assert any(ln.startswith("  fixture__calc-2: patched, partial: test_patch has no") for ln in lines), text

    # --resume keeps a done row; the task whose row was lost runs again.
    out.write_text("\n".join(json.dumps(rows[i]) for i in ("fixture__calc-1", "fixture__calc-3")) + "\n")
    assert main([*args, "--resume"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "tests=1 of=3 partial=1 other=0 failed=1"
    again = out.read_text().splitlines()
    assert [json.loads(ln)["instance_id"] for ln in again] == ["fixture__calc-1", "fixture__calc-3", "fixture__calc-2"]
    assert main([*args, "--report-only"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "tests=1 of=3 partial=1 other=0 failed=1"


def test_bad_input_is_one_line_and_exit_2(calc: tuple[Path, Instance], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, inst = calc
    dataset = write_dataset(tmp_path / "lite.jsonl", [inst.model_dump()])
    for extra, message in ((["--tasks", "nope-1"], "unknown task id 'nope-1'"),
                           (["--repos", str(tmp_path / "rows")], "--repos: not a directory"),
                           (["--repos", str(tmp_path)], "none of the 1 selected tasks has a mirror"),
                           (["--shard", "2/2"], "--shard: need 0 <= I < N")):
        assert main(["--dataset", str(dataset), "--repos", str(mirrors), "--tasks", "all",
                     "--out", str(tmp_path / "rows" / "e2e.jsonl"), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("e2e_bench: error: ") and message in err and err.count("\n") == 1, err


def test_report_prints_a_reason_of_many_lines_as_one() -> None:
    why = ("reproduction test not accepted (none): the runner could not import the label app.tests: "
           "======\nERROR: tests (unittest.loader._FailedTest)\n------\nImportError: Failed to import")
    rows = [{"instance_id": "a-1", "repo": "o/a", "outcome": "patched", "kind": "partial", "why": why,
             "seconds": 2.0},
            {"instance_id": "a-2", "repo": "o/a", "outcome": "patched", "kind": "tests", "seconds": 4.0}]
    text = "\n".join(report(rows))
    assert text.splitlines()[-2] == ("  a-1: patched, partial: reproduction test not accepted (none): the runner "
                                     "could not import the label app.tests: ====== ERROR: tests "
                                     "(unittest.loader._FailedTest) ------ ImportError: Failed to import")
    assert text.splitlines()[-1] == "tests=1 of=2 partial=1 other=0 failed=0"
    assert len(text.splitlines()) == 5
