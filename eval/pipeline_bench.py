"""The pipeline's own overhead per task on real SWE-bench Lite instances, LLM time excluded.

The LLM is an oracle that replays the gold patch (eval/fixtures/oracle.py), so every node runs for real
(ranking, reading, edits, pyright, tests, records) on a fetched mirror. Reference, measured in the
same run: the bare work any harness does for the task (a worktree at the base commit, the gold
patch applied, the instance's tests run once through the same test runner).

    python -m eval.pipeline_bench --dataset ../shared/data/swebench_lite.jsonl --repos MIRRORS \
        --instances pallets__flask-4992 --runs 3

With ``--executor ray`` each task also runs through ``--executor ray`` (a local Ray started once,
its start-up reported apart) right after the thread pool, and the last line adds the executor's
own cost: the median of Ray's wall time over the thread pool's on the same task in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from eval.fixtures.oracle import oracle_script
from eval.hidden import run_hidden
from eval.options import add_options, check_options, load_instances, mirrored
from fixgraph import phases
from fixgraph.config import ConfigError, load_config
from fixgraph.dataset import DatasetError, select
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.repo.workspace import RepoCache, WorkspaceError
from graph import build_graph
from pipeline.executors import ExecutorError, RayExecutor
from pipeline.tasks import run_tasks
from scoring.verdict.judge import InputError

DEFAULT_INSTANCES = "pallets__flask-4992,psf__requests-2317"


class OracleModels:
    """A model factory a Ray worker can receive: it builds the oracle there, on first use."""

    def __init__(self, instance: Any):
        self.instance = instance
        self.model: TimedModel | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"instance": self.instance, "model": None}

    def __call__(self, role: str) -> TimedModel:
        if self.model is None:
            self.model = TimedModel(script=oracle_script(self.instance))
        return self.model


class TimedModel(ScriptedChatModel):
    """The scripted model, timing itself: its time is the 'LLM time' the figure leaves out."""

    clock: list[float] = []

    def _generate(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        t0 = time.perf_counter()
        try:
            return super()._generate(*args, **kwargs)
        finally:
            self.clock.append(time.perf_counter() - t0)


OUTSIDE = "outside any phase"


def phase_seconds(rec: phases.Recorder, total: float) -> dict[str, float]:
    """The run's seconds by phase, with what no phase claimed (the runner, LangGraph) as its own."""
    out = dict(rec.seconds)
    out[OUTSIDE] = max(0.0, total - rec.total())
    return out


def phase_lines(rec: phases.Recorder, total: float) -> str:
    """One task's phases, largest first, each with how many times it was entered; then what ran
    beside them (overlapping, not in the sum)."""
    seconds = phase_seconds(rec, total)
    parts = [f"{name} {s:.2f}s" + (f" x{rec.counts[name]}" if rec.counts.get(name, 0) > 1 else "")
             for name, s in sorted(seconds.items(), key=lambda kv: -kv[1]) if s >= 0.005]
    line = f"{'':8s} phases (sum {sum(seconds.values()):.2f}s of {total:.2f}s): " + ", ".join(parts)
    if rec.overlapped:
        line += "; beside them: " + ", ".join(f"{n} {s:.2f}s" for n, s in sorted(rec.overlapped.items(),
                                                                               key=lambda kv: -kv[1]))
    return line


def median_phases(runs: list[dict[str, float]]) -> str:
    names = sorted({n for r in runs for n in r})
    med = {n: statistics.median(r.get(n, 0.0) for r in runs) for n in names}
    return "  phases, median of the runs: " + ", ".join(
        f"{n} {s:.2f}s" for n, s in sorted(med.items(), key=lambda kv: -kv[1]) if s >= 0.005)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add_options(p, without={"only", "stride", "shard", "output", "resume"})
    p.add_argument("--instances", default=DEFAULT_INSTANCES)
    p.add_argument("--config", default="redo")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--cache-dir", type=Path, help="default: a temporary folder")
    p.add_argument("--executor", choices=["threads", "ray"], default="threads",
                   help="ray: also run each task on a local Ray and report Ray's time over the thread pool's")
    args = p.parse_args(argv)
    try:
        check_options(args)
        instances = mirrored(select(load_instances(args), args.instances), args.repos.resolve(), set())
        if not instances:
            raise DatasetError(f"none of {args.instances} has a mirror under {args.repos}")
        with tempfile.TemporaryDirectory(prefix="fixgraph-bench-") as tmp:
            cache = args.cache_dir or Path(tmp) / "cache"
            # Records mask the key wherever it appears: a word no repository's code holds.
            cfg = load_config(args.config, env={"OPENAI_API_KEY": "sk-pipeline-bench-scripted"}, overrides={
                "cache_dir": str(cache), "predictions_dir": str(Path(tmp) / "predictions"),
                "runs_dir": str(Path(tmp) / "runs")})
            return _bench(instances, cfg, args)
    except (ConfigError, DatasetError, InputError, WorkspaceError, ExecutorError) as exc:
        print(f"pipeline_bench: error: {exc}", file=sys.stderr)
        return 2


def _bench(instances, cfg, args) -> int:  # noqa: ANN001

    repo_cache = RepoCache(cfg.cache_dir, args.repos)
    overhead: dict[str, list[float]] = {i.instance_id: [] for i in instances}
    bare: dict[str, list[float]] = {i.instance_id: [] for i in instances}
    print(f"config {cfg.name}; {len(instances)} instance(s); {args.runs} measured runs after one warm-up")
    executor: RayExecutor | None = None
    ray_vs_threads: dict[str, list[float]] = {i.instance_id: [] for i in instances}
    if args.executor == "ray":
        t0 = time.perf_counter()
        executor = RayExecutor.start(cfg)
        print(f"ray: a local Ray started in {time.perf_counter() - t0:.2f}s (once; not in the figures below)")
    try:
        return _measure(instances, cfg, args, repo_cache, overhead, bare, executor, ray_vs_threads)
    finally:
        if executor is not None:
            executor.close()


def _measure(instances, cfg, args, repo_cache, overhead, bare, executor, ray_vs_threads) -> int:  # noqa: ANN001
    from scoring.execution.runner import make_runner

    by_phase: dict[str, list[dict[str, float]]] = {i.instance_id: [] for i in instances}
    for run in range(args.runs + 1):
        for inst in instances:
            # Reference: worktree, gold patch, the tests once.
            t0 = time.perf_counter()
            wt = repo_cache.worktree(inst.repo, inst.base_commit, f"bare-{inst.instance_id}")
            wt.apply(inst.patch)
            outcome = run_hidden(make_runner(cfg.tests, cfg.cache_dir.resolve()), inst, wt, inst.patch)
            repo_cache.remove_worktree(inst.repo, wt)
            t_bare = time.perf_counter() - t0

            model = TimedModel(script=oracle_script(inst))
            model.clock.clear()
            with phases.recording() as rec:
                t0 = time.perf_counter()
                summary = run_tasks([inst], cfg, build_graph=build_graph, run_id=f"bench{run}", repos=args.repos,
                                    model_factory=lambda role, m=model: m, progress=False)
                total = time.perf_counter() - t0
            llm = sum(model.clock)
            tag = "warm-up" if run == 0 else f"run {run}"
            print(f"{tag:8s} {inst.instance_id:28s} total {total:6.2f}s llm {llm:5.3f}s "
                  f"overhead {total - llm:6.2f}s bare {t_bare:6.2f}s patched={summary.patched} "
                  f"tests_runnable={outcome.runnable}{'' if outcome.runnable else ' (' + outcome.reason + ')'}")
            print(phase_lines(rec, total))
            if executor is not None:
                t0 = time.perf_counter()
                on_ray = run_tasks([inst], cfg, build_graph=build_graph, run_id=f"ray{run}", repos=args.repos,
                                   model_factory=OracleModels(inst), progress=False, executor=executor)
                t_ray = time.perf_counter() - t0
                print(f"{'':8s} {'':28s} on ray {t_ray:6.2f}s ({t_ray / total:.2f}x the thread pool) "
                      f"patched={on_ray.patched}")
                if run:
                    ray_vs_threads[inst.instance_id].append(t_ray / total)
            if run:
                overhead[inst.instance_id].append(total - llm)
                bare[inst.instance_id].append(t_bare)
                by_phase[inst.instance_id].append(phase_seconds(rec, total))
    med = statistics.median([statistics.median(v) for v in overhead.values()])
    ref = statistics.median([statistics.median(v) for v in bare.values()])
    for iid in overhead:
        print(f"{iid}: median overhead {statistics.median(overhead[iid]):.2f}s, "
              f"bare {statistics.median(bare[iid]):.2f}s")
        print(median_phases(by_phase[iid]))
    line = f"overhead_per_task_s={med:.2f} bare_task_s={ref:.2f} ratio={med / ref if ref else float('nan'):.2f}"
    if executor is not None:
        for iid, ratios in ray_vs_threads.items():
            print(f"{iid}: ray/threads wall time, median {statistics.median(ratios):.2f} ({len(ratios)} runs)")
        line += f" ray_over_threads={statistics.median([statistics.median(v) for v in ray_vs_threads.values()]):.2f}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
