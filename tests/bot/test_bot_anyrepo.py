"""The bot on a repository swebench has no spec for: its tests run in the env inferred from the
default branch's files, or in the one the maintainer's committed ``.fixgraph.toml`` describes; the
PR body says how the env was made and names the tests that ran with their verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from eval.fakes.github_api import FakeGitHub, labeled_payload, make_fixture_repo
from eval.fixtures.service_repo import SERVICE, service_files
from fixgraph.models.scripted import ScriptedChatModel
from tests.bot.test_bot_e2e import script
from tests.helpers.bot_harness import TOKEN, Bot
from tests.helpers.run_graph import run_task
from tests.helpers.testrun_helpers import MINOR, pinned_pyproject

pytestmark = pytest.mark.slow

PYPROJECT = pinned_pyproject("""[project.optional-dependencies]
test = ["pytest"]

[tool.setuptools]
packages = ["calc"]

[tool.pytest.ini_options]
testpaths = ["tests"]
""")
TABLE = f"""python = "{MINOR}"
setup = ["pip install --no-build-isolation -e ."]
test_cmd = "pytest -rA -p no:cacheprovider"
"""


# Every test of the fixture asks this server first (its conftest): the tests pass only when it was started.
WITH_SERVICE = {**service_files(), ".fixgraph.toml": f"{TABLE}services = [{SERVICE}]\n"}


@pytest.mark.parametrize("committed, made", [
    ({}, f"Environment: inferred from the repository: python {MINOR} (requires-python); "
         "install (extras test): pip install -e .; pip install pytest; tests (pytest config)"),
    ({".fixgraph.toml": TABLE}, f"Environment: inferred from the repository: python {MINOR} (.fixgraph.toml); "
     "install (.fixgraph.toml): pip install --no-build-isolation -e .; tests (.fixgraph.toml)"),
    (WITH_SERVICE, "tests (.fixgraph.toml): pytest -rA -p no:cacheprovider [pytest log]; services started for the "
     "tests: upper (`python services/upper_server.py {port}` on a free port of the run's loopback, UPPER_PORT, "
     "UPPER_ADDR)."),
], ids=["inferred", "committed-file", "committed-service"])
def test_the_pr_says_how_the_env_was_made_and_which_tests_ran(tmp_path: Path, committed: dict[str, str],
                                                               made: str) -> None:
    files = {"pyproject.toml": PYPROJECT, **committed}
    fake = FakeGitHub(tmp_path / "served", tokens={TOKEN}).start()
    bare, _ = make_fixture_repo(tmp_path / "fixture", files)
    fake.add_repo("acme/calc", bare)
    fake.add_issue("acme/calc", 7, "add() subtracts", "`calc.add(2, 3)` returns -1; it should return 5.")
    model = ScriptedChatModel(script=script(runs=1))
    venv: dict[str, Any] = {"tests.backend": "venv", "tests.env_dir": str(tmp_path / "envs")}
    bot = Bot(fake, tmp_path, run_task, run_kwargs={"model_factory": lambda role: model}, dedupe_window_s=0, **venv)
    try:
        status, reply = bot.post("issues", labeled_payload("acme/calc", 7))
        assert status == 202 and reply and reply["queued"]
        assert bot.jobs.wait_idle(900)
        [pr] = fake.open_pulls("acme/calc")
        body = pr["body"]
        assert made in body, body
        assert "Measured by running tests" in body  # the fix_score kind is tests
        assert "`tests/test_add_issue.py::test_add_adds`: PASSED" in body
        assert "`tests/test_calc.py::test_add`: " not in body or "test_add`: PASSED" in body
        assert TOKEN not in fake.all_text()
    finally:
        bot.close()
        fake.stop()
