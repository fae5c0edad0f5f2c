"""eval/gold_critic.py: per-phase false-alarm shares over saved rows, every case listed."""

from __future__ import annotations

import pytest

from eval import gold_critic
from scoring.verdict.judge import InputError


def _row(iid: str, repo: str, certain=(), suspicions=(), redo=False, replay=None, tests=None):
    rec = {"instance_id": iid, "repo": repo,
           "static": {"status": "ok", "seconds": 2.0, "certain": list(certain), "suspicions": list(suspicions),
                      "redo": {"unsafe": redo, "new": ["x is possibly unbound"] if redo else [], "seconds": 3.0}}}
    if replay is not None:
        rec["replay"] = replay
    if tests is not None:
        rec["tests"] = tests
    return rec


def test_report_counts_each_phase_and_lists_its_cases(capsys):
    unbound = {"source": "pyright", "rule": "reportPossiblyUnbound", "file": "a.py", "line": 3, "message": "x"}
    recs = [
        _row("a-1", "o/a", suspicions=[unbound], redo=True,
             replay={"ran": True, "summaries": [{"kind": "introduced"}], "note": "replay: introduced", "seconds": 1}),
        _row("b-1", "o/b", replay={"ran": False, "summaries": [], "note": "no code", "seconds": 0}),
        {"instance_id": "c-1", "repo": "o/c", "skipped": "cannot check out"},
    ]
    gold_critic.report(recs, {"static", "replay"})
    out = capsys.readouterr().out
    assert "rows: 3 (1 skipped" in out
    assert "gold_false_alarm_static=0.000 (0/2)" in out
    assert "gold_false_alarm_static_any=0.500 (1/2)" in out
    assert "gold_false_alarm_redo_static=0.500 (1/2)" in out
    assert "gold_false_alarm_replay=1.000 (1/1)" in out
    assert "    a-1: pyright/reportPossiblyUnbound a.py:3" in out


def test_rows_come_from_each_repository_in_turn():
    class Inst:
        def __init__(self, repo: str):
            self.repo = repo

    data = {"a1": Inst("a"), "a2": Inst("a"), "b1": Inst("b")}
    rows = [{"instance_id": i} for i in ("a1", "a2", "b1")]
    assert [r["instance_id"] for r in gold_critic._round_robin(rows, data)] == ["a1", "b1", "a2"]  # type: ignore[arg-type]


def test_bad_phases_are_one_line_errors(tmp_path):
    args = gold_critic.parser().parse_args(["--repos", str(tmp_path), "--phases", "static,nope"])
    with pytest.raises(InputError, match="--phases"):
        gold_critic.run(args)


def test_instances_not_chosen_are_a_one_line_error(calc, tmp_path, capsys):
    mirrors, inst = calc
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text(inst.model_dump_json() + "\n")
    argv = ["--dataset", str(dataset), "--repos", str(mirrors), "--report", "-o", str(tmp_path / "rows.jsonl")]
    assert gold_critic.main([*argv, "--instances", f"{inst.instance_id},nope__nope-1"]) == 2
    assert "--instances: not among the chosen instances" in capsys.readouterr().err
    assert gold_critic.main([*argv, "--instances", inst.instance_id]) == 0
    assert "rows: 0" in capsys.readouterr().out  # chosen, and nothing judged yet


def test_end_to_end_and_the_tests_a_gold_test_patch_edits(capsys):
    unbound = {"source": "pyright", "rule": "reportPossiblyUnbound", "file": "a.py", "line": 3, "message": "x"}
    ran = {"ran": True, "rejected": False, "weighed": [], "crashes": [], "broken": [], "no_regression": 1.0,
           "seconds": 10.0, "reason": ""}
    recs = [
        _row("a-1", "o/a", suspicions=[unbound], tests={**ran, "ran": False, "reason": "no test selected"}),
        _row("a-2", "o/a", suspicions=[unbound], tests=ran),
        _row("b-1", "o/b", tests={**ran, "rejected": True, "broken": ["tests/t.py::test_pinned[x]"],
                                  "no_regression": 0.995}),
        _row("b-2", "o/b", tests={**ran, "rejected": True, "broken": ["test_other (app.tests.T)"],
                                  "no_regression": 0.2}),
        _row("c-1", "o/c", tests={**ran, "ran": False}),  # no tests, no finding: the LLM's call
    ]
    edits = "--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1,3 +1,3 @@ def test_pinned(x):\n-    assert f() == 1\n+    assert f() == 2\n"
    gold_critic.report(recs, {"static", "tests"}, {"b-1": edits, "b-2": edits})
    out = capsys.readouterr().out
    assert "gold_false_alarm_tests=0.667 (2/3)" in out
    assert "no_regression=0.995: tests/t.py::test_pinned[x]" in out
    assert "gold_false_alarm_end_to_end=0.500 (2/4)" in out  # a-1 untested, b-2 under the threshold
    assert "    a-1: untested (no test selected): pyright/reportPossiblyUnbound a.py:3" in out
    assert "gold_false_alarm_tests_unpinned=0.333 (1/3)" in out and "test_patch edits: b-1" in out
    assert "gold_false_alarm_tests_scored=0.333 (1/3)" in out  # b-2: 0.5 + 0.3*0.2 + 0.2 < 0.8
    assert gold_critic.edited_by_test_patch("test_pinned (app.tests.T)", edits)
    assert not gold_critic.edited_by_test_patch("tests/t.py::test_pin", edits)


def test_a_test_edited_inside_its_body_is_pinned():
    patch = ("--- a/tests/config/test_config.py\n+++ b/tests/config/test_config.py\n"
             "@@ -65,18 +64,20 @@ def test_unknown_message_id(capsys: CaptureFixture) -> None:\n \n"
             " def test_unknown_option_name(capsys: CaptureFixture) -> None:\n"
             "-    with pytest.raises(_UnrecognizedOptionError):\n+    with pytest.raises(SystemExit):\n"
             "         Run([str(EMPTY_MODULE), \"--unknown-option=yes\"], exit=False)\n")
    assert gold_critic.edited_by_test_patch("tests/config/test_config.py::test_unknown_option_name", patch)
    assert not gold_critic.edited_by_test_patch("tests/config/test_config.py::test_unknown_message_id", patch)
