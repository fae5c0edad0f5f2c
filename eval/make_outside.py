"""A SWE-bench-format dataset from real fix commits of repositories swebench has no spec for.

    python -m eval.make_outside --repos MIRRORS --out FILE.jsonl [--list eval/outside.txt]
        [--only NAME,...] [--timeout S] [--cache-dir DIR] [--resume]

Each line of ``--list`` names a repository and one of its fix commits. The row is built the way
SWE-bench-Live builds its rows: the base is the commit's first parent; ``patch`` is the commit's diff
outside the tests, ``test_patch`` its diff of test files; the test patch's test files run twice in
the env inferred from the base commit (``scoring.execution.infer``, sandboxed as every run), at
base + test_patch and at base + test_patch + patch, each run bounded by ``--timeout`` seconds.
FAIL_TO_PASS are the tests that pass only with the patch, PASS_TO_PASS those that pass in both runs;
``version`` is empty. A commit with no FAIL_TO_PASS test (a refactor, a test the fix did not
change the outcome of), whose diff has no test or no code part, or whose env does not build makes
no row: it is printed with its reason. Rows go to ``--out`` (JSONL, one per instance); every
commit's result goes to ``<out>.log.jsonl``, which ``--resume`` reads to skip what is done.
Grade the rows' gold patches with ``python -m eval.grade --dataset FILE.jsonl --predictions
<gold predictions> --repos MIRRORS`` (``--gold`` writes that predictions file). Last line:
``rows=<n> of=<commits> repos=<r>``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from unidiff.patch import PatchSet

from eval.local_harness import eval_suite
from eval.rows import write_row
from fixgraph.config import TestSettings
from fixgraph.dataset import Instance
from fixgraph.records import atomic_write
from fixgraph.repo import gitsafe
from fixgraph.repo.workspace import RepoCache, WorkspaceError, find_mirror
from scoring.execution.envs import VenvEnvs
from scoring.execution.runner import SubprocessRunner
from scoring.execution.testenv import PASSING

# A file of the tests: in a tests folder, or named as pytest collects test modules (and conftest).
TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)(test_[^/]*|[^/]*_test|conftest)\.py$")
DEFAULT_LIST = Path(__file__).with_name("outside.txt")


class MakeError(ValueError):
    """Bad input: one line for the user."""


def read_list(path: Path) -> list[tuple[str, str]]:
    """(repo, commit) per line: ``owner/name <40-hex commit>``; ``#`` starts a comment."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MakeError(f"cannot read {path}: {exc.strerror}") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or "/" not in words[0] or not re.fullmatch(r"[0-9a-f]{40}", words[1]):
            raise MakeError(f"{path}:{n}: expected 'owner/name <40-hex commit>'")
        out.append((words[0], words[1]))
    if not out:
        raise MakeError(f"{path}: no commits listed")
    return out


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=gitsafe.hardened_env(),
                          timeout=120)
    if proc.returncode != 0:
        raise MakeError(f"git {args[0]} failed in {repo}: "
                        + (proc.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0][:200])
    return proc.stdout.decode(errors="replace")


def split_diff(diff: str) -> tuple[str, str]:
    """(patch, test_patch): the diff's files outside the tests, and those of the tests."""
    code, tests = [], []
    for pf in PatchSet(diff):
        (tests if TEST_PATH.search(pf.path) else code).append(str(pf))
    return "".join(code), "".join(tests)


def draft(mirror: Path, repo: str, commit: str) -> Instance:
    """The row before its tests ran: base, patches, the commit's message as the problem statement."""
    base = _git(mirror, "rev-parse", f"{commit}^").strip()
    patch, test_patch = split_diff(_git(mirror, "diff", "--no-color", "--no-renames", base, commit))
    message = _git(mirror, "log", "-1", "--format=%B", commit).strip()
    created = _git(mirror, "log", "-1", "--format=%cI", commit).strip()
    owner, name = repo.split("/", 1)
    return Instance(instance_id=f"{owner}__{name}-{commit[:8]}", repo=repo, base_commit=base,
                    problem_statement=message, version="", created_at=created, environment_setup_commit=base,
                    patch=patch, test_patch=test_patch, FAIL_TO_PASS=[], PASS_TO_PASS=[])


def derive(before: dict[str, str], after: dict[str, str]) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS) from the runs without and with the patch (both with the tests')."""
    f2p = sorted(t for t, s in after.items() if s in PASSING and before.get(t) not in PASSING)
    p2p = sorted(t for t, s in after.items() if s in PASSING and before.get(t) in PASSING)
    return f2p, p2p


def make_row(inst: Instance, cache: RepoCache, runner: SubprocessRunner, timeout_s: float) -> tuple[Instance | None, dict[str, Any]]:
    """The row with its tests, or None and why; the log entry says the runs' seconds and counts."""
    entry: dict[str, Any] = {"instance_id": inst.instance_id, "repo": inst.repo, "base_commit": inst.base_commit}
    if not inst.patch.strip() or not inst.test_patch.strip():
        return None, {**entry, "made": False, "reason": "the commit changes no " + ("code" if not inst.patch.strip()
                                                                                      else "test file")}
    suite = eval_suite(inst)
    if not suite.targets:
        return None, {**entry, "made": False, "reason": "the test patch changes no test module"}
    suite = replace(suite, timeout_s=timeout_s, label="make-outside")
    try:
        wt = cache.worktree(inst.repo, inst.base_commit, f"outside-{inst.instance_id}")
    except WorkspaceError as exc:
        return None, {**entry, "made": False, "reason": str(exc)}
    task = inst.task()
    try:
        before = runner.run_suite(task, wt, None, suite)
        after = before if before.error else runner.run_suite(task, wt, inst.patch, suite)
    finally:
        cache.remove_worktree(inst.repo, wt)
    entry.update(seconds=round(before.seconds + (after.seconds if after is not before else 0.0), 1), env=after.env)
    for name, run in (("base + test_patch", before), ("with the patch", after)):
        if run.error or run.timed_out:
            why = run.error[:200] if run.error else f"timed out after {run.timeout_s:g} s"
            return None, {**entry, "made": False, "reason": f"the run {name}: {why}"}
    f2p, p2p = derive(before.statuses, after.statuses)
    broken = sorted(t for t, s in after.statuses.items() if s not in PASSING and s != "SKIPPED")
    entry.update(fail_to_pass=len(f2p), pass_to_pass=len(p2p), failing_with_patch=broken[:20])
    if not f2p:
        return None, {**entry, "made": False, "reason": "no test fails without the patch and passes with it"}
    return inst.model_copy(update={"FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p}), {**entry, "made": True, "reason": ""}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.make_outside", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--repos", type=Path, required=True, help="folder of the repositories' git mirrors")
    ap.add_argument("--out", type=Path, required=True, help="the rows, JSON Lines (not committed: pass a path)")
    ap.add_argument("--list", type=Path, default=DEFAULT_LIST, help=f"repository and fix commit per line "
                    f"(default {DEFAULT_LIST.name} beside this script)")
    ap.add_argument("--only", default="", help="comma-separated repositories (owner/name or name)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run (two runs per commit)")
    ap.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("FIXGRAPH_CACHE_DIR", ".cache/fixgraph")))
    ap.add_argument("--gold", type=Path, default=None, help="also write the rows' gold patches as a predictions file")
    ap.add_argument("--resume", action="store_true", help="keep the rows and results already written")
    args = ap.parse_args(argv)
    try:
        if not args.repos.is_dir():
            raise MakeError(f"--repos {args.repos} is not a directory")
        wanted = read_list(args.list)
        only = {w.strip() for w in args.only.split(",") if w.strip()}
        wanted = [(r, c) for r, c in wanted if not only or r in only or r.split("/")[1] in only]
        if not wanted:
            raise MakeError(f"--only {args.only!r} names no repository of {args.list}")
        missing = sorted({r for r, _ in wanted if find_mirror(args.repos, r) is None})
        if missing:
            raise MakeError(f"no mirror under {args.repos} of {', '.join(missing)} (fetch them first)")
        rows, log = _make_all(args, wanted)
    except MakeError as exc:
        print(f"eval.make_outside: error: {exc}", file=sys.stderr)
        return 2
    _report(args, rows, log, len(wanted))
    return 0


def _log_path(out: Path) -> Path:
    return out.with_name(out.name + ".log.jsonl")


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line a kill cut short: that commit is made again
    return out


def _make_all(args: argparse.Namespace, wanted: list[tuple[str, str]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = _read_jsonl(args.out) if args.resume else []
    log = _read_jsonl(_log_path(args.out)) if args.resume else []
    made = {r["instance_id"] for r in rows}
    done = {e["instance_id"] for e in log if not e.get("made") or e["instance_id"] in made}
    log = [e for e in log if e["instance_id"] in done]
    rows = [r for r in rows if r["instance_id"] in done]
    settings = TestSettings(backend="venv", timeout_s=args.timeout, cpu_s=int(args.timeout * 2))
    envs = VenvEnvs(args.cache_dir / "envs", args.cache_dir, settings, specs=lambda _repo, _version: None)
    runner = SubprocessRunner(settings, args.cache_dir, envs, "venv")
    cache = RepoCache(args.cache_dir, args.repos)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, "".join(json.dumps(r) + "\n" for r in rows))
    atomic_write(_log_path(args.out), "".join(json.dumps(e) + "\n" for e in log))
    for repo, commit in wanted:
        mirror = find_mirror(args.repos, repo)
        assert mirror is not None
        inst = draft(mirror, repo, commit)
        if inst.instance_id in done:
            continue
        start = time.monotonic()
        row, entry = make_row(inst, cache, runner, args.timeout)
        entry["wall_seconds"] = round(time.monotonic() - start, 1)
        if row is not None:
            rows.append(row.model_dump())
            with args.out.open("a", encoding="utf-8") as fh:
                write_row(fh, row.model_dump())
        log.append(entry)
        with _log_path(args.out).open("a", encoding="utf-8") as fh:
            write_row(fh, entry)
        print(f"{inst.instance_id}: " + (f"F2P {entry['fail_to_pass']} P2P {entry['pass_to_pass']}" if row
                                           else f"no row: {entry['reason']}") + f" ({entry['wall_seconds']} s)",
              file=sys.stderr, flush=True)
    return rows, log


def _report(args: argparse.Namespace, rows: list[dict[str, Any]], log: list[dict[str, Any]], n: int) -> None:
    if args.gold is not None:
        atomic_write(args.gold, "".join(json.dumps({"instance_id": r["instance_id"], "model_name_or_path": "gold",
                                                    "model_patch": r["patch"]}) + "\n" for r in rows))
    print("instance                                  F2P   P2P  seconds  made / why not")
    for e in log:
        print(f"{e['instance_id']:<40} {e.get('fail_to_pass', '-'):>4} {e.get('pass_to_pass', '-'):>5} "
              f"{e.get('seconds', '-'):>8}  {'row' if e.get('made') else e.get('reason', '')[:100]}")
    print(f"rows={len(rows)} of={n} repos={len({r['repo'] for r in rows})}")


if __name__ == "__main__":
    sys.exit(main())
