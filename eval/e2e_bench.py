"""Each task end to end with the scripted model: does its record reach score kind ``tests``?

    python -m eval.e2e_bench --repos MIRRORS --dataset ../shared/data/swebench_lite.jsonl \\
        [--tasks stratified50] [--only django/django,matplotlib] [--stride K] [--shard I/N] \\
        [-o runs/e2e_bench.jsonl] [--resume] [--report-only] [--cache-dir DIR] [--config redo]

For each task whose repository has a mirror under MIRRORS, the whole graph runs once (EVAL_MODE)
with the oracle model (eval/fixtures/oracle.py): it replays the gold patch, and its reproduction
test is the instance's own test file as ``test_patch`` leaves it, with the files the patch creates
as its data files (evaluation side, handed over here as eval/repro_bench.py does: the pipeline never
sees ``test_patch``); when the Reproducer refuses it, the stand-in drafts the patch's next test
file, then each as a new file beside it (``eval.hidden.standin_drafts``), as a model told why would
write another. So what varies is whether the pipeline's own tests
run on the repository: the record's chosen attempt scores kind ``tests``
(the reproduction test and the selected existing tests both ran), ``partial`` (one of the two),
or ``semantic``/``none``; every row that is not ``tests`` says why, from the record.

``--stride K`` takes every K-th task of each repository (by version and id). One row per task
goes to ``-o/--output`` (JSON Lines; ``--out`` is the same option) as it finishes; ``--resume`` keeps the rows there
and runs the others. The run's records and predictions go beside it (``<out>-runs/``), never to
the repository's predictions/. The report: per repository the tasks, how many reached ``tests``,
``partial``, another kind, or failed (no record, an exception, a checkout that failed, or the
record's status ``failed``), the median seconds per task; then every row that is not ``tests``
with its why. Last line: ``tests=<k> of=<n> partial=<p> other=<o> failed=<f>``, the four counts
adding up to n.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import git

from eval.fixtures.oracle import oracle_script
from eval.hidden import standin_drafts
from eval.options import (
    add_options,
    check_options,
    instance_repo,
    load_instances,
    mirrored,
    only_repos,
    sample,
)
from eval.rows import instance_key, open_rows, previous_rows, run_tag, write_row
from fixgraph.config import ConfigError, RunConfig, load_config
from fixgraph.dataset import DatasetError, Instance, select
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.records import RunStore
from fixgraph.redaction import redact
from fixgraph.repo.workspace import RepoCache, WorkspaceError
from graph import build_graph
from pipeline.tasks import model_name, run_tasks
from scoring.verdict.judge import InputError

# The key the config gets: a word no repository's code holds, since records mask it wherever it
# appears ("oracle" would mask django's oracle backend in its patches and paths).
SCRIPTED_KEY = "sk-e2e-bench-scripted"
WHY_CHARS = 600
RAN = ("patched", "empty")  # the record's statuses of a task the graph took to its end


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.e2e_bench", description=(__doc__ or "").split("\n")[0])
    add_options(p, rows="task", output=Path("runs/e2e_bench.jsonl"), output_help="per-task rows, JSON Lines")
    p.add_argument("--tasks", default="stratified50", help="stratified50 | all | ID[,ID...]")
    p.add_argument("--report-only", action="store_true", help="print the report of the rows in --output; run nothing")
    p.add_argument("--cache-dir", type=Path, help="environments and clones, shared (default: a temporary folder)")
    p.add_argument("--config", default="redo", help="a config name in configs/ or a TOML path")
    return p


def choose(instances: list[Instance], args: argparse.Namespace) -> list[Instance]:
    """The ``--tasks`` of ``--only``'s repos that have a mirror, by repo and version (so one
    environment serves consecutive tasks), then ``--stride`` and ``--shard``."""
    shard = check_options(args)
    only = only_repos(args.only, {i.repo for i in instances})
    picked = [i for i in select(instances, args.tasks) if not only or i.repo in only]
    kept = mirrored(picked, args.repos, set())
    if not kept:
        raise DatasetError(f"none of the {len(picked)} selected tasks has a mirror under {args.repos}")
    if len(kept) < len(picked):
        print(f"e2e_bench: {len(picked) - len(kept)} selected tasks have no mirror under {args.repos}; "
              "left out", file=sys.stderr)
    kept.sort(key=lambda i: (i.repo, i.version, i.instance_id))
    return sample(kept, instance_repo, args.stride, None, shard)


def own_test_files(inst: Instance, repos: RepoCache, key: str) -> list[dict[str, Any]]:
    """Evaluation side: the instance's own test files (eval.hidden), read in a worktree of its own;
    the stand-in drafts them in turn."""
    wt = repos.worktree(inst.repo, inst.base_commit, key)
    try:
        return standin_drafts(inst, wt)
    finally:
        repos.remove_worktree(inst.repo, wt)


def chosen_attempt(record: dict[str, Any]) -> dict[str, Any]:
    """The attempt the record published; else its last one (an empty or failed task's)."""
    attempts = record.get("attempts") or []
    number = (record.get("published") or {}).get("attempt")
    return next((a for a in attempts if a.get("number") == number), attempts[-1] if attempts else {})


def why_not_tests(record: dict[str, Any], score: dict[str, Any]) -> str:
    """What the record says kept the task from kind ``tests``: its failure, the score's note, why
    the tests did not run, and the reproduction test's fate."""
    test_run = score.get("test_run") or {}
    repro = record.get("repro") or {}
    parts = [record.get("failed") or "",
             score.get("note") or "",
             "" if test_run.get("runnable", True) else f"tests not runnable: {test_run.get('reason', '')}",
             "" if repro.get("status") in (None, "accepted") else
             f"reproduction test not accepted ({repro.get('status')}): {repro.get('reason', '')}"]
    if not record.get("attempts") and not record.get("failed"):
        parts.append(f"no attempt: {record.get('stop_reason', '')}")
    return "; ".join(dict.fromkeys(p for p in parts if p))[:WHY_CHARS] or "the record gives no reason"


def row_of(record: dict[str, Any]) -> dict[str, Any]:
    """The row's figures from the task's record."""
    attempt = chosen_attempt(record)
    score = attempt.get("score") or {}
    row: dict[str, Any] = {
        "outcome": record.get("status", "failed"), "kind": score.get("kind", "none"),
        "fix_score": score.get("fix_score"), "test_pass_rate": score.get("test_pass_rate"),
        "no_regression": score.get("no_regression"), "tests_run": score.get("tests_run", 0),
        "attempts": record.get("n_attempts", 0), "repro": (record.get("repro") or {}).get("status", ""),
        "repro_test": (record.get("repro") or {}).get("path"),
        "stop_reason": record.get("stop_reason", "")}
    if row["kind"] != "tests" or row["outcome"] not in RAN:
        row["why"] = why_not_tests(record, score)
    return row


class Bench:
    """One run's settings, caches and store: what each task's run shares."""

    def __init__(self, cfg: RunConfig, args: argparse.Namespace, run_id: str):
        self.cfg, self.mirrors, self.run_id = cfg, args.repos, run_id
        self.repos = RepoCache(cfg.cache_dir, args.repos)
        self.store = RunStore(run_id, cfg.predictions_dir, cfg.runs_dir, model_name(cfg))

    def run_one(self, inst: Instance) -> dict[str, Any]:
        head = {"instance_id": inst.instance_id, "repo": inst.repo, "version": inst.version}
        t0 = time.monotonic()
        try:
            own = own_test_files(inst, self.repos, f"{self.run_id}-own-{inst.instance_id}")
        except (WorkspaceError, git.GitCommandError) as exc:  # e.g. the base commit not in the mirror
            detail = str(exc).strip().splitlines() or ["git failed"]
            return head | {"outcome": "no_checkout", "kind": "none", "why": detail[-1][:WHY_CHARS],
                           "seconds": round(time.monotonic() - t0, 1)}
        model = ScriptedChatModel(script=oracle_script(inst, own))
        run_tasks([inst], self.cfg, build_graph=build_graph, run_id=self.run_id, repos=self.mirrors,
                  model_factory=lambda role: model, progress=False)
        record = self.store.read_record(inst.instance_id)
        body = row_of(record) if record else {"outcome": "error", "kind": "none", "why": "no record written"}
        if not own and "why" in body:  # the oracle's stand-in test then fails at nothing: refused
            body["why"] = f"test_patch has no Python test file; {body['why']}"[:WHY_CHARS]
        return head | {"own_test": own[0]["path"] if own else None} | body | {
            "seconds": round(time.monotonic() - t0, 1)}

    def row(self, inst: Instance) -> dict[str, Any]:
        """The task's row, whatever happens: one bad task must not end the bench."""
        try:
            return self.run_one(inst)
        except Exception as exc:
            return {"instance_id": inst.instance_id, "repo": inst.repo, "version": inst.version,
                    "outcome": "error", "kind": "none",
                    "why": redact(f"the task raised {type(exc).__name__}: {exc}")[:WHY_CHARS]}


def category(row: dict[str, Any]) -> str:
    """tests | partial | other | failed: the four counts of the last line."""
    if row.get("outcome") not in RAN:
        return "failed"
    return row["kind"] if row.get("kind") in ("tests", "partial") else "other"


def one_line(why: str) -> str:
    """A reason as one line of the report: a reason may hold a test runner's output over many lines
    (django-11211's holds django's import traceback), so its whitespace is collapsed; the row keeps
    it as it was."""
    return " ".join(why.split())


def report(rows: list[dict[str, Any]]) -> list[str]:
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_repo[r["repo"]].append(r)
    lines = [f"{'repo':28s} {'tasks':>5s} {'tests':>5s} {'partial':>7s} {'other':>5s} {'failed':>6s} {'median_s':>8s}"]
    for repo in sorted(by_repo):
        group = by_repo[repo]
        counts = {c: sum(category(r) == c for r in group) for c in ("tests", "partial", "other", "failed")}
        secs = [r["seconds"] for r in group if r.get("seconds") is not None]
        median = f"{statistics.median(secs):.1f}" if secs else "n/a"
        lines.append(f"{repo:28s} {len(group):5d} {counts['tests']:5d} {counts['partial']:7d} "
                     f"{counts['other']:5d} {counts['failed']:6d} {median:>8s}")
    misses = [r for r in rows if category(r) != "tests"]
    if misses:
        lines.append("not kind tests (outcome, kind: why):")
        lines += [f"  {r['instance_id']}: {r.get('outcome')}, {r.get('kind')}: {one_line(r.get('why', ''))}"
                  for r in misses]
    total = {c: sum(category(r) == c for r in rows) for c in ("tests", "partial", "other", "failed")}
    lines.append(f"tests={total['tests']} of={len(rows)} partial={total['partial']} other={total['other']} "
                 f"failed={total['failed']}")
    return lines


def run_id_for(args: argparse.Namespace) -> str:
    """Named after the out file and the shard: runs side by side on one cache must not share
    worktrees (the runner removes its run id's stale ones)."""
    stem = re.sub(r"[^A-Za-z0-9._+-]", "_", args.output.stem)
    return f"e2e-{stem}-{run_tag(args)}"


def run(chosen: list[Instance], args: argparse.Namespace, cache: Path) -> list[dict[str, Any]]:
    runs = args.output.parent / f"{args.output.stem}-runs"
    run_id = run_id_for(args)
    cfg = load_config(args.config, env={"OPENAI_API_KEY": SCRIPTED_KEY, "EVAL_MODE": "true"}, overrides={
        "cache_dir": str(cache), "predictions_dir": str(runs / "predictions"), "runs_dir": str(runs)})
    if not args.resume:  # a fresh run: no record of an earlier one stands in for a task
        shutil.rmtree(runs / run_id, ignore_errors=True)
    bench = Bench(cfg, args, run_id)
    done = previous_rows(args.output, instance_key) if args.resume else {}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with open_rows(args.output, args.resume) as out:
        for n, inst in enumerate(chosen, 1):
            if inst.instance_id in done:
                continue
            row = done[inst.instance_id] = bench.row(inst)
            write_row(out, row)
            print(f"[{n}/{len(chosen)}] {inst.instance_id}: {row['outcome']} {row['kind']} "
                  f"{row.get('seconds', '-')}s {row.get('why', '')[:120]}".rstrip(), file=sys.stderr, flush=True)
    return [done[i.instance_id] for i in chosen if i.instance_id in done]


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        chosen = choose(load_instances(args), args)
        if args.report_only:
            rows = previous_rows(args.output, instance_key)
            print("\n".join(report([rows[i.instance_id] for i in chosen if i.instance_id in rows])))
            return 0
        with tempfile.TemporaryDirectory(prefix="fixgraph-e2e-") as tmp:
            rows = run(chosen, args, args.cache_dir or Path(tmp) / "cache")
    except (ConfigError, DatasetError, InputError) as exc:
        print(f"e2e_bench: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
