"""Does the loop's own regression check see the regressions real agents' patches make?

    python -m eval.regression_bench --predictions FILE --dataset ../shared/data/swebench_lite.jsonl \\
        --repos DIR [--only pallets/flask,psf/requests] [--stride K] [--shard I/N] [--limit N] \\
        [--base-runs N] [-o ROWS.jsonl] [--resume | --rescore] [--config NAME]

For each prediction whose repository has a mirror under DIR, on the evaluation side the instance's
hidden tests run at the base and with the patch (the configured backend, venv by default, with
``test_patch`` applied as swebench's harness does: ``eval.hidden.run_hidden``). A patch has a
*visible regression* when a ``PASS_TO_PASS`` test that passed at the base fails with it. The
prediction is the loop's own check (``scoring.execution.outcomes.own_outcome`` with no reproduction test: the
existing tests ``scoring.execution.choose_tests`` picks from the base tree and the patch, nothing hidden): it
flags the patch when a selected test that passed at the base fails with it, unless every such test
is an expected behaviour change (``scoring.verdict.expected_change``: an assertion failure in a test named
after the issue's title, as the Critic reads it). The figures without that rule are printed too,
and ``--rescore`` scores saved rows again by the current rules without running anything.

It prints the patches judged, those with a visible regression, the recall and precision of the
loop's check on them, the regressions the loop found in tests outside ``PASS_TO_PASS`` (real
breakage the harness does not count; they are false positives in the headline precision and are
listed), the runtime findings (``scoring.runtime.findings``), tests run and seconds per patch, and, where
the harness's verdict is known (``resolved`` in the predictions file), how often the hidden-test
run here agrees with it, per repo, with the disagreements.

A row whose environment cannot be built, or whose hidden tests report nothing at the base, is not
runnable (with its reason), never counted as clean or as a regression; a patch that does not apply
is recorded. Last line: ``regression_recall=<r> regression_precision=<p> median_s=<s>``, where
``median_s`` is the median wall time of the loop's check per patch (its base run included: the
first attempt's cost).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import git

from eval import hidden
from eval.critic_bench import Tally
from eval.hidden import gold_check, run_hidden, tests_the_test_patch_edits
from eval.options import add_row_options, check_options, dataset_map, row_repo, sample
from eval.rows import (
    instance_key,
    mirrored_rows,
    open_rows,
    previous_rows,
    run_tag,
    run_terminable,
    write_row,
)
from fixgraph.config import load_config
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree
from scoring.execution.outcomes import listed_among, own_outcome
from scoring.execution.runner import make_runner
from scoring.execution.testenv import PASSING, SuiteRunner
from scoring.runtime.findings import runtime_findings
from scoring.verdict import expected_change
from scoring.verdict.judge import InputError, load_predictions


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.regression_bench", description=(__doc__ or "").split("\n")[0])
    add_row_options(p, rows="row", predictions="predictions JSONL (lite_predictions/*.jsonl)",
                    output=Path("runs/regression_bench.jsonl"),
                    config="config for the test backend and the regression selection")
    p.add_argument("--base-runs", type=int, default=0, choices=(0, 1, 2, 3),
                   help="runs of the selected tests at the base (flaky ones left out); 0: the config's")
    p.add_argument("--expected-changes", action="store_true",
                   help="count no expected behaviour change as a flag (scoring.verdict.expected_change); default: the "
                        "config's regression.expected_changes")
    p.add_argument("--rescore", action="store_true",
                   help="score the rows already in --output by the current rules and judge no new row (safe beside a "
                        "run still writing them)")
    p.add_argument("--check-extra", action="store_true",
                   help="with --rescore: run the gold check (evaluation side) on saved false positives flagged outside "
                        "PASS_TO_PASS that lack it, and append the rows so checked to --output")
    return p


def judge_row(row: dict[str, Any], inst: Instance, wt_key: str, repos: RepoCache, runner: SuiteRunner,
              cfg: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"instance_id": inst.instance_id, "repo": inst.repo, "version": inst.version,
                           "system": row.get("system", ""), "resolved": row.get("resolved")}
    patch = row.get("model_patch") or ""
    if not patch.strip():
        return rec | {"status": "empty_patch"}
    try:
        wt = repos.worktree(inst.repo, inst.base_commit, wt_key)
    except (WorkspaceError, git.GitCommandError) as exc:
        return rec | {"status": "no_checkout", "reason": str(exc).strip().splitlines()[-1][:200]}
    try:
        wt.apply(patch)
    except PatchError as exc:
        return rec | {"status": "not_applied", "reason": str(exc)[:300]}
    try:
        t0 = time.monotonic()
        truth = run_hidden(runner, inst, wt, patch)  # evaluation side: the hidden tests
        rec["hidden_seconds"] = round(time.monotonic() - t0, 1)
        if not truth.runnable:
            return rec | {"status": "not_runnable", "reason": truth.reason[:300]}
        p2p = inst.PASS_TO_PASS
        rec["hidden_timed_out"] = truth.timed_out
        # A run cut by its timeout did not reach the tests it does not report: unknown, not broken.
        rec["visible"] = [t for t in sorted(truth.broken(p2p))
                          if not truth.timed_out or truth.pass_to_pass_after.get(t, "MISSING") != "MISSING"]
        rec["p2p_passing_at_base"] = sum(truth.pass_to_pass_before.get(t) in PASSING for t in p2p)
        rec["resolved_here"] = (all(s in PASSING for s in truth.fail_to_pass.values())
                                and all(s in PASSING for s in truth.pass_to_pass_after.values()))
        # For the fidelity report: what fails here, and which of those PASS_TO_PASS tests fail at
        # the base as well (this machine's environment: no network, a different library).
        failing = {t: st for t, st in {**truth.fail_to_pass, **truth.pass_to_pass_after}.items() if st not in PASSING}
        rec["hidden_failing"] = dict(list(failing.items())[:50])
        rec["hidden_failing_at_base"] = [t for t in failing if t in truth.pass_to_pass_before
                                         and truth.pass_to_pass_before[t] not in PASSING][:50]
        t1 = time.monotonic()
        own = own_outcome(runner, inst.task(), wt, patch, [], cfg.regression)  # the loop's check
        rec["own_seconds"] = round(time.monotonic() - t1, 1)
        rec["own_base_seconds"] = round(own.base_seconds, 1)
        rec["own_run_seconds"] = round(own.seconds, 1)  # the test processes alone: no wait for a shared env
        rec["own_ran"] = own.regression_ran
        rec["own_reason"] = own.reason[:300]
        rec["selected"] = own.selection.get("files", [])
        rec["selected_tests"] = own.selection.get("tests", [])
        rec["tests_run"] = len(own.pass_to_pass_before)
        rec["broken"] = sorted(own.broken())
        # What each broken test raised ("" when no record says): a crash or a failed assertion.
        kinds = expected_change.failure_kinds(own)
        rec["flag_kinds"] = {t: kinds.get(t, "") for t in rec["broken"]}
        # What each said (an assertion's compared values), to study which flags a fix means to cause.
        said = {str(c.get("test")): str(c.get("message", ""))[:400] for c in own.regression_crashes}
        rec["flag_messages"] = {t: said[t] for t in rec["broken"][:20] if said.get(t)}
        rec["edited"] = tests_the_test_patch_edits(inst, wt, rec["broken"])
        apply_expected(rec, inst, cfg.regression.expected_changes)
        rec["visible_new"] = tests_the_test_patch_edits(inst, wt, rec["visible"])
        check_extra(rec, inst, wt, patch, runner, cfg)
        rec["runtime"] = [{k: f.get(k) for k in ("rule", "file", "line", "symbol", "message")}
                          for f in runtime_findings(own, patch, cfg.regression.runtime_scope)]
        rec["notes"] = own.notes[:5]
        return rec | {"status": "judged"}
    finally:
        wt.reset()


def apply_expected(rec: dict[str, Any], inst: Instance, enabled: bool) -> None:
    """The loop's verdict on a judged row: its broken tests, but, when ``enabled``, the expected
    behaviour changes (``scoring.verdict.expected_change``, from the issue's title and the failures' kinds,
    nothing hidden; recorded either way). Rows saved before the rule (no ``broken``) are scored
    again from what they recorded."""
    if "broken" not in rec:
        rec["broken"] = list(rec["flagged"])
    rec["expected_change"] = expected_change.expected_changes(
        rec["broken"], rec.get("flag_kinds") or {}, inst.problem_statement, inst.repo)
    rec["flagged"] = [t for t in rec["broken"] if not enabled or t not in rec["expected_change"]]
    # The loop's ids are whole; the dataset lists some cut at a space (scoring.execution.outcomes.as_listed).
    listed = set(listed_among(rec["flagged"], inst.PASS_TO_PASS))
    rec["extra"] = [t for t in rec["flagged"] if t not in listed]


def check_extra(rec: dict[str, Any], inst: Instance, wt: Worktree, patch: str, runner: SuiteRunner, cfg: Any) -> bool:
    """Evaluation side: a false positive's flags outside PASS_TO_PASS, run with the instance's gold
    patch and with the candidate, each with its test patch (``eval.hidden.gold_check``): is the flag
    breakage the harness does not count, or a change the fix makes too? Only flags that count
    against precision are checked (a patch with no visible regression). Whether it ran."""
    if not outside_only(rec) or gold_checked(rec):
        return False
    rec["extra_check"] = gold_check(runner, inst, wt, patch, rec["extra"], rec.get("selected") or [],
                                    cfg.regression.timeout_s)
    return True


def outside_only(rec: dict[str, Any]) -> bool:
    """Whether a row is a false positive by flags outside PASS_TO_PASS (flags there, no visible
    regression): the rows the gold check looks at."""
    return bool(rec["extra"]) and not rec["visible"]


def gold_checked(rec: dict[str, Any]) -> bool:
    """Whether ``rec`` holds a gold check as ``check_extra`` makes it now (rows checked before the
    third run of FAIL_TO_PASS tests lack it)."""
    return "extra_check" in rec and all("gold_base" in v for v in rec["extra_check"]["tests"].values()
                                        if v["verdict"] == hidden.TARGET)


def select_rows(args: argparse.Namespace, dataset: dict[str, Instance],
                only: set[str]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    shard = check_options(args)
    skipped = {"not in dataset": 0, "no mirror": 0, "other repo": 0}
    rows = mirrored_rows(load_predictions(args.predictions), dataset, args.repos, only, skipped)
    return sample(rows, row_repo(dataset), args.stride, args.limit, shard), skipped


def run(args: argparse.Namespace) -> int:
    check_options(args)  # a bad option fails before the config and the dataset are read
    cfg = load_config(args.config)
    if args.base_runs:
        cfg = cfg.model_copy(update={"regression": cfg.regression.model_copy(update={"base_runs": args.base_runs})})
    if args.expected_changes:
        cfg = cfg.model_copy(update={"regression": cfg.regression.model_copy(update={"expected_changes": True})})
    args.expected_changes = cfg.regression.expected_changes
    dataset, only = dataset_map(args)
    rows, skipped = select_rows(args, dataset, only)
    if not rows:
        raise InputError("no predictions with a mirror to judge")
    done = previous_rows(args.output, instance_key) if args.resume or args.rescore else {}
    cache_dir = cfg.cache_dir.resolve()
    repos = RepoCache(cache_dir, mirrors=args.repos)
    runner = make_runner(cfg.tests, cache_dir)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    print(f"judging {len(rows)} predictions (skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()) + ")",
          file=sys.stderr)
    key = f"regrbench-{run_tag(args)}"
    if args.rescore:
        print(f"--rescore: {sum(r['instance_id'] not in done for r in rows)} rows not judged yet are left out",
              file=sys.stderr)
        rows = [r for r in rows if r["instance_id"] in done]
    try:
        with open_rows(args.output, args.resume or args.rescore) as out:
            for n, row in enumerate(rows, 1):
                if row["instance_id"] in done:
                    continue
                inst = dataset[row["instance_id"]]
                rec = judge_row(row, inst, f"{key}-{inst.repo_slug}", repos, runner, cfg)
                done[inst.instance_id] = rec
                write_row(out, rec)
                print(f"[{n}/{len(rows)}] {inst.instance_id}: {rec['status']} visible={len(rec.get('visible', []))} "
                      f"flagged={len(rec.get('flagged', []))} runtime={len(rec.get('runtime', []))} "
                      f"own={rec.get('own_seconds')}s hidden={rec.get('hidden_seconds')}s "
                      f"{rec.get('reason', '') or rec.get('own_reason', '')}"[:400], file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted: the figures below cover the rows judged so far (rerun with --resume to continue)",
              file=sys.stderr)
    recs = [done[r["instance_id"]] for r in rows if r["instance_id"] in done]
    for rec in recs:
        if rec.get("status") == "judged":
            apply_expected(rec, dataset[rec["instance_id"]], cfg.regression.expected_changes)
    patches = {r["instance_id"]: r.get("model_patch") or "" for r in rows}
    for rec in recs:  # rows judged before the fields existed
        if rec.get("status") != "judged":
            continue
        inst = dataset[rec["instance_id"]]
        old = "edited" not in rec or "visible_new" not in rec
        unchecked = args.check_extra and outside_only(rec) and not gold_checked(rec)
        if not (old or unchecked):
            continue
        with contextlib.suppress(WorkspaceError, git.GitCommandError):
            wt = repos.worktree(inst.repo, inst.base_commit, f"{key}-{inst.repo_slug}")
            if old:
                rec["edited"] = tests_the_test_patch_edits(inst, wt, rec["broken"])
                rec["visible_new"] = tests_the_test_patch_edits(inst, wt, rec["visible"])
            if unchecked and check_extra(rec, inst, wt, patches[rec["instance_id"]], runner, cfg):
                print(f"gold check {inst.instance_id}: " + ", ".join(
                    f"{t} {v['verdict']}" for t, v in list(rec["extra_check"]["tests"].items())[:5])
                    + f" ({rec['extra_check']['seconds']}s) {rec['extra_check']['reason']}"[:400], file=sys.stderr)
                with args.output.open("a", encoding="utf-8") as out:  # a later row of an id wins on reading
                    write_row(out, rec)
    print(report(recs, args))
    return 0


def report(recs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    judged = [r for r in recs if r["status"] == "judged"]
    tally = Tally("loop check")
    for r in judged:
        tally.add(bool(r["visible"]), bool(r["flagged"]), r["own_seconds"])
    lines = [f"rows: {len(recs)} (predictions {args.predictions.name}, stride {args.stride}"
             + (f", only {args.only}" if args.only else "") + (f", shard {args.shard}" if args.shard else "") + ")"]
    for status in ("not_runnable", "not_applied", "no_checkout", "empty_patch"):
        these = [r for r in recs if r["status"] == status]
        if these:
            lines.append(f"{status}: {len(these)}")
            lines += [f"  {r['instance_id']}: {r.get('reason', '')[:160]}" for r in these]
    lines.append(f"patches judged: {len(judged)}; with a visible regression (PASS_TO_PASS): "
                 f"{sum(bool(r['visible']) for r in judged)}; flagged by the loop's check: "
                 f"{sum(bool(r['flagged']) for r in judged)}")
    lines.append(f"TP {tally.tp} FP {tally.fp} FN {tally.fn} TN {tally.tn}; "
                 f"loop's check could not run on {sum(not r['own_ran'] for r in judged)} (counted as not flagged)")
    unseen = 0
    for r in judged:
        if r["visible"] and not r["flagged"]:
            # Every broken test is one the test patch adds or rewrites: no existing test has it.
            new_only = "visible_new" in r and set(r["visible"]) <= set(r["visible_new"])
            unseen += new_only
            lines.append(f"  missed {r['instance_id']}: {', '.join(r['visible'][:3])}; "
                         + ("only in tests the instance's test patch adds or rewrites" if new_only else
                            f"selected {r['selected'][:3]}{' + ' + str(len(r.get('selected_tests', []))) + ' single tests' if r.get('selected_tests') else ''}"
                            f" ({r['own_reason'][:100] or 'ran'})"))
    if unseen and tally.tp + tally.fn - unseen:
        lines.append(f"recall over the visible regressions an existing test can show ({unseen} misses are only in "
                     f"tests the test patch adds or rewrites): {tally.tp / (tally.tp + tally.fn - unseen):.3f}")
    extra = [r for r in judged if r["extra"]]
    lines.append(f"regressions outside PASS_TO_PASS found by the loop: {len(extra)} patches, "
                 f"{sum(len(r['extra']) for r in extra)} tests"
                 + (f" ({sum(not r['visible'] for r in extra)} of those patches have no visible regression)" if extra else ""))
    lines += [f"  {r['instance_id']}: {', '.join(r['extra'][:3])}" for r in extra[:8]]
    lines += false_positives(judged, tally)
    lines += gold_report(judged, tally)
    lines += expected_report(judged, bool(getattr(args, "expected_changes", False)))
    runtime = [r for r in judged if r["runtime"]]
    lines.append(f"runtime findings: {len(runtime)} patches")
    lines += [f"  {r['instance_id']}: {f['rule']} at {f['file']}:{f['line']} in {f['symbol']}"
              for r in runtime[:8] for f in r["runtime"][:1]]
    if judged:
        lines.append(f"tests run per patch: median {statistics.median(r['tests_run'] for r in judged):.0f}; "
                     f"seconds per patch (loop's check): median {tally.median_s:.1f}, p95 {tally.p95_s:.1f}; "
                     f"hidden run: median {statistics.median(r['hidden_seconds'] for r in judged):.1f}")
        runs = [r["own_run_seconds"] for r in judged if "own_run_seconds" in r]
        if runs:
            lines.append(f"seconds per patch in the test processes alone (no queueing for an env another job "
                         f"holds): median {statistics.median(runs):.1f} ({len(runs)} patches)")
        later = [r["own_seconds"] - r["own_base_seconds"] for r in judged if "own_base_seconds" in r]
        if later:  # a later attempt of the same task finds the base run cached
            lines.append(f"seconds per later attempt (base run cached): median {statistics.median(later):.1f}, "
                         f"max {max(later):.1f} ({len(later)} patches)")
    lines += fidelity(recs)
    lines.append(f"regression_recall={tally.recall:.3f} regression_precision={tally.precision:.3f} "
                 f"median_s={tally.median_s:.1f}")
    return "\n".join(lines)


def fp_cause(r: dict[str, Any]) -> str:
    """Why the loop flagged a patch the harness's PASS_TO_PASS tests find clean."""
    if "edited" in r and set(r["flagged"]) <= set(r["edited"]):
        return "rewritten"  # the test patch rewrites every flagged test: the fix changes what it asserts
    if r["runtime"]:
        return "crash"  # a runtime error in a file the patch touched, in a test the harness does not run
    return "other"


def false_positives(judged: list[dict[str, Any]], tally: Tally) -> list[str]:
    fps = [r for r in judged if r["flagged"] and not r["visible"]]
    if not fps:
        return []
    causes = [fp_cause(r) for r in fps]
    lines = [f"false positives: {len(fps)}; every flagged test rewritten by the instance's test patch (the fix "
             f"changes what it asserts): {causes.count('rewritten')}; a runtime error in a touched file, in a test "
             f"outside PASS_TO_PASS: {causes.count('crash')}; other: {causes.count('other')}"]
    for r, cause in zip(fps, causes, strict=True):
        kinds = sorted({k or "kind unknown" for t, k in (r.get("flag_kinds") or {}).items() if t in r["flagged"]})
        lines.append(f"  {r['instance_id']}: {cause}; {len(r['flagged'])} tests"
                     + (f" ({', '.join(kinds)})" if kinds else "") + f", e.g. {r['flagged'][0]}")
    rewritten = causes.count("rewritten")
    if tally.tp + tally.fp - rewritten:
        # Evaluation side only: the loop cannot know which tests the fix's own test patch rewrites.
        lines.append(f"precision with the rewritten-test flags set aside (reads the test patch: not the loop's): "
                     f"{tally.tp / (tally.tp + tally.fp - rewritten):.3f}")
    return lines


def gold_report(judged: list[dict[str, Any]], tally: Tally) -> list[str]:
    """The gold check of the false positives' flags outside PASS_TO_PASS (``check_extra``), and
    precision counting a flag the check verifies as breakage as true: beside the strict figure,
    never instead of it (it reads the gold patch, which the loop cannot)."""
    fps = [r for r in judged if outside_only(r)]
    if not fps:
        return []
    checked = [r for r in fps if gold_checked(r)]
    verdicts = [(r, t, v) for r in checked for t, v in r["extra_check"]["tests"].items()]
    lines = [f"flags outside PASS_TO_PASS on patches with no visible regression: {len(fps)} patches; run again with "
             f"the instance's gold patch and with the candidate, each with its test patch (evaluation side): "
             f"{len(checked)} patches, {len(verdicts)} tests"]
    words = {hidden.VERIFIED: "verified breakage (passes with the gold patch, fails with the candidate)",
             hidden.SHARED: "fails or is gone with the gold patch too (an intended or shared change)",
             hidden.REWRITTEN: "passes with the candidate once the test patch rewrites it",
             hidden.TARGET: "a FAIL_TO_PASS test the candidate fails, whose base version the gold patch fails too "
                            "(the fix changes what it asserts)",
             hidden.TARGET_KEPT: "a FAIL_TO_PASS test the candidate fails, whose base version the gold patch passes "
                                 "(the candidate broke what the fix keeps; the harness says unresolved, not "
                                 "regression)",
             hidden.UNCHECKED: "not checked (a run could not say)"}
    for verdict, text in words.items():
        these = [(r, t, v) for r, t, v in verdicts if v["verdict"] == verdict]
        if these:
            lines.append(f"  {text}: {len(these)} tests on {len({r['instance_id'] for r, _, _ in these})} patches, "
                         "e.g. " + "; ".join(f"{r['instance_id']} {t} (gold {v['gold']}, candidate {v['candidate']})"
                                            for r, t, v in these[:3]))
    for r in checked:
        if r["extra_check"]["reason"]:
            lines.append(f"  {r['instance_id']}: {r['extra_check']['reason'][:200]}")
    if len(checked) < len(fps):
        lines.append(f"  not run yet on {len(fps) - len(checked)} patches (--rescore --check-extra): "
                     + ", ".join(r["instance_id"] for r in fps if not gold_checked(r)))
    def some(r: dict[str, Any], kinds: set[str]) -> bool:
        return any(v["verdict"] in kinds for v in r["extra_check"]["tests"].values())

    verified = sum(some(r, {hidden.VERIFIED}) for r in checked)
    kept = sum(some(r, {hidden.VERIFIED, hidden.TARGET_KEPT}) for r in checked)
    if tally.tp + tally.fp:
        lines.append(f"precision counting verified breakage as true (reads the gold patch: not the loop's; "
                     f"{verified} false positives verified): {(tally.tp + verified) / (tally.tp + tally.fp):.3f}")
        if kept > verified:
            lines.append(f"  and counting breakage of a FAIL_TO_PASS test's base version that the gold patch keeps "
                         f"({kept} false positives): {(tally.tp + kept) / (tally.tp + tally.fp):.3f}")
    return lines


def expected_report(judged: list[dict[str, Any]], enabled: bool) -> list[str]:
    """What the expected-change rule sets aside (``enabled``) or would, checked against the
    evaluation's view, and the figures of the other setting."""
    aside = [r for r in judged if r.get("expected_change")]
    other = Tally("the other setting")
    for r in judged:
        broken = r.get("broken", r["flagged"])
        left = broken if enabled else [t for t in broken if t not in (r.get("expected_change") or {})]
        other.add(bool(r["visible"]), bool(left), r["own_seconds"])
    tests = [t for r in aside for t in r["expected_change"]]
    # Evaluation side: a set-aside test the fix's own test patch rewrites was meant to change; one
    # that is a visible regression was not.
    rewritten = sum(t in set(r.get("edited") or []) for r in aside for t in r["expected_change"])
    dropped = sum(t in set(r["visible"]) for r in aside for t in r["expected_change"])
    lines = [f"expected behaviour changes {'set aside' if enabled else 'the rule would set aside (off)'} "
             f"(every broken test an assertion in a test named after the "
             f"issue's title): {len(aside)} patches, {len(tests)} tests; of those tests, rewritten by the "
             f"instance's test patch: {rewritten}; visible regressions: {dropped}"]
    lines += [f"  {r['instance_id']}: " + ", ".join(f"{t} ({'/'.join(terms)})" for t, terms in
                                                   list(r["expected_change"].items())[:3])
              + (f" (+{len(r['expected_change']) - 3})" if len(r["expected_change"]) > 3 else "")
              + f"; visible regression: {'yes' if r['visible'] else 'no'}" for r in aside]
    lines.append(f"{'without' if enabled else 'with'} that rule: TP {other.tp} FP {other.fp} FN {other.fn} "
                 f"TN {other.tn}; recall {other.recall:.3f} precision {other.precision:.3f}")
    return lines


def fidelity(recs: list[dict[str, Any]]) -> list[str]:
    """Agreement of the hidden-test run here with the harness's ``resolved``, per repo."""
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recs:
        if r["status"] == "judged" and isinstance(r.get("resolved"), bool):
            by_repo[r["repo"]].append(r)
    if not by_repo:
        return []
    lines = ["fidelity (resolved here vs the harness's resolved; then counting only the tests that pass at the "
             "base here, where the rows record them):"]
    off = []
    for repo in sorted(by_repo):
        group = by_repo[repo]
        agree = sum(r["resolved_here"] == r["resolved"] for r in group)
        known = [r for r in group if "hidden_failing" in r]
        # A PASS_TO_PASS test that fails at the base here as well is this machine's (no network):
        # leave it out, and see whether the verdicts then agree.
        runnable = sum((r["resolved_here"] or set(r["hidden_failing"]) <= set(r["hidden_failing_at_base"]))
                       == r["resolved"] for r in known)
        lines.append(f"  {repo:24s} {agree}/{len(group)} agree" + (f"; {runnable}/{len(known)}" if known else ""))
        off += [r for r in group if r["resolved_here"] != r["resolved"]]
    for r in off:
        failing = list(r.get("hidden_failing") or {})
        at_base = r.get("hidden_failing_at_base") or []
        lines.append(f"  differs: {r['instance_id']} harness resolved={r['resolved']} here={r['resolved_here']}"
                     + (f"; failing here: {', '.join(failing[:3])}" + (f" (+{len(failing) - 3})" if len(failing) > 3 else "")
                        + f"; {len(at_base)} of them PASS_TO_PASS tests failing at the base here too" if failing else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_terminable(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
