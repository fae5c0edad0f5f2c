"""How often the local grader (``eval.grade``) agrees with the official SWE-bench harness.

    python -m eval.grade_fidelity --dataset PATH --repos DIR [--predictions-dir DIR] [--stride N]
        [--offset K] [--only REPO,...] [--workers N] [--resume] [--cache-dir DIR] [--out DIR]

The rows are the shared predictions files (``lite_predictions/*.jsonl``: one row per system and
instance, each with the official ``resolved``). Chosen by a stated stride: the dataset's
instances (of ``--only``'s repositories, default all twelve) sorted by repository and id, every
``--stride``-th from ``--offset``, and every system's non-empty prediction for each (the systems
of one instance share its environment and its install, so an env built serves nine rows; an
empty patch is skipped: both graders count it unresolved without running anything). Rows run
instance by instance.

Prints agreement with the official verdict per repository and overall (over the rows the tests
could run for), every disagreement with its class, and the not-runnable rows with their reasons.
On a disagreement the instance's gold patch is graded too (once per instance). The classes, first
match: ``timeout`` (the official run timed out), ``patch apply`` (one grader applied the patch,
the other did not), ``flaky test`` (graded once more when the gold patch is resolved here, the
verdict changes), ``network`` (the log asks for the internet), ``environment drift (the gold
patch is not resolved here either)``, ``parser`` (a listed test the log shows but swebench's
parser does not report), ``environment drift`` (the rest: this machine's packages).
Per-row results go to ``--out``, as ``eval.grade`` lays them out (run id ``fidelity``), and a
rerun with ``--resume`` grades nothing twice. Last line:
``agreement=<a> rows=<n> disagreements=<d> not_runnable=<u>`` (``rows``: rows graded, the
not-runnable ones included; ``agreement``: over the runnable ones).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from eval.gold_bench import NETWORK_ERROR
from eval.grade import instance_dir, read_grade, write_grade
from eval.local_harness import NOT_RUNNABLE, PATCH_FAILED, RESOLVED, Graded, Prediction, grade, grader_label
from eval.options import add_options, check_options, instance_repo, load_instances, only_repos, per_repository
from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import RepoCache, find_mirror
from scoring.execution.runner import make_runner
from scoring.verdict.judge import InputError

SHARED_PREDICTIONS = Path("../shared/data/lite_predictions")
RUN_ID = "fidelity"


def load_rows(folder: Path) -> list[dict[str, Any]]:
    """Every (system, instance) row of the shared predictions files."""
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                row.setdefault("system", path.stem)
                rows.append(row)
    return rows


def choose(instances: list[Instance], rows: list[dict[str, Any]], stride: int, offset: int,
           only: set[str]) -> list[tuple[Instance, dict[str, Any]]]:
    """The stride's instances, and every system's non-empty prediction for each; the instances
    taken in turn from each repository, so that a run stopped early spans them all."""
    picked = per_repository(sorted((i for i in instances if not only or i.repo in only),
                                   key=lambda i: (i.repo, i.instance_id)), stride, instance_repo, offset)
    turns: dict[str, list[Instance]] = defaultdict(list)
    for inst in picked:
        turns[inst.repo].append(inst)
    picked = [t[k] for k in range(max(map(len, turns.values()), default=0)) for t in turns.values() if k < len(t)]
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if (row.get("model_patch") or "").strip():
            by_id[row["instance_id"]].append(row)
    return [(inst, row) for inst in picked for row in sorted(by_id[inst.instance_id], key=lambda r: r["system"])]


def env_ready(cache_dir: Path, inst: Instance) -> bool:
    """Whether the (repo, version) environment is built (``scoring.execution.envs``' layout)."""
    meta = cache_dir / "envs" / f"{inst.repo.replace('/', '+')}__{inst.version}" / "env.json"
    try:
        return bool(json.loads(meta.read_text()).get("ok"))
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def classify(inst: Instance, row: dict[str, Any], status: str, log: str, gold: str,
             again: Graded | None) -> str:
    """Why the local verdict (``status``) differs from the official one (see the module's
    docstring); ``gold``: the local status of the instance's gold patch."""
    if row.get("eval_status") == "test_timeout" or (row.get("log") or {}).get("outcome") == "tests_timed_out":
        return "timeout"
    if status == PATCH_FAILED or row.get("eval_status") == "no_apply":
        return "patch apply"
    if again is not None and (again.status == RESOLVED) != (status == RESOLVED):
        return "flaky test"
    if NETWORK_ERROR.search(log):
        return "network"
    if gold and gold != RESOLVED:
        return "environment drift (the gold patch is not resolved here either)"
    from scoring.execution.specs import log_parser

    statuses = dict(log_parser(inst.repo)(log, None))
    for test in [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS]:
        name = test.split("::")[-1].split("[", 1)[0].split(" (", 1)[0]
        if test not in statuses and not any(k.startswith(test.split("[", 1)[0]) for k in statuses) and name in log:
            return "parser"
    return "environment drift"


def report(results: list[dict[str, Any]]) -> list[str]:
    lines = ["repo                      rows  runnable  agree  agreement  official_resolved  local_resolved"]
    by_repo: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        by_repo[r["repo"]].append(r)
    for repo in sorted(by_repo):
        rs = by_repo[repo]
        ok = [r for r in rs if r["status"] != NOT_RUNNABLE]
        agree = sum(r["agree"] for r in ok)
        share = f"{agree / len(ok):.3f}" if ok else "-"
        lines.append(f"{repo:<25} {len(rs):>4}  {len(ok):>8}  {agree:>5}  {share:>9}  "
                     f"{sum(r['official'] for r in ok):>17}  {sum(r['status'] == RESOLVED for r in ok):>14}")
    lines += ["", "disagreements (instance, system: official -> local, class, tests):"]
    for r in results:
        if r["status"] != NOT_RUNNABLE and not r["agree"]:
            lines.append(f"  {r['instance_id']}, {r['system']}: {'resolved' if r['official'] else 'unresolved'}"
                         f" -> {r['status']}, {r['class']}; {r['detail'][:220]}")
    lines += ["", "not runnable here (instance, system: reason):"]
    for r in results:
        if r["status"] == NOT_RUNNABLE:
            lines.append(f"  {r['instance_id']}, {r['system']}: {r['reason'][:200]}")
    secs = [r["seconds"] for r in results if r["status"] != NOT_RUNNABLE and r.get("seconds")]
    if secs:
        # Warm: not the first row graded of its instance (that one may have built or installed the env).
        first: dict[str, dict[str, Any]] = {}
        for r in sorted(results, key=lambda r: r.get("mtime", 0.0)):
            first.setdefault(r["instance_id"], r)
        warm = [r["seconds"] for r in results if r["status"] != NOT_RUNNABLE and r.get("seconds")
                and first[r["instance_id"]] is not r]
        lines.append(f"\nseconds per graded prediction: median {statistics.median(secs):.1f}, "
                     f"total {sum(secs):.0f} over {len(secs)}; with a warm env (not an instance's first row): "
                     + (f"median {statistics.median(warm):.1f} over {len(warm)}" if warm else "none yet"))
    ok = [r for r in results if r["status"] != NOT_RUNNABLE]
    agreement = sum(r["agree"] for r in ok) / len(ok) if ok else 0.0
    lines.append(f"agreement={agreement:.3f} rows={len(results)} disagreements={sum(not r['agree'] for r in ok)} "
                 f"not_runnable={len(results) - len(ok)}")
    return lines


def _detail(folder: Path, inst: Instance) -> str:
    """The listed tests that failed here, from the grade's report."""
    try:
        data = json.loads((folder / "report.json").read_text())[inst.instance_id]
    except (OSError, json.JSONDecodeError, KeyError):
        return ""
    ts = data.get("tests_status") or {}
    f2p = (ts.get("FAIL_TO_PASS") or {}).get("failure") or []
    p2p = (ts.get("PASS_TO_PASS") or {}).get("failure") or []
    return f"F2P failing: {', '.join(f2p[:3]) or '-'}; P2P failing: {', '.join(p2p[:3]) or '-'}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.grade_fidelity", description=(__doc__ or "").split("\n\n")[0])
    add_options(ap, rows="instance (by id, from --offset)", stride=4, output=Path("runs/grade_fidelity"),
                output_help="a folder: the grades as eval.grade lays them out (run id fidelity)")
    ap.add_argument("--predictions-dir", type=Path, default=SHARED_PREDICTIONS)
    ap.add_argument("--offset", type=int, default=0, help="the first instance of each repository --stride takes "
                                                          "(0-based, below K)")
    ap.add_argument("--ready-only", action="store_true",
                    help="only instances whose (repo, version) environment is built already in --cache-dir")
    ap.add_argument("--skip", default="", help="comma-separated repositories not to grade now (the choice of rows "
                                               "stays --only's and --stride's)")
    ap.add_argument("--limit", type=int, default=None, help="grade at most N new rows, then report")
    ap.add_argument("--report-only", action="store_true",
                    help="grade nothing; report every row --out holds (of --only's repositories), whichever run chose it")
    ap.add_argument("--no-recheck", action="store_true", help="do not grade a disagreement a second time")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--network", action="store_true", help="let the tests reach the network, as the harness's "
                                                             "containers do (eval.grade --network)")
    ap.add_argument("--backend", choices=["venv", "local"], default="venv", help="local: this interpreter (tests)")
    ap.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("FIXGRAPH_CACHE_DIR", ".cache/fixgraph")))
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        k, n = check_options(args) or (0, 1)
        if not 0 <= args.offset < args.stride:
            raise InputError("--offset must be in [0, stride)")
        if not args.predictions_dir.is_dir():
            raise InputError(f"--predictions-dir {args.predictions_dir} is not a directory")
        instances = load_instances(args)
        only = only_repos(args.only, {i.repo for i in instances})
    except InputError as exc:
        print(f"eval.grade_fidelity: error: {exc}", file=sys.stderr)
        return 2
    logs = args.output / "logs"
    if args.report_only:  # every row graded in --out, whichever runs chose it
        chosen = [(i, r) for i, r in choose(instances, load_rows(args.predictions_dir), 1, 0, only)
                  if read_grade(instance_dir(logs, RUN_ID, Prediction(i.instance_id, r["system"], ""))) is not None]
    else:
        chosen = [(i, r) for i, r in choose(instances, load_rows(args.predictions_dir), args.stride, args.offset, only)
                  if find_mirror(args.repos, i.repo) is not None
                  and (not args.ready_only or env_ready(args.cache_dir, i))]
    if not chosen:
        print(f"eval.grade_fidelity: error: {args.output} holds no graded row" if args.report_only else
              "eval.grade_fidelity: error: no row chosen has a repository mirror", file=sys.stderr)
        return 2
    settings = TestSettings(backend=args.backend, timeout_s=args.timeout, cpu_s=int(args.timeout * 2),
                            network_isolation=not args.network)
    runner = make_runner(settings, args.cache_dir)
    cache = RepoCache(args.cache_dir, args.repos)
    label = grader_label(args.backend)
    results: list[dict[str, Any]] = []
    todo = [(i, r) for i, r in chosen
            if read_grade(instance_dir(logs, RUN_ID, Prediction(i.instance_id, r["system"], ""))) is None]
    if todo and len(todo) < len(chosen) and not (args.resume or args.report_only):
        print(f"eval.grade_fidelity: error: {args.output} holds grades already; pass --resume", file=sys.stderr)
        return 2
    order = list(dict.fromkeys(i.instance_id for i, _ in chosen))
    skip = {x.strip() for x in args.skip.split(",") if x.strip()}
    todo = [(i, r) for i, r in todo if order.index(i.instance_id) % n == k
            and i.repo not in skip and i.repo.split("/")[1] not in skip]
    if args.limit is not None:
        todo = todo[:args.limit]
    bar = tqdm(todo, desc="fidelity", unit="row", disable=args.no_progress or args.report_only, file=sys.stderr)
    def gold_of(inst: Instance) -> str:
        """The local status of the instance's gold patch, graded once (systems share it)."""
        pred = Prediction(inst.instance_id, "gold", inst.patch)
        done = read_grade(instance_dir(logs, RUN_ID, pred))
        if done is None:
            graded = grade(inst, pred, cache, runner, settings, args.cache_dir, f"fidg-{inst.instance_id}-{uuid.uuid4().hex[:6]}")
            done = write_grade(instance_dir(logs, RUN_ID, pred), pred, graded, label)
        return str(done["status"])

    for inst, row in [] if args.report_only else bar:
        pred = Prediction(inst.instance_id, row["system"], row["model_patch"])
        graded = grade(inst, pred, cache, runner, settings, args.cache_dir, f"fid-{inst.instance_id}-{uuid.uuid4().hex[:6]}")
        rec = write_grade(instance_dir(logs, RUN_ID, pred), pred, graded, label)
        if graded.status != NOT_RUNNABLE and (graded.status == RESOLVED) != bool(row.get("resolved")):
            gold = gold_of(inst)
            again = None
            if gold == RESOLVED and graded.status != PATCH_FAILED and not args.no_recheck:
                again = grade(inst, pred, cache, runner, settings, args.cache_dir, f"fid2-{inst.instance_id}-{uuid.uuid4().hex[:6]}")
                rec["recheck"] = again.status
            rec["class"] = classify(inst, row, graded.status, graded.log, gold, again)
            rec["gold"] = gold
            write_grade_rec(instance_dir(logs, RUN_ID, pred), rec)
        bar.set_postfix_str(f"{inst.instance_id} {row['system'][:12]}: {graded.status}", refresh=False)
    for inst, row in chosen:
        folder = instance_dir(logs, RUN_ID, Prediction(inst.instance_id, row["system"], ""))
        rec = read_grade(folder)
        if rec is None:
            continue
        official = bool(row.get("resolved"))
        agree = (rec["status"] == RESOLVED) == official
        cls = ""
        if rec["status"] != NOT_RUNNABLE and not agree:
            gold = read_grade(instance_dir(logs, RUN_ID, Prediction(inst.instance_id, "gold", "")))
            gold_status = str((gold or {}).get("status") or ("" if args.report_only else gold_of(inst)))
            cls = rec["class"] if "gold" in rec else classify(inst, row, rec["status"],
                                                              _read(folder / "test_output.txt"), gold_status, None)
        results.append({"instance_id": inst.instance_id, "repo": inst.repo, "system": row["system"],
                        "official": official, "status": rec["status"], "agree": agree, "class": cls,
                        "reason": rec.get("reason", ""), "seconds": rec.get("seconds", 0.0),
                        "detail": _detail(folder, inst), "mtime": (folder / "grade.json").stat().st_mtime})
    print(f"rows: every row graded in {args.output}: {len(results)}" if args.report_only else
          f"rows chosen: every {args.stride}th instance of each repository from {args.offset} of "
          f"{', '.join(sorted(only)) or 'all repositories'}, all systems' non-empty predictions: {len(chosen)}; "
          f"graded: {len(results)}")
    print(f"grader: {label}")
    print("\n".join(report(results)))
    return 0


def write_grade_rec(folder: Path, rec: dict[str, Any]) -> None:
    from fixgraph.records import atomic_write

    atomic_write(folder / "grade.json", json.dumps(rec, indent=2) + "\n")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


if __name__ == "__main__":
    sys.exit(main())
