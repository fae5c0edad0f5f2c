"""The base run cache (scoring.execution.outcomes.baseline) for a run pytest stops at collection: a
conftest that cannot be imported at the base commit is pinned once and read back by later attempts,
keyed by what it depends on (another env, another added test file: run again); a run cut by its
timeout is not pinned; an entry written without the flag and no statuses is run again."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fixgraph.dataset import Task
from fixgraph.repo.workspace import RepoCache
from scoring.execution.outcomes import baseline, stopped_at_collection
from scoring.execution.runner import make_runner
from scoring.execution.testenv import Suite
from tests.helpers.testrun_helpers import REPO, local_settings, make_repo

FILES = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/test_calc.py": "import calc\n\n\ndef test_add():\n    assert calc.add(1, 2) == 3\n",
    # A conftest that needs a package this environment does not have (flask's examples/javascript).
    "examples/tests/conftest.py": "import not_installed_anywhere  # noqa: F401\n",
    "examples/tests/test_ex.py": "def test_ex():\n    pass\n",
    # The same, but the process then hangs at exit: pytest's words are in the log of a run cut short.
    "hangs/tests/conftest.py": ("import atexit\nimport time\n\natexit.register(time.sleep, 60)\n"
                                "import not_installed_anywhere  # noqa: F401,E402\n"),
    "hangs/tests/test_h.py": "def test_h():\n    pass\n",
}


def _setup(tmp_path: Path):  # noqa: ANN202
    mirrors, commit = make_repo(tmp_path, FILES)
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "bc")
    task = Task(instance_id="fixture__calc-bc", repo=REPO, base_commit=commit, problem_statement="")
    return wt, task, make_runner(local_settings(), tmp_path / "cache"), tmp_path / "cache" / "test-baselines"


@pytest.mark.slow
def test_a_run_stopped_at_collection_is_pinned_by_env_and_test_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wt, task, runner, cached = _setup(tmp_path)
    suite = Suite(targets=("examples/tests/test_ex.py",), label="regression")
    first = baseline(runner, task, wt, suite)
    assert not first.statuses and first.seconds > 0 and stopped_at_collection(first), first.log
    [pinned] = cached.glob("*.json")
    assert json.loads(pinned.read_text())["stopped_at_collection"] is True
    again = baseline(runner, task, wt, suite)
    assert again.seconds == 0.0 and not again.statuses and "ImportError while loading conftest" in again.log

    # Another test file in the suite: its own entry, run again.
    added = replace(suite, added=(("examples/tests/test_more.py", "def test_more():\n    pass\n"),))
    assert baseline(runner, task, wt, added).seconds > 0
    assert len(list(cached.glob("*.json"))) == 2
    # Another env (a rebuilt one has another key): run again, never the entry pinned with the first.
    monkeypatch.setattr(runner, "env_key", lambda *args, **kwargs: "local-rebuilt")
    assert baseline(runner, task, wt, suite).seconds > 0
    assert len(list(cached.glob("*.json"))) == 3


@pytest.mark.slow
def test_a_collection_stop_cut_by_its_timeout_or_pinned_without_the_flag_is_run_again(tmp_path: Path) -> None:
    wt, task, runner, cached = _setup(tmp_path)
    slow = Suite(targets=("hangs/tests/test_h.py",), label="regression", timeout_s=3)
    cut = baseline(runner, task, wt, slow)
    assert cut.timed_out and "ImportError while loading conftest" in cut.log and not stopped_at_collection(cut)
    assert not list(cached.glob("*.json"))

    suite = Suite(targets=("examples/tests/test_ex.py",), label="regression")
    baseline(runner, task, wt, suite)
    [pinned] = cached.glob("*.json")
    data = json.loads(pinned.read_text())
    # An entry with no statuses and no flag (pinned by an older fixgraph, or cut short) is not trusted.
    for bad in (json.dumps({k: v for k, v in data.items() if k != "stopped_at_collection"}), pinned.read_text()[:40]):
        pinned.write_text(bad)
        assert baseline(runner, task, wt, suite).seconds > 0
        assert json.loads(pinned.read_text())["stopped_at_collection"] is True
