"""scoring/verdict/weigh.py and scoring/runtime/lines.py: suspicions weighed against what ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fixgraph.state import Finding
from scoring.runtime import lines as traced_lines
from scoring.runtime.lines import Lines
from scoring.verdict import weigh

TEXT = "def f(x):\n    y = g(\n        x)\n    return y\n"


def _pyright(line: int, rule: str = "reportCallIssue") -> Finding:
    return Finding(source="pyright", rule=rule, message="Expected 1 positional argument", file="m.py", line=line)


def test_certain_findings_are_the_ones_sure_without_running():
    assert weigh.certain(Finding(source="pyflakes", rule="UndefinedName"))
    assert weigh.certain(Finding(source="names", rule="UnknownAttribute"))
    assert weigh.certain(Finding(source="pyright", rule="syntax"))
    assert weigh.certain(Finding(source="pyright", rule="reportRelativeImport"))
    assert not weigh.certain(_pyright(2))
    assert not weigh.certain(Finding(source="llm", rule="TypeError"))


def test_a_continuation_line_stands_for_its_statement():
    assert weigh.span(_pyright(3), TEXT) == (2, 3)
    assert weigh.span(Finding(source="llm", rule="TypeError", file="m.py", symbol="f"), TEXT) == (2, 3, 4)


def _weigh(f: Finding, lines: Lines | None, crashes=(), ran: bool = True) -> dict[str, Any]:
    [out] = weigh.weigh([f], ran=ran, lines=lines, crashes=list(crashes), texts={"m.py": TEXT}, why_not="no env")
    return dict(out)


def test_statuses():
    ran = Lines(executed={"m.py": {1, 2, 4}}, traced={"m.py"})
    assert _weigh(_pyright(3), ran)["status"] == "contradicted"
    crash = {"test": "t::a", "type": "TypeError", "frames": [{"file": "m.py", "line": 2}]}
    confirmed = _weigh(_pyright(3), ran, [crash])
    assert confirmed["status"] == "confirmed" and "t::a" in confirmed["evidence"]
    # Another exception type at the place does not confirm a TypeError.
    assert _weigh(_pyright(3), ran, [{**crash, "type": "KeyError"}])["status"] == "contradicted"
    # A caught TypeError passing there: not contradicted.
    caught = Lines(executed={"m.py": {1, 2, 4}}, raised={"m.py": {2: {"TypeError"}}}, traced={"m.py"})
    assert _weigh(_pyright(3), caught)["status"] == "unconfirmed"
    never = _weigh(_pyright(3), Lines(traced={"m.py"}))
    assert never["status"] == "unconfirmed" and "never imported" in never["evidence"]
    timed = _weigh(_pyright(3), Lines(timed_out=True))
    assert timed["status"] == "unconfirmed" and "timeout" in timed["evidence"]
    assert _weigh(_pyright(3), Lines(executed={"m.py": {1}}, traced={"m.py"}))["status"] == "unconfirmed"
    untested = _weigh(_pyright(3), None, ran=False)
    assert untested["status"] == "untested" and len(weigh.confirmed([Finding(**untested)])) == 1
    assert weigh.summary([Finding(**confirmed), Finding(**never)]) == "static suspicions: 1 confirmed, 1 unconfirmed"


def test_the_tracer_records_executed_and_raising_lines_in_watched_files_only(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(
        "def f(x):\n    try:\n        return x.nope\n    except AttributeError:\n        return 0\n")
    (tmp_path / "pkg" / "other.py").write_text("def g():\n    return 1\n")
    site = traced_lines.install(tmp_path / "site")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(tmp_path)]),
           **traced_lines.env_for(["pkg/m.py"], out)}
    code = "import pkg.m, pkg.other; pkg.m.f(1); pkg.other.g()"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True)
    got = traced_lines.read(out, ["pkg/m.py"], timed_out=False)
    assert got.traced == {"pkg/m.py"} and {1, 2, 3, 4, 5} <= got.executed["pkg/m.py"]
    assert "AttributeError" in got.raised["pkg/m.py"][3]
    assert "pkg/other.py" not in got.executed
    assert got.imported == {"pkg/m.py"}
    # With lines named, only the code objects holding them are traced; the file still counts as imported.
    (tmp_path / "pkg" / "m.py").write_text(
        "def f(x):\n    return x\n\n\ndef h():\n    return 2\n")
    env.update(traced_lines.env_for([traced_lines.spec("pkg/m.py", [6])], tmp_path / "out2"))
    subprocess.run([sys.executable, "-c", "import pkg.m; pkg.m.f(1)"], cwd=tmp_path, env=env, check=True)
    only = traced_lines.read(tmp_path / "out2", [traced_lines.spec("pkg/m.py", [6])], timed_out=False)
    assert only.traced == {"pkg/m.py"} and only.imported == {"pkg/m.py"} and not only.executed.get("pkg/m.py")
    [never] = weigh.weigh([Finding(source="pyright", rule="reportCallIssue", file="pkg/m.py", line=2)], ran=True,
                          lines=only, crashes=[], texts={})
    assert never.get("status") == "unconfirmed" and "never reached" in never.get("evidence", "")
    assert weigh.trace_specs([_pyright(3)], {"m.py": TEXT}) == ["m.py#2,3"]
    # A run that wrote nothing (killed by its timeout) traced nothing.
    assert traced_lines.read(tmp_path / "none", ["pkg/m.py"], timed_out=True).traced == set()
