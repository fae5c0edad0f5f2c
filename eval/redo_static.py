"""REDO's own static phase (Li et al., 2024, §3.1), as the reference the Critic is measured against.

pyright runs on the Python files the patch touches, on the modified code and on the original
code, each time as a plain ``pyright --outputjson FILES`` in the repository (its own settings),
and the patch is Unsafe when the set of error message strings after the patch holds one the set
before did not. Nothing is cached and nothing is filtered: that is the method as published.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from fixgraph.repo.workspace import Worktree
from scoring.static.differential import StaticAnalysisUnavailable
from scoring.static.patchinfo import PatchParseError, parse_patch


@dataclass
class RedoResult:
    unsafe: bool
    new_messages: list[str]
    seconds: float
    note: str = ""
    analysed: bool = True  # False: nothing compared (the note says why), not a clean patch


def _messages(cmd: list[str], wt: Worktree, files: list[str]) -> set[str]:
    if not files:
        return set()
    proc = subprocess.run(cmd + ["--outputjson"] + files, cwd=wt.path, capture_output=True, timeout=900)
    if proc.returncode not in (0, 1):
        raise StaticAnalysisUnavailable(f"pyright failed (exit {proc.returncode})")
    data = json.loads(proc.stdout)
    return {d["message"] for d in data.get("generalDiagnostics", []) if d.get("severity") == "error"}


def _git_apply(wt: Worktree, patch: str, reverse: bool) -> None:
    args = ["git", "apply", "--whitespace=nowarn"] + (["-R"] if reverse else []) + ["-"]
    proc = subprocess.run(args, cwd=wt.path, input=patch.encode(), capture_output=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.decode(errors="replace").strip() or "git apply failed")


def redo_static(cmd: list[str], wt: Worktree, patch: str) -> RedoResult:
    """Judge ``patch``, which the worktree holds applied; it is put back as found."""
    start = time.monotonic()
    try:
        changes = parse_patch(patch)
    except PatchParseError as exc:
        return RedoResult(False, [], 0.0, str(exc))
    after_files = [c.path for c in changes if c.is_python and not c.is_deleted]
    before_files = [c.path for c in changes if c.is_python and not c.is_new]
    if not after_files:
        return RedoResult(False, [], round(time.monotonic() - start, 3), "no Python file")
    after = _messages(cmd, wt, after_files)
    try:
        _git_apply(wt, patch, reverse=True)
    except RuntimeError as exc:  # the worktree no longer holds the patch as given: nothing to compare
        why = str(exc).strip().splitlines()[0][:200]
        return RedoResult(False, [], round(time.monotonic() - start, 3),
                          f"not analysed: the patch does not reverse ({why})", analysed=False)
    try:
        before = _messages(cmd, wt, before_files)
    finally:
        _git_apply(wt, patch, reverse=False)
    new = sorted(after - before)
    return RedoResult(bool(new), new, round(time.monotonic() - start, 3))
