"""Environments inferred for repositories swebench has no spec for: built, tests collected, share
passing at the pinned commit.

    python -m eval.anyrepo_bench --repos MIRRORS [--only NAME,...] [--out FILE] [--resume]

Each repository below (fetched as a git mirror, ``<repos>/<owner>+<name>/repo`` or
``<repos>/<owner>+<name>``) is checked at its pinned commit by ``scoring.execution.repo_check``: the
env inferred from its own files (scoring.execution.infer), built in a venv as every env is
(sandboxed, the index through fixgraph's proxy), and its test command run once at that commit,
bounded by ``--timeout`` seconds (a run the bound stops reports the tests that finished). Per
repository it prints the shape, the commit, the Python and how the env was made, the build's
seconds, the tests collected, passed, failed, skipped and the pass share (passed over those not
skipped). Rows go to ``--out`` (JSONL); ``--resume`` keeps the rows there. Last line: the number
of repositories whose tests ran, and the pass share pooled over their tests and its median.

``--with-tables`` checks the repositories of ``TABLES`` once more with the ``.fixgraph.toml`` a
maintainer would commit (committed on top of the pinned commit in a scratch clone; the mirror is
left alone): a row ``<repo> (table)`` each, measured as the others, the table's services started.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from fixgraph.config import TestSettings
from fixgraph.records import atomic_write
from scoring.execution.repo_check import CheckError, check_repo

# (repository, shape, commit): small repositories with fast suites, each at a recent commit.
REPOS: tuple[tuple[str, str, str], ...] = (
    ("pallets/itsdangerous", "src layout, pyproject, dependency groups", "672971d66a2ef9f85151e53283113f33d642dabd"),
    ("pallets/markupsafe", "C extension, src layout", "1251593f6b0e3b45f2cc8aba662622bc22d6a5e2"),
    ("tkem/cachetools", "tox-only test deps, src layout", "28d4506f2a49d781ffbcecb095fa7aba5bb80aff"),
    ("benjaminp/six", "setup.py, tox-only, one module", "c8e394065cd541a16c040515dc0afb85cf22a7c3"),
    ("jaraco/jaraco.functools", "namespace package, extras test", "9f4e0e2849659969577f40be40cabe026dd5fb0f"),
    ("hukkin/tomli", "src layout, unittest tests", "920e20b1cf495b63f6d4a6aa3cd5e4ff25f5f5a7"),
    ("more-itertools/more-itertools", "flit, unittest tests, requirements folder",
     "2fe1b2eeb9d75f994113fe3ac76d14b6bcd6fb10"),
    ("andialbrecht/sqlparse", "hatch pyproject, Makefile", "60cdc649726bf1bc4f1b336050560b336da715ec"),
    ("python-humanize/humanize", "src layout, hatch-vcs, extras tests", "c3a124cdeb272d7f63bc0aa66f79c6fbafd2fc6d"),
    ("pytest-dev/iniconfig", "src layout, hatch-vcs", "71901257f6cbf660e77b1077e00f11a0f440be1e"),
    ("kjd/idna", "flit pyproject", "6ebfaab9ea718dce38a7c17ddafd7fb28b0468d4"),
    ("uiri/toml", "setup.py, tox", "65bab7582ce14c55cdeec2244c65ea23039c9e6f"),
    ("simplejson/simplejson", "C extension, setup.py", "639b2ee73b2de6b385fcd4d44e0e08054a4d8a0e"),
    ("jmespath/jmespath.py", "setup.py with requirements.txt", "2ad18b0e51ef3c22ef0d4bbeb11506746a39e228"),
    ("pinterest/pymemcache", "needs a service (memcached), test-requirements.txt",
     "3ef28efac1a6cca5fb47c88981b7df4b33f1aac5"),
    ("python-semver/python-semver", "src layout, setup.cfg, tox", "d8813b67a2ec5d579365f51a6d8f96d02f3fcbc3"),
    ("dateutil/dateutil", "setup.py, requirements-dev.txt, src layout", "c981f9c7aa91b83cc9bd33a09ecee9e751b06e8d"),
)


# What a maintainer would commit where inference cannot do it alone.
TABLES: dict[str, str] = {
    # test-requirements.txt less pylibmc (it compiles against libmemcached's headers) and pytest-cov
    # (setup.cfg's --cov addopts, reset); the integration tests beside the unit ones, against the
    # memcached the table starts (the integration tests' default localhost:11211).
    "pinterest/pymemcache": (
        'setup = ["pip install -e .", "pip install Faker==26.1.0 pytest==8.3.4 python-memcached==1.62 '
        'zstd==1.5.4.0 gevent==24.2.1"]\n'
        "test_cmd = \"pytest -rA -o addopts='' -m 'unit or integration' pymemcache/test\"\n"
        'services = ["memcached"]\n'),
}
TABLE_COMMIT_ENV = {"GIT_AUTHOR_NAME": "fixgraph", "GIT_AUTHOR_EMAIL": "bench@fixgraph.invalid",
                    "GIT_COMMITTER_NAME": "fixgraph", "GIT_COMMITTER_EMAIL": "bench@fixgraph.invalid",
                    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


def with_table(mirror: Path, commit: str, table: str, scratch: Path) -> tuple[Path, str]:
    """A bare scratch clone of ``mirror`` sharing its objects, and the commit that adds ``table`` as
    ``.fixgraph.toml`` on top of ``commit`` (fixed names and dates: the same commit every run)."""
    clone = scratch / "repo.git"
    env = {**os.environ, **TABLE_COMMIT_ENV, "GIT_INDEX_FILE": str(scratch / "index")}

    def git(*args: str, text: str | None = None) -> str:
        return subprocess.run(["git", *args], cwd=clone if clone.exists() else scratch, env=env, input=text,
                              capture_output=True, text=True, check=True, timeout=300).stdout.strip()

    git("clone", "-q", "--bare", "--shared", str(mirror), str(clone))
    blob = git("hash-object", "-w", "--stdin", text=table)
    git("read-tree", commit)
    git("update-index", "--add", "--cacheinfo", f"100644,{blob},.fixgraph.toml")
    tree = git("write-tree")
    return clone, git("commit-tree", tree, "-p", commit, "-m", "fixgraph table (eval.anyrepo_bench)")


def mirror_of(repos: Path, repo: str) -> Path | None:
    base = repos / repo.replace("/", "+")
    for path in (base / "repo", base):
        if path.is_dir():
            return path
    return None


def measure(repos: Path, repo: str, shape: str, commit: str, settings: TestSettings, cache_dir: Path,
            timeout_s: float, table: str = "") -> dict[str, Any]:
    row: dict[str, Any] = {"repo": f"{repo} (table)" if table else repo, "shape": shape, "commit": commit}
    path = mirror_of(repos, repo)
    if path is None:
        return {**row, "built": False, "reason": f"no mirror of {repo} under {repos}"}
    with tempfile.TemporaryDirectory(prefix="anyrepo-table-") as scratch:
        try:
            rev = commit
            if table:
                path, rev = with_table(path, commit, table, Path(scratch))
                row["table"] = table
            check = check_repo(path, settings, cache_dir, rev=rev, timeout_s=timeout_s, repo=repo)
        except CheckError as exc:
            return {**row, "built": False, "reason": str(exc)}
        except (OSError, subprocess.SubprocessError) as exc:
            return {**row, "built": False, "reason": f"cannot commit the table: {exc}"}
    counts: dict[str, int] = {}
    for status in check.statuses.values():
        counts[status] = counts.get(status, 0) + 1
    return {**row, "env": check.description, "built": check.built, "reason": check.reason, "services": check.services,
            "build_seconds": check.build_seconds, "run_seconds": round(check.run_seconds, 1),
            "timed_out": check.timed_out, "collected": check.collected, "passed": check.passed,
            "skipped": check.skipped, "counts": counts, "pass_share": round(check.pass_share, 4),
            "failing": sorted(t for t, s in check.statuses.items() if s in ("FAILED", "ERROR"))[:20],
            "log_tail": "" if check.collected else check.log_tail}


def line(row: dict[str, Any]) -> str:
    python = next((ln.split(" (")[0] for ln in str(row.get("env", "")).splitlines() if ln.startswith("python")), "")
    head = f"{row['repo']:32} {row['commit'][:10]} {python:12}"
    if not row.get("built") or not row.get("collected"):
        return f"{head} NOT RUN: {str(row.get('reason', ''))[:160]}"
    return (f"{head} build={row['build_seconds']:.0f}s run={row['run_seconds']:.0f}s collected={row['collected']} "
            f"passed={row['passed']} skipped={row['skipped']} share={row['pass_share']:.3f}"
            + (" (timed out)" if row.get("timed_out") else ""))


def headline(rows: list[dict[str, Any]]) -> str:
    ran = [r for r in rows if r.get("built") and r.get("collected")]
    passed = sum(r["passed"] for r in ran)
    counted = sum(r["collected"] - r["skipped"] for r in ran)
    pooled = passed / counted if counted else 0.0
    median = statistics.median(r["pass_share"] for r in ran) if ran else 0.0
    at_90 = sum(r["pass_share"] >= 0.9 for r in ran)
    return (f"tests_ran={len(ran)}/{len(rows)} pass_share_pooled={pooled:.3f} ({passed}/{counted}) "
            f"pass_share_median={median:.3f} repos_at_0.9={at_90}/{len(rows)}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.anyrepo_bench", description=(__doc__ or "").splitlines()[0])
    p.add_argument("--repos", type=Path, required=True, help="folder of git mirrors (<owner>+<name>)")
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/fixgraph").expanduser())
    p.add_argument("--only", default="", help="comma-separated repository names (owner/name or name)")
    p.add_argument("--timeout", type=float, default=300, help="seconds for each repository's test run")
    p.add_argument("--out", type=Path, default=Path("anyrepo_bench.jsonl"))
    p.add_argument("--resume", action="store_true", help="keep the rows --out already has")
    p.add_argument("--with-tables", action="store_true",
                   help="check the repositories of TABLES once more with the table a maintainer would commit")
    args = p.parse_args(argv)
    if not args.repos.is_dir():
        print(f"eval.anyrepo_bench: error: --repos {args.repos} is not a folder", file=sys.stderr)
        return 2
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    chosen = [(*r, "") for r in REPOS if not only or r[0] in only or r[0].split("/")[1] in only]
    if args.with_tables:
        chosen += [(*r, TABLES[r[0]]) for r in REPOS if r[0] in TABLES and (not only or r[0] in only
                                                                          or r[0].split("/")[1] in only)]
    done: dict[str, dict[str, Any]] = {}
    if args.resume and args.out.is_file():
        for text in args.out.read_text().splitlines():
            try:
                row = json.loads(text)
            except ValueError:
                continue
            done[row["repo"]] = row
    settings = TestSettings(backend="venv", timeout_s=args.timeout)
    rows = []
    for repo, shape, commit, table in chosen:
        name = f"{repo} (table)" if table else repo
        row = done.get(name) if done.get(name, {}).get("commit") == commit else None
        if row is None:
            row = measure(args.repos, repo, shape, commit, settings, args.cache_dir.resolve(), args.timeout, table)
            done[name] = row
            atomic_write(args.out, "".join(json.dumps(r) + "\n" for r in done.values()))
        rows.append(row)
        print(line(row), flush=True)
    print(headline(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
