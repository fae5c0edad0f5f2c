"""One-way layers: the import graph of the non-test code has no cycle, and no package imports one
above it in the order the README states.

A small AST walk: every ``import`` and ``from ... import`` in fixgraph/, scoring/, agents/,
pipeline/, bot/, eval/ and graph.py, at any depth (a lazy import inside a function is still a
dependency), is an edge between the project's modules; a strongly connected component of more than one module is a
cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fixgraph", "scoring", "agents", "pipeline", "bot", "eval")


def modules() -> dict[str, Path]:
    found = {"graph": ROOT / "graph.py"}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` depends on pkg.mod when that is a module, else on pkg.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def test_the_walk_sees_real_edges() -> None:
    graph = import_graph()
    assert "fixgraph.config" in graph["pipeline.tasks"]
    assert "fixgraph.github.client" in graph["fixgraph.github.pr"]
    assert "agents.critic" in graph["graph"]  # imported inside build_graph: still an edge
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_no_import_cycle() -> None:
    assert [sorted(c) for c in cycles(import_graph())] == []


# Low to high, as README.md states it: a module's layer is its top-level package.
LAYERS: list[str] = ["fixgraph", "scoring", "agents", "pipeline", "graph", "bot", "eval"]


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    assert top in LAYERS, f"{module} is in no layer: add its package to LAYERS and to the README"
    return LAYERS.index(top)


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def test_no_package_imports_one_above_it() -> None:
    assert upward(import_graph()) == []


def test_an_upward_import_is_caught(tmp_path: Path) -> None:
    """Plant a lazy upward import (the floor reaching into scoring inside a function) and see it fail."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f():\n    from scoring.verdict import fix_score\n    return fix_score\n")
    mods = modules()
    graph = import_graph()
    graph["fixgraph.planted"] = imports("fixgraph.planted", planted, set(mods))
    assert upward(graph) == ["fixgraph.planted -> scoring.verdict.fix_score"]
    assert layer_of("pipeline.cli") > layer_of("agents.critic") > layer_of("scoring.execution.outcomes")


def test_the_floor_imports_nothing_above_it() -> None:
    """The floor's core modules import nothing but the floor (the layer test, said for the modules
    everything else stands on)."""
    graph = import_graph()
    floor = ["fixgraph.state", "fixgraph.config", "fixgraph.models.llm", "fixgraph.repo.workspace",
             "fixgraph.records", "fixgraph.github.pr", "fixgraph.github.client", "fixgraph.sandbox.process"]
    for name in floor:
        above = sorted(t for t in graph[name] if layer_of(t) > 0)
        assert above == [], name
