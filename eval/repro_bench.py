"""Does the loop's own test signal work on real repositories?

    python -m eval.repro_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR \
        [--only pallets/flask,pytest-dev/pytest,sympy/sympy] [--limit N] [--stride K] [--instances ID,...]
        [-o FILE]

For each SWE-bench Lite instance whose repository has a mirror in DIR, the real Reproducer node
runs with a scripted model whose "reproduction test" is the instance's own test file as its
``test_patch`` leaves it (the evaluation side hands it over here, in the benchmark only: the
pipeline never sees it). Then the Critic's test phase (``scoring.execution.outcomes.own_outcome``) judges the
gold patch with that test and the existing tests it selects from the patch. Per repo it prints:

- ``repro_ok``: the share of instances whose test was accepted (it runs, and fails at the base)
  and passes with the gold patch, among those whose environment builds;
- ``regression_runnable``: the share whose selection found existing tests that ran at the base;
- the tests selected (files, tests run) and the seconds of the test phase per attempt.

Last line: ``repro_ok=<share> regression_runnable=<share> median_s=<seconds>``, where median_s is the
median over instances of the Critic's added test time for one attempt (the base run of the
selected tests is cached after the first attempt of a task, so later attempts cost less: both are
printed). Results go to ``--out`` (JSONL) as they come, and a rerun resumes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from eval.hidden import standin_repro
from eval.options import add_options, check_options, load_instances, mirrored, only_repos
from eval.rows import instance_key, previous_rows, write_row
from fixgraph.config import ConfigError, load_config
from fixgraph.dataset import Instance
from fixgraph.records import RunStore
from fixgraph.repo.workspace import RepoCache, WorkspaceError
from scoring.execution.outcomes import ReproTest, own_outcome
from scoring.execution.runner import make_runner
from scoring.execution.testenv import PASSING
from scoring.verdict.judge import InputError


def pick(instances: list[Instance], mirrors: Path, only: set[str], limit: int | None,
         stride: int = 1) -> list[Instance]:
    """Instances with a mirror; per repo the commonest versions first, so environments are shared."""
    by_repo: dict[str, list[Instance]] = defaultdict(list)
    for inst in mirrored(instances, mirrors, only):
        by_repo[inst.repo].append(inst)
    out: list[Instance] = []
    for repo in sorted(by_repo):
        group = by_repo[repo]
        count: dict[str, int] = defaultdict(int)
        for inst in group:
            count[inst.version] += 1
        group.sort(key=lambda i: (-count[i.version], i.version, i.instance_id))
        group = group[::stride]
        out += group[:limit] if limit else group
    return out


def run_one(inst: Instance, cfg: Any, repos: RepoCache, store: RunStore) -> dict[str, Any]:
    row: dict[str, Any] = {"instance_id": inst.instance_id, "repo": inst.repo, "version": inst.version}
    t0 = time.monotonic()
    try:
        wt = repos.worktree(inst.repo, inst.base_commit, f"repro-{inst.instance_id}")
    except WorkspaceError as exc:
        return row | {"status": "no_checkout", "reason": str(exc)}
    try:
        t_repro = time.monotonic()
        repro = standin_repro(inst, wt, cfg, store)  # evaluation side: the benchmark's stand-in
        if not repro["standin"]:
            return row | {"status": "no_test_file", "reason": repro["reason"]}
        row["test_patch_other_files"] = repro["standin"]["other_files"]
        row["support_files"] = repro["standin"]["support_files"]
        task = inst.task()
        row["repro_seconds"] = round(time.monotonic() - t_repro, 1)
        row["repro_status"] = repro.get("status")
        row["repro_reason"] = repro.get("reason", "")
        if repro.get("status") != "accepted" and "env could not be built" in repro.get("reason", ""):
            return row | {"status": "no_env", "reason": repro.get("reason", "")}
        accepted = [ReproTest.from_dict(repro)] if repro.get("status") == "accepted" else []
        row["repro_failing_at_base"] = len(repro.get("failing") or [])
        wt.reset()
        wt.apply(inst.patch)
        runner = make_runner(cfg.tests, cfg.cache_dir.resolve())
        attempts = []
        for _ in range(2):  # the first attempt runs the selected tests at the base; the second finds them cached
            t1 = time.monotonic()
            out = own_outcome(runner, task, wt, inst.patch, accepted, cfg.regression, cfg.repro.timeout_s)
            attempts.append(round(time.monotonic() - t1, 1))
        row["attempt_seconds"] = attempts
        row["repro_passes_with_gold"] = bool(out.fail_to_pass) and all(s in PASSING for s in out.fail_to_pass.values())
        row["repro_after"] = out.fail_to_pass
        # Evaluation side: do the instance's FAIL_TO_PASS tests fail at the base and pass with the gold
        # patch in our environment? (Other tests of the file may fail for reasons of their own.)
        base = repro.get("base_statuses") or {}
        f2p = [t for t in inst.FAIL_TO_PASS if t in base or t in out.fail_to_pass]
        row["f2p_seen"] = len(f2p)
        row["f2p_ok"] = bool(f2p) and all(base.get(t) not in PASSING for t in f2p) and all(
            out.fail_to_pass.get(t) in PASSING for t in f2p)
        row["repro_ok"] = repro.get("status") == "accepted" and row["repro_passes_with_gold"]
        row["regression_runnable"] = out.regression_ran
        row["selected"] = out.selection.get("files", [])
        row["left_out"] = len(out.selection.get("left_out", []))
        row["regression_tests"] = len(out.pass_to_pass_before)
        row["regressions_with_gold"] = sorted(t for t, s in out.pass_to_pass_after.items()
                                              if s not in PASSING and out.pass_to_pass_before.get(t) in PASSING)
        row["reason"] = out.reason
        row["status"] = "ran"
        return row
    finally:
        row["seconds"] = round(time.monotonic() - t0, 1)
        repos.remove_worktree(inst.repo, wt)


def _share(rows: list[dict[str, Any]], key: str) -> str:
    return f"{sum(bool(r.get(key)) for r in rows) / len(rows):.2f}" if rows else "n/a"


def _median_s(rows: list[dict[str, Any]], attempt: int) -> str:
    vals = [r["attempt_seconds"][attempt] for r in rows]
    return f"{statistics.median(vals):.1f}" if vals else "n/a"


def report(rows: list[dict[str, Any]]) -> str:
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_repo[r["repo"]].append(r)
    lines = [f"{'repo':24s} {'insts':>5s} {'env_ok':>6s} {'repro_ok':>8s} {'f2p_ok':>6s} {'regr_run':>8s} {'files':>5s} "
             f"{'tests':>6s} {'s/attempt1':>10s} {'s/attempt2':>10s}"]
    ran_all: list[dict[str, Any]] = []
    for repo in sorted(by_repo):
        group = by_repo[repo]
        ran = [r for r in group if r.get("status") == "ran"]
        ran_all += ran
        lines.append(f"{repo:24s} {len(group):5d} {len(ran):6d} {_share(ran, 'repro_ok'):>8s} {_share(ran, 'f2p_ok'):>6s} "
                     f"{_share(ran, 'regression_runnable'):>8s} "
                     f"{statistics.mean([len(r['selected']) for r in ran]) if ran else 0:5.1f} "
                     f"{statistics.mean([r['regression_tests'] for r in ran]) if ran else 0:6.1f} "
                     f"{_median_s(ran, 0):>10s} {_median_s(ran, 1):>10s}")
    misses = [r for r in ran_all if not r.get("repro_ok")]
    if misses:
        lines.append("reproduction tests not ok:")
        lines += [f"  {r['instance_id']}: {r.get('repro_status')} {str(r.get('repro_reason'))[:150]}"
                  + ("" if r.get("repro_passes_with_gold") else " (not passing with the gold patch)") for r in misses]
    others = [r for r in rows if r.get("status") != "ran"]
    if others:
        lines.append("not run:")
        lines += [f"  {r['instance_id']}: {r.get('status')} {str(r.get('reason'))[:150]}" for r in others]
    if not ran_all:
        lines.append("repro_ok=n/a regression_runnable=n/a median_s=n/a")
        return "\n".join(lines)
    ok = sum(bool(r["repro_ok"]) for r in ran_all) / len(ran_all)
    f2p = sum(bool(r.get("f2p_ok")) for r in ran_all) / len(ran_all)
    lines.append(f"the instance's FAIL_TO_PASS tests, run as the reproduction test, fail at the base and pass "
                 f"with the gold patch: {f2p:.3f} (every failing test of the file passing with it: {ok:.3f})")
    runnable = sum(bool(r["regression_runnable"]) for r in ran_all) / len(ran_all)
    first = statistics.median(r["attempt_seconds"][0] for r in ran_all)
    later = statistics.median(r["attempt_seconds"][1] for r in ran_all)
    lines.append(f"instances run: {len(ran_all)}; median test seconds: first attempt {first:.1f}, later attempts {later:.1f}")
    lines.append(f"repro_ok={ok:.3f} regression_runnable={runnable:.3f} median_s={first:.1f} f2p_ok={f2p:.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.repro_bench", description=(__doc__ or "").split("\n")[0])
    add_options(p, rows="instance (commonest versions first, before --limit)", without={"shard", "resume"},
                output=Path("runs/repro_bench.jsonl"),
                output_help="per-instance rows, JSON Lines; a rerun skips the instances already there")
    p.add_argument("--limit", type=int, default=None, help="instances per repo")
    p.add_argument("--instances", default="", help="comma-separated instance ids (default: all chosen)")
    p.add_argument("--config", default="redo")
    args = p.parse_args(argv)
    try:
        check_options(args)
        cfg = load_config(args.config, overrides={"budget.task_dollars": 1000.0})
        instances = load_instances(args)
        only = only_repos(args.only, {i.repo for i in instances})
    except (ConfigError, InputError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    chosen = pick(instances, args.repos, only, args.limit, args.stride)
    wanted = {s.strip() for s in args.instances.split(",") if s.strip()}
    if wanted:
        chosen = [i for i in chosen if i.instance_id in wanted]
    done = previous_rows(args.output, instance_key)  # a line cut by a kill is judged again
    args.output.parent.mkdir(parents=True, exist_ok=True)
    repos = RepoCache(cfg.cache_dir, args.repos)
    store = RunStore("repro-bench", Path(args.output.parent / "repro-bench-predictions"), args.output.parent,
                     "repro-bench", [])
    with args.output.open("a") as fh:
        for inst in chosen:
            if inst.instance_id in done:
                continue
            try:
                row = run_one(inst, cfg, repos, store)
            except Exception as exc:  # one instance's failure is a row with the reason, not the end of the run
                row = {"instance_id": inst.instance_id, "repo": inst.repo, "status": "error",
                       "reason": f"{type(exc).__name__}: {exc}"[:300]}
            done[inst.instance_id] = row
            write_row(fh, row)
            print(f"{inst.instance_id}: {row.get('status')} repro={row.get('repro_status')} "
                  f"ok={row.get('repro_ok')} regr={row.get('regression_runnable')} "
                  f"{row.get('attempt_seconds')} {row.get('seconds')}s", file=sys.stderr)
    print(report([done[i.instance_id] for i in chosen if i.instance_id in done]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
