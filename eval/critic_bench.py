"""SWEDE-style benchmark of the Critic's runtime-error detection on real agents' patches.

    python -m eval.critic_bench --predictions FILE [FILE ...] --dataset ../shared/data/swebench_lite.jsonl \\
        --repos DIR [--limit N] [--llm] [--config NAME] [-o ROWS.jsonl]

With several predictions files, ``--stride``, ``--limit`` and ``--shard`` choose each file's rows
on their own (the runs of one agent, each with its own ``--stride 3`` sample, in one table).

Labels follow SWEDE (Li et al., 2024): a prediction is positive (Unsafe) when its evaluation log
shows a runtime error (``failure_kind == "runtime_error"``), negative when it was resolved or
failed only on assertions; every other row is skipped, as are rows whose repository has no mirror
under ``--repos``. Each patch is judged, in the same run and in alternating order, by

- ``redo_static``: REDO's static phase as published (eval/redo_static.py), the reference;
- ``ours_static``: this Critic's differential static phase (scoring/static/differential.py), with an empty
  cache at the start of the run;
- with ``--llm``, ``ours_static+llm``: the full REDO pipeline, the LLM check on the patches the
  static phase passes (a missing verdict counts as not flagged, and is reported);
- with ``--runtime``, ``ours_static+runtime``: the static phase's findings sure without running
  (``scoring.verdict.weigh.certain``), then, on the patches they pass, the other findings weighed
  against the tests as the Critic weighs them,
  the Critic's replay of the issue's code with the patch (``scoring.runtime.replay``) and the loop's own
  check (``scoring.execution.outcomes.own_outcome``: the existing tests selected from the patch, no
  reproduction test, no hidden data) turned into runtime findings (``scoring.runtime.findings``). Test
  environments come from the config's backend (venv) under its cache dir (``FIXGRAPH_CACHE_DIR``);
  a row whose tests cannot run counts as not flagged (but for its static suspicions, which then
  decide), and is reported. The runtime rule's scope
  (``--runtime-scope``, else the config's ``regression.runtime_scope``) names this column; every
  regressed test's crash is saved in the row (``scoring.runtime.findings.summarize``), and the other scope
  is counted from those records as an extra row (``ours_static+runtime_<scope>``), so one run
  measures both, and ``--resume`` over saved rows counts both again. ``ours_static+tests_only``
  is the column without the replay; ``--add-replay`` replays saved rows that lack it.

``--repro-standin`` (with ``--runtime``) is the ``oracle-tests`` ablation: an upper bound for
studying the Critic, never a SWE-bench result and never the default. The runtime column's tests
then include a reproduction test, the stand-in for the hidden test: the Reproducer node, its model
scripted to draft the instance's own test file as its ``test_patch`` leaves it
(``eval.hidden.standin_repro``), keeps it only if it runs and fails at the base, and the Critic's
test phase runs it on the candidate as it runs a Reproducer's test from the graph's state (the
Critic's code reads no evaluation data; the bench hands it the test). Each row saves the test's
fate, its statuses with the patch and its crashes (``runtime.repro``); a crash in the repository's
code in the scope flags the runtime column, as in the Critic (``critic.repro_crashes``). Two more
rows of the table, counted from those: ``repro_raises``, the reproduction test still failing with
the patch by raising something other than an assertion (a status ``ERROR``, or a crash record of
another type) wherever it raised, which is not a rule of the Critic; and
``ours_static+runtime|repro_raises``, either. Every line printed and every row says
``oracle-tests``; a rows file is resumed only by a run of the same kind.

A patch that does not apply, or that a method cannot analyze, counts as not flagged for it.
The last line is the headline:
``F1=<ours> F1_redo_static=<reference> median_s=<ours> median_s_redo=<reference>``; with ``--runtime``,
``F1=<ours> F1_redo_static=<ref> F1_runtime=<static+runtime> P_runtime=<its precision> median_s=<ours>
median_s_redo=<ref> median_s_runtime=<static+runtime>``, then ``F1_runtime_<other scope>=<f1>
P_runtime_<other scope>=<its precision>``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import git

from eval.hidden import standin_repro
from eval.options import add_row_options, check_options, dataset_map, row_repo, sample
from eval.redo_static import redo_static
from eval.rows import (
    mirrored_rows,
    open_rows,
    previous_rows,
    run_tag,
    run_terminable,
    system_instance_key,
    write_row,
)
from fixgraph import phases
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Instance
from fixgraph.models.llm import RunMeter
from fixgraph.records import RunStore
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree
from fixgraph.state import Finding
from scoring.execution.outcomes import ReproTest, TestOutcome, own_outcome
from scoring.execution.runner import make_runner
from scoring.execution.testenv import SuiteRunner
from scoring.runtime import llm_check, replay
from scoring.runtime.findings import (
    NOT_RUNTIME,
    SCOPES,
    Scope,
    crash_summaries,
    findings_of,
    repro_summaries,
    unsafe_in,
)
from scoring.static import differential as static
from scoring.verdict import weigh
from scoring.verdict.judge import InputError, load_predictions, make_llm

# The ablation that gives the Critic the hidden test's stand-in as its reproduction test.
ORACLE = "oracle-tests"
POSITIVE = {"runtime_error"}
NEGATIVE = {"resolved", "assertion_failure"}


def label(row: dict[str, Any]) -> bool | None:
    kind = row.get("failure_kind")
    if kind in POSITIVE:
        return True
    if kind in NEGATIVE:
        return False
    return None


@dataclass
class Tally:
    name: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    seconds: list[float] = field(default_factory=list)
    # A runtime column's seconds outside the sandboxed processes, for the rows that record them.
    outside: list[float] = field(default_factory=list)
    not_analyzed: int = 0
    # How many rows each reproduction test's fate had (``--repro-standin``: accepted, none, not run).
    fates: dict[str, int] = field(default_factory=dict)

    def add(self, truth: bool, flagged: bool, seconds: float | None) -> None:
        if truth and flagged:
            self.tp += 1
        elif flagged:
            self.fp += 1
        elif truth:
            self.fn += 1
        else:
            self.tn += 1
        if seconds is not None:
            self.seconds.append(seconds)

    @property
    def rows(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def accuracy(self) -> float:
        return (self.tp + self.tn) / self.rows if self.rows else 0.0

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds) if self.seconds else 0.0

    @property
    def p95_s(self) -> float:
        if not self.seconds:
            return 0.0
        ordered = sorted(self.seconds)
        return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.critic_bench", description=(__doc__ or "").split("\n")[0])
    add_row_options(p, rows="labelled row", predictions="labelled predictions JSONL file(s)", many=True,
                    config="config for the Critic settings and the LLM")
    p.add_argument("--llm", action="store_true", help="add the LLM check (needs an OpenAI-compatible endpoint)")
    p.add_argument("--runtime", action="store_true",
                   help="add ours_static+runtime: the selected existing tests run on patches the static phase passes")
    p.add_argument("--runtime-scope", choices=SCOPES, default=None,
                   help="where a regressed test's crash counts as a runtime error (default: the config's "
                        "regression.runtime_scope); the other scope is counted too, from the saved crashes")
    p.add_argument("--add-replay", action="store_true",
                   help="with --runtime --resume: replay the issue's code on saved rows judged before the "
                        "replay existed (no test runs again), and save them again")
    p.add_argument("--repro-standin", action="store_true",
                   help=f"the {ORACLE} ablation, with --runtime: the Critic's tests include the stand-in "
                        "reproduction test built from the instance's test_patch (an upper bound, never a "
                        "SWE-bench result); every line and row says so")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="worktrees (default: a temporary folder); the static cache always starts empty")
    return p


def _labelled_rows(args: argparse.Namespace, dataset: dict[str, Instance], only: Any, shard: Any,
                   skipped: dict[str, int]) -> list[dict[str, Any]]:
    """The labelled predictions with a mirror, each file sampled alone (several runs' files give
    each run its own sample); what was left out counted in ``skipped``."""
    rows: list[dict[str, Any]] = []
    for path in args.predictions:
        labelled = []
        for row in load_predictions(path):
            if "failure_kind" not in row:
                raise InputError(f"{path}: rows have no failure_kind label (use the labelled lite_predictions files)")
            if label(row) is None:
                skipped["unlabelled"] += 1
            else:
                labelled.append(row)
        rows += sample(mirrored_rows(labelled, dataset, args.repos, only, skipped), row_repo(dataset), args.stride,
                       args.limit, shard)
    if not rows:
        raise InputError("no labelled rows with a mirror to judge")
    return rows


def _table(say: Callable[[str], None], tallies: list[Tally]) -> None:
    """One line per method: the confusion counts, precision, recall, F1, accuracy and seconds."""
    width = max(28, *(len(t.name) + 1 for t in tallies))
    say(f"{'method':<{width}}{'rows':>6}{'TP':>5}{'FP':>5}{'FN':>5}{'TN':>5}{'prec':>7}{'recall':>8}{'F1':>7}"
        f"{'acc':>7}{'med_s':>8}{'p95_s':>8}{'n/a':>5}")
    for t in tallies:
        say(f"{t.name:<{width}}{t.rows:>6}{t.tp:>5}{t.fp:>5}{t.fn:>5}{t.tn:>5}{t.precision:>7.3f}{t.recall:>8.3f}"
            f"{t.f1:>7.3f}{t.accuracy:>7.3f}{t.median_s:>8.2f}{t.p95_s:>8.2f}{t.not_analyzed:>5}")


def _summary(say: Callable[[str], None], args: argparse.Namespace, *, scope: str, other: str, ablation: str,
             unrecorded: int, no_verdict: int, spent: float, redo: Tally, ours: Tally, withrt: Tally,
             withother: Tally, before: Tally, repro_raises: Tally, either: Tally) -> None:
    """The lines under the table, the headline figures last."""
    if args.llm:
        say(f"LLM gave no verdict on {no_verdict} patches (counted as not flagged); "
            f"spent ${spent:.4f}")
    ratio = ours.median_s / redo.median_s if redo.median_s else 0.0
    say(f"F1 gain {ours.f1 - redo.f1:+.3f}, precision gain {ours.precision - redo.precision:+.3f}, "
        f"median time ratio {ratio:.2f}")
    if args.runtime:
        say(f"tests could not run on {withrt.not_analyzed} of the patches the static phase passed "
            "(counted as not flagged)")
        if outside := withrt.outside:
            say(f"seconds outside the sandboxed processes (tests, the issue's code) in the runtime column: "
                f"median {statistics.median(outside):.2f} s a patch over the {len(outside)} rows whose tests "
                "ran and whose phases were recorded")
        say(f"runtime scope: {scope} (ours_static+runtime); {other} counted from the saved crashes"
            + (f", except {unrecorded} rows saved without them (their saved verdict)" if unrecorded else ""))
    if ablation:
        say("the runtime column's reproduction test is the hidden test's stand-in (an upper bound, never a "
            "SWE-bench result); its fate per row: " + ", ".join(f"{k} {v}" for k, v in sorted(repro_raises.fates.items())))
    if args.runtime:
        say(f"F1={ours.f1:.3f} F1_redo_static={redo.f1:.3f} F1_runtime={withrt.f1:.3f} P_runtime={withrt.precision:.3f} "
            f"median_s={ours.median_s:.2f} median_s_redo={redo.median_s:.2f} median_s_runtime={withrt.median_s:.2f} "
            f"F1_runtime_{other}={withother.f1:.3f} P_runtime_{other}={withother.precision:.3f} "
            f"F1_runtime_pre36={before.f1:.3f} P_runtime_pre36={before.precision:.3f} "
            f"median_s_runtime_pre36={before.median_s:.2f}"
            + (f" F1_repro_raises={repro_raises.f1:.3f} P_repro_raises={repro_raises.precision:.3f} "
               f"F1_runtime_or_repro={either.f1:.3f} P_runtime_or_repro={either.precision:.3f}" if ablation else ""))
    else:
        say(f"F1={ours.f1:.3f} F1_redo_static={redo.f1:.3f} median_s={ours.median_s:.2f} "
            f"median_s_redo={redo.median_s:.2f}")


def _previous(args: argparse.Namespace, ablation: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows a resumed run keeps; rows of the other ablation are refused (one output, one kind)."""
    previous = previous_rows(args.output, system_instance_key) if args.resume else {}
    mixed = [k for k, rec in previous.items() if rec.get("ablation", "") != ablation]
    if mixed:
        raise InputError(f"{args.output}: {len(mixed)} rows were judged "
                         + (f"without --repro-standin: an {ORACLE} run needs rows of its own (another -o)"
                            if ablation else f"with --repro-standin ({ORACLE}): rerun with it, or use another -o"))
    return previous


def _ablation(args: argparse.Namespace) -> str:
    """The oracle label when the runtime column's reproduction test is the hidden test's stand-in."""
    if args.repro_standin and not args.runtime:
        raise InputError("--repro-standin gives the runtime column a reproduction test: it needs --runtime")
    return ORACLE if args.repro_standin else ""


def run(args: argparse.Namespace) -> int:
    shard = check_options(args)
    cfg = load_config(args.config)
    settings = cfg.critic
    scope: Scope = args.runtime_scope or cfg.regression.runtime_scope
    other: Scope = next(s for s in SCOPES if s != scope)
    if args.llm:
        cfg.require_llm()
    ablation = _ablation(args)
    say = _sayer(ablation)
    cmd = static.pyright_command(settings)
    static.pyright_version(cmd)
    dataset, only = dataset_map(args)
    skipped = {"unlabelled": 0, "no mirror": 0, "not in dataset": 0, "other repo": 0}
    rows = _labelled_rows(args, dataset, only, shard, skipped)

    previous = _previous(args, ablation)
    work = Path(tempfile.mkdtemp(prefix="critic-bench-"))
    cache_root = (args.cache_dir or work).resolve()
    static_cache = work / "static"
    repos = RepoCache(cache_root, mirrors=args.repos)
    redo, ours, full = Tally("redo_static"), Tally("ours_static"), Tally("ours_static+llm")
    withrt, withother = Tally("ours_static+runtime"), Tally(f"ours_static+runtime_{other}")
    noreplay = Tally("ours_static+tests_only")  # the runtime column without the replay
    # The earlier Critic rule on the same rows, kept as a reference: any static finding vetoed before a test ran.
    before = Tally("ours_static+runtime_pre36")
    unrecorded = 0  # rows saved before the crashes were: their other-scope verdict is the saved one
    runner = make_runner(cfg.tests, cfg.cache_dir.resolve()) if args.runtime else None
    run_meter = RunMeter(cfg.budget.run_dollars)
    repro_raises, either = Tally("repro_raises"), Tally("ours_static+runtime|repro_raises")
    standins: dict[str, dict[str, Any]] = {}
    store = RunStore("critic-bench", work / "predictions", work, "critic-bench")

    def standin_for(inst: Instance, wt: Worktree, patch: str) -> dict[str, Any]:
        """The stand-in reproduction test of ``inst``, made once per instance; ``wt`` keeps ``patch``."""
        if inst.instance_id not in standins:
            standins[inst.instance_id] = standin_repro(inst, wt, cfg, store, tries=1)  # leaves wt at the base
            wt.apply(patch)
        return standins[inst.instance_id]
    out = open_rows(args.output, args.resume)
    judged = no_verdict = 0
    say(f"judging {len(rows)} labelled rows (skipped: "
        + ", ".join(f"{k} {v}" for k, v in skipped.items()) + ")", sys.stderr)
    try:
        for n, row in enumerate(rows, 1):
            inst = dataset[row["instance_id"]]
            truth = bool(label(row))
            done = previous.get((row.get("system", ""), inst.instance_id))
            if done is not None and runner is not None and args.add_replay and _needs_replay(done):
                _add_replay(repos, runner, cfg, inst, row, done, run_tag(args))
                write_row(out, done)
                say(f"[{n}/{len(rows)}] {inst.instance_id}: {done['runtime']['replay']['note']}", sys.stderr)
            if done is not None:
                _count(done, truth, redo, ours, full, args.llm)
                if args.runtime:
                    _count_runtime(done, truth, withrt, scope)
                    unrecorded += not _count_runtime(done, truth, withother, other)
                    _count_runtime(done, truth, noreplay, scope, replayed=False)
                    _count_pre36(done, truth, before, scope)
                    _count_repro(done, truth, repro_raises, either, scope)
                judged += 1
                continue
            rec: dict[str, Any] = {"instance_id": inst.instance_id, "system": row.get("system", ""),
                                   "label": truth} | ({"ablation": ablation} if ablation else {})
            try:
                wt = repos.worktree(inst.repo, inst.base_commit, f"bench-{inst.repo_slug}-{run_tag(args)}")
            except (WorkspaceError, git.GitCommandError) as exc:
                # A mirror may lack some large blobs; such a commit cannot be checked out here.
                skipped["cannot check out"] = skipped.get("cannot check out", 0) + 1
                say(f"[{n}/{len(rows)}] {inst.instance_id}: skipped, cannot check out "
                    f"({str(exc).strip().splitlines()[-1][:120]})", sys.stderr)
                continue
            try:
                wt.apply(row.get("model_patch") or "")
            except PatchError as exc:
                rec["not_applied"] = str(exc)
                for t in (redo, ours, full, withrt, withother, noreplay, before, repro_raises, either):
                    t.add(truth, False, None)
                    t.not_analyzed += 1
                write_row(out, rec)
                continue
            patch = row["model_patch"]
            try:
                # Alternate which method runs first, so that neither always gets warm OS caches.
                order = ("ours", "redo") if n % 2 else ("redo", "ours")
                for which in order:
                    if which == "redo":
                        r = redo_static(cmd, wt, patch)
                        redo.add(truth, r.unsafe, r.seconds)
                        rec["redo"] = {"unsafe": r.unsafe, "new": r.new_messages[:20], "seconds": r.seconds}
                        if not r.analysed:
                            redo.not_analyzed += 1
                            rec["redo"]["note"] = r.note
                    else:
                        s = static.analyze_patch(wt, patch, settings=settings, cache_dir=static_cache)
                        flagged = s.status == "ok" and bool(s.new)
                        ours.add(truth, flagged, s.seconds)
                        if s.status != "ok":
                            ours.not_analyzed += 1
                        rec["ours"] = {"status": s.status, "reason": s.reason, "unsafe": flagged,
                                       "new": s.new, "all_new": s.all_new, "seconds": s.seconds,
                                       "notes": s.notes}
                if args.llm:
                    flagged = bool(rec["ours"]["unsafe"])
                    if not flagged and rec["ours"]["status"] == "ok":
                        check, usage = llm_check.runtime_check(make_llm(cfg, run_meter), inst.task(), wt, patch,
                                                               calls=settings.llm_check_calls)
                        if check is None:
                            no_verdict += 1
                        flagged = check is not None and check.verdict == "Unsafe"
                        rec["llm"] = {"verdict": check.verdict if check else None,
                                      "errors": [e.model_dump() for e in check.errors] if check else [],
                                      "dollars": usage.get("dollars", 0.0)}
                    full.add(truth, flagged, None)
                if runner is not None:
                    standin = partial(standin_for, inst, wt, patch) if ablation else None
                    rec["runtime"] = _runtime(runner, cfg, inst, wt, patch, rec["ours"], scope, standin)
                    _count_runtime(rec, truth, withrt, scope)
                    _count_runtime(rec, truth, withother, other)
                    _count_runtime(rec, truth, noreplay, scope, replayed=False)
                    _count_pre36(rec, truth, before, scope)
                    _count_repro(rec, truth, repro_raises, either, scope)
            finally:
                wt.reset()
            write_row(out, rec)
            judged += 1
            rt = rec.get("runtime") or {}
            say(f"[{n}/{len(rows)}] {inst.instance_id} label={'E' if truth else '-'} "
                f"redo={'U' if rec['redo']['unsafe'] else '-'} {rec['redo']['seconds']:.1f}s "
                f"ours={'U' if rec['ours']['unsafe'] else '-'} {rec['ours']['seconds']:.1f}s"
                + (f" runtime={'U' if rt.get('unsafe') else '-'} {rt.get('seconds', 0.0):.1f}s" if rt else "")
                + (f" repro={(rt.get('repro') or {}).get('status', 'not run')}" if ablation else ""), sys.stderr)
    except KeyboardInterrupt:
        say(f"interrupted: the figures below cover the {judged} rows judged so far"
            + (" (rerun with --resume to continue)" if args.output else ""), sys.stderr)
    finally:
        if out:
            out.close()
        # The static cache (and, without --cache-dir, the clones) belong to this run only.
        shutil.rmtree(work, ignore_errors=True)

    say(f"rows judged: {judged} of {len(rows)}")
    tallies = [redo, ours] + ([full] if args.llm else []) + ([withrt, withother, noreplay, before] if args.runtime else [])
    tallies += [repro_raises, either] if ablation else []
    say("skipped: " + ", ".join(f"{k} {v}" for k, v in skipped.items()))
    _table(say, tallies)
    _summary(say, args, scope=scope, other=other, ablation=ablation, unrecorded=unrecorded, no_verdict=no_verdict,
             spent=run_meter.spent, redo=redo, ours=ours, withrt=withrt, withother=withother, before=before,
             repro_raises=repro_raises, either=either)
    return 0


def _sayer(ablation: str) -> Callable[..., None]:
    """``print`` for this bench's lines: each names the ablation, when there is one."""
    def say(text: str, file: TextIO = sys.stdout) -> None:
        print(f"[{ablation}] {text}" if ablation else text, file=file)
    return say


def _repro_record(made: dict[str, Any], outcome: TestOutcome, crashes: list[dict[str, Any]]) -> dict[str, Any]:
    """What a row keeps of the stand-in reproduction test: the Reproducer's verdict on it, the
    ids that failed at the base, their statuses with the patch (``after``) and their crashes
    (``scoring.runtime.findings.repro_summaries``)."""
    accepted = made.get("status") == "accepted"
    return {"status": made.get("status"), "reason": str(made.get("reason", ""))[:300],
            "path": made.get("path", ""), "failing": list(made.get("failing") or []),
            "seconds": made.get("seconds"), **(made.get("standin") or {}),
            "ran": accepted and bool(outcome.fail_to_pass), "after": dict(outcome.fail_to_pass) if accepted else {},
            "crashes": crashes}


def repro_raises(rt: dict[str, Any]) -> bool:
    """Not a rule of the Critic (``--repro-standin``'s extra row): the reproduction test still
    fails with the patch by raising something other than an assertion: an id whose status is
    ERROR (django's and unittest's word for it), or a crash record of another type."""
    repro = rt.get("repro") or {}
    return (any(st == "ERROR" for st in (repro.get("after") or {}).values())
            or any(c.get("type") not in NOT_RUNTIME for c in repro.get("crashes") or []))


def _count_repro(rec: dict[str, Any], truth: bool, alone: Tally, either: Tally, scope: Scope) -> None:
    """Add one row of an ``oracle-tests`` run to ``alone`` (:func:`repro_raises`) and to
    ``either`` (that, or the runtime column's verdict in ``scope``); rows of other runs count in
    neither."""
    if rec.get("ablation") != ORACLE:
        return
    if "not_applied" in rec:
        for t in (alone, either):
            t.add(truth, False, None)
            t.not_analyzed += 1
        return
    rt = rec["runtime"]
    fate = str((rt.get("repro") or {}).get("status") or "not run (the static phase decided)")
    alone.fates[fate] = alone.fates.get(fate, 0) + 1
    raised = repro_raises(rt)
    alone.add(truth, raised, None)
    either.add(truth, raised or _runtime_unsafe(rt, scope), rt["seconds"])


def _count(rec: dict[str, Any], truth: bool, redo: Tally, ours: Tally, full: Tally, llm: bool) -> None:
    """Add a row recorded by an earlier, interrupted run to the tallies."""
    if "not_applied" in rec:
        for t in (redo, ours, full):
            t.add(truth, False, None)
            t.not_analyzed += 1
        return
    redo.add(truth, bool(rec["redo"]["unsafe"]), rec["redo"]["seconds"])
    ours.add(truth, bool(rec["ours"]["unsafe"]), rec["ours"]["seconds"])
    if rec["ours"]["status"] != "ok":
        ours.not_analyzed += 1
    if llm:
        flagged = bool(rec["ours"]["unsafe"]) or (rec.get("llm") or {}).get("verdict") == "Unsafe"
        full.add(truth, flagged, None)


def _runtime(runner: SuiteRunner, cfg: RunConfig, inst: Instance, wt: Worktree, patch: str,
             static_rec: dict[str, Any], scope: Scope,
             standin: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """The runtime column's verdict in ``scope``, as the Critic reaches it (no veto before
    evidence): a static finding sure without running decides; the others are suspicions the
    selected existing tests weigh (``scoring.verdict.weigh``: flagged when a crashed test confirms
    one, or when the tests cannot run and the suspicion decides), with the replay's and the
    tests' own runtime findings. ``crashes`` keeps every regressed test's crash for a rescoring in
    either scope. ``standin`` (the ``oracle-tests`` ablation): the Reproducer's result for the
    hidden test's stand-in, which the tests run as the Critic runs a reproduction test from the
    graph's state (``agents.critic``); ``repro`` saves its fate and what it did with the patch."""
    new = [Finding(**f) for f in static_rec.get("new") or []]
    sure = [f for f in new if weigh.certain(f)]
    if sure or static_rec["status"] != "ok":
        return {"unsafe": bool(sure), "ran": False, "seconds": static_rec["seconds"]}
    suspicions = [f for f in new if not weigh.certain(f)]
    texts = {f: wt.read(f) or "" for f in sorted({str(s.get("file", "")) for s in suspicions if s.get("file")})}
    made = standin() if standin is not None else None
    repro = [ReproTest.from_dict(made)] if made is not None and made.get("status") == "accepted" else []
    start = time.monotonic()  # the Reproducer's own seconds are not the Critic's
    with phases.recording() as timing:
        replayed = _replay(runner, cfg, inst, wt, patch)
        outcome = own_outcome(runner, inst.task(), wt, patch, repro, cfg.regression, cfg.repro.timeout_s,
                              trace=weigh.trace_specs(suspicions, texts))
    # The Critic's evidence (scoring.runtime.findings.evidence), saved in two parts for rescoring.
    crashes, repro_crashes = crash_summaries(outcome, patch), repro_summaries(outcome, patch)
    found = findings_of(crashes + (repro_crashes if cfg.critic.repro_crashes else []), scope)
    weighed = weigh.weigh(suspicions, ran=outcome.runnable, lines=outcome.lines,
                          crashes=outcome.regression_crashes + outcome.repro_crashes,
                          texts=texts, why_not=outcome.reason)
    return {"unsafe": bool(found) or bool(replayed and replayed["summaries"]) or bool(weigh.confirmed(weighed)),
            "scope": scope, "ran": outcome.regression_ran, "reason": outcome.reason[:300],
            "findings": [dict(f) for f in found], "crashes": crashes, "broken": outcome.broken(),
            "weighed": [dict(f) for f in weighed], "tests_run": len(outcome.pass_to_pass_before),
            "replay": replayed, "seconds": round(static_rec["seconds"] + time.monotonic() - start, 2),
            "phases": _phase_seconds(timing)} | (
                {"repro": _repro_record(made, outcome, repro_crashes)} if made is not None else {})


# The phases (fixgraph/phases.py) in which a row's seconds are the sandboxed processes' own: the
# repository's tests and the issue's code, and the wait on the patched run started beside the base run.
PROCESS_PHASES = (phases.SANDBOXED_PROCESS, phases.WAITING_ON_PATCHED_RUN)


def _phase_seconds(timing: phases.Recorder) -> dict[str, float]:
    """The replay's and the tests' seconds by phase (the bench's own thread); what ran beside it
    in another thread under ``beside: <phase>`` (overlapping, not in the row's sum)."""
    out = {name: round(s, 2) for name, s in timing.seconds.items() if s >= 0.005}
    return out | {f"beside: {name}": round(s, 2) for name, s in timing.overlapped.items() if s >= 0.005}


def outside_processes(rt: dict[str, Any]) -> float | None:
    """A row's Critic seconds outside its sandboxed processes (static phase, selection, env lookup,
    copies, comparison): None for a row saved before phases were recorded or that ran no tests."""
    if not rt.get("ran") or "phases" not in rt:
        return None
    inside = sum(float(rt["phases"].get(name, 0.0)) for name in PROCESS_PHASES)
    return max(0.0, float(rt.get("seconds") or 0.0) - inside)


def _replay(runner: SuiteRunner, cfg: RunConfig, inst: Instance, wt: Worktree, patch: str) -> dict[str, Any] | None:
    """The Critic's replay of the issue's code (``scoring.runtime.replay``), as a row saves it; None when
    the config turns it off."""
    if not cfg.critic.replay_issue:
        return None
    return replay.replay_issue(runner, inst.task(), wt, patch, timeout_s=cfg.critic.replay_timeout_s).to_dict()


def _needs_replay(rec: dict[str, Any]) -> bool:
    """A saved row whose runtime column ran before the replay existed."""
    rt = rec.get("runtime")
    return "not_applied" not in rec and isinstance(rt, dict) and "replay" not in rt and "scope" in rt


def _add_replay(repos: RepoCache, runner: SuiteRunner, cfg: RunConfig, inst: Instance,
                row: dict[str, Any], rec: dict[str, Any], tag: str) -> None:
    """Give a saved row the replay it lacks (its tests are not run again)."""
    rt = rec["runtime"]
    try:
        wt = repos.worktree(inst.repo, inst.base_commit, f"bench-{inst.repo_slug}-{tag}")
        wt.apply(row.get("model_patch") or "")
    except (WorkspaceError, git.GitCommandError, PatchError) as exc:
        rt["replay"] = {"note": f"replay: not run ({str(exc).strip()[:200]})", "summaries": [], "seconds": 0.0,
                        "ran": False}
        return
    try:
        start = time.monotonic()
        rt["replay"] = _replay(runner, cfg, inst, wt, row["model_patch"])
        rt["seconds"] = round(float(rt.get("seconds") or 0.0) + time.monotonic() - start, 2)
    finally:
        wt.reset()


def _count_pre36(rec: dict[str, Any], truth: bool, tally: Tally, scope: Scope) -> None:
    """The row as the earlier veto rule judges it: any static finding flagged the patch
    after the static phase's seconds, no test run; a patch without one went on as now."""
    if "not_applied" not in rec and rec["ours"]["status"] == "ok" and rec["ours"]["unsafe"]:
        tally.add(truth, True, rec["ours"]["seconds"])
    else:
        _count_runtime(rec, truth, tally, scope)


def _runtime_unsafe(rt: dict[str, Any], scope: Scope, replayed: bool = True) -> bool:
    """The saved runtime column's verdict in ``scope`` (with the replay's findings unless
    ``replayed`` is False)."""
    # The tests' verdict from their saved crashes (none when they could not run); a row saved
    # before the crashes were, or flagged by the static phase (nothing ran), has its saved verdict.
    unsafe = unsafe_in(rt["crashes"], scope) if "crashes" in rt else bool(rt["unsafe"])
    # A reproduction test raising in the repository's code (critic.repro_crashes; only the
    # oracle-tests rows have one).
    unsafe = unsafe or unsafe_in((rt.get("repro") or {}).get("crashes") or [], scope)
    # A suspicion the tests confirmed (or that decided, the tests not running) flags in either scope.
    unsafe = unsafe or any(f.get("status") in ("confirmed", "untested") for f in rt.get("weighed") or [])
    if replayed:
        unsafe = unsafe or bool((rt.get("replay") or {}).get("summaries"))
    return unsafe


def _count_runtime(rec: dict[str, Any], truth: bool, tally: Tally, scope: Scope, replayed: bool = True) -> bool:
    """Add one row to ``tally`` in ``scope`` (with the replay's findings unless ``replayed`` is
    False); False when the row, saved without its crashes, could only be counted by its saved
    verdict (whatever scope that had)."""
    if "not_applied" in rec:
        tally.add(truth, False, None)
        tally.not_analyzed += 1
        return True
    rt = rec["runtime"]
    recorded = not rt["ran"] or "crashes" in rt
    unsafe = _runtime_unsafe(rt, scope, replayed)
    tally.add(truth, unsafe, rt["seconds"])
    if (outside := outside_processes(rt)) is not None:
        tally.outside.append(outside)
    if not unsafe and not rt["ran"]:
        tally.not_analyzed += 1
    return recorded


def main(argv: list[str] | None = None) -> int:
    return run_terminable(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
