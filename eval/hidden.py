"""The evaluation side's access to an instance's hidden tests, for benchmarks under ``eval/``.

Benchmarks that grade the runner or a Critic against ground truth call these; the pipeline never
does (its own tests are ``scoring.tests.own_outcome``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from fixgraph.dataset import Instance
from fixgraph.workspace import Worktree
from scoring.specs import NON_TEST_EXTS, patch_files
from scoring.testenv import SuiteRunner, git, git_apply
from scoring.tests import TestOutcome, hidden_outcome


def run_hidden(runner: SuiteRunner, inst: Instance, wt: Worktree, patch: str) -> TestOutcome:
    """The instance's FAIL_TO_PASS and PASS_TO_PASS tests before and after ``patch``."""
    return hidden_outcome(runner, inst.task(), inst.evaluation_data(), wt, patch)


def test_file_from_test_patch(inst: Instance, wt: Worktree) -> dict[str, Any] | None:
    """The instance's own test file as its ``test_patch`` leaves it: the test file holding the most
    FAIL_TO_PASS tests, {"path", "content"}; None when the test patch has no Python test file."""
    files = [f for f in patch_files(inst.test_patch) if f.endswith(".py") and not f.endswith(NON_TEST_EXTS)]
    if not files:
        return None

    def hits(path: str) -> int:
        stem = Path(path).stem
        return sum(t.startswith(path) or stem in t for t in inst.FAIL_TO_PASS)

    path = max(files, key=lambda f: (hits(f), -files.index(f)))
    scratch = Path(tempfile.mkdtemp(prefix="fixgraph-testfile-"))
    try:
        proc = git(wt.path, "show", f"{inst.base_commit}:{path}")
        target = scratch / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if proc.returncode == 0:
            target.write_bytes(proc.stdout)
        git(scratch, "init", "-q")
        one = _file_diff(inst.test_patch, path)
        if git_apply(scratch, one):
            return None
        # Data files the test patch adds (fixtures, expected outputs) are not part of a one-file test.
        others = [f for f in patch_files(inst.test_patch) if f != path]
        return {"path": path, "content": target.read_text(encoding="utf-8", errors="replace"),
                "other_files": others}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _file_diff(patch: str, path: str) -> str:
    """The part of a multi-file diff that touches ``path``."""
    blocks = patch.split("diff --git ")
    keep = [b for b in blocks[1:] if b.split("\n", 1)[0].endswith(f" b/{path}")]
    return "".join("diff --git " + b for b in keep)
