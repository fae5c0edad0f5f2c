"""Fixture repositories with real bugs, and scripted LLM replies that fix them.

Used by the tests and by the offline benchmarks. A fixture repo is a real git repository (a small
package with a bug and a failing test) laid out like a mirror folder: ``<root>/<owner>+<name>``,
so ``--repos <root>`` finds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

OPS_BUGGY = '''"""Small arithmetic helpers."""


def add(a, b):
    """Sum of two numbers."""
    return a + b


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values) - 1


def clamp(x, lo, hi):
    """x limited to [lo, hi]."""
    return max(lo, min(x, hi))
'''

TESTS_BASE = '''from calc.ops import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_clamp():
    assert clamp(5, 0, 3) == 3
'''

TEST_PATCH_ADDITION = '''

def test_mean():
    from calc.ops import mean

    assert mean([1, 2, 3]) == 2
'''

PROBLEM = """mean() is off by one

`calc.ops.mean([1, 2, 3])` returns 1.0 instead of 2.0. The arithmetic mean should be the sum
divided by the count, nothing subtracted.
"""

BUGGY_LINE = "    return sum(values) / len(values) - 1\n"
FIXED_LINE = "    return sum(values) / len(values)\n"
# A first attempt that introduces a name pyright reports as undefined.
BROKEN_LINE = "    return total(values) / len(values)\n"
# A first attempt that passes static analysis and is still wrong (the reproduction test catches it).
WRONG_LINE = "    return sum(values) / len(values) - 0.5\n"

# The reproduction test the scripted Reproducer writes: it fails on the bug, passes on the fix.
REPRO_PATH = "tests/test_mean_issue.py"
REPRO_TEST = '''from calc.ops import mean


def test_mean_is_sum_over_count():
    assert mean([1, 2, 3]) == 2
'''
# A first draft that does not reproduce the issue: it passes on the unfixed code.
REPRO_TEST_PASSING = '''from calc.ops import add


def test_add_still_adds():
    assert add(1, 2) == 3
'''


def git_commit_all(repo: Path, message: str) -> str:
    """``git init`` (if needed), commit everything under ``repo`` with a fixed identity; the new sha.

    No global or system git config is read, so fixtures are the same on every machine.
    """
    env = {"GIT_AUTHOR_NAME": "fixture", "GIT_AUTHOR_EMAIL": "fixture@example.invalid",
           "GIT_COMMITTER_NAME": "fixture", "GIT_COMMITTER_EMAIL": "fixture@example.invalid",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo)}

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                              text=True).stdout.strip()

    if not (repo / ".git").exists():
        git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", message)
    return git("rev-parse", "HEAD")


def _diff(before: str, after: str, path: str) -> str:
    import difflib

    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


def make_calc_repo(root: Path, owner: str = "fixture", name: str = "calc") -> dict[str, Any]:
    """Create the repo under ``root`` and return a SWE-bench-format instance for its bug."""
    repo = root / f"{owner}+{name}"
    (repo / "calc").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "calc" / "__init__.py").write_text("")
    (repo / "calc" / "ops.py").write_text(OPS_BUGGY)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_ops.py").write_text(TESTS_BASE)
    (repo / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0.1"\n')
    base = git_commit_all(repo, "calc: initial")
    test_patch = _diff(TESTS_BASE, TESTS_BASE + TEST_PATCH_ADDITION, "tests/test_ops.py")
    gold = _diff(OPS_BUGGY, OPS_BUGGY.replace(BUGGY_LINE, FIXED_LINE), "calc/ops.py")
    return {
        "instance_id": f"{owner}__{name}-1",
        "repo": f"{owner}/{name}",
        "base_commit": base,
        "problem_statement": PROBLEM,
        "version": "0.1",
        "patch": gold,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_mean"]),
        "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_add", "tests/test_ops.py::test_clamp"]),
    }


def write_dataset(path: Path, instances: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in instances))
    return path


def calc_script(first_attempt_broken: bool = True, first_attempt: str = "",
                repro_drafts: list[dict[str, str]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Replies (tool arguments per schema) that take the calc fixture from issue to fix.

    With ``first_attempt_broken`` the Coder's first patch uses an undefined name, which the
    Critic's static phase must catch and send back; with ``first_attempt="wrong"`` it passes static
    analysis and leaves the reproduction test failing. ``repro_drafts`` replaces the Reproducer's
    replies (default: one test that reproduces the issue).
    """
    edit = {"path": "calc/ops.py", "search": BUGGY_LINE}
    code = [{"edits": [edit | {"replace": FIXED_LINE}], "explanation": "Drop the stray - 1."}]
    kind = first_attempt or ("broken" if first_attempt_broken else "")
    if kind == "broken":
        code.insert(0, {"edits": [edit | {"replace": BROKEN_LINE}], "explanation": "Use total()."})
    elif kind == "wrong":
        code.insert(0, {"edits": [edit | {"replace": WRONG_LINE}], "explanation": "Subtract less."})
    drafts = repro_drafts if repro_drafts is not None else [
        {"path": REPRO_PATH, "content": REPRO_TEST, "explanation": "mean of 1, 2, 3 is 2."}]
    return {
        "Plan": [{"files": ["calc/ops.py"], "reasoning": "mean() lives in calc/ops.py."}],
        "ExploreStep": [{"next_files": [], "learned": "mean subtracts 1 from the true mean.",
                         "confidence": "high",
                         "suspects": [{"file": "calc/ops.py", "symbol": "mean", "start_line": 9, "end_line": 11}]}],
        "ReproTestDraft": drafts,
        "CodeChange": code,
        "RuntimeCheck": [{"verdict": "Safe", "errors": []}] * 3,
        "PatchJudgment": [{"score": 0.9, "reasoning": "Removes the off-by-one."}] * 3,
    }
