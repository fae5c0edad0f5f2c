"""langgraph.json: langgraph-cli accepts it, and its graph entry imports and compiles without a key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What `langgraph dev` does with a "path.py:attr" entry: load the file as a module, call the
# factory when it is one, and expect a compiled graph.
LOAD = """
import importlib.util, json, sys
from pathlib import Path
spec = json.loads(Path("langgraph.json").read_text())["graphs"]["fixgraph"]
path, attr = spec.rsplit(":", 1)
mod_spec = importlib.util.spec_from_file_location("lg_entry", Path(path).resolve())
module = importlib.util.module_from_spec(mod_spec)
mod_spec.loader.exec_module(module)
graph = getattr(module, attr)
graph = graph() if callable(graph) and not hasattr(graph, "invoke") else graph
print(type(graph).__name__, sorted(graph.get_graph().nodes))
"""


def test_langgraph_cli_validates_the_config() -> None:
    from langgraph_cli.config import validate_config_file

    config = validate_config_file(ROOT / "langgraph.json")
    assert config["graphs"] == {"fixgraph": "./graph.py:make_graph"}
    assert config["dependencies"] == ["."]


@pytest.mark.slow
def test_the_graph_entry_imports_and_compiles_without_a_key() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "GITHUB"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", LOAD], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    kind, nodes = proc.stdout.split(" ", 1)
    assert kind == "CompiledStateGraph"
    assert json.loads(nodes.replace("'", '"')) == [
        "__end__", "__start__", "coder", "critic", "explorer", "planner", "pr_agent", "reproducer"]
