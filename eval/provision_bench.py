"""Gold patches on a machine without the spec's Pythons: uv provisions each one from a loopback mirror.

    python -m eval.provision_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR --cache-dir NEW \\
        [--tasks IDS] [--pythons-from ~/.pyenv] [--archives DIR] [--out rows.jsonl]

The mirror serves real interpreters: this machine's own installs (``--pythons-from``, a pyenv-style
folder) packed as python-build-standalone's ``install_only`` archives (``eval.fakes.python_mirror``),
one per minor the rows' specs ask for. ``eval.gold_bench`` then runs in a child with pyenv hidden
(``PYENV_ROOT`` pointing nowhere, ``PATH`` holding only this venv and the system folders) and
``UV_PYTHON_DOWNLOADS_JSON_URL`` naming the mirror's list, into ``--cache-dir``: a new cache, so
every env is built with the interpreter uv installs there, not reused from one built with
pyenv's. A rerun with the same cache and ``--out`` resumes.

Prints gold_bench's report, then one row per instance: the Python the env was built with and how
it got it (from its ``env.json``), the gold verdict and the seconds. Last line:
``provisioned=<rows whose env used a provisioned Python>/<rows> runnable=<n> gold_fix_score_min=<x>``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from eval.fakes.python_mirror import Archive, PackError, PythonMirror, installs, pack
from eval.rows import instance_key, previous_rows
from fixgraph.dataset import DatasetError, load_dataset_any, select
from scoring.execution.interpreters import PYTHONS_DIR
from scoring.execution.specs import repo_specs

ROWS = ("django__django-11099,django__django-15814,sympy__sympy-13480,sympy__sympy-20442,astropy__astropy-6938,"
        "psf__requests-2674,pytest-dev__pytest-5227,pallets__flask-4045,pydata__xarray-4248,"
        "pylint-dev__pylint-7080,mwaskom__seaborn-2848,sphinx-doc__sphinx-8435")


def hidden_pyenv_env(downloads_json: Path) -> dict[str, str]:
    """The environment of a machine with no pyenv whose uv reads the mirror's list."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYENV", "UV_"))}
    env.update(PYENV_ROOT="/nonexistent", UV_PYTHON_DOWNLOADS_JSON_URL=str(downloads_json),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]))
    return env


def wanted_minors(dataset: str, tasks: str, cache_dir: Path) -> dict[str, str]:
    """instance id -> the Python its spec names."""
    out = {}
    for inst in select(load_dataset_any(dataset, cache_dir), tasks):
        spec = repo_specs(cache_dir, inst.repo, inst.version) or {}
        out[inst.instance_id] = str(spec.get("python", "?"))
    return out


def env_records(cache_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(repo, version) -> the env's record, for the envs built in ``cache_dir``."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((cache_dir / "envs").glob("**/env.json")):
        try:
            meta = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("repo"):
            out[(str(meta["repo"]), str(meta.get("version", "")))] = meta
    return out


def table(rows: list[dict[str, Any]], wanted: dict[str, str], records: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    lines = ["instance                      spec  python  how          env_s  gold   empty  test_s  interpreter"]
    for r in rows:
        meta = records.get((r["repo"], r["version"]), {})
        how = str(meta.get("python_how") or "-")
        gold = f"{r['gold_fix_score']:.3f}" if r.get("runnable") and r.get("gold_fix_score") is not None else "-"
        empty = r.get("empty_test_pass_rate")
        test_s = (r.get("seconds_gold") or 0) + (r.get("seconds_empty") or 0)
        lines.append(f"{r['instance_id']:<29} {wanted.get(r['instance_id'], '?'):<5} {meta.get('python_version', '-'):<7} "
                     f"{how:<12} {meta.get('seconds', '-'):>5}  {gold:<5}  {'-' if empty is None else f'{empty:.2f}':<5}  "
                     f"{test_s:>6.0f}  {meta.get('python', '')}")
        if not r.get("runnable"):
            lines.append(f"    not runnable: {str(r.get('reason', ''))[:220]}")
    return lines


def _pack_all(minors: set[str], root: Path, out_dir: Path) -> tuple[list[Archive], list[str]]:
    have = installs(root)
    archives, missing = [], []
    for xy in sorted(minors):
        if xy not in have:
            missing.append(f"{xy}: not under {root}/versions")
            continue
        try:
            archives.append(pack(have[xy], out_dir))
        except PackError as exc:
            missing.append(f"{xy}: {exc}")
    return archives, missing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.provision_bench", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--repos", type=Path, required=True, metavar="DIR")
    ap.add_argument("--cache-dir", type=Path, required=True, help="a new cache (or this bench's, to resume)")
    ap.add_argument("--tasks", default=ROWS, help="comma-separated instance ids (default: the 12 of docs/fresh-machine.md)")
    ap.add_argument("--pythons-from", type=Path, default=Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv"),
                    help="a pyenv-style folder whose installs the mirror serves (default: %(default)s)")
    ap.add_argument("--archives", type=Path, default=Path("runs/python_mirror"), help="where packed archives are kept")
    ap.add_argument("-o", "--out", type=Path, default=Path("runs/provision_bench.jsonl"))
    args = ap.parse_args(argv)
    cache_dir = args.cache_dir.resolve()
    try:
        wanted = wanted_minors(args.dataset, args.tasks, cache_dir)
    except DatasetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    archives, missing = _pack_all({w for w in wanted.values() if w != "?"}, args.pythons_from, args.archives)
    for line in missing:
        print(f"not served: {line}", file=sys.stderr)
    if not archives:
        print(f"error: no interpreter to serve: none of the rows' Pythons is under {args.pythons_from}/versions "
              "(--pythons-from names a pyenv-style folder)", file=sys.stderr)
        return 2
    mirror = PythonMirror(archives)
    try:
        dl = mirror.downloads_json(args.archives / "downloads.json")
        print(f"mirror {mirror.url}: {', '.join(a.key for a in archives)}", file=sys.stderr, flush=True)
        cmd = [sys.executable, "-m", "eval.gold_bench", "--dataset", args.dataset, "--repos", str(args.repos),
               "--tasks", args.tasks, "--cache-dir", str(cache_dir), "--out", str(args.out)]
        proc = subprocess.run(cmd, env=hidden_pyenv_env(dl), stdin=subprocess.DEVNULL)
    finally:
        mirror.close()
    if proc.returncode != 0:
        print(f"error: eval.gold_bench exited {proc.returncode}", file=sys.stderr)
        return proc.returncode
    rows = list(previous_rows(args.out, instance_key).values())
    records = env_records(cache_dir)
    print("\n".join(table(rows, wanted, records)))
    # An env built after an earlier row's install finds that Python in the cache ("found"): what
    # counts is that its interpreter is one uv put there.
    used = [records.get((r["repo"], r["version"]), {}) for r in rows]
    provisioned = sum(1 for m in used if str(m.get("python", "")).startswith(str(cache_dir / PYTHONS_DIR) + os.sep))
    ok = [r["gold_fix_score"] for r in rows if r.get("runnable") and r.get("gold_fix_score") is not None]
    print(f"provisioned={provisioned}/{len(rows)} runnable={len(ok)} "
          f"gold_fix_score_min={min(ok) if ok else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
