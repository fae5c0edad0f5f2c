"""Execution evidence: an issue's snippets extracted, then run at the base commit in the real
sandbox (local backend, a real git fixture repository), and what they ran recorded."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from fixgraph.dataset import Task
from fixgraph.localize.snippets import MAX_BLOCKS, MAX_CHARS, issue_snippets
from fixgraph.repo.workspace import RepoCache, Worktree
from fixgraph.sandbox.process import sandbox_mode
from scoring.execution.interpreters import system_pythons as installed_pythons
from scoring.execution.runner import SubprocessRunner, make_runner
from scoring.execution.testenv import EnvError, TestEnv, UnavailableRunner
from scoring.runtime import issue_run
from scoring.runtime.issue_run import NO_BACKEND, IssueTrace, TracedError, trace_issue
from tests.helpers.testrun_helpers import local_settings, make_repo

REPO = "fixture/mylib"
INIT = "from .core import Widget, parse\nfrom . import helpers\n"
CORE = """\
class Widget:
    def __init__(self, n):
        self.n = n

    def size(self):
        return _check(self.n)


def parse(text):
    return _check(len(text) - 10)


def _check(n):
    if n < 0:
        raise ValueError("negative: %d" % n)
    return n
"""
# Imported with the package (and calling a function while it is imported), never called after.
HELPERS = """\
def build():
    return {"a": 1}


REGISTRY = build()
"""
FILES = {
    "mylib/__init__.py": INIT,
    "mylib/core.py": CORE,
    "mylib/helpers.py": HELPERS,
    "README.md": "mylib\n",
}

sandboxed = pytest.mark.skipif(sandbox_mode() == "none", reason="no sandbox on this machine")


def fenced(code: str, lang: str = "python") -> str:
    return f"Something is wrong.\n\n```{lang}\n{code}```\n\nThanks!\n"


@pytest.fixture
def fixture(tmp_path: Path) -> tuple[SubprocessRunner, Task, Worktree]:
    mirrors, commit = make_repo(tmp_path, FILES, repo=REPO)
    task = Task(instance_id="fixture__mylib-1", repo=REPO, base_commit=commit, problem_statement="")
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, task.instance_id)
    runner = make_runner(local_settings(run_root=tmp_path / "runs"), tmp_path / "cache")
    assert isinstance(runner, SubprocessRunner)
    return runner, task, wt


# ---- snippet extraction ------------------------------------------------------------------


def test_fenced_python_and_bare_fences_are_kept_in_order() -> None:
    text = "intro\n```python\nimport a\na.f()\n```\nthen\n```\nb = 2\n```\n"
    assert issue_snippets(text) == ["import a\na.f()\n", "b = 2\n"]


def test_shell_console_diff_and_traceback_blocks_are_skipped() -> None:
    text = (
        "```bash\npip install x\n```\n"
        "```console\n$ python -c 'x'\n```\n"
        "```diff\n-a = 1\n+a = 2\n```\n"
        '```\nTraceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n```\n'
        "```python\nTraceback (most recent call last):\n  x = 1\n```\n"
        "```py\nok = True\n```\n"
    )
    assert issue_snippets(text) == ["ok = True\n"]


def test_doctest_outside_fences_becomes_plain_code_without_its_output() -> None:
    text = (
        "When I do this:\n\n"
        ">>> from mylib import parse\n"
        ">>> for t in ['a', 'b']:\n"
        "...     parse(t)\n"
        "0\n"
        ">>> parse('x')\n"
        "Traceback (most recent call last):\n"
        "ValueError: negative\n"
        "\nit fails.\n"
    )
    assert issue_snippets(text) == [
        "from mylib import parse\nfor t in ['a', 'b']:\n    parse(t)\nparse('x')\n"
    ]


def test_ipython_prompts_are_converted_inside_a_fence() -> None:
    text = fenced(
        "In [1]: import numpy as np\n\nIn [2]: def f(x):\n   ...:     return x\n   ...:\n\nOut[2]: 3\n"
    )
    assert issue_snippets(text) == ["import numpy as np\ndef f(x):\n    return x\n"]


def test_python2_print_is_repaired_and_prose_lines_dropped() -> None:
    text = fenced("x = 1\nprint x\nprint 'a', x\nthis line is prose, not code\nprint(x)\n")
    assert issue_snippets(text) == ["x = 1\nprint(x)\nprint('a', x)\nprint(x)\n"]


def test_a_block_with_too_many_bad_lines_is_left_out() -> None:
    prose = "".join(f"word{i} word{i} word\n" for i in range(12))
    assert issue_snippets(fenced("a = 1\n" + prose)) == []
    assert issue_snippets(fenced("a = 1\n" + prose[: 8 * len("word0 word0 word\n")])) == ["a = 1\n"]


def test_garbage_non_utf8_and_nul_input_never_raises() -> None:
    junk = (
        "\udcff\udcfe\x00\n```python\nx = '\udcff'\n\x00y = 2\n```\n"
        + "(" * 5000
        + "\n```python\n"
        + "[" * 300
        + "\n```"
    )
    out = issue_snippets(junk)
    assert all(isinstance(s, str) for s in out)
    assert out and out[0].endswith("y = 2\n")  # the surrogate became a replacement character
    assert issue_snippets("") == []
    assert issue_snippets(b"\xff\xfe\n```python\nz = 3\n```\n".decode("latin-1")) == ["z = 3\n"]


def test_caps_on_blocks_and_characters_and_determinism() -> None:
    many = "".join(fenced(f"v{i} = {i}\n") for i in range(30))
    out = issue_snippets(many)
    assert len(out) == MAX_BLOCKS and out[0] == "v0 = 0\n"
    big = "".join(fenced(f"s{i} = '{'x' * 7000}'\n") for i in range(5))
    assert sum(map(len, issue_snippets(big))) <= MAX_CHARS
    assert issue_snippets(many) == out


# ---- running them ------------------------------------------------------------------------


@pytest.mark.slow
@sandboxed
def test_error_frames_and_calls_are_recorded_imported_only_file_is_not(fixture) -> None:
    runner, task, wt = fixture
    code = "from mylib import Widget, parse\nw = Widget(3)\nw.size()\nparse('abc')\n"
    trace = trace_issue(runner, task, wt, fenced(code), timeout_s=60)
    assert trace.reason == "" and not trace.timed_out
    assert trace.statements == 4
    assert set(trace.calls) == {"mylib/core.py"}  # helpers.py: imported (and run at import) only
    assert trace.calls["mylib/core.py"] == {"__init__:2": 1, "size:5": 1, "parse:9": 1, "_check:13": 2}
    assert trace.first == {"mylib/core.py": 1}
    [err] = trace.errors
    assert err.type == "ValueError" and err.message == "negative: -7"
    assert err.frames == [("mylib/core.py", 10, "parse"), ("mylib/core.py", 15, "_check")]
    assert err.statement == 3
    assert trace.seconds > 0
    again = IssueTrace.from_dict(json.loads(json.dumps(trace.to_dict())))
    assert again.to_dict() == trace.to_dict()


@pytest.mark.slow
@sandboxed
def test_a_name_the_package_exports_is_resolved_without_its_import(fixture) -> None:
    runner, task, wt = fixture
    trace = trace_issue(runner, task, wt, fenced("Widget(-2).size()\n"), timeout_s=60)
    assert trace.reason == ""
    assert [e.type for e in trace.errors] == ["ValueError"]  # not a NameError: Widget was found
    assert trace.errors[0].frames[-1] == ("mylib/core.py", 15, "_check")
    assert "size:5" in trace.calls["mylib/core.py"]


@pytest.mark.slow
@sandboxed
def test_conventional_aliases_and_modules_are_imported_for_the_snippet(fixture) -> None:
    runner, task, wt = fixture
    # ``np`` (numpy, installed with fixgraph) and ``json`` are used as their authors always do,
    # without the imports; the statement then reaches the repository.
    code = "n = int(np.int64(3))\nblob = json.dumps({'n': n})\nWidget(n - 10).size()\n"
    trace = trace_issue(runner, task, wt, fenced(code), timeout_s=60)
    assert [e.type for e in trace.errors] == ["ValueError"]
    assert trace.errors[0].message == "negative: -7" and trace.errors[0].statement == 2


@pytest.mark.slow
@sandboxed
def test_a_name_nobody_exports_stays_a_name_error(fixture) -> None:
    runner, task, wt = fixture
    trace = trace_issue(runner, task, wt, fenced("undefined_thing(1)\n"), timeout_s=60)
    assert [e.type for e in trace.errors] == ["NameError"]
    assert trace.errors[0].frames == [] and trace.calls == {}


def _bounded(fixture, code: str, timeout_s: float, within_s: float) -> IssueTrace:
    """The trace of ``code`` run with a 1 s statement timer, which must return within ``within_s``."""
    runner, task, wt = fixture
    start = time.monotonic()
    trace = trace_issue(runner, task, wt, fenced(code), timeout_s=timeout_s, statement_timeout_s=1)
    assert time.monotonic() - start < within_s
    return trace


@pytest.mark.slow
@sandboxed
def test_an_endless_statement_is_cut_by_its_timer_and_the_next_one_runs(fixture) -> None:
    code = "import mylib\nwhile True:\n    try:\n        pass\n    except Exception:\n        pass\nmylib.parse('abcdefghijkl')\n"
    trace = _bounded(fixture, code, timeout_s=30, within_s=25)
    assert trace.timed_out and trace.reason == ""
    assert [e.type for e in trace.errors] == ["StatementTimeout"]
    assert trace.statements == 3 and trace.first == {"mylib/core.py": 2}


@pytest.mark.slow
@sandboxed
def test_code_that_swallows_the_timer_is_killed_by_the_wall_clock(fixture) -> None:
    runner = fixture[0]
    code = "import mylib\nmylib.parse('abcdefghijkl')\nwhile True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"
    trace = _bounded(fixture, code, timeout_s=8, within_s=30)
    assert trace.timed_out
    # What ran before the loop was written before the kill.
    assert trace.statements == 2 and "mylib/core.py" in trace.calls
    assert not list((runner.cache_dir / "issue-traces").glob("*.json"))  # a timed-out run is not pinned


@pytest.mark.slow
@sandboxed
def test_snippet_sees_no_secret_from_the_parent_environment(fixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-exec-must-not-leak-7781")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_exec_must_not_leak")
    runner, task, wt = fixture
    code = (
        "import os\n"
        "raise RuntimeError('%r %r %s' % (os.environ.get('OPENAI_API_KEY'), os.environ.get('GITHUB_TOKEN'),"
        " 'leak' in repr(dict(os.environ))))\n"
    )
    trace = trace_issue(runner, task, wt, fenced(code), timeout_s=60)
    assert [(e.type, e.message) for e in trace.errors] == [("RuntimeError", "None None False")]


@pytest.mark.slow
@sandboxed
def test_snippet_cannot_write_outside_its_working_copy(fixture, tmp_path: Path) -> None:
    runner, task, wt = fixture
    mirror = tmp_path / "mirrors" / REPO.replace("/", "+")
    targets = [tmp_path / "planted.txt", mirror / "planted.txt", wt.path / "planted.txt"]
    code = (
        "".join(f"open({str(t)!r}, 'w').write('x')\n" for t in targets)
        + "open('inside.txt', 'w').write('ok')\n"
    )
    trace = trace_issue(runner, task, wt, fenced(code), timeout_s=60)
    assert trace.statements == 4
    assert len(trace.errors) == 3 and all(
        e.type in ("PermissionError", "OSError", "FileNotFoundError") for e in trace.errors
    )
    assert [e.statement for e in trace.errors] == [0, 1, 2]  # the write into the copy itself worked
    assert not any(t.exists() for t in targets)


@pytest.mark.slow
@sandboxed
def test_the_cache_serves_the_second_call_without_running(fixture) -> None:
    runner, task, wt = fixture
    # A message no second run could repeat: the second call's equal message is the first run's.
    text = fenced("import os\nraise KeyError(os.urandom(8).hex())\n")
    first = trace_issue(runner, task, wt, text, timeout_s=60)
    [token] = [e.message for e in first.errors]
    assert not first.cached and len(token) == 18
    cached = list((runner.cache_dir / "issue-traces").glob("fixture__mylib-1-*.json"))
    assert len(cached) == 1
    second = trace_issue(runner, task, wt, text, timeout_s=60)
    assert second.cached and [e.message for e in second.errors] == [token]
    assert second.to_dict() == first.to_dict()
    # Other snippets are another entry.
    other = trace_issue(
        runner, task, wt, fenced("import os\nraise KeyError(os.urandom(8).hex())\nx = 1\n"), timeout_s=60
    )
    assert not other.cached and other.errors[0].message != token


@pytest.mark.slow
@sandboxed
def test_an_output_file_turned_into_a_link_is_not_followed(fixture, tmp_path: Path) -> None:
    runner, task, wt = fixture
    outside = tmp_path / "not-for-the-snippet.json"
    outside.write_text(json.dumps({"statements": 99, "calls": {"stolen.py": {"f:1": 1}}}))
    # One statement: the tracer rewrites its output after each one.
    code = (
        "def swap():\n"
        "    import os\n"
        "    os.remove('_fixgraph_issue_trace.json')\n"
        f"    os.symlink({str(outside)!r}, '_fixgraph_issue_trace.json')\n"
        "    os._exit(0)\n"
        "swap()\n"
    )
    trace = trace_issue(runner, task, wt, fenced(code), timeout_s=60)
    assert trace.reason.startswith("the tracer wrote no trace")
    assert trace.statements == 0 and "stolen.py" not in trace.calls
    assert not list((runner.cache_dir / "issue-traces").glob("*.json"))


@pytest.mark.slow
@sandboxed
def test_a_huge_allocation_is_a_memory_error_not_a_dead_run(tmp_path: Path) -> None:
    mirrors, commit = make_repo(tmp_path, FILES, repo=REPO)
    task = Task(instance_id="fixture__mylib-2", repo=REPO, base_commit=commit, problem_statement="")
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, task.instance_id)
    runner = make_runner(local_settings(memory_mb=1024), tmp_path / "cache")
    code = "block = bytearray(8 * 1024 ** 3)\nimport mylib\nmylib.parse('x' * 11)\n"
    trace = trace_issue(runner, task, wt, fenced(code))
    assert [e.type for e in trace.errors] == ["MemoryError"]
    assert trace.statements == 3 and trace.first == {"mylib/core.py": 2}


def test_an_issue_without_code_gives_a_reason_and_runs_nothing(fixture) -> None:
    runner, task, wt = fixture
    trace = trace_issue(runner, task, wt, "It crashes when I click the button.\n\n```bash\nmake\n```\n")
    assert trace.reason == "the issue has no Python code to run"
    assert trace.statements == 0 and trace.seconds == 0 and trace.calls == {} and trace.errors == []
    runs = runner.settings.run_root
    assert runs is not None and not (runs.exists() and any(runs.iterdir()))
    assert not (runner.cache_dir / "issue-traces").exists()


def test_the_docker_backend_says_why_not(fixture, tmp_path: Path) -> None:
    _, task, wt = fixture
    runner = UnavailableRunner("docker backend: no daemon", "docker", tmp_path / "cache")
    trace = trace_issue(runner, task, wt, fenced("import y\n"))
    assert trace.reason == NO_BACKEND and trace.snippets == 1 and trace.statements == 0


class _BrokenEnvs:
    def get(self, task: Task, wt: Worktree, files: Sequence[str] = ()) -> TestEnv:
        raise EnvError("no interpreter for this version")


def test_an_environment_that_cannot_be_built_gives_a_reason(fixture, tmp_path: Path) -> None:
    _, task, wt = fixture
    runner = SubprocessRunner(
        local_settings(run_root=tmp_path / "runs"), tmp_path / "cache", _BrokenEnvs(), "venv"
    )
    trace = trace_issue(runner, task, wt, fenced("import mylib\n"))
    assert "no interpreter for this version" in trace.reason and trace.statements == 0


# ---- the tracer under the oldest and newest interpreters SWE-bench uses -------------------


@pytest.mark.parametrize("version", ["3.6", "3.13"])
def test_the_tracer_runs_under_old_and_new_pythons(tmp_path: Path, version: str) -> None:
    major, minor = version.split(".")
    python = installed_pythons().get((int(major), int(minor)))
    if python is None:
        pytest.skip(f"no python{version} here")
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    spec = {
        "blocks": ["w = Widget(1)\nw.size()\nparse('')\n"],
        "prelude": "from mylib import Widget\n",
        "statement_timeout_s": 5,
        "budget_s": 30,
    }
    (tmp_path / "in.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [python, str(issue_run.TRACER), "in.json", "out.json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["statements"] == 3
    assert out["calls"]["mylib/core.py"] == {"__init__:2": 1, "size:5": 1, "parse:9": 1, "_check:13": 2}
    assert [e["type"] for e in out["errors"]] == ["ValueError"]  # parse found by the NameError retry
    assert out["errors"][0]["frames"][-1] == ["mylib/core.py", 15, "_check"]


def test_traced_error_round_trips_with_frame_tuples() -> None:
    err = TracedError("ValueError", "bad", [("a.py", 3, "f")], 2)
    back = TracedError.from_dict(json.loads(json.dumps(err.to_dict())))
    assert back == err and isinstance(back.frames[0], tuple)
