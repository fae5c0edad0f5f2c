"""eval.select_bench on the calc fixture: candidates from several runs, the rule's pick scored
against `resolved`, bad input refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import select_bench
from eval.fixtures.repos import make_calc_repo, write_dataset
from tests.scoring.test_select import FIX, FIX_AGAIN, WRONG, scratch_patch


def _preds(path: Path, iid: str, patch: str, resolved: bool | None) -> Path:
    row: dict[str, object] = {"instance_id": iid, "model_patch": patch, "system": path.stem}
    if resolved is not None:
        row["resolved"] = resolved
    path.write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.slow
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
    # One repository: a held-out fold would tune on no row, so no count that holds one out is printed.
    assert "one repository: not cross-validated" in "\n".join(lines)
    assert not any("cross-validated)" in x or "(nested)" in x or "other repositories:" in x for x in lines)
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


def _cands(*pairs: tuple[str, bool]) -> list[tuple[str, str, bool]]:
    return [(f"r{i}", patch, resolved) for i, (patch, resolved) in enumerate(pairs)]


def test_costly_signals_run_only_where_the_pick_can_change():
    applied = {"applies": True}
    # FIX and FIX_AGAIN are one change; WRONG another.
    mixed = _cands((FIX, True), (FIX_AGAIN, True), (WRONG, False))
    sig = {name: applied for name, _, _ in mixed}
    assert select_bench.behaviour_needed("contested", mixed, sig)
    assert select_bench.behaviour_needed("distinct", mixed, sig)
    # Every distinct change resolves (or none does): whatever the signals, the pick's outcome is the same.
    agreed = _cands((FIX, True), (WRONG, True))
    assert not select_bench.behaviour_needed("contested", agreed, sig)
    assert select_bench.behaviour_needed("distinct", agreed, sig)
    # Which member of a group is picked is fixed (the first): only the firsts' outcomes count.
    first_fails = _cands((FIX, False), (FIX_AGAIN, True), (WRONG, False))
    assert not select_bench.behaviour_needed("contested", first_fails, sig)
    # A change that does not apply is never picked: it cannot make an instance contested.
    assert not select_bench.behaviour_needed("contested", mixed, {"r0": {"applies": False}, "r1": {"applies": False},
                                                                  "r2": applied})
    one = _cands((FIX, True), (FIX_AGAIN, False))
    assert not select_bench.behaviour_needed("distinct", one, sig)
    assert select_bench.behaviour_needed("all", one, sig)


def test_rows_of_one_instance_from_two_runs_are_merged(tmp_path):
    rows = tmp_path / "rows.jsonl"
    static_row = {"instance_id": "x", "repo": "o/r", "seconds": 10.0, "behaviour": "static",
                  "signals": {"a": {"applies": True, "static": "Unsafe"}, "b": {"applies": False}}}
    tests_row = {"instance_id": "x", "repo": "o/r", "seconds": 5.0, "behaviour": "+tests",
                 "signals": {"a": {"applies": True, "no_regression": 0.5, "broke": True}}}
    rows.write_text(json.dumps(static_row) + "\n" + json.dumps(tests_row) + "\n{not json\n")
    merged = select_bench.load_rows(rows)["x"]
    assert merged["signals"]["a"] == {"applies": True, "static": "Unsafe", "no_regression": 0.5, "broke": True}
    assert merged["signals"]["b"] == {"applies": False}
    assert (merged["seconds"], merged["behaviour"]) == (15.0, "static; +tests")


def test_a_later_run_with_a_test_signal_takes_back_an_earlier_no_test_signal_note(tmp_path):
    rows = tmp_path / "rows.jsonl"
    note = select_bench.NO_TEST_SIGNAL + "env could not be built"
    failed = {"instance_id": "x", "repo": "o/r", "behaviour": "+tests", "note": note,
              "signals": {"a": {"applies": True, "tests_note": "env could not be built"}}}
    later = {"instance_id": "x", "repo": "o/r", "behaviour": "+tests",
             "signals": {"a": {"applies": True, "no_regression": 1.0, "tests_note": ""}}}
    rows.write_text(json.dumps(failed) + "\n" + json.dumps(later) + "\n")
    assert select_bench.load_rows(rows)["x"]["note"] == ""
    # Without a later signal the note stays, once; a checkout's note stays beside it.
    checkout = {"instance_id": "x", "repo": "o/r", "behaviour": "", "note": "cannot check out: gone", "signals": {}}
    rows.write_text("".join(json.dumps(r) + "\n" for r in (checkout, failed, failed)))
    assert select_bench.load_rows(rows)["x"]["note"] == "cannot check out: gone; " + note


@pytest.mark.slow
def test_bench_skips_the_static_phase_where_no_signal_can_change_the_outcome(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FIXGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    inst = make_calc_repo(tmp_path / "mirrors")
    dataset = write_dataset(tmp_path / "lite.jsonl", [inst])
    iid = inst["instance_id"]

    def bench(resolved: tuple[bool, bool], out: Path) -> dict:
        runs = [_preds(tmp_path / "a.jsonl", iid, WRONG, resolved[0]), _preds(tmp_path / "b.jsonl", iid, FIX, resolved[1])]
        assert select_bench.main(["--predictions", *map(str, runs), "--dataset", str(dataset), "--repos",
                                  str(tmp_path / "mirrors"), "--behaviour-where", "contested", "-o", str(out)]) == 0
        return json.loads(out.read_text())

    row = bench((False, True), tmp_path / "contested.jsonl")
    assert row["behaviour"] == "static"
    assert row["signals"]["a"]["static"] and row["signals"]["b"]["static"] == "Safe"
    row = bench((False, False), tmp_path / "agreed.jsonl")
    assert row["behaviour"] == "skipped (contested)"
    assert "static" not in row["signals"]["a"] and row["signals"]["a"]["applies"]
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("selected=0 oracle=0 ")


def test_nested_cross_validation_chooses_the_family_without_the_repository_it_counts():
    from scoring.verdict import choose_patch
    from tests.scoring.test_select import FIX_BREAKS_CLAMP

    def row(repo: str, n: int, large_resolves: bool) -> select_bench.Prepared:
        cands = [("small", FIX, not large_resolves), ("large", FIX_BREAKS_CLAMP, large_resolves)]
        return select_bench.Prepared(f"{repo}-{n}", repo, cands, {"signals": {"small": {"applies": True},
                                                                              "large": {"applies": True}}})

    # Repository x wants the larger change three times; y and z want the smaller one once each.
    rows = [row("x", n, True) for n in range(3)] + [row("y", 0, False), row("z", 0, False)]
    spaces = {"small": [choose_patch.Weights(size=1.0, twin=0.0, files=0.0, tokens=0.0)],
              "large": [choose_patch.Weights(size=-1.0, twin=0.0, files=0.0, tokens=0.0)]}
    matrices = {name: select_bench.resolved_matrix(rows, space) for name, space in spaces.items()}
    # Compared on all rows, "large" wins (3 against 2) and would be reported as 3...
    assert {name: int(m.sum()) for name, m in matrices.items()} == {"small": 2, "large": 3}
    counts, chosen = select_bench.nested_cv(rows, spaces, matrices)
    # ...while each repository, held out, gets the family the other two prefer: always the wrong one.
    assert chosen == {"x": "small", "y": "large", "z": "large"}
    assert counts == {"x": 0, "y": 0, "z": 0}


def test_the_fair_best_run_is_chosen_on_the_other_repositories():
    # Run a resolves repository x's three instances, b one of y's and one of z's: a is the best
    # single run in hindsight (3 against 2), but chosen without the repository it is counted on.
    repo_of = {"x1": "x", "x2": "x", "x3": "x", "y1": "y", "z1": "z"}
    runs = {"a": {i: {"resolved": i.startswith("x")} for i in repo_of},
            "b": {i: {"resolved": not i.startswith("x")} for i in repo_of}}
    assert select_bench.best_run_held_out(repo_of, runs) == {"x": ("b", 0), "y": ("a", 0), "z": ("a", 0)}


@pytest.mark.slow
def test_instances_without_a_mirror_are_judged_from_the_patches_alone(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FIXGRAPH_CACHE_DIR", str(tmp_path / "cache"))
    inst = make_calc_repo(tmp_path / "mirrors")
    # The same bug in a repository this machine has no mirror of: checking it out would clone from GitHub.
    elsewhere = inst | {"instance_id": "elsewhere__lib-1", "repo": "elsewhere/lib"}
    dataset = write_dataset(tmp_path / "lite.jsonl", [inst, elsewhere])
    runs = []
    for name, patch, resolved in (("a", WRONG, False), ("b", FIX, True), ("c", FIX_AGAIN, True)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps({"instance_id": i, "model_patch": patch, "system": name, "resolved": resolved})
                                + "\n" for i in (inst["instance_id"], elsewhere["instance_id"])))
        runs.append(str(path))
    out = tmp_path / "rows.jsonl"
    args = ["--predictions", *runs, "--dataset", str(dataset), "--repos", str(tmp_path / "mirrors"), "--no-static",
            "--unmirrored", "only", "-o", str(out)]
    assert select_bench.main(args) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == \
        "selected=1 oracle=1 vote=1.0 random=0.67 best_single=1 instances=1"
    row = json.loads(out.read_text())
    assert row["instance_id"] == "elsewhere__lib-1" and row["note"] == "cannot check out: no mirror of elsewhere/lib"
    assert row["signals"]["b"] == {"applies": True, "why": "no checkout"}
    assert not (tmp_path / "cache" / "repos").exists() or not any((tmp_path / "cache" / "repos").iterdir())
    # By default only the mirrored instance is judged; with include, both.
    assert select_bench.main([*args[:-4], "-o", str(tmp_path / "skip.jsonl")]) == 0
    assert [json.loads(x)["instance_id"] for x in (tmp_path / "skip.jsonl").read_text().splitlines()] == [inst["instance_id"]]
    assert select_bench.main([*args[:-3], "include", "-o", str(tmp_path / "both.jsonl")]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("instances=2")
