"""Every third-party module the code or the tests import is a declared dependency.

The same guarantee as CI's fresh virtual environment, without building one: each top-level module
imported anywhere (AST walk) maps to its installed distribution, which must be named in
pyproject.toml's dependencies or its dev extra.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
OWN = {"fixgraph", "scoring", "agents", "pipeline", "graph", "bot", "eval", "tests"}
# Imported only as an alternative when present (fixgraph/models/llm.py falls back to httpx).
OPTIONAL = {"httpx2"}
# Modules of the fixture repositories the tests create and import from their checkouts.
FIXTURES = {"calc", "calc_version"}


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + project["optional-dependencies"]["dev"]
    return {norm(re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0]) for r in reqs}


def imported() -> dict[str, str]:
    """Top-level module -> one file that imports it."""
    files = [ROOT / "graph.py", *[p for d in sorted(OWN - {"graph"}) for p in (ROOT / d).rglob("*.py")]]
    found: dict[str, str] = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                     else [])
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared() -> None:
    dists = packages_distributions()
    have = declared()
    missing = []
    for module, where in sorted(imported().items()):
        if module in sys.stdlib_module_names or module in OWN | OPTIONAL | FIXTURES:
            continue
        names = {norm(d) for d in dists.get(module, [])}
        if not names & have:
            missing.append(f"{module} ({where}; distribution {sorted(names) or 'not installed'})")
    assert missing == []
