"""eval.critic_bench on a fixture mirror: SWEDE labelling, both methods in one run, the headline."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from eval.critic_bench import Tally, _count_pre36, _count_runtime, main, outside_processes
from eval.fixtures.critic_repo import edit, make_repo
from eval.redo_static import redo_static
from fixgraph.config import CriticSettings
from scoring.static.differential import pyright_command
from tests.helpers.testrun_helpers import local_config

OVERRIDE = "\n\nclass Big(Circle):\n    def area(self, scale):\n        return 2\n"


@pytest.mark.slow
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


@pytest.mark.slow
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


def _one_runtime_row(tmp_path: Path, src: Any, patch: str, issue: str) -> tuple[Path, list[str]]:
    """A mirror of ``src``, one positive row with ``patch`` for an instance whose issue is
    ``issue``, a local-backend config: the rows file and the runtime column's arguments."""
    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(src.path), str(mirrors / "demo+shapes" / "repo")], check=True)
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    dataset.write_text(json.dumps({"instance_id": "demo__shapes-1", "repo": "demo/shapes", "base_commit": src.base,
                                   "problem_statement": issue}) + "\n")
    preds.write_text(json.dumps({"instance_id": "demo__shapes-1", "system": "agent", "model_patch": patch,
                                 "failure_kind": "runtime_error"}) + "\n")
    config = local_config(tmp_path, cache="envs")
    rows = tmp_path / "rows.jsonl"
    return rows, ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors), "--runtime",
                  "--config", str(config), "--cache-dir", str(tmp_path / "cache"), "-o", str(rows)]


@pytest.mark.slow
def test_the_runtime_column_saves_each_crash_and_counts_both_scopes_again_on_resume(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Circle.area() now returns a str: the untouched pkg/report.py's total() raises TypeError
    (inside sum(), so its innermost repository frame is the caller) and test_area's comparison
    raises in the test itself. Scope ``touched`` sees only regressions; ``source`` flags the
    caller. Both are counted from one run, and again from the saved rows alone."""
    src = make_repo(tmp_path / "src")
    (src.path / "pkg" / "report.py").write_text("def total(shapes):\n    return sum(s.area() for s in shapes)\n")
    (src.path / "tests" / "test_report.py").write_text(
        "from pkg.report import total\nfrom pkg.shapes import Circle\n\n\n"
        "def test_total():\n    assert total([Circle(1)]) > 3\n")
    subprocess.run(["git", "add", "-A"], cwd=src.path, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "report"], cwd=src.path, check=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src.path, check=True, capture_output=True,
                          text=True).stdout.strip()
    src.base = base
    patch = edit(src, "pkg/shapes.py", "return math.pi * self.r ** 2", 'return "%.2f" % (math.pi * self.r ** 2)')
    rows, common = _one_runtime_row(tmp_path, src, patch, "p")

    printed: list[str] = []

    def table() -> tuple[dict[str, list[str]], str]:
        out = capsys.readouterr().out.strip().splitlines()
        printed[:] = out
        return {line.split()[0]: line.split()[1:6] for line in out if line.startswith("ours_static+")}, out[-1]

    assert main(common + ["--runtime-scope", "touched"]) == 0
    columns, last = table()
    # No static finding: the earlier veto rule took the same path (pre36 = the headline scope).
    assert columns == {"ours_static+runtime": ["1", "0", "0", "1", "0"],
                       "ours_static+runtime_source": ["1", "1", "0", "0", "0"],
                       "ours_static+tests_only": ["1", "0", "0", "1", "0"],
                       "ours_static+runtime_pre36": ["1", "0", "0", "1", "0"]}
    assert "F1_runtime_source=1.000 P_runtime_source=1.000 " in last and " F1_runtime=0.000 " in last
    assert " F1_runtime_pre36=0.000 " in last
    [rec] = [json.loads(line) for line in rows.read_text().splitlines()]
    rt = rec["runtime"]
    assert rt["ran"] and not rt["unsafe"] and rt["scope"] == "touched" and rt["findings"] == []
    assert rt["replay"]["ran"] is False and "no Python code" in rt["replay"]["note"]
    crashes = {c["test"]: c for c in rt["crashes"]}
    assert set(crashes) == {"tests/test_report.py::test_total", "tests/test_shapes.py::test_area"}
    total = crashes["tests/test_report.py::test_total"]
    assert (total["type"], total["frame"]["file"], total["frame"]["function"]) == ("TypeError", "pkg/report.py", "total")
    assert not total["in_test"] and total["touched"] is None
    assert crashes["tests/test_shapes.py::test_area"]["in_test"]
    # Where the row's seconds went: the tests' sandboxed processes apart from the Critic's own work.
    assert rt["phases"]["sandboxed process"] > 0 and "test selection" in rt["phases"]
    outside = outside_processes(rt)
    assert outside is not None and 0 < outside < rt["seconds"]
    [line] = [ln for ln in printed if "outside the sandboxed processes" in ln]
    assert f"median {outside:.2f} s a patch over the 1 rows" in line

    # The saved rows alone give both columns again, in either scope as the headline (the
    # config's default, regression.runtime_scope, is source).
    assert main(common + ["--resume", "--runtime-scope", "touched"]) == 0
    assert table()[0] == columns
    assert main(common + ["--resume"]) == 0
    columns, last = table()
    assert columns == {"ours_static+runtime": ["1", "1", "0", "0", "0"],
                       "ours_static+runtime_touched": ["1", "0", "0", "1", "0"],
                       "ours_static+tests_only": ["1", "1", "0", "0", "0"],
                       "ours_static+runtime_pre36": ["1", "1", "0", "0", "0"]}
    assert " F1_runtime=1.000 P_runtime=1.000 " in last and "F1_runtime_touched=0.000 P_runtime_touched=0.000 " in last
    assert len(rows.read_text().splitlines()) == 1


@pytest.mark.slow
def test_the_replay_counts_in_the_runtime_column_and_is_added_to_rows_saved_without_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """bounds() now reads an attribute Circle lacks: no existing test calls it, the issue's code
    does. The runtime column flags it through the replay and ``ours_static+tests_only`` does not;
    a row saved before the replay existed gets it from ``--add-replay``, its tests not run again."""
    src = make_repo(tmp_path / "src")
    patch = edit(src, "pkg/shapes.py", "return 0, c.r, 2 * c.r", "return 0, c.r, c.diameter")
    issue = "bounds() is wrong\n\n```python\nfrom pkg.shapes import Circle, bounds\nprint(bounds(Circle(2)))\n```\n"
    rows, common = _one_runtime_row(tmp_path, src, patch, issue)

    def table() -> dict[str, list[str]]:
        out = capsys.readouterr().out.strip().splitlines()
        return {line.split()[0]: line.split()[1:6] for line in out if line.startswith("ours_static+")}

    assert main(common) == 0
    assert table() == {"ours_static+runtime": ["1", "1", "0", "0", "0"],
                       "ours_static+runtime_touched": ["1", "1", "0", "0", "0"],
                       "ours_static+tests_only": ["1", "0", "0", "1", "0"],
                       "ours_static+runtime_pre36": ["1", "1", "0", "0", "0"]}
    [rec] = [json.loads(line) for line in rows.read_text().splitlines()]
    rt = rec["runtime"]
    assert rt["unsafe"] and rt["findings"] == [] and rt["tests_run"] == 1
    [summary] = rt["replay"]["summaries"]
    assert (summary["kind"], summary["type"], summary["frame"][:1]) == ("introduced", "AttributeError", ["pkg/shapes.py"])

    # The same row as an earlier version saved it: no replay. --resume alone counts the saved
    # verdict; --add-replay replays it, appends the row again, and runs no test.
    del rt["replay"]
    rt["unsafe"] = False
    rows.write_text(json.dumps(rec) + "\n")
    assert main(common + ["--resume"]) == 0
    assert table()["ours_static+runtime"] == ["1", "0", "0", "1", "0"]
    assert main(common + ["--resume", "--add-replay"]) == 0
    assert table()["ours_static+runtime"] == ["1", "1", "0", "0", "0"]
    saved = [json.loads(line) for line in rows.read_text().splitlines()]
    assert len(saved) == 2 and saved[-1]["runtime"]["replay"]["summaries"] == [summary]
    assert saved[-1]["runtime"]["tests_run"] == 1 and saved[-1]["runtime"]["crashes"] == rt["crashes"]
    assert main(common + ["--resume", "--add-replay"]) == 0  # nothing left to add
    assert len(rows.read_text().splitlines()) == 2


def test_the_earlier_veto_rule_is_counted_from_the_same_rows() -> None:
    """A suspicion the tests contradicted: the Critic now passes the patch after its tests, the
    earlier veto rule flagged it after the static phase alone, in the static phase's seconds."""
    rec = {"ours": {"status": "ok", "unsafe": True, "seconds": 4.0},
           "runtime": {"ran": True, "unsafe": False, "crashes": [], "seconds": 60.0,
                       "weighed": [{"status": "contradicted"}], "replay": {"summaries": []}}}
    now, before = Tally("now"), Tally("pre36")
    _count_runtime(rec, False, now, "source")
    _count_pre36(rec, False, before, "source")
    assert (now.fp, now.tn, now.seconds) == (0, 1, [60.0])
    assert (before.fp, before.tn, before.seconds) == (1, 0, [4.0])


@pytest.mark.slow
def test_redo_static_on_a_patch_that_no_longer_reverses_is_a_row_it_could_not_analyse(tmp_path: Path) -> None:
    # A worktree that does not hold the patch as given (a file changed after it was applied) made
    # git apply -R fail, and the whole bench end with a traceback.
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "a.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    (repo / "a.py").write_text("x = 2\n")
    patch = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True).stdout
    (repo / "a.py").write_text("x = 3\n")  # not what the patch left
    r = redo_static(pyright_command(CriticSettings()), cast(Any, SimpleNamespace(path=repo)), patch)
    assert not r.unsafe and r.note.startswith("not analysed: the patch does not reverse"), r.note
    assert not r.analysed
    assert (repo / "a.py").read_text() == "x = 3\n"  # left as found
