"""Functions a reader can hold: none over 100 lines in the product packages, none over 150 in the
benchmarks (a nested function counts as part of the one that holds it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("agents", "fixgraph", "scoring", "bot", "pipeline", "graph.py")
LIMITS = {**dict.fromkeys(PRODUCT, 100), "eval": 150}


def _functions(path: Path) -> list[tuple[str, int]]:
    """(name, lines) of every function not nested in another, methods included."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((child.name, (child.end_lineno or child.lineno) - child.lineno + 1))
            else:
                visit(child)

    visit(ast.parse(path.read_text(encoding="utf-8")))
    return found


def test_no_function_is_longer_than_its_package_allows() -> None:
    too_long = []
    for top, limit in LIMITS.items():
        files = [ROOT / top] if top.endswith(".py") else sorted((ROOT / top).rglob("*.py"))
        for path in files:
            too_long += [f"{path.relative_to(ROOT)}:{name} {n} lines (limit {limit})"
                         for name, n in _functions(path) if n > limit]
    assert not too_long, "split these at their seams:\n" + "\n".join(too_long)
