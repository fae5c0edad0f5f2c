"""Does the issue's own code, replayed with a patch, tell a fix from a non-fix? (``repro.issue_code``)

    python -m eval.issue_code_bench --predictions FILE [FILE ...] --dataset ../shared/data/swebench_lite.jsonl \\
        --repos DIR [--only REPOS] [--stride K] [--limit N] [--shard I/N] [--config NAME] \\
        [--cache-dir DIR] [--env-dir DIR] [-o ROWS.jsonl [--resume]]

For every instance that a predictions file names and whose repository is mirrored under ``--repos``,
the issue's code runs at the base commit in the Critic's sandbox (``scoring.runtime.issue_run``: the test
environment, no network; traces cached under the cache dir, so the localization benchmark's
``--execute`` runs serve here). Where it raises the crash the issue reports
(``scoring.runtime.replay.reported_crashes``), the gold patch (read here, in the benchmark only, as the
reference: the pipeline never sees it) and each prediction are replayed (``scoring.runtime.replay``), and
each gets the verdict the Critic would draw from the replay alone:

- ``unsafe``: a finding of the replay (a new crash, another exception the issue does not ask for, or
  the reported crash still there with the same message): rejected before the tests run;
- ``fails``: no finding, but a statement of the reported crash fails as a reproduction test (it still
  raises the reported type, or another exception);
- ``passes``: every statement of the reported crash that the patched run reached passes;
- ``not run``: the patched run did not happen or reached none of them (the record says why).

Per predictions file it prints how each verdict splits by the harness's ``resolved`` (read from the
predictions file, here only); then the gold patch's verdicts. The last line is the headline:
``gold_pass=<share of instances whose gold patch passes> resolved_if_pass=<share of passing
predictions resolved> resolved_if_not=<share of failing or unsafe ones resolved> base_rate=<share of
all predictions of these instances resolved> rows=<predictions with a verdict>``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import git

from eval.options import add_row_options, check_options, dataset_map, row_repo, sample
from eval.rows import (
    mirrored_rows,
    open_rows,
    previous_rows,
    run_tag,
    run_terminable,
    system_instance_key,
    write_row,
)
from fixgraph.config import load_config
from fixgraph.dataset import Instance, Task
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree
from scoring.execution.runner import make_runner
from scoring.execution.testenv import SuiteRunner
from scoring.runtime import replay
from scoring.runtime.issue_run import IssueTrace, trace_issue
from scoring.verdict.judge import InputError, load_predictions

VERDICTS = ("passes", "fails", "unsafe", "not run")
GOLD = "gold"


def verdict(result: replay.Replay) -> str:
    """What the Critic would draw from the replay alone (module docstring)."""
    if result.summaries:
        return "unsafe"
    if not result.reproduced:
        return "not run"
    return "passes" if all(r["status"] == "PASSED" for r in result.reproduced) else "fails"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.issue_code_bench", description=(__doc__ or "").split("\n")[0])
    add_row_options(p, rows="prediction", predictions="predictions JSONL file(s) with the harness's `resolved`",
                    many=True, config="config for the test backend and the replay's timeout")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="worktrees and traces (default: the config's cache_dir)")
    p.add_argument("--env-dir", type=Path, default=None, help="test environments (default: the config's)")
    return p


def _load_rows(args: argparse.Namespace, dataset: dict[str, Instance], only: set[str],
               shard: tuple[int, int] | None, skipped: dict[str, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in args.predictions:
        labelled = []
        for row in load_predictions(path):
            if not isinstance(row.get("resolved"), bool):
                raise InputError(f"{path}: prediction {row['instance_id']} has no `resolved` (true or false): "
                                 "use predictions with the harness's outcome")
            row.setdefault("system", path.stem)
            labelled.append(row)
        # Each file is sampled alone, as in critic_bench.
        rows += sample(mirrored_rows(labelled, dataset, args.repos, only, skipped), row_repo(dataset), args.stride,
                       args.limit, shard)
    if not rows:
        raise InputError("no predictions of a mirrored repository to judge")
    return rows


def run(args: argparse.Namespace) -> int:
    shard = check_options(args)
    cfg = load_config(args.config)
    tests = cfg.tests.model_copy(update={"env_dir": args.env_dir}) if args.env_dir else cfg.tests
    cache_dir = (args.cache_dir or cfg.cache_dir).resolve()
    dataset, only = dataset_map(args)
    skipped: dict[str, int] = {}
    rows = _load_rows(args, dataset, only, shard, skipped)
    by_instance: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_instance[row["instance_id"]].append(row)
    done = previous_rows(args.output, system_instance_key) if args.resume else {}
    runner = make_runner(tests, cache_dir)
    repos = RepoCache(cache_dir, mirrors=args.repos)
    out = open_rows(args.output, args.resume)
    records: list[dict[str, Any]] = []
    print(f"{len(rows)} predictions of {len(by_instance)} instances"
          + (f" (skipped: {', '.join(f'{k} {v}' for k, v in skipped.items())})" if skipped else ""), file=sys.stderr)
    try:
        for n, (iid, preds) in enumerate(sorted(by_instance.items()), 1):
            inst = dataset[iid]
            judged = [done.get((p["system"], iid)) for p in preds] + [done.get((GOLD, iid))]
            if all(r is not None for r in judged):
                records += [r for r in judged if r is not None]
                continue
            try:
                wt = repos.worktree(inst.repo, inst.base_commit, f"icb-{inst.repo_slug}-{run_tag(args)}")
            except (WorkspaceError, git.GitCommandError) as exc:
                line = str(exc).strip().splitlines()
                rec = {"instance_id": iid, "repo": inst.repo, "system": GOLD, "verdict": "not run",
                       "note": f"cannot check out: {line[-1][:160] if line else ''}", "crashes": 0}
                records.append(rec)
                write_row(out, rec)
                continue
            task = inst.task()
            base = trace_issue(runner, task, wt, task.issue, timeout_s=cfg.critic.replay_timeout_s)
            crashes = replay.reported_crashes(base, task.issue) if not base.reason else []
            todo = [(GOLD, inst.patch, None)] + [(p["system"], p.get("model_patch") or "", p["resolved"])
                                                 for p in preds]
            for system, patch, resolved in todo:
                rec = done.get((system, iid))
                if rec is None:
                    rec = {"instance_id": iid, "repo": inst.repo, "system": system, "resolved": resolved,
                           "crashes": len(crashes)}
                    if not crashes:
                        rec.update(verdict="not run", note=base.note() if base.reason else
                                   "the issue's code raised no crash the issue names at the base")
                    elif not patch.strip():
                        rec.update(verdict="not run", note="no patch")
                    else:
                        rec.update(_replayed(runner, task, wt, patch, base, cfg.critic.replay_timeout_s))
                    write_row(out, rec)
                records.append(rec)
            print(f"[{n}/{len(by_instance)}] {iid}: {len(crashes)} reported crash statements; "
                  + ", ".join(f"{r['system']}={r['verdict']}" for r in records[-len(todo):]), file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted: the figures below cover the instances judged so far"
              + (" (rerun with --resume to continue)" if args.output else ""), file=sys.stderr)
    finally:
        if out:
            out.close()
    report(records)
    return 0


def _replayed(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, base: IssueTrace,
              timeout_s: float) -> dict[str, Any]:
    """One patch's replay, as a row keeps it. The patch is applied to ``wt`` first, as the Critic
    has it (the replay's copy falls back on its files), and taken off after."""
    try:
        wt.apply(patch)
    except PatchError as exc:
        return {"verdict": "not run", "note": f"the patch does not apply: {str(exc)[:200]}"}
    try:
        result = replay.replay_issue(runner, task, wt, patch, timeout_s=timeout_s, base=base)
    finally:
        wt.reset()
    return {"verdict": verdict(result), "note": result.note, "reproduced": result.reproduced,
            "kinds": [s["kind"] for s in result.summaries], "seconds": round(result.seconds, 2)}


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.3f}" if whole else "-"


def report(records: list[dict[str, Any]]) -> None:
    """The tables and the headline (module docstring) over ``records``."""
    gold = [r for r in records if r["system"] == GOLD]
    reproduced = {r["instance_id"] for r in gold if r.get("crashes")}
    by_repo = Counter(r["repo"] for r in gold if r["instance_id"] in reproduced)
    print(f"instances: {len(gold)}; the issue's code raised the crash the issue reports at the base in "
          f"{len(reproduced)} ({', '.join(f'{k} {v}' for k, v in sorted(by_repo.items()))})")
    preds = [r for r in records if r["system"] != GOLD and r["instance_id"] in reproduced]
    print(f"{'system':<40}{'rows':>6}" + "".join(f"{v + ' (resolved/all)':>26}" for v in VERDICTS))
    systems = sorted({r["system"] for r in preds})
    for name, rows in [(s, [r for r in preds if r["system"] == s]) for s in systems] + [("all", preds)]:
        cells = []
        for v in VERDICTS:
            these = [r for r in rows if r["verdict"] == v]
            cells.append(f"{sum(bool(r['resolved']) for r in these)}/{len(these)}")
        print(f"{name:<40}{len(rows):>6}" + "".join(f"{c:>26}" for c in cells))
    gold_here = [r for r in gold if r["instance_id"] in reproduced]
    counts = Counter(r["verdict"] for r in gold_here)
    print("gold patch: " + ", ".join(f"{v} {counts.get(v, 0)}" for v in VERDICTS)
          + "".join(f"\n  {r['instance_id']}: {r['verdict']}: {r.get('note', '')}" for r in gold_here
                    if r["verdict"] != "passes"))
    passing = [r for r in preds if r["verdict"] == "passes"]
    failing = [r for r in preds if r["verdict"] in ("fails", "unsafe")]
    judged = passing + failing
    print(f"gold_pass={_share(counts.get('passes', 0), len(gold_here))} "
          f"resolved_if_pass={_share(sum(bool(r['resolved']) for r in passing), len(passing))} "
          f"resolved_if_not={_share(sum(bool(r['resolved']) for r in failing), len(failing))} "
          f"base_rate={_share(sum(bool(r['resolved']) for r in preds), len(preds))} rows={len(judged)}")


def main(argv: list[str] | None = None) -> int:
    return run_terminable(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
