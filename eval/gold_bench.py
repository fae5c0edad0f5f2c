"""Gold and empty patches through the test runner, over Lite instances whose repos are local.

    python -m eval.gold_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR [--limit N]

For each selected instance it runs the gold patch and an empty patch through the runner the
Critic uses (``scoring.execution.runner.make_runner``) and prints, per repo: how many instances could run
their tests here, the gold patch's mean test_pass_rate and no_regression (1.0 expected where
tests run), the empty patch's mean test_pass_rate (0 expected) and seconds per run (median).
Every gold result below 1.0 is listed with the tests behind it. Per-instance results go to
``-o/--output`` (JSONL; ``--out`` is the same option); a rerun skips instances already there. Last line:
``runnable=<share of instances whose tests ran> gold_fix_score=<mean on those>``.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import git

from eval.hidden import run_hidden
from eval.options import (
    add_options,
    check_options,
    instance_repo,
    load_instances,
    mirrored,
    only_repos,
    per_repository,
)
from eval.rows import instance_key, previous_rows, write_row
from fixgraph.config import TestSettings
from fixgraph.dataset import DatasetError, Instance, select
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError
from scoring.execution.outcomes import PASSING, TestOutcome
from scoring.execution.runner import make_runner
from scoring.verdict import fix_score
from scoring.verdict.judge import InputError
from scoring.verdict.quality import code_quality


def pick(instances: list[Instance], mirrors: Path, limit: int | None, only: set[str]) -> list[Instance]:
    """Instances with a local mirror; per repo the commonest versions first, so envs are shared."""
    by_repo: dict[str, list[Instance]] = defaultdict(list)
    for inst in mirrored(instances, mirrors, only):
        by_repo[inst.repo].append(inst)
    out: list[Instance] = []
    for repo in sorted(by_repo):
        group = by_repo[repo]
        counts = Counter(i.version for i in group)
        group.sort(key=lambda i: (-counts[i.version], i.version, i.instance_id))
        out.extend(group[:limit] if limit else group)
    return out


def strided(instances: list[Instance], stride: int) -> list[Instance]:
    """Every ``stride``-th instance of each repo in instance-id order (all its versions stay in)."""
    return per_repository(sorted(instances, key=lambda i: i.instance_id), stride, instance_repo)


# What a test that wanted the internet says when it has none.
NETWORK_ERROR = re.compile(r"ConnectionError|NewConnectionError|Max retries exceeded|Network is unreachable|"
                      r"Temporary failure in name resolution|Name or service not known")


def run_one(inst: Instance, cache: RepoCache, runner: Any, run: str = "") -> dict[str, Any]:
    """``run``: this run's name in its worktree's, so that two benches on one cache (another
    --out) never check out, reset or remove each other's worktree of the same instance."""
    row: dict[str, Any] = {"instance_id": inst.instance_id, "repo": inst.repo, "version": inst.version}
    try:
        wt = cache.worktree(inst.repo, inst.base_commit, f"goldbench-{run}-{inst.instance_id}")
    except WorkspaceError as exc:
        return {**row, "runnable": False, "reason": str(exc)}
    except git.GitCommandError as exc:  # e.g. a mirror missing some blobs
        return {**row, "runnable": False, "reason": f"cannot check out the base commit: {_git_error(exc)}"}
    try:
        wt.apply(inst.patch)
    except PatchError as exc:
        return {**row, "runnable": False, "reason": f"gold patch: {exc}"}
    gold_patch = wt.diff()
    quality, _ = code_quality(wt, gold_patch, inst.patch)
    start = time.monotonic()
    gold: TestOutcome = run_hidden(runner, inst, wt, gold_patch)
    gold_secs = time.monotonic() - start
    start = time.monotonic()
    empty, empty_reason = _empty_run(inst, wt, runner)
    empty_secs = time.monotonic() - start
    cache.remove_worktree(inst.repo, wt)
    parts = fix_score.compute(gold, quality, None)
    row.update(runnable=gold.runnable, reason=gold.reason, seconds_gold=round(gold_secs, 1),
               seconds_empty=round(empty_secs, 1), code_quality=quality, network_isolated=gold.network_isolated)
    if gold.runnable:
        row.update(
            gold_fix_score=parts.get("fix_score"), gold_test_pass_rate=parts.get("test_pass_rate"),
            gold_no_regression=parts.get("no_regression"),
            empty_test_pass_rate=fix_score.test_pass_rate(empty) if empty is not None and empty.runnable else None,
            empty_reason=empty_reason,
            f2p_not_passing={t: s for t, s in gold.fail_to_pass.items() if s not in PASSING},
            p2p_regressed={t: s for t, s in gold.pass_to_pass_after.items()
                           if s not in PASSING and gold.pass_to_pass_before.get(t) in PASSING},
            notes=gold.notes,
            needs_network=bool(NETWORK_ERROR.search(gold.crash + gold.log_tail)),
        )
    else:
        row["log_tail"] = gold.log_tail[-600:]
    return row


def _git_error(exc: git.GitCommandError) -> str:
    """The last line git wrote to stderr: the one that says why."""
    detail = [ln for ln in str(exc.stderr or "").strip().splitlines() if ln.strip()]
    last = (detail or ["git failed"])[-1].strip()
    return re.sub(r"^stderr: '(.*)'$", r"\1", last)  # GitPython's wrapping of it


def _empty_run(inst: Instance, wt: Any, runner: Any) -> tuple[TestOutcome | None, str]:
    """The empty patch's outcome and reason, on the worktree reset to the base commit; none when
    the reset fails (another process removed or locked the worktree under the run), so that the
    gold result is kept with the reason rather than the whole run ending."""
    try:
        wt.reset()
    except git.GitCommandError as exc:
        return None, f"empty patch not run: cannot reset the worktree: {_git_error(exc)}"
    empty: TestOutcome = run_hidden(runner, inst, wt, "")
    return empty, empty.reason


def _mean(xs: list[float]) -> str:
    return f"{statistics.fmean(xs):.3f}" if xs else "-"


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["repo                      insts  runnable  gold_tpr  gold_noreg  empty_tpr  s/run(median)"]
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_repo[r["repo"]].append(r)
    for repo in sorted(by_repo):
        rs = by_repo[repo]
        ok = [r for r in rs if r["runnable"]]
        secs = [r["seconds_gold"] for r in rs if "seconds_gold" in r] + [r["seconds_empty"] for r in rs if "seconds_empty" in r]
        empties = [r["empty_test_pass_rate"] for r in ok if r.get("empty_test_pass_rate") is not None]
        lines.append(f"{repo:<25} {len(rs):>5}  {len(ok):>8}  {_mean([r['gold_test_pass_rate'] for r in ok]):>8}  "
                     f"{_mean([r['gold_no_regression'] for r in ok]):>10}  {_mean(empties):>9}  "
                     f"{statistics.median(secs) if secs else 0:>12.1f}")
    lines.append("")
    lines.append("not runnable here (reason):")
    reasons = Counter((r["repo"], r["reason"][:150]) for r in rows if not r["runnable"])
    for (repo, reason), n in sorted(reasons.items()):
        lines.append(f"  {repo}: {n} x {reason}")
    lines.append("gold results below 1.0 (tests behind them):")
    for r in rows:
        if r["runnable"] and (r["gold_test_pass_rate"] < 1.0 or r["gold_no_regression"] < 1.0):
            f2p = ", ".join(f"{t} {s}" for t, s in list(r["f2p_not_passing"].items())[:3])
            p2p = ", ".join(f"{t} {s}" for t, s in list(r["p2p_regressed"].items())[:3])
            why = " | why: the tests need the internet, the runner has no network" if r.get("needs_network") else ""
            lines.append(f"  {r['instance_id']}: tpr={r['gold_test_pass_rate']:.2f} noreg={r['gold_no_regression']:.2f}"
                         f" | F2P not passing: {f2p or '-'} | P2P regressed: {p2p or '-'}{why}")
    for r in rows:
        if r["runnable"] and r.get("empty_test_pass_rate") is None:
            lines.append(f"  {r['instance_id']}: the gold patch's tests run, the empty patch's do not: "
                         f"{r.get('empty_reason', '')[:160]}")
    ok = [r for r in rows if r["runnable"]]
    share = len(ok) / len(rows) if rows else 0.0
    lines.append(f"runnable={share:.3f} gold_fix_score={_mean([r['gold_fix_score'] for r in ok])}")
    return lines


def _chosen(args: argparse.Namespace) -> list[Instance]:
    """``--tasks`` with a mirror, else ``--only``'s repositories strided and limited; one-line
    errors for a bad option, before any work."""
    check_options(args)
    if args.limit is not None and args.limit < 1:
        raise InputError("--limit must be at least 1")
    if args.python and not re.fullmatch(r"\d+\.\d+", args.python):
        raise InputError(f"--python {args.python!r} is not X.Y")
    instances = load_instances(args)
    if args.tasks:
        chosen = mirrored(select(instances, args.tasks), args.repos, set())
    else:
        chosen = pick(strided(instances, args.stride), args.repos, args.limit,
                      only_repos(args.only, {i.repo for i in instances}))
    if not chosen:
        raise InputError(f"no instance of {args.dataset} has a mirror under {args.repos}")
    return chosen


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.gold_bench", description=(__doc__ or "").split("\n\n")[0])
    add_options(ap, rows="instance (by id, before --limit)", without={"shard", "resume"},
                output=Path("runs/gold_bench.jsonl"),
                output_help="per-instance rows, JSON Lines; a rerun skips the instances already there")
    ap.add_argument("--limit", type=int, default=None, help="at most N instances per repo")
    ap.add_argument("--tasks", default="", help="comma-separated instance ids (overrides --only and --limit)")
    ap.add_argument("--backend", choices=["venv", "local", "docker"], default="venv")
    ap.add_argument("--timeout", type=float, default=900.0, help="wall-clock seconds per test run")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    ap.add_argument("--python", metavar="X.Y", help="build every env with this Python instead of the spec's "
                    "(measures which substitutes are safe; those envs live apart)")
    args = ap.parse_args(argv)
    try:
        chosen = _chosen(args)
    except (InputError, DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    done = previous_rows(args.output, instance_key)  # a line cut by a kill is judged again
    settings = TestSettings(backend=args.backend, timeout_s=args.timeout, python=args.python)
    runner = make_runner(settings, args.cache_dir)
    cache = RepoCache(args.cache_dir, args.repos)
    rows: list[dict[str, Any]] = []
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for i, inst in enumerate(chosen, 1):
        if inst.instance_id in done:
            rows.append(done[inst.instance_id])
            continue
        row = run_one(inst, cache, runner, re.sub(r"[^A-Za-z0-9._+-]", "_", args.output.stem))
        rows.append(row)
        with args.output.open("a") as fh:
            write_row(fh, row)
        status = (f"tpr={row['gold_test_pass_rate']:.2f} noreg={row['gold_no_regression']:.2f} "
                  f"empty={row.get('empty_test_pass_rate')}") if row["runnable"] else f"not runnable: {row['reason'][:120]}"
        print(f"[{i}/{len(chosen)}] {inst.instance_id}: {status}", file=sys.stderr, flush=True)
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
