"""Cold and warm env builds per (repo, version) of the compiled repositories.

    python -m eval.build_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR \\
        --only matplotlib/matplotlib [--versions 3.5,3.6] [--warm 1] --cache-dir DIR --out runs/build_bench.jsonl

Per version: the env is built (the spec's venv, then the install at the first Lite instance's base
commit: cold, unless the shared compiler cache already holds objects of another version, which the
row says), then installed at the next ``--warm`` instances' base commits (warm: a later base commit
of the same (repo, version); unchanged translation units come from the compiler cache, unchanged
extensions' links from the link cache). Each row has the seconds, the compiler cache's hits and
misses for that step (ccache's stats log), the links reused and made, and whether the install was
reused without rebuilding (no build input changed between the commits). A rerun skips steps
already in ``--out``. Last lines: per version ``cold_s warm_s ratio``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from eval.options import add_options, check_options, load_instances, mirrored, only_repos
from eval.rows import write_row
from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import RepoCache
from scoring.execution.compiled import CCACHE_STATS_LOG, CYTHON_STATS_LOG, LINK_STATS_LOG
from scoring.execution.envs import VenvEnvs
from scoring.execution.testenv import EnvError
from scoring.verdict.judge import InputError


def _logged(env_dir: Path, name: str) -> list[str]:
    """The lines a build step's cache logged in ``env_dir``'s stats log ``name`` since the last
    call (the log is then cleared)."""
    log = env_dir / name
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    log.unlink(missing_ok=True)
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ccache_counts(env_dir: Path) -> dict[str, int]:
    """Hits and misses ccache logged for this env's build steps since the last call."""
    counts = Counter(_logged(env_dir, CCACHE_STATS_LOG))
    # ccache 4's stats log: one direct_cache_hit or preprocessed_cache_hit per hit, cache_miss per miss
    # (beside storage lines: local_storage_hit, local_storage_read_miss, ...)
    hits = counts.get("direct_cache_hit", 0) + counts.get("preprocessed_cache_hit", 0)
    misses = counts.get("cache_miss", 0)
    return {"ccache_hits": hits, "ccache_misses": misses}


def link_counts(env_dir: Path) -> dict[str, int]:
    """Links the link cache (scoring/execution/linkcache.py) reused and made for this env's build
    steps since the last call."""
    lines = _logged(env_dir, LINK_STATS_LOG)
    return {"link_hits": lines.count("link_hit"), "link_misses": lines.count("link_miss")}


def cython_counts(env_dir: Path) -> dict[str, int]:
    """Modules Cython's cache (scoring/execution/cython_cache.py) had and generated for this env's
    build steps since the last call."""
    lines = _logged(env_dir, CYTHON_STATS_LOG)
    return {"cython_hits": lines.count("hit"), "cython_misses": lines.count("miss")}


def build_step(envs: VenvEnvs, cache: RepoCache, inst: Instance, kind: str) -> dict[str, Any]:
    row: dict[str, Any] = {"repo": inst.repo, "version": inst.version, "kind": kind,
                           "instance_id": inst.instance_id, "base_commit": inst.base_commit}
    wt = cache.worktree(inst.repo, inst.base_commit, f"buildbench-{inst.instance_id}")
    path = envs.record_path(inst.task(), wt)  # an inferred env's is named by what it was built from
    before = _meta(path)
    start = time.monotonic()
    cpu = _children_cpu()
    try:
        envs.get(inst.task(), wt)
        row["ok"], row["reason"] = True, ""
    except EnvError as exc:
        row["ok"], row["reason"] = False, str(exc)[:300]
    row["seconds"] = round(time.monotonic() - start, 1)
    # CPU seconds of the build's processes (the sandbox waits for them): what the build costs on any
    # machine, where wall seconds on a shared one mostly measure the other users' load
    row["cpu_seconds"] = round(_children_cpu() - cpu, 1)
    after = _meta(path)
    row["reused_install"] = row["ok"] and after.get("installed_commit") != inst.base_commit
    row["venv_seconds"] = after.get("seconds") if after.get("build_id") != before.get("build_id") else 0.0
    row["install_seconds"] = (after.get("install_seconds")
                              if after.get("installed_commit") == inst.base_commit else 0.0)
    row.update(ccache_counts(path))
    row.update(link_counts(path))
    row.update(cython_counts(path))
    cache.remove_worktree(inst.repo, wt)
    return row


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads((path / "env.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def report(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["repo                       version  cold_install_s  warm_install_s(median)  ratio  cold_hits/misses"]
    by: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[(r["repo"], r["version"])].append(r)
    for (repo, version), rs in sorted(by.items()):
        cold = [r for r in rs if r["kind"] == "cold" and r["ok"]]
        warm_rows = [r for r in rs if r["kind"] == "warm" and r["ok"] and not r["reused_install"]]
        warm = sorted(r["install_seconds"] for r in warm_rows)
        cpu = [f"{r['kind']} {r['cpu_seconds']:.0f}" for r in rs if r.get("cpu_seconds") is not None and r["ok"]]
        failed = [r for r in rs if not r["ok"]]
        c = cold[0]["install_seconds"] if cold else None
        w = warm[len(warm) // 2] if warm else None
        ratio = f"{w / c:.2f}" if c and w is not None else "-"
        hm = f"{cold[0]['ccache_hits']}/{cold[0]['ccache_misses']}" if cold else "-"
        lines.append(f"{repo:<26} {version:<8} {c if c is not None else '-':>14} {w if w is not None else '-':>23}"
                     f"  {ratio:>5}  {hm}  cpu_s: {', '.join(cpu) or '-'}")
        for r in failed:
            lines.append(f"    failed ({r['kind']}, {r['instance_id']}): {r['reason'][:200]}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.build_bench", description=(__doc__ or "").split("\n\n")[0])
    add_options(ap, without={"stride", "shard", "resume"}, output=Path("runs/build_bench.jsonl"),
                output_help="one row per build, JSON Lines; a rerun skips the builds already there")
    ap.add_argument("--versions", default="", help="comma-separated versions (default: all of the repos')")
    ap.add_argument("--warm", type=int, default=1, help="later base commits installed per version")
    ap.add_argument("--build-timeout", type=float, default=1800.0,
                    help="seconds per build step (a cold compile on a busy machine takes long)")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    args = ap.parse_args(argv)
    try:
        check_options(args)
        if not args.only.strip():
            raise InputError("--only: name the repositories to build (owner/name or name)")
        instances = load_instances(args)
        only = only_repos(args.only, {i.repo for i in instances})
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    versions = {s.strip() for s in args.versions.split(",") if s.strip()}
    groups: dict[tuple[str, str], list[Instance]] = defaultdict(list)
    for inst in mirrored(instances, args.repos, only):
        if not versions or inst.version in versions:
            groups[(inst.repo, inst.version)].append(inst)
    if not groups:
        print(f"error: no instance of {args.dataset} matches --only/--versions with a mirror", file=sys.stderr)
        return 2
    done = set()
    rows: list[dict[str, Any]] = []
    if args.output.is_file():
        for line in args.output.read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            rows.append(row)
            done.add((row["instance_id"], row["kind"]))
    settings = TestSettings(backend="venv", build_timeout_s=args.build_timeout)
    envs = VenvEnvs(args.cache_dir / "envs", args.cache_dir, settings)
    cache = RepoCache(args.cache_dir, args.repos)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    for key in sorted(groups):
        group = sorted(groups[key], key=lambda i: i.instance_id)
        seen: set[str] = set()
        plan: list[tuple[Instance, str]] = []
        for inst in group:
            if inst.base_commit in seen:
                continue
            seen.add(inst.base_commit)
            plan.append((inst, "cold" if not plan else "warm"))
        for inst, kind in plan[:1 + args.warm]:
            if (inst.instance_id, kind) in done:
                continue
            row = build_step(envs, cache, inst, kind)
            rows.append(row)
            with args.output.open("a") as fh:
                write_row(fh, row)
            print(f"{key[0]} {key[1]} {kind} {inst.instance_id}: ok={row['ok']} {row['seconds']} s "
                  f"(install {row['install_seconds']} s, ccache {row['ccache_hits']}/{row['ccache_misses']}, "
                  f"links reused/made {row['link_hits']}/{row['link_misses']}, "
                  f"Cython modules reused/made {row['cython_hits']}/{row['cython_misses']}) "
                  f"{row['reason'][:160]}", file=sys.stderr, flush=True)
    print("\n".join(report(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
