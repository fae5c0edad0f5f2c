"""code_quality in [0, 1]: what the patch adds, judged on three things, all differential.

    lint        = max(0, 1 - 0.25 * new_findings)
                  new_findings: ruff findings (pyflakes rules F and syntax errors E9; pyflakes
                  itself when ruff is missing) in the changed Python files after the patch, minus
                  those already there before it (matched by rule and message, not line number).
    complexity  = 1 if added <= allowed else max(0, 1 - 0.1 * (added - allowed))
                  added: branch points (if/for/while/try/with/boolean operators/comprehensions/
                  lambdas, except clauses) after minus before in the changed files;
                  allowed = 3 + the branch points the gold patch adds (3 when none is given).
    size        = 1 if lines <= 2 * ref else max(0, 1 - (lines / ref - 2) / 8)
                  lines: added + removed lines of the patch; ref: the gold patch's lines (at least
                  5), or 20 when no gold patch is given.
    code_quality = 0.5 * lint + 0.25 * complexity + 0.25 * size

An empty patch adds nothing and scores 1.0 here; the tests are what say it fixes nothing.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from fixgraph import phases
from fixgraph.repo.workspace import Worktree
from scoring.execution.specs import patch_files
from scoring.static.patchinfo import changes_code

W_LINT, W_COMPLEXITY, W_SIZE = 0.5, 0.25, 0.25
LINT_PENALTY = 0.25
BASE_ALLOWED_BRANCHES = 3
DEFAULT_SIZE_REF = 20
MIN_SIZE_REF = 5

_BRANCHES = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.With, ast.AsyncWith, ast.BoolOp,
             ast.IfExp, ast.comprehension, ast.Lambda, ast.ExceptHandler)


def changed_lines(patch: str) -> int:
    n = 0
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            continue
        if line.startswith(("+", "-")):
            n += 1
    return n


def branch_points(source: str | None) -> int:
    if not source:
        return 0
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return 0
    return sum(isinstance(node, _BRANCHES) for node in ast.walk(tree))


def _ruff() -> str | None:
    """ruff installed with this interpreter (a dependency, so the findings, and so code_quality, do
    not depend on whether a virtualenv was activated), else one on PATH."""
    return shutil.which("ruff", path=sysconfig.get_path("scripts")) or shutil.which("ruff")


def _lint(sources: dict[str, str]) -> Counter[tuple[str, str]] | None:
    """Findings per (rule, message) over ``sources`` (path -> text); None when no linter ran."""
    if not sources:
        return Counter()
    with tempfile.TemporaryDirectory(prefix="fixgraph-lint-") as tmp:
        root = Path(tmp)
        for rel, text in sources.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        ruff = _ruff()
        if ruff:
            proc = subprocess.run([ruff, "check", "--isolated", "--no-cache", "--select", "F,E9",
                                   "--output-format", "json", "--exit-zero", "."],
                                  cwd=root, capture_output=True, text=True, timeout=120)
            try:
                rows = json.loads(proc.stdout or "[]")
                return Counter((str(r.get("code")), f"{r.get('filename', '').replace(str(root), '')}: {r.get('message')}")
                               for r in rows)
            except json.JSONDecodeError:
                pass
        proc = subprocess.run([sys.executable, "-m", "pyflakes", "."], cwd=root, capture_output=True,
                              text=True, timeout=120)
        if proc.returncode not in (0, 1):
            return None
        found: Counter[tuple[str, str]] = Counter()
        for line in proc.stdout.splitlines():
            parts = line.split(":", 3)
            if len(parts) == 4:
                found[("pyflakes", f"{parts[0]}: {parts[3].strip()}")] += 1
        return found


def _base_text(wt: Worktree, rel: str) -> str | None:
    try:
        return wt.repo.git.show(f"{wt.base}:{rel}")
    except Exception:  # GitCommandError: the file is new
        return None


@phases.timed("code quality")
def code_quality(wt: Worktree, patch: str, gold_patch: str = "") -> tuple[float, dict[str, Any]]:
    """The patch's code_quality and the figures behind it (kept in the task record)."""
    files = [f for f in patch_files(patch) if f.endswith(".py")]
    before = {f: t for f in files if (t := _base_text(wt, f)) is not None}
    after = {f: t for f in files if (t := wt.read(f)) is not None}
    lint_before, lint_after = _lint(before), _lint(after)
    if lint_before is None or lint_after is None:
        new_findings, lint = 0, 1.0
        lint_note = "no linter ran"
    else:
        new = lint_after - lint_before
        new_findings = sum(new.values())
        lint = max(0.0, 1.0 - LINT_PENALTY * new_findings)
        lint_note = "; ".join(f"{rule} {msg}" for (rule, msg) in list(new)[:5])
    added = sum(branch_points(after.get(f)) - branch_points(before.get(f)) for f in files)
    gold_added = _gold_branches(wt, gold_patch) if gold_patch else 0
    allowed = BASE_ALLOWED_BRANCHES + max(0, gold_added)
    complexity = 1.0 if added <= allowed else max(0.0, 1.0 - 0.1 * (added - allowed))
    lines = changed_lines(patch)
    ref = max(MIN_SIZE_REF, changed_lines(gold_patch)) if gold_patch.strip() else DEFAULT_SIZE_REF
    size = 1.0 if lines <= 2 * ref else max(0.0, 1.0 - (lines / ref - 2) / 8)
    score = W_LINT * lint + W_COMPLEXITY * complexity + W_SIZE * size
    return round(score, 6), {
        "lint": lint, "new_lint_findings": new_findings, "lint_detail": lint_note,
        "complexity": complexity, "branches_added": added, "branches_allowed": allowed,
        "size": size, "lines_changed": lines, "size_ref": ref,
        # Only docstrings or comments changed: nothing the interpreter runs (scoring/verdict/choose_patch.py).
        "changes_code": changes_code(patch, before, after),
    }


def _gold_branches(wt: Worktree, gold_patch: str) -> int:
    """Branch points the gold patch adds, measured by applying it to a scratch copy of its files."""
    files = [f for f in patch_files(gold_patch) if f.endswith(".py")]
    with tempfile.TemporaryDirectory(prefix="fixgraph-gold-") as tmp:
        root = Path(tmp)
        before: dict[str, str] = {}
        for rel in files:
            text = _base_text(wt, rel)
            if text is not None:
                before[rel] = text
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_text(text)
        subprocess.run(["git", "init", "-q"], cwd=root, capture_output=True)
        proc = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root,
                              input=gold_patch.encode(), capture_output=True)
        if proc.returncode != 0:
            return 0
        return sum(branch_points((root / f).read_text() if (root / f).is_file() else None)
                   - branch_points(before.get(f)) for f in files)
