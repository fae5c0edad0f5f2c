"""How well the selection rule (scoring/verdict/choose_patch.py) picks among several agents' patches.

    python -m eval.select_bench --predictions FILE [FILE ...] --dataset ../shared/data/swebench_lite.jsonl \\
        --repos DIR [--only R,...] [--stride K] [--limit N] [--shard I/N] [--instances FILE] [--resume] \\
        [--tests] [--no-static] [--behaviour-where all|distinct|contested] [--unmirrored skip|only|include] \\
        [--config NAME|PATH] [-o ROWS.jsonl]

For each instance whose repository has a mirror under ``--repos`` (with ``--unmirrored``, also or
only the others, from the signals a patch alone gives), the candidates are the given runs' patches
(an instance missing from some runs uses those it has). Each candidate is applied at the base
commit and judged with what the loop may know: the guard and the differential static
phase (scoring.verdict.judge.judge; ``--no-static`` skips the static phase), code quality, and with
``--tests`` the repository's existing tests selected from the patch (scoring.execution.outcomes.own_outcome; no
reproduction test exists here, since none was written by an LLM). An instance whose test
environment cannot be built keeps the signals that need no test run, and the row says so. The
static phase and the tests run once per distinct deliverable change, and with
``--behaviour-where`` only where they can matter: ``distinct`` (two distinct deliverable changes
or more) or ``contested`` (those changes differ in outcome: the only instances where the pick's
outcome can change, found by reading ``resolved``). Otherwise the ground truth ``resolved`` is
read only to score the pick. Rows of one instance from several runs (static in one, tests in
another) are merged on ``--resume``.

Printed per repository and overall: instances, the oracle (instances with a resolved candidate),
resolved picks of the rule with its default weights, a uniformly random pick among non-empty
candidates (expected value), a majority vote over normalized patches (ties: expected value over
the tied groups), the best single run; then the weights tuned on all rows (in-sample) and
leave-one-repository-out (cross-validated), for the whole grid and for each family of agreement
signals, the family that cross-validates best, the count with the family also chosen without
the held-out repository (nested: the figure that reuses no held-out row for any choice the grid
makes), the best single run chosen without the repository it counts (the run that resolves the
most of the other repositories' rows: the best single run column is chosen after seeing every row),
the instances the rule got wrong, seconds per instance. With one repository nothing can be held
out: the counts that hold a repository out are not printed (their folds would tune on no row).
Last line: ``selected=<n> oracle=<n> vote=<n> random=<x> best_single=<n> instances=<n>``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import itertools
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import git
import numpy as np

from eval.options import add_row_options, check_options, dataset_map, sample
from eval.rows import open_rows, run_terminable, write_row, written_rows
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree, find_mirror
from scoring.execution import outcomes
from scoring.execution.runner import make_runner
from scoring.execution.testenv import PASSING
from scoring.static import differential as static
from scoring.static import guard
from scoring.verdict import choose_patch, fix_score, quality
from scoring.verdict.judge import InputError, judge, load_predictions

# The weights tried when tuning: every combination (the test signals' only with --tests).
GRID: dict[str, tuple[float, ...]] = {
    "soft": (0.0, 0.5, 1.0),
    "medoid": (0.0, 0.5, 1.0, 2.0),
    # Never off: between candidates equal on every other signal, the one others agree with wins.
    "twin": (0.25, 0.5, 1.0),
    "files": (0.0, 0.5, 1.0),
    "tokens": (0.0, 0.25, 0.5, 1.0),
    "exact": (0.0, 0.5),
    "size": (0.0, 0.25, 0.5),
    # Never off: in the loop an Unsafe verdict stops the Critic before the tests, and the verdict
    # then stands in for them (here the tests run whatever the verdict).
    "unsafe": (0.5, 1.0),
    "quality": (0.0, 0.5),
}
TEST_GRID: dict[str, tuple[float, ...]] = {"regression": (0.0, 1.0, 2.0), "broke": (0.0, 1.0),
                                           "same_tests": (0.0, 0.5, 1.0)}
# The weights before this grid was tuned with the static phase and tests (the previous defaults:
# README, Choosing among candidates), which ties are resolved towards.
PRIOR = choose_patch.Weights(tests=2.0, regression=2.0, broke=1.0, unsafe=0.5, quality=0.0, size=0.5, exact=0.0, soft=1.0,
                       judged=1.0, medoid=0.0, twin=0.25, files=0.0, same_tests=0.0, tokens=0.0)
BEHAVIOUR_WHERE = ("all", "distinct", "contested")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.select_bench", description=(__doc__ or "").split("\n")[0])
    add_row_options(p, rows="instance", predictions="predictions JSONL with `resolved` (one file a run)", many=True,
                    output=Path("runs/select_bench/rows.jsonl"),
                    config="config for the Critic, regression and test settings")
    p.add_argument("--tests", action="store_true", help="also run the selected existing tests per candidate (slow)")
    p.add_argument("--no-static", action="store_true", help="skip the static phase (guard and quality still run)")
    p.add_argument("--behaviour-where", choices=BEHAVIOUR_WHERE, default="all", help=(
        "where the static phase and the tests run: on every instance (all); where at least two distinct "
        "deliverable candidates exist (distinct); or, reading the ground truth, only where distinct "
        "deliverable candidates differ in outcome, the only instances where the pick's outcome can change "
        "(contested). Default: %(default)s"))
    p.add_argument("--unmirrored", choices=("skip", "only", "include"), default="skip", help=(
        "instances whose repository has no mirror under --repos: left out (skip), alone (only) or with the "
        "others (include), judged from the signals a patch alone gives (agreement, size; a non-empty patch "
        "counts as applying). Default: %(default)s"))
    p.add_argument("--instances", type=Path, default=None, help="only the instance ids listed in FILE (one a line)")
    p.add_argument("--cache-dir", type=Path, default=None, help="worktrees, static and test caches (default: config's)")
    p.add_argument("--show-wrong", type=int, default=30, help="list at most this many wrong picks")
    return p


# ---- input ------------------------------------------------------------------------------


def load_runs(paths: Sequence[Path]) -> dict[str, dict[str, dict[str, Any]]]:
    """run name -> instance id -> prediction row (with ``resolved``)."""
    runs: dict[str, dict[str, dict[str, Any]]] = {}
    for path in paths:
        rows = load_predictions(path)
        name = str(rows[0].get("system") or path.stem)
        if name in runs:
            name = path.stem
        if name in runs:
            raise InputError(f"{path}: run {name!r} given twice")
        for row in rows:
            if not isinstance(row.get("resolved"), bool):
                raise InputError(f"{path}: prediction {row['instance_id']} has no boolean `resolved` to score with")
        runs[name] = {row["instance_id"]: row for row in rows}
    return runs


def candidates_of(runs: dict[str, dict[str, dict[str, Any]]], iid: str) -> list[tuple[str, str, bool]]:
    """(run, patch, resolved) for the runs that have the instance, in the order the runs were given."""
    return [(name, str(rows[iid].get("model_patch") or ""), bool(rows[iid]["resolved"]))
            for name, rows in runs.items() if iid in rows]


# ---- signals ----------------------------------------------------------------------------


def _apply(wt: Worktree, patch: str) -> str:
    """"" when the patch applies (``git apply``, else GNU patch with fuzz, as the harness does)."""
    try:
        wt.apply(patch)
        return ""
    except PatchError as exc:
        wt.reset()
        done = subprocess.run(["patch", "--batch", "--fuzz=5", "-p1", "-i", "-"], cwd=wt.path, input=patch.encode(),
                              capture_output=True, timeout=60)
        if done.returncode == 0:
            return ""
        wt.reset()
        return str(exc)


def signals(inst: Instance, wt: Worktree, patch: str, cfg: RunConfig, cache_dir: Path, static_on: bool,
            runner: outcomes.SuiteRunner | None) -> dict[str, Any]:
    """What the loop would know about one candidate: applies, guard, quality, and when asked the
    static phase and the selected existing tests."""
    if not patch.strip():
        return {"applies": False, "why": "empty patch"}
    err = _apply(wt, patch)
    if err:
        return {"applies": False, "why": err}
    out: dict[str, Any] = {"applies": True}
    try:
        settings = cfg.critic.model_copy(update={"static": static_on})
        if not static_on:
            found = guard.check_patch(wt, patch) if settings.guard != "off" else []
            out["guard"] = len(found)
        else:
            v = judge(wt, inst, patch, settings=settings, cache_dir=cache_dir / "static")
            out.update(static=v.verdict, guard=len(v.guard), static_reason=v.reason[:200],
                       errors=[e.get("message", "")[:160] for e in v.errors[:3]])
        out["guard_blocked"] = bool(out.get("guard")) and settings.guard == "block"
        out["code_quality"], detail = quality.code_quality(wt, patch)
        out["changes_code"] = detail["changes_code"]
        if runner is not None:
            outcome = outcomes.own_outcome(runner, inst.task(), wt, patch, [], cfg.regression, cfg.repro.timeout_s)
            if outcome.regression_ran:
                before, after = outcome.pass_to_pass_before, outcome.pass_to_pass_after
                out["no_regression"] = fix_score.no_regression(outcome)
                out["broke"] = any(s not in PASSING and before.get(t) in PASSING for t, s in after.items())
                out["behaviour"] = after
            else:
                out["tests_note"] = outcome.reason[:300]
            out["test_seconds"] = round(outcome.seconds, 1)
    finally:
        wt.reset()
    return out


def _groups(cands: list[tuple[str, str, bool]], sig: dict[str, dict[str, Any]]) -> dict[str, list[int]]:
    """Normalized change -> the indices of the deliverable candidates making it, in input order."""
    out: dict[str, list[int]] = {}
    for i, (name, patch, _) in enumerate(cands):
        s = sig[name]
        if s.get("applies") and not s.get("guard_blocked") and choose_patch.changed_lines(patch) \
                and s.get("changes_code") is not False:
            out.setdefault(choose_patch.normalize(patch), []).append(i)
    return out


def behaviour_needed(where: str, cands: list[tuple[str, str, bool]], sig: dict[str, dict[str, Any]]) -> bool:
    """Whether the static phase and tests are worth running on this instance. ``contested`` reads
    the ground truth: the pick is the first member of one group, so when those firsts all resolve,
    or none does, no signal can change whether the pick resolves."""
    groups = _groups(cands, sig)
    if where == "all":
        return bool(groups)
    if where == "distinct":
        return len(groups) >= 2
    return len({cands[members[0]][2] for members in groups.values()}) == 2


NO_TEST_SIGNAL = "no test signal (fell back to the signals that need no test run): "


def tests_note(sig: dict[str, dict[str, Any]]) -> str:
    """Why no candidate has a test signal, when one was sought and none came; "" when some has."""
    notes = {str(s["tests_note"]) for s in sig.values() if s.get("tests_note")}
    if not notes or any("no_regression" in s for s in sig.values()):
        return ""
    return NO_TEST_SIGNAL + "; ".join(sorted(notes))[:300]


def judge_instance(inst: Instance, cands: list[tuple[str, str, bool]], repos: RepoCache, cfg: RunConfig,
                   cache_dir: Path, args: argparse.Namespace, runner: outcomes.SuiteRunner | None) -> dict[str, Any]:
    start = time.monotonic()
    row: dict[str, Any] = {"instance_id": inst.instance_id, "repo": inst.repo, "signals": {}}
    wt: Worktree | None = None
    try:
        if find_mirror(args.repos, inst.repo) is None:
            # Checking it out would clone from GitHub.
            raise WorkspaceError(f"no mirror of {inst.repo}")
        # One worktree per repository and output file: runs writing different rows (shards, or a
        # static run beside a tests run) go side by side.
        run_id = hashlib.sha256(str(args.output.resolve()).encode()).hexdigest()[:8]
        wt = repos.worktree(inst.repo, inst.base_commit, f"select-{inst.repo_slug}-{run_id}")
    except (WorkspaceError, git.GitCommandError) as exc:
        row["note"] = f"cannot check out: {str(exc).strip().splitlines()[-1][:200]}"
    done: dict[str, dict[str, Any]] = {}  # equal patches are judged once
    for name, patch, _ in cands:
        if wt is None:
            row["signals"][name] = {"applies": bool(patch.strip()), "why": "no checkout"}
            continue
        if patch not in done:
            done[patch] = signals(inst, wt, patch, cfg, cache_dir, False, None)
        row["signals"][name] = done[patch]
    static_on = not args.no_static
    if wt is not None and (static_on or runner is not None):
        if behaviour_needed(args.behaviour_where, cands, row["signals"]):
            # The costly signals once per distinct change (the rule picks among those), shared
            # by the candidates that make it.
            for members in _groups(cands, row["signals"]).values():
                full = signals(inst, wt, cands[members[0]][1], cfg, cache_dir, static_on, runner)
                for i in members:
                    row["signals"][cands[i][0]] = full
            row["behaviour"] = "static" * static_on + "+tests" * (runner is not None)
        else:
            row["behaviour"] = f"skipped ({args.behaviour_where})"
    if args.tests and (note := tests_note(row["signals"])):
        row["note"] = note
    row["seconds"] = round(time.monotonic() - start, 2)
    return row


# The selection found no existing test for the change: the tests ran (for the others), and
# nothing was shown broken. Left unknown, the neutral half favoured whichever candidate happened
# to touch tested code (pylint-7114, sphinx-8721).
UNREACHED = "no existing test exercises the changed code"


def to_candidates(cands: list[tuple[str, str, bool]], row: dict[str, Any]) -> list[choose_patch.Candidate]:
    out = []
    for name, patch, _ in cands:
        s = row["signals"].get(name, {})
        if UNREACHED in s.get("tests_note", "") and "no_regression" not in s:
            s = s | {"no_regression": 1.0, "broke": False}
        out.append(choose_patch.Candidate(
            name=name, patch=patch, applies=bool(s.get("applies", bool(patch.strip()))),
            guard_blocked=bool(s.get("guard_blocked")), static=str(s.get("static", "")),
            code_quality=s.get("code_quality"), no_regression=s.get("no_regression"), broke=s.get("broke"),
            behaviour=s.get("behaviour"), changes_code=s.get("changes_code")))
    return out


# ---- scoring ----------------------------------------------------------------------------


class Prepared:
    """One instance's candidates and their weight-independent features, for fast tuning."""

    def __init__(self, iid: str, repo: str, cands: list[tuple[str, str, bool]], row: dict[str, Any]):
        self.iid, self.repo = iid, repo
        self.cands = cands
        self.candidates = to_candidates(cands, row)
        self.feats = choose_patch.features(self.candidates)
        self.signed = choose_patch.signed(self.feats)
        self.resolved = [r for _, _, r in cands]
        self.row = row
        # The first of each group of equal deliverable candidates: the others are its duplicates.
        seen: set[str] = set()
        self.choices: list[int] = []
        for i, c in enumerate(self.candidates):
            key = choose_patch.normalize(c.patch)
            if choose_patch.deliverable(c) and key not in seen:
                seen.add(key)
                self.choices.append(i)

    def pick(self, weights: choose_patch.Weights) -> int | None:
        """What choose_patch.pick would choose (same order), without recomputing the features."""
        if not self.choices:
            return None
        w = dataclasses.astuple(weights)
        values = [sum(a * b for a, b in zip(row, w, strict=True)) for row in self.signed]
        return min(self.choices, key=lambda i: (-values[i], self.feats[i]["size"] or 0.0, i))

    def resolved_pick(self, weights: choose_patch.Weights) -> int:
        i = self.pick(weights)
        return int(i is not None and self.resolved[i])

    def random(self) -> float:
        live = [r for (_, p, r) in self.cands if p.strip()]
        return sum(live) / len(live) if live else 0.0

    def vote(self) -> float:
        live = [(choose_patch.normalize(p), r) for (_, p, r) in self.cands if p.strip()]
        if not live:
            return 0.0
        count = Counter(k for k, _ in live)
        top = max(count.values())
        tied = {k for k, n in count.items() if n == top}
        by_key = {k: r for k, r in live if k in tied}
        return sum(by_key.values()) / len(by_key)


# Families of the grid, compared by cross-validation: which agreement signals each leaves out.
FAMILIES: dict[str, tuple[str, ...]] = {
    "copies counted (soft, exact)": ("medoid", "twin", "files", "tokens"),
    "copies discounted (medoid, twin, files, tokens)": ("soft", "exact"),
    "both": (),
}


def grid(with_tests: bool, drop: Sequence[str] = ()) -> list[choose_patch.Weights]:
    space = {k: v for k, v in (dict(GRID) | (TEST_GRID if with_tests else {})).items() if k not in drop}
    base = choose_patch.DEFAULT_WEIGHTS.to_dict() | {name: 0.0 for name in drop}
    if not with_tests:
        base |= {name: 0.0 for name in ("tests", *TEST_GRID)}
    return [choose_patch.Weights(**(base | dict(zip(space, values, strict=True))))
            for values in itertools.product(*space.values())]


def resolved_matrix(rows: Sequence[Prepared], weights: Sequence[choose_patch.Weights]) -> np.ndarray:
    """resolved[r, w]: whether row r's pick under weights w resolves; all weights at once. Ties
    are broken as choose_patch.rank does (smaller change, then earlier candidate); scores are rounded
    so that a sum in another order cannot split a tie."""
    w = np.array([dataclasses.astuple(x) for x in weights])
    out = np.zeros((len(rows), len(weights)), dtype=bool)
    for r, p in enumerate(rows):
        if not p.choices:
            continue
        order = sorted(p.choices, key=lambda i: (p.feats[i]["size"] or 0.0, i))
        values = np.round(np.array([p.signed[i] for i in order]) @ w.T, 9)
        out[r] = np.array([p.resolved[i] for i in order])[values.argmax(axis=0)]
    return out


def prior_distance(weights: Sequence[choose_patch.Weights]) -> np.ndarray:
    return np.abs(np.array([dataclasses.astuple(w) for w in weights]) - np.array(dataclasses.astuple(PRIOR))).sum(axis=1)


def tune(rows: Sequence[Prepared], weights: Sequence[choose_patch.Weights], matrix: np.ndarray | None = None,
         distance: np.ndarray | None = None) -> tuple[choose_patch.Weights, int]:
    """The weights that resolve the most rows; on ties the nearest to PRIOR (the rows cannot
    tell those apart, so nothing is changed for them), then the first in grid order."""
    counts = (resolved_matrix(rows, weights) if matrix is None else matrix).sum(axis=0)
    distance = prior_distance(weights) if distance is None else distance
    best = int(np.lexsort((np.arange(len(weights)), distance, -counts))[0])
    return weights[best], sum(p.resolved_pick(weights[best]) for p in rows)


def cross_validate(prepared: Sequence[Prepared], space: Sequence[choose_patch.Weights],
                   matrix: np.ndarray | None = None) -> tuple[choose_patch.Weights, int, dict[str, int]]:
    """The weights tuned on all rows and their count (in-sample), and per repository the count
    of the weights tuned on the other repositories (leave one repository out)."""
    matrix = resolved_matrix(prepared, space) if matrix is None else matrix
    distance = prior_distance(space)
    tuned, tuned_n = tune(prepared, space, matrix, distance)
    return tuned, tuned_n, held_out(prepared, space, matrix, np.ones(len(prepared), dtype=bool), distance)


def held_out(prepared: Sequence[Prepared], space: Sequence[choose_patch.Weights], matrix: np.ndarray,
             rows: np.ndarray, distance: np.ndarray) -> dict[str, int]:
    """Among ``rows`` (a mask), per repository: the count of the weights tuned on the others."""
    repos = np.array([p.repo for p in prepared])
    out: dict[str, int] = {}
    for repo in sorted(set(repos[rows])):
        train = rows & (repos != repo)
        w, _ = tune([p for p, keep in zip(prepared, train, strict=True) if keep], space, matrix[train], distance)
        out[repo] = sum(p.resolved_pick(w) for p, keep in zip(prepared, rows & (repos == repo), strict=True) if keep)
    return out


def nested_cv(prepared: Sequence[Prepared], spaces: dict[str, list[choose_patch.Weights]],
              matrices: dict[str, np.ndarray]) -> tuple[dict[str, int], dict[str, str]]:
    """Leave one repository out with the family of agreement signals chosen on the other
    repositories too (by their own leave-one-repository-out count; ties: the first family): per
    repository the count and the family chosen without it. Comparing the families' cross-validated
    counts on all rows and shipping the best reuses the held-out repository to choose; this does not."""
    repos = np.array([p.repo for p in prepared])
    distances = {name: prior_distance(space) for name, space in spaces.items()}
    counts: dict[str, int] = {}
    chosen: dict[str, str] = {}
    for repo in sorted(set(repos)):
        train = repos != repo
        inner = {name: sum(held_out(prepared, spaces[name], matrices[name], train, distances[name]).values())
                 for name in spaces}
        best = max(inner, key=lambda name: inner[name])
        w, _ = tune([p for p, keep in zip(prepared, train, strict=True) if keep], spaces[best], matrices[best][train],
                    distances[best])
        counts[repo] = sum(p.resolved_pick(w) for p in prepared if p.repo == repo)
        chosen[repo] = best
    return counts, chosen


def best_run_held_out(repo_of: dict[str, str], runs: dict[str, dict[str, dict[str, Any]]]) -> dict[str, tuple[str, int]]:
    """Per repository of ``repo_of`` (instance -> repository): the run that resolves the most of the
    other repositories' instances (ties: the later name, as for the best single run) and how many of
    this repository's it resolves. The best single run in hindsight is chosen on every row, the
    counted repository's included; no one knows in advance which run is best on a repository."""
    def resolved(name: str, ids: Sequence[str]) -> int:
        return sum(bool(runs[name].get(i, {}).get("resolved")) for i in ids)

    out: dict[str, tuple[str, int]] = {}
    for repo in sorted(set(repo_of.values())):
        others = [i for i, r in repo_of.items() if r != repo]
        best = max(runs, key=lambda name: (resolved(name, others), name))
        out[repo] = best, resolved(best, [i for i, r in repo_of.items() if r == repo])
    return out


def _why(p: Prepared, i: int | None, j: int) -> str:
    """A short account of why candidate i was picked over the resolved candidate j."""
    def show(k: int) -> str:
        f = {n: round(v, 2) for n, v in p.feats[k].items() if v is not None}
        s = p.row["signals"].get(p.cands[k][0], {})
        extra = f" static={s['static']}" if s.get("static") else ""
        extra += "" if s.get("applies", True) else f" not-applied({s.get('why', '')[:60]})"
        return f"{p.cands[k][0]} {f}{extra}"
    if i is None:
        return f"nothing deliverable picked; resolved: {show(j)}"
    return f"picked {show(i)} | resolved {show(j)}"


def report(prepared: list[Prepared], runs: dict[str, dict[str, dict[str, Any]]], with_tests: bool,
           show_wrong: int) -> None:
    by_repo: dict[str, list[Prepared]] = defaultdict(list)
    for p in prepared:
        by_repo[p.repo].append(p)
    ids = {p.iid for p in prepared}
    single = {name: sum(bool(rows[i]["resolved"]) for i in ids if i in rows) for name, rows in runs.items()}
    best_run = max(single, key=lambda n: (single[n], n))
    w0 = choose_patch.DEFAULT_WEIGHTS
    spaces = {name: grid(with_tests, drop) for name, drop in FAMILIES.items()}
    matrices = {name: resolved_matrix(prepared, space) for name, space in spaces.items()}
    fitted = {name: cross_validate(prepared, spaces[name], matrices[name]) for name in FAMILIES}
    tuned, tuned_n, cv = fitted["both"]
    # With one repository a held-out fold tunes on no row and falls back to PRIOR: not a count.
    one_repo = len(by_repo) < 2
    print(f"{'repo':<22}{'inst':>5}{'oracle':>7}{'select':>7}{'cv':>5}{'random':>8}{'vote':>7}{'best1':>6}{'s/inst':>8}")
    for repo in sorted(by_repo):
        rows = by_repo[repo]
        print(f"{repo:<22}{len(rows):>5}{sum(any(p.resolved) for p in rows):>7}"
              f"{sum(p.resolved_pick(w0) for p in rows):>7}{'-' if one_repo else cv[repo]:>5}{sum(p.random() for p in rows):>8.2f}"
              f"{sum(p.vote() for p in rows):>7.2f}{sum(bool(runs[best_run].get(p.iid, {}).get('resolved')) for p in rows):>6}"
              f"{statistics.median([p.row.get('seconds', 0.0) for p in rows]):>8.1f}")
    selected = sum(p.resolved_pick(w0) for p in prepared)
    oracle = sum(any(p.resolved) for p in prepared)
    print(f"{'all':<22}{len(prepared):>5}{oracle:>7}{selected:>7}{'-' if one_repo else sum(cv.values()):>5}"
          f"{sum(p.random() for p in prepared):>8.2f}{sum(p.vote() for p in prepared):>7.2f}{single[best_run]:>6}"
          f"{statistics.median([p.row.get('seconds', 0.0) for p in prepared]):>8.1f}")
    print("single runs: " + ", ".join(f"{n} {k}" for n, k in sorted(single.items(), key=lambda x: -x[1])))
    print(f"default weights {w0.to_dict()}: {selected}")
    print(f"tuned on all rows (in-sample): {tuned_n} with {tuned.to_dict()}")
    if not one_repo:
        print(f"tuned leave-one-repo-out (cross-validated): {sum(cv.values())} "
              f"({', '.join(r.split('/')[-1] + ' ' + str(n) for r, n in sorted(cv.items()))})")
    for name, (w, n, folds) in fitted.items():
        nonzero = {k: v for k, v in w.to_dict().items() if v and k != "judged"}
        held = "" if one_repo else f", cross-validated {sum(folds.values())}"
        print(f"grid {name}: in-sample {n} ({nonzero}){held}")
    if one_repo:
        print("one repository: not cross-validated (no other repository's rows to tune weights or choose a run on)")
    else:
        # The defaults to ship: the family that generalizes best, tuned on every row.
        chosen = max(fitted, key=lambda name: sum(fitted[name][2].values()))
        print(f"chosen by cross-validation: {chosen}: {fitted[chosen][0].to_dict()}")
        nested, families = nested_cv(prepared, spaces, matrices)
        print(f"family and weights chosen on the other repositories (nested): {sum(nested.values())} "
              f"({', '.join(r.split('/')[-1] + ' ' + str(n) for r, n in sorted(nested.items()))}; families: "
              f"{', '.join(r.split('/')[-1] + ' ' + families[r].split(' (')[0] for r in sorted(families))})")
        fair = best_run_held_out({p.iid: p.repo for p in prepared}, runs)
        print(f"best single run chosen on the other repositories: {sum(n for _, n in fair.values())} "
              f"({', '.join(r.split('/')[-1] + ' ' + str(n) for r, (_, n) in fair.items())}; runs: "
              f"{', '.join(f'{name} {k}' for name, k in Counter(name for name, _ in fair.values()).most_common())})")
    notes = [p for p in prepared if p.row.get("note")]
    if notes:
        print(f"instances with a note ({len(notes)}): " + "; ".join(f"{p.iid}: {p.row['note'][:120]}" for p in notes[:10]))
    wrong = []
    for p in prepared:
        i = p.pick(w0)
        if any(p.resolved) and (i is None or not p.resolved[i]):
            j = p.resolved.index(True)
            wrong.append(f"  {p.iid}: {_why(p, i, j)}")
    print(f"wrong picks with a resolved candidate ({len(wrong)}):")
    for line in wrong[:show_wrong]:
        print(line)
    seconds = [p.row.get("seconds", 0.0) for p in prepared]
    print(f"seconds per instance: median {statistics.median(seconds):.1f}, mean {statistics.mean(seconds):.1f}, "
          f"total {sum(seconds):.0f}")
    print(f"selected={selected} oracle={oracle} vote={round(sum(p.vote() for p in prepared), 2)} "
          f"random={sum(p.random() for p in prepared):.2f} best_single={single[best_run]} instances={len(prepared)}")


def load_rows(path: Path) -> dict[str, dict[str, Any]]:
    """Rows by instance. Rows of one instance from several runs (static in one, tests in another,
    their files concatenated) are merged: each candidate keeps every signal either run found."""
    rows: dict[str, dict[str, Any]] = {}
    for rec in written_rows(path):
        with contextlib.suppress(KeyError, TypeError, AttributeError):
            prev = rows.get(rec["instance_id"])
            if prev is None:
                rows[rec["instance_id"]] = rec
                continue
            for name, sig in rec["signals"].items():
                prev["signals"][name] = {**prev["signals"].get(name, {}), **sig}
            prev["seconds"] = round(prev.get("seconds", 0.0) + rec.get("seconds", 0.0), 2)
            prev["behaviour"] = "; ".join(b for b in (prev.get("behaviour"), rec.get("behaviour")) if b)
            # Notes of a checkout stay; whether a test signal is missing is the merged signals' to say
            # (a later run that got one takes back an earlier run's "no test signal").
            notes = [kept for row in (prev, rec)
                     if (kept := str(row.get("note") or "").split(NO_TEST_SIGNAL)[0].rstrip("; "))]
            if "+tests" in prev["behaviour"] and (note := tests_note(prev["signals"])):
                notes.append(note)
            prev["note"] = "; ".join(dict.fromkeys(notes))
    return rows


def run(args: argparse.Namespace) -> int:
    shard = check_options(args)
    cfg = load_config(args.config)
    if not args.no_static:
        static.pyright_version(static.pyright_command(cfg.critic))  # fail before any work
    runs = load_runs(args.predictions)
    dataset, only = dataset_map(args)
    wanted_mirror = {"skip": {True}, "only": {False}, "include": {True, False}}[args.unmirrored]
    ids = sorted({i for rows in runs.values() for i in rows if i in dataset
                  and (find_mirror(args.repos, dataset[i].repo) is not None) in wanted_mirror})
    if args.instances is not None:
        try:
            wanted = set(args.instances.read_text(encoding="utf-8").split())
        except OSError as exc:
            raise InputError(f"--instances: {exc.strerror or exc}: {args.instances}") from None
        ids = [i for i in ids if i in wanted]
    ids = sample([i for i in ids if not only or dataset[i].repo in only], lambda i: dataset[i].repo, args.stride,
                 args.limit, shard)
    if not ids:
        raise InputError("no instance of the predictions is left (mirrors under --repos, --unmirrored, --instances, "
                         "--stride, --shard)")
    cache_dir = (args.cache_dir or cfg.cache_dir).resolve()
    repos = RepoCache(cache_dir, mirrors=args.repos)
    runner = make_runner(cfg.tests, cache_dir) if args.tests else None
    previous = load_rows(args.output) if args.resume and args.output.is_file() else {}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    prepared: list[Prepared] = []
    print(f"{len(ids)} instances, {len(runs)} runs", file=sys.stderr)
    try:
        with open_rows(args.output, args.resume) as out:
            for n, iid in enumerate(ids, 1):
                inst = dataset[iid]
                cands = candidates_of(runs, iid)
                row = previous.get(iid)
                if row is None:
                    row = judge_instance(inst, cands, repos, cfg, cache_dir, args, runner)
                    write_row(out, row)
                p = Prepared(iid, inst.repo, cands, row)
                prepared.append(p)
                i = p.pick(choose_patch.DEFAULT_WEIGHTS)
                print(f"[{n}/{len(ids)}] {iid}: {len(cands)} candidates, picked "
                      f"{p.cands[i][0] if i is not None else 'none'} "
                      f"({'resolved' if i is not None and p.resolved[i] else 'not resolved'}; oracle {any(p.resolved)}) "
                      f"{row.get('seconds', 0.0):.1f}s", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"interrupted: the figures below cover {len(prepared)} instances (rerun with --resume)", file=sys.stderr)
    if not prepared:
        raise InputError("no instance was judged")
    report(prepared, runs, args.tests, args.show_wrong)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_terminable(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
