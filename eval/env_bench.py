"""Build the ``venv`` backend's environment of every (repo, version) of a dataset, and time it.

    python -m eval.env_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR --only django

One environment per (repo, version), built from swebench's specs (``scoring.execution.envs``) at
the first instance of that version (its ``environment_setup_commit`` for the dependencies, its
``base_commit`` for the install). A built or failed environment is cached: a rerun reports it
without building (``--resume`` behaviour is the cache's). Per version it prints the Python used,
ok or the reason, the build's and the install's seconds (as ``env.json`` recorded them when they
were built) and the requirements left out. Rows go to ``--out`` (JSONL). Last line:
``built=<ok>/<versions> build_seconds_total=<sum>``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from eval.options import add_options, check_options, load_instances, mirrored, only_repos
from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.records import atomic_write
from fixgraph.repo.workspace import RepoCache, WorkspaceError
from scoring.execution.envs import VenvEnvs
from scoring.execution.testenv import EnvError
from scoring.verdict.judge import InputError


def first_per_version(instances: list[Instance], only: set[str]) -> list[Instance]:
    """The first instance (by id) of each (repo, version), in (repo, version) order."""
    seen: dict[tuple[str, str], Instance] = {}
    for inst in sorted(instances, key=lambda i: i.instance_id):
        if only and inst.repo not in only and inst.repo.split("/")[1] not in only:
            continue
        seen.setdefault((inst.repo, inst.version), inst)
    return [seen[k] for k in sorted(seen, key=lambda k: (k[0], tuple(int(x) for x in k[1].split(".") if x.isdigit())))]


def build_one(envs: VenvEnvs, cache: RepoCache, inst: Instance) -> dict[str, Any]:
    row: dict[str, Any] = {"repo": inst.repo, "version": inst.version, "instance_id": inst.instance_id,
                           "env": "", "wall_seconds": 0.0, "python": None, "wanted_python": None,
                           "build_seconds": None, "install_seconds": None, "left_out": []}
    start = time.monotonic()
    try:
        wt = cache.worktree(inst.repo, inst.base_commit, f"envbench-{inst.instance_id}")
    except WorkspaceError as exc:  # a row of the table (not built, with why), never the end of the run
        return {**row, "ok": False, "reason": str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
                "wall_seconds": round(time.monotonic() - start, 1)}
    try:
        envs.get(inst.task(), wt)
        row["ok"], row["reason"] = True, ""
    except EnvError as exc:
        row["ok"], row["reason"] = False, str(exc)
    finally:
        env_dir = envs.record_path(inst.task(), wt)  # an inferred env's is named by what it was built from
        cache.remove_worktree(inst.repo, wt)
    row["env"] = env_dir.name
    meta_path = env_dir / "env.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    row.update(wall_seconds=round(time.monotonic() - start, 1), python=meta.get("python_version"),
               wanted_python=meta.get("wanted_python"), build_seconds=meta.get("seconds"),
               install_seconds=meta.get("install_seconds"), left_out=sorted(meta.get("left_out", {})))
    if not row["ok"] and not row["reason"]:
        row["reason"] = meta.get("reason", "")
    return row


def _chosen(args: argparse.Namespace) -> list[Instance] | str:
    """The first instance of each wanted (repo, version) with a mirror, or why there is none."""
    try:
        check_options(args)
        instances = load_instances(args)
        only = only_repos(args.only, {i.repo for i in instances})
    except InputError as exc:
        return str(exc)
    versions = {s.strip() for s in args.versions.split(",") if s.strip()}
    chosen = [i for i in first_per_version(mirrored(instances, args.repos, only), only)
              if not versions or i.version in versions]
    return chosen or f"no (repo, version) of {args.dataset} has a mirror under {args.repos}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.env_bench", description=(__doc__ or "").split("\n\n")[0])
    add_options(ap, without={"stride", "shard", "resume"}, output=Path("runs/env_bench.jsonl"),
                output_help="one row per (repo, version), JSON Lines")
    ap.add_argument("--versions", default="", help="comma-separated versions to include (default: all)")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    args = ap.parse_args(argv)
    chosen = _chosen(args)
    if isinstance(chosen, str):
        print(f"error: {chosen}", file=sys.stderr)
        return 2
    settings = TestSettings(backend="venv")
    envs = VenvEnvs(settings.env_dir or args.cache_dir / "envs", args.cache_dir, settings)
    cache = RepoCache(args.cache_dir, args.repos)
    rows: list[dict[str, Any]] = []
    for inst in chosen:
        row = build_one(envs, cache, inst)
        rows.append(row)
        print(f"{row['repo']} {row['version']}: {'ok' if row['ok'] else 'FAILED: ' + row['reason'][:160]} "
              f"python={row['python']} build_s={row['build_seconds']} install_s={row['install_seconds']}",
              file=sys.stderr, flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, "".join(json.dumps(r) + "\n" for r in rows))
    print("repo                      version  python  ok  build_s  install_s  left out / reason")
    for r in rows:
        tail = ",".join(r.get("left_out") or []) if r["ok"] else r["reason"][:100]
        print(f"{r['repo']:<25} {r['version']:<8} {r['python'] or '-':<7} {'y' if r['ok'] else 'n':<3} "
              f"{r['build_seconds'] or 0:>7}  {r['install_seconds'] or 0:>9}  {tail}")
    ok = [r for r in rows if r["ok"]]
    total = sum(float(r["build_seconds"] or 0) + float(r["install_seconds"] or 0) for r in rows)
    print(f"built={len(ok)}/{len(rows)} build_seconds_total={total:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
