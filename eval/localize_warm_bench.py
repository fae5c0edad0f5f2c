"""Where the warm localization time goes, and this code against a reference revision in the same run.

    python -m eval.localize_warm_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR \\
        [--repo sympy/sympy] [--stride 8] [--rounds 2] [--reference main] [--cache-dir DIR]

For every ``--stride``-th instance of ``--repo`` it times what the pipeline does once the indexes are
cached (as ``eval.localization_bench``'s ``warm`` column): load the index, attach the history, rank,
render the Planner's map and the Explorer's prompt. Each phase is split into the process's own CPU
time, the time it was runnable but waiting for a core (``/proc/self/schedstat``: the cost of a loaded
machine), the time it waited on git subprocesses, and the rest (I/O, locks). The reference revision
(``git archive`` of ``--reference`` from this checkout) and this code run alternately in fresh
processes, ``--rounds`` times each, so both see the same load. The last line is the headline: the
median warm wall time per instance of this code and of the reference, with their CPU times.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

PHASES = ("load", "history", "rank", "map", "prompt")
ROOT = Path(__file__).resolve().parent.parent


def _cpu_runq() -> tuple[float, float]:
    """This process's CPU time and time spent runnable but waiting for a core, in seconds."""
    try:
        with open("/proc/self/schedstat") as fh:
            cpu_ns, wait_ns = fh.read().split()[:2]
        return int(cpu_ns) / 1e9, int(wait_ns) / 1e9
    except (OSError, ValueError):
        return time.process_time(), float("nan")


def _clock(spawned: list[float]) -> tuple[float, ...]:
    cpu, runq = _cpu_runq()
    return time.perf_counter(), cpu, runq, spawned[0], spawned[1]


def worker(args: argparse.Namespace) -> int:
    """Time every instance in this process (the code on sys.path is the one measured)."""
    from eval.localization_bench import explorer_prompt_tokens
    from fixgraph.config import ExplorerSettings
    from fixgraph.dataset import load_jsonl
    from fixgraph.localize import RepoIndex

    spawned = [0.0, 0.0]  # seconds blocked on subprocesses, how many subprocesses
    real_run = subprocess.run

    def timed_run(*a, **k):  # noqa: ANN002, ANN003, ANN202
        t0, (cpu0, runq0) = time.perf_counter(), _cpu_runq()
        try:
            return real_run(*a, **k)
        finally:
            # Blocked on the child only: our own CPU (fork, reading its pipe) and our waits for a
            # core during the call are already counted in their columns.
            cpu1, runq1 = _cpu_runq()
            spawned[0] += time.perf_counter() - t0 - (cpu1 - cpu0) - (runq1 - runq0)
            spawned[1] += 1

    subprocess.run = timed_run  # type: ignore[assignment]
    git_dir = Path(args.git_dir)
    insts = [i for i in load_jsonl(args.dataset) if i.repo == args.repo][:: args.stride]
    settings = ExplorerSettings()
    for inst in insts:  # the cold pass: every cache built, as in the pipeline's second task on a commit
        RepoIndex.build_from_git(git_dir, inst.base_commit, args.cache_dir)
    for inst in insts:
        marks = [_clock(spawned)]
        index = RepoIndex.build_from_git(git_dir, inst.base_commit, args.cache_dir, history=False)
        marks.append(_clock(spawned))
        index.attach_history(git_dir, inst.base_commit, args.cache_dir)
        marks.append(_clock(spawned))
        ranked = index.rank(inst.problem_statement, k=settings.candidates_shown)
        marks.append(_clock(spawned))
        index.repo_map(ranked, max_tokens=settings.map_tokens)
        marks.append(_clock(spawned))
        explorer_prompt_tokens(index, inst, ranked, settings)
        marks.append(_clock(spawned))
        phases = {name: [b - a for a, b in zip(m0, m1, strict=True)]
                  for name, m0, m1 in zip(PHASES, marks[:-1], marks[1:], strict=True)}
        print(json.dumps({"instance_id": inst.instance_id, "phases": phases}), flush=True)
    return 0


def _reference_tree(rev: str, into: Path) -> Path:
    """The code of ``rev`` (from this checkout's git) unpacked under ``into``."""
    archive = into / "ref.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev], stdout=fh, check=True, capture_output=False,
                       stderr=subprocess.PIPE)
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into / "ref", filter="data")
        else:  # Pythons before 3.11.4 (Debian 12's 3.11.2) lack extraction filters: plain files and folders only
            tar.extractall(into / "ref", members=[m for m in tar.getmembers() if (m.isfile() or m.isdir())
                                                  and not m.name.startswith("/") and ".." not in Path(m.name).parts])
    return into / "ref"


def run(args: argparse.Namespace) -> int:
    from fixgraph.dataset import DatasetError, load_jsonl
    from fixgraph.repo.workspace import find_mirror

    try:
        insts = [i for i in load_jsonl(args.dataset) if i.repo == args.repo]
    except DatasetError as exc:
        print(f"localize_warm_bench: {exc}", file=sys.stderr)
        return 2
    git_dir = find_mirror(args.repos, args.repo) if args.repos.is_dir() else None
    if git_dir is None or not insts:
        print(f"localize_warm_bench: no instance of {args.repo} with a mirror under {args.repos}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="warm-bench-") as tmp:
        versions: dict[str, Path] = {"this code": ROOT}
        if args.reference:
            try:
                versions[args.reference] = _reference_tree(args.reference, Path(tmp))
            except subprocess.CalledProcessError as exc:
                err = exc.stderr.decode(errors="replace").strip().splitlines() if exc.stderr else []
                print(f"localize_warm_bench: --reference {args.reference}: {err[-1] if err else 'git archive failed'}",
                      file=sys.stderr)
                return 2
        samples: dict[str, list[dict[str, list[float]]]] = {name: [] for name in versions}
        for _ in range(args.rounds):
            for name, code in versions.items():
                # This file runs the measure; the package it imports is the version's (-P: the
                # script's folder is not put on the path, PYTHONPATH alone decides).
                cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--worker", "--dataset", str(args.dataset),
                       "--repos", str(args.repos), "--repo", args.repo, "--stride", str(args.stride),
                       "--cache-dir", str(args.cache_dir), "--git-dir", str(git_dir)]
                env = {**os.environ, "PYTHONPATH": str(code)}
                proc = subprocess.run(cmd, cwd=code, env=env, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    tail = proc.stderr.strip().splitlines()
                    print(f"localize_warm_bench: {name}: {tail[-1] if tail else proc.returncode}", file=sys.stderr)
                    return 2
                samples[name] += [json.loads(line)["phases"] for line in proc.stdout.splitlines() if line.startswith("{")]
                if args.verbose:
                    print(f"{name}: {len(samples[name])} samples", file=sys.stderr, flush=True)
    n = len(insts[:: args.stride])
    print(f"{args.repo}: {n} instances (every {args.stride}th) x {args.rounds} rounds per version, alternating; "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    print("medians per instance, seconds: wall = own CPU + runnable waiting for a core (runq) "
          "+ blocked on git subprocesses + other (I/O, locks)")
    head = f"{'version':<12}{'phase':<9}{'wall':>7}{'CPU':>7}{'runq':>7}{'git':>7}{'#git':>5}{'other':>7}"
    print(head)
    print("-" * len(head))
    totals: dict[str, tuple[float, float]] = {}
    for name, rows in samples.items():
        table = {p: [r[p] for r in rows] for p in PHASES}
        table["total"] = [[sum(r[p][j] for p in PHASES) for j in range(5)] for r in rows]
        for phase, vals in table.items():
            def med(j: int, vals: list[list[float]] = vals) -> float:
                return statistics.median(v[j] for v in vals)
            other = statistics.median(v[0] - v[1] - v[2] - v[3] for v in vals)
            print(f"{name:<12}{phase:<9}{med(0):>7.3f}{med(1):>7.3f}{med(2):>7.3f}{med(3):>7.3f}{med(4):>5.0f}{other:>7.3f}")
        totals[name] = (statistics.median(v[0] for v in table["total"]), statistics.median(v[1] for v in table["total"]))
    line = f"warm median on {args.repo}: this code {totals['this code'][0]:.2f} s wall (CPU {totals['this code'][1]:.2f} s)"
    if args.reference:
        ref = totals[args.reference]
        line += f"; {args.reference} {ref[0]:.2f} s wall (CPU {ref[1]:.2f} s)"
    print(line)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.localize_warm_bench", description=(__doc__ or "").split("\n")[0])
    # Its own options, not eval.options: the worker runs this file on a reference revision's
    # packages, which may predate eval.options; --stride is over one repository anyway.
    p.add_argument("--dataset", type=Path, required=True, help="SWE-bench-format JSONL")
    p.add_argument("--repos", type=Path, required=True, help="folder of git mirrors (<owner>+<name>/repo)")
    p.add_argument("--repo", default="sympy/sympy", help="owner/name (default sympy/sympy, the largest)")
    p.add_argument("--stride", type=int, default=8, help="every Nth instance of the repository")
    p.add_argument("--rounds", type=int, default=2, help="runs of each version, alternating")
    p.add_argument("--reference", default="", help="a git revision of this checkout to compare against")
    p.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--git-dir", default="", help=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.stride < 1 or args.rounds < 1:
        print("localize_warm_bench: --stride and --rounds must be >= 1", file=sys.stderr)
        return 2
    try:
        return worker(args) if args.worker else run(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
