"""Faults and load: many fixture tasks through a misbehaving LLM server, nothing lost.

    python -m eval.fault_bench --tasks 150 --workers 8 --fault-rate 0.2 [--kill] [--seed N]

It builds fixture repositories (a few small packages, each with many functions that have an
off-by-one bug; one task per bug), then runs ``graph.py`` on all of them twice as a subprocess:
once against a fault-free scripted server (the reference) and once against a
:class:`~eval.fakes.faulty_llm_server.FaultyLLMServer` that injects every fault kind at ``--fault-rate``.
The scripted replies are a pure function of the task named in the prompt, so retries and re-asks
get the same answer and a task whose replies came through must produce the reference's patch.
With ``--kill`` the faulty run is SIGKILLed (its whole process group) at a random moment, then
resumed with the same command.

    python -m eval.fault_bench --tasks 150 --workers 8 --fault-rate 0.2 --executor ray --kill

With ``--executor ray`` the faulty run (and the ``--run-budget`` runs) go through a local Ray
(``graph.py --executor ray``; the reference stays on the thread pool, so ``identical_to_clean``
also compares the two executors), and ``--kill`` SIGKILLs ``--kills`` Ray worker processes in
the middle of their tasks instead of the whole run: Ray reruns those tasks, which resume from
their checkpoints.

Checks: every task has exactly one final record and at most one predictions line; every task
whose replies came through (no LLM failure, no budget stop) has the reference's prediction; no
task's spending before its last call reached a cap (so no cap is exceeded by more than one call,
counted from the usage the server reported, which includes calls a killed process never
recorded); no worktree and no process is left behind. Last line:
``tasks=N lost=0 duplicated=0 over_budget=0 identical_to_clean=n/n``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.fakes.faulty_llm_server import FAULT_KINDS, FaultPlan, FaultyLLMServer
from eval.fixtures.repos import git_commit_all

PROJECT = Path(__file__).resolve().parent.parent
CONFIG = """\
# fault_bench: the redo pipeline without its two slow phases (pyright, the instance's tests),
# so 150 tasks fit a few minutes on 2 cores; the Critic's two LLM calls still run.
name = "{name}"
max_attempts = 3
cache_dir = "{work}/cache"
predictions_dir = "{work}/predictions"
runs_dir = "{work}/runs"

[llm]
timeout_s = {timeout}
max_retries = {retries}

[executor]
cpus = {cpus}
local_cpus = {local_cpus}

[critic]
enabled = true
static = false
llm_check = true
tests = false
guard = "warn"
fix_score_threshold = 0.8
"""
TAG = re.compile(r"\[task ([A-Za-z0-9_.\-]+)\]")
# One task in this many is scripted to send an edit that does not apply (an empty result).
NO_APPLY_EVERY = 10


@dataclass(frozen=True)
class Spec:
    instance_id: str
    module: str  # e.g. lib3/funcs.py
    func: str
    buggy: str
    fixed: str
    applies: bool


def make_bench_repos(root: Path, n_tasks: int, per_repo: int = 30) -> tuple[list[dict[str, Any]], dict[str, Spec]]:
    """Fixture repos under ``root`` (mirror layout) and one SWE-bench-format instance per bug."""
    instances: list[dict[str, Any]] = []
    specs: dict[str, Spec] = {}
    n_repos = max(1, -(-n_tasks // per_repo))
    for r in range(n_repos):
        name = f"lib{r}"
        repo = root / f"bench+{name}"
        (repo / name).mkdir(parents=True)
        count = min(per_repo, n_tasks - r * per_repo)
        funcs = []
        for j in range(count):
            factor = j + 2
            funcs.append(f'def scale_{j}(x):\n    """x times {factor}."""\n    return x * {factor} + 1\n')
        (repo / name / "__init__.py").write_text("")
        (repo / name / "funcs.py").write_text(f'"""Scaling helpers of {name}."""\n\n\n' + "\n\n".join(funcs))
        (repo / "README.md").write_text(f"# {name}\n\nScaling helpers.\n")
        base = git_commit_all(repo, f"{name}: initial")
        for j in range(count):
            iid = f"bench__{name}-{j}"
            factor = j + 2
            specs[iid] = Spec(iid, f"{name}/funcs.py", f"scale_{j}", f"    return x * {factor} + 1\n",
                              f"    return x * {factor}\n", applies=(len(specs) + 1) % NO_APPLY_EVERY != 0)
            instances.append({
                "instance_id": iid, "repo": f"bench/{name}", "base_commit": base, "version": "0.1",
                "problem_statement": (f"[task {iid}] scale_{j}() is off by one\n\n`{name}.funcs.scale_{j}(1)` "
                                      f"returns {factor + 1} instead of {factor}."),
                "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]",
            })
    return instances, specs


def task_tag(body: dict[str, Any]) -> str:
    """The task a chat request belongs to: the ``[task ID]`` marker in its prompt."""
    for message in body.get("messages", []):
        found = TAG.search(str(message.get("content") or ""))
        if found:
            return found.group(1)
    return ""


class BenchResponder:
    """Replies that depend only on the task and the tool asked for: retries get the same answer."""

    def __init__(self, specs: dict[str, Spec]):
        self.specs = specs

    def __call__(self, tool: str, body: dict[str, Any]) -> dict[str, Any]:
        spec = self.specs.get(task_tag(body))
        if spec is None:
            raise KeyError(f"no task marker in the prompt for {tool}")
        if tool == "Plan":
            return {"files": [spec.module], "reasoning": f"{spec.func} lives in {spec.module}."}
        if tool == "ExploreStep":
            return {"next_files": [], "learned": f"{spec.func} adds 1.", "confidence": "high",
                    "suspects": [{"file": spec.module, "symbol": spec.func}]}
        if tool == "CodeChange":
            search = spec.buggy if spec.applies else spec.buggy.replace("+ 1", "+ 2")
            return {"edits": [{"path": spec.module, "search": search, "replace": spec.fixed}],
                    "explanation": "Drop the stray + 1."}
        if tool == "RuntimeCheck":
            return {"verdict": "Safe", "errors": []}
        if tool == "PatchJudgment":
            return {"score": 0.95, "reasoning": "Removes the off-by-one."}
        raise KeyError(f"no scripted reply for {tool}")


@dataclass
class RunResult:
    seconds: float
    peak_rss_mb: float
    returncode: int
    killed_at: float | None = None
    records_at_kill: int = 0
    leftover_processes: int = 0
    leftover_commands: tuple[str, ...] = ()
    # --executor ray --kill: (seconds into the run, the task whose worker was SIGKILLed)
    worker_kills: list[tuple[float, str]] = field(default_factory=list)


def _group_members(pgid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries ``marker``: a run's processes, wherever Ray put
    them (its workers have process groups of their own, and outlive a killed driver)."""
    needle = marker.encode()
    out = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if needle in env.read_bytes() and (env.parent / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                out.append(int(env.parent.name))
        except (OSError, IndexError):
            continue
    return out


def ray_task_workers(marker: str) -> dict[int, str]:
    """This run's Ray worker processes in the middle of a fixgraph task: pid -> instance id."""
    out = {}
    for pid in _marked(marker):
        title = _command(pid)
        if title.startswith("ray::fixgraph:"):
            out[pid] = title.removeprefix("ray::fixgraph:").strip()
    return out


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return f"pid {pid}"


def run_graph(work: Path, config: Path, run_id: str, dataset: Path, base_url: str, workers: int,
              kill_after: float | None = None, extra_env: dict[str, str] | None = None,
              executor: str = "threads", worker_kills: list[float] | None = None,
              rng: random.Random | None = None) -> RunResult:
    """``graph.py`` on every task in its own process group.

    With ``kill_after``, SIGKILL the whole group that many seconds after the first record appears
    (so the kill lands while tasks are being written and others are in flight, not during start-up).
    With ``worker_kills`` (``executor="ray"``), SIGKILL one Ray worker in the middle of a task at
    each of those moments after the first record, chosen with ``rng``.
    """
    marker = f"fault_bench:{work}:{run_id}:{time.monotonic()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "FIXGRAPH_", "GITHUB_", "RAY_"))}
    env.update(OPENAI_API_KEY="sk-fault-bench", OPENAI_BASE_URL=base_url, EVAL_MODE="true",
               PYTHONPATH=str(PROJECT), FAULT_BENCH_RUN=marker, **(extra_env or {}))
    cmd = [sys.executable, str(PROJECT / "graph.py"), "--tasks", "all", "--dataset", str(dataset),
           "--config", str(config), "--repos", str(work / "mirrors"), "--run-id", run_id,
           "--workers", str(workers), "--no-progress", "--executor", executor]
    kills = sorted(worker_kills or [])
    rng = rng or random.Random(0)
    log = open(work / f"{run_id}.log", "a")  # noqa: SIM115 - closed below, after the child is reaped
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    result = RunResult(0.0, 0.0, 0)
    folder = work / "runs" / run_id / "records"
    deadline = None
    first: float | None = None
    while True:
        # wait4 rather than Popen.wait: it also gives the child's peak resident memory.
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        now = time.monotonic()
        if kills:
            if first is None and folder.is_dir() and any(folder.glob("*.json")):
                first = now
            busy = ray_task_workers(marker) if first is not None and now >= first + kills[0] else {}
            if busy:
                pid = rng.choice(sorted(busy))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    result.worker_kills.append((now - t0, busy[pid]))
                kills.pop(0)
        if kill_after is not None and result.killed_at is None:
            if deadline is None and folder.is_dir() and any(folder.glob("*.json")):
                deadline = now + kill_after
            if deadline is not None and now >= deadline:
                result.records_at_kill = len(list(folder.glob("*.json")))
                os.killpg(proc.pid, signal.SIGKILL)
                result.killed_at = now - t0
        time.sleep(0.02)
    result.seconds = time.monotonic() - t0
    result.returncode = proc.returncode = os.waitstatus_to_exitcode(status)
    result.peak_rss_mb = rusage.ru_maxrss / 1024
    log.close()
    # Whatever is still in the group a few seconds later outlived the run (SIGKILLed children
    # may take a moment to die): count it, then end it (it is ours).
    def leftovers() -> list[int]:
        return sorted(set(_group_members(proc.pid)) | set(_marked(marker)))

    left = leftovers()
    settle = time.monotonic() + 5.0
    while left and time.monotonic() < settle:
        time.sleep(0.1)
        left = leftovers()
    result.leftover_processes = len(left)
    result.leftover_commands = tuple(_command(pid) for pid in left)
    if left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    return result


def leftover_worktrees(work: Path, run_id: str) -> list[str]:
    found = [p.name for p in (work / "cache" / "worktrees").glob(f"{run_id}__*")]
    for bare in (work / "cache" / "repos").glob("*.git"):
        listing = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=bare, capture_output=True, text=True)
        found += [ln.split(" ", 1)[1] for ln in listing.stdout.splitlines()
                  if ln.startswith("worktree ") and f"{run_id}__" in ln]
    return found


def predictions(work: Path, run_id: str) -> tuple[dict[str, str], int]:
    """instance id -> patch from the predictions JSONL, and how many ids appear more than once."""
    path = work / "predictions" / f"{run_id}.jsonl"
    seen: dict[str, str] = {}
    dup = 0
    if path.is_file():
        for raw in path.read_text().splitlines():
            row = json.loads(raw)
            dup += row["instance_id"] in seen
            seen[row["instance_id"]] = row["model_patch"]
    return seen, dup


def records(work: Path, run_id: str) -> dict[str, dict[str, Any]]:
    folder = work / "runs" / run_id / "records"
    return {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def over_budget(log: list[dict[str, Any]], task_tokens: int, task_dollars: float,
                prices: dict[str, Any]) -> list[str]:
    """Tasks whose reported spending before their last delivered reply already reached a cap."""
    per: dict[str, list[tuple[int, float]]] = {}
    for e in sorted(log, key=lambda e: e["t"]):
        if e["usage"] is None or not e["tag"]:
            continue
        tin, tout = e["usage"]
        price = prices.get(e["model"])
        dollars = (tin * price.input + tout * price.output) / 1e6 if price else 0.0
        per.setdefault(e["tag"], []).append((tin + tout, dollars))
    out = []
    for tag, calls in per.items():
        before = calls[:-1]
        if sum(c[0] for c in before) >= task_tokens or sum(c[1] for c in before) >= task_dollars:
            out.append(tag)
    return out


def came_through(rec: dict[str, Any]) -> bool:
    return not rec.get("failed") and not str(rec.get("stop_reason", "")).startswith("budget")


def run_budget_phase(args: argparse.Namespace, work: Path, config: Path, dataset: Path,
                     responder: BenchResponder, cfg: Any, ids: list[str], clean_recs: dict[str, dict[str, Any]],
                     clean_preds: dict[str, str]) -> bool:
    """A fault-free run under a run-wide dollar cap, then the same command without the cap."""
    clean_cost = sum(float(r["billed"]["dollars"]) for r in clean_recs.values())
    cap = round(clean_cost * args.run_budget, 6)
    with FaultyLLMServer(responder, FaultPlan(rate=0.0), tag=task_tag) as srv:
        capped = run_graph(work, config, "capped", dataset, srv.base_url, args.workers,
                           extra_env={"FIXGRAPH_RUN_DOLLARS": str(cap)}, executor=args.executor)
        at_cap = records(work, "capped")
        # One call in flight per worker may finish after the cap is reached: the dearest call here.
        dearest = max((e["usage"][0] * cfg.llm.prices[e["model"]].input
                       + e["usage"][1] * cfg.llm.prices[e["model"]].output) / 1e6
                      for e in srv.log if e["usage"] and e["model"] in cfg.llm.prices)
        finish = run_graph(work, config, "capped", dataset, srv.base_url, args.workers, executor=args.executor)
    spent = sum(float(r["billed"]["dollars"]) for r in at_cap.values())
    unfinished = [i for i, r in at_cap.items() if not r.get("final")]
    bad = [i for i in unfinished if not str(at_cap[i].get("stop_reason", "")).startswith("budget: run")]
    done = records(work, "capped")
    preds, dup = predictions(work, "capped")
    same = [i for i in ids if preds.get(i) == clean_preds.get(i)]
    bound = cap + args.workers * dearest
    log = (work / "capped.log").read_text()
    said = "run budget of" in log
    print(f"run budget: cap ${cap:.4f} ({args.run_budget:.2f} x the clean run's ${clean_cost:.4f}); the capped run "
          f"exited {capped.returncode} after {capped.seconds:.1f} s with {len(at_cap)} records "
          f"({len(unfinished)} stopped mid-task by the cap, not final), spent ${spent:.4f} "
          f"(bound: cap + {args.workers} workers x ${dearest:.4f} = ${bound:.4f}); "
          f"{'it said so' if said else 'it did NOT say so'}")
    print(f"run budget: the rerun without the cap exited {finish.returncode} after {finish.seconds:.1f} s: "
          f"{len(done)} records, all final: {all(r.get('final') for r in done.values())}; "
          f"{len(same)}/{len(ids)} predictions identical to clean, {dup} duplicated lines")
    return (capped.returncode == 0 and finish.returncode == 0 and said and spent <= bound + 1e-9 and not bad
            and len(at_cap) < len(ids) and len(done) == len(ids) and all(r.get("final") for r in done.values())
            and len(same) == len(ids) and not dup and not leftover_worktrees(work, "capped")
            and not capped.leftover_processes and not finish.leftover_processes)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m eval.fault_bench", description="Faults and load: many fixture tasks through a misbehaving LLM server.")
    p.add_argument("--tasks", type=int, default=150)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--fault-rate", type=float, default=0.2)
    p.add_argument("--kill", action="store_true", help="SIGKILL the faulty run at a random moment, then resume "
                   "(with --executor ray: SIGKILL --kills Ray workers mid-task instead)")
    p.add_argument("--executor", choices=["threads", "ray"], default="threads",
                   help="run the faulty run (and --run-budget's) on the thread pool or on a local Ray")
    p.add_argument("--kills", type=int, default=3, help="with --executor ray --kill: Ray workers to SIGKILL")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--run-budget", type=float, metavar="FRACTION",
                   help="also run fault-free with a run-wide dollar cap of FRACTION x the clean run's cost, "
                        "check it stops cleanly, then finish it without the cap")
    p.add_argument("--timeout", type=float, default=2.0, help="the LLM client's timeout, seconds")
    p.add_argument("--retries", type=int, default=4, help="llm.max_retries")
    p.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temporary one)")
    args = p.parse_args(argv)
    problems = []
    if args.tasks < 1:
        problems.append("--tasks must be at least 1")
    if args.workers < 1:
        problems.append("--workers must be at least 1")
    if args.kills < 1:
        problems.append("--kills must be at least 1")
    if not 0.0 <= args.fault_rate <= 1.0:
        problems.append("--fault-rate must be within [0, 1]")
    if args.timeout <= 0 or not 0 <= args.retries <= 10:
        problems.append("--timeout must be positive and --retries within [0, 10]")
    if args.run_budget is not None and not 0.0 < args.run_budget < 1.0:
        problems.append("--run-budget must be a fraction within (0, 1)")
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        problems.append(f"--keep {args.keep} is not empty")
    if problems:
        print(f"fault_bench: error: {problems[0]}", file=sys.stderr)
        raise SystemExit(2)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="fault_bench."))
    work.mkdir(parents=True, exist_ok=True)
    try:
        return bench(args, work)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


def bench(args: argparse.Namespace, work: Path) -> int:
    from fixgraph.config import load_config

    instances, specs = make_bench_repos(work / "mirrors", args.tasks)
    dataset = work / "tasks.jsonl"
    dataset.write_text("".join(json.dumps(i) + "\n" for i in instances))
    config = work / "faultbench.toml"
    # On Ray, --workers tasks share this machine's CPUs, as the thread pool's workers do.
    local_cpus = os.cpu_count() or 1
    config.write_text(CONFIG.format(name="faultbench", work=work, timeout=args.timeout, retries=args.retries,
                                    cpus=round(local_cpus / args.workers, 4), local_cpus=local_cpus))
    cfg = load_config(str(config), env={})
    responder = BenchResponder(specs)
    print(f"fault_bench: {args.tasks} fixture tasks in {len(list((work / 'mirrors').iterdir()))} repos, "
          f"{args.workers} workers, fault rate {args.fault_rate}, seed {args.seed}; config: redo without "
          f"pyright and tests (critic.static=false, critic.tests=false, LLM check and judgment on); "
          f"llm.timeout_s={args.timeout} llm.max_retries={args.retries}; executor {args.executor}"
          + (" (the clean reference on the thread pool)" if args.executor == "ray" else ""))

    with FaultyLLMServer(responder, FaultPlan(rate=0.0), tag=task_tag) as clean_srv:
        clean = run_graph(work, config, "clean", dataset, clean_srv.base_url, args.workers)
    plan = FaultPlan(rate=args.fault_rate, kinds=FAULT_KINDS, seed=args.seed, retry_after="1",
                     silent_s=args.timeout * 4, trickle_s=args.timeout * 4)
    with FaultyLLMServer(responder, plan, tag=task_tag) as srv:
        if args.kill and args.executor == "ray":
            rng = random.Random(args.seed)
            moments = [clean.seconds * rng.uniform(0.0, 0.7) for _ in range(args.kills)]
            runs = [run_graph(work, config, "faulty", dataset, srv.base_url, args.workers, executor="ray",
                              worker_kills=moments, rng=rng)]
        elif args.kill:
            rng = random.Random(args.seed)
            moment = clean.seconds * rng.uniform(0.0, 0.7)
            first = run_graph(work, config, "faulty", dataset, srv.base_url, args.workers, kill_after=moment)
            resumed = run_graph(work, config, "faulty", dataset, srv.base_url, args.workers)
            runs = [first, resumed]
        else:
            runs = [run_graph(work, config, "faulty", dataset, srv.base_url, args.workers, executor=args.executor)]
        log = list(srv.log)
        served = srv.faults()

    ids = [i["instance_id"] for i in instances]
    clean_recs, recs = records(work, "clean"), records(work, "faulty")
    clean_preds, clean_dup = predictions(work, "clean")
    preds, dup_lines = predictions(work, "faulty")
    lost = [i for i in ids if i not in recs or not recs[i].get("final")]
    stray = [name for name in recs if name not in ids]
    duplicated = dup_lines + len(stray)
    through = [i for i in ids if i in recs and came_through(recs[i])]
    identical = [i for i in through if preds.get(i) == clean_preds.get(i)]
    over = over_budget(log, cfg.budget.task_tokens, cfg.budget.task_dollars, cfg.llm.prices)
    budget_stops = [i for i in ids if str(recs.get(i, {}).get("stop_reason", "")).startswith("budget")]
    failed = [i for i in ids if recs.get(i, {}).get("failed")]
    trees = leftover_worktrees(work, "clean") + leftover_worktrees(work, "faulty")
    procs = sum(r.leftover_processes for r in [clean, *runs])
    clean_ok = len(clean_recs) == len(ids) and not clean_dup and all(came_through(r) for r in clean_recs.values())

    def run_line(name: str, r: RunResult) -> str:
        kill = f", SIGKILLed at {r.killed_at:.1f} s with {r.records_at_kill} records written" if r.killed_at else ""
        return f"  {name:<14} {r.seconds:7.1f} s  peak RSS {r.peak_rss_mb:6.1f} MiB  exit {r.returncode}{kill}"

    print("runs (graph.py subprocess, wall time and the run process's peak resident memory):")
    print(run_line("clean", clean))
    for n, r in enumerate(runs):
        print(run_line("faulty" if n == 0 else "faulty resumed", r))
    faulty_s = sum(r.seconds for r in runs)
    print(f"  faulty/clean wall time: {faulty_s / clean.seconds:.2f}x; "
          f"{args.tasks / faulty_s:.2f} tasks/s under faults, {args.tasks / clean.seconds:.2f} clean")
    requests = len(log)
    print(f"faults served: {sum(served.values())} of {requests} requests ("
          + ", ".join(f"{k} {served.get(k, 0)}" for k in FAULT_KINDS) + ")")
    print(f"clean run: {len(clean_recs)} records, {len(clean_preds)} predictions, "
          f"{'all replies came through' if clean_ok else 'NOT CLEAN'}")
    for i in ids:  # what went wrong in the reference, so a rare miss can be told from a bug
        rec = clean_recs.get(i)
        if rec is None or not came_through(rec) or i not in clean_preds:
            why = "no record" if rec is None else (rec.get("failed") or rec.get("stop_reason") or "no prediction")
            print(f"  clean {i}: {str(why)[:200]}")
    print(f"faulty run: {len(recs)} records, {len(preds)} predictions; {len(through)} came through, "
          f"{len(budget_stops)} stopped by the task budget (huge usage reported), {len(failed)} failed "
          "for good (faults beyond the retries, or two invalid replies)")
    reasons: dict[str, int] = {}
    for i in failed:
        reason = re.sub(r"\d+", "N", recs[i]["failed"])[:90]
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in sorted(reasons.items(), key=lambda t: -t[1]):
        print(f"  {n:3d} x {reason}")
    kills = runs[0].worker_kills
    if args.kill and args.executor == "ray":
        hit = sorted({iid for _, iid in kills})
        back = [i for i in hit if recs.get(i, {}).get("resumed")]
        print(f"kill: {len(kills)} of {args.kills} Ray workers SIGKILLed mid-task at "
              f"{', '.join(f'{t:.1f} s' for t, _ in kills) or '-'}; Ray reran their {len(hit)} tasks, "
              f"{len(back)} from a checkpoint: {', '.join(hit)}")
    elif args.kill:
        resumed = sum(bool(r.get("resumed")) for r in recs.values())
        note = "" if runs[0].killed_at else " (the run ended before the kill moment)"
        print(f"kill: {resumed} tasks resumed from a checkpoint after the SIGKILL{note}")
    if trees or procs:
        commands = [c for r in [clean, *runs] for c in r.leftover_commands]
        print(f"left behind: {len(trees)} worktrees {trees[:3]}, {procs} processes {commands[:3]}")
    else:
        print("left behind: no worktree, no process")
    for label, items in (("lost", lost), ("stray records", stray), ("over budget", over),
                         ("different from clean", [i for i in through if i not in identical])):
        if items:
            print(f"{label}: {', '.join(items[:8])}{' ...' if len(items) > 8 else ''}")
    budget_ok = True
    if args.run_budget is not None:
        budget_ok = run_budget_phase(args, work, config, dataset, responder, cfg, ids, clean_recs, clean_preds)
    ok = (budget_ok and not lost and not duplicated and not over and len(identical) == len(through) and not trees
          and not procs and clean_ok and runs[-1].returncode == 0
          and (not args.kill or args.executor != "ray" or len(kills) == args.kills))
    print(f"tasks={len(ids)} lost={len(lost)} duplicated={duplicated} over_budget={len(over)} "
          f"identical_to_clean={len(identical)}/{len(through)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
