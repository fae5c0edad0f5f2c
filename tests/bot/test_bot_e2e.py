"""The issue-to-PR bot end to end: signed webhook -> the real graph (scripted model) -> a pushed
branch that fixes the fixture bug and a PR whose body holds the verdict and fix_score.

Only GitHub's REST API (loopback fake), git's remote (a real bare repo behind git http-backend,
token-authenticated) and the LLM (ScriptedChatModel) are fakes; git, pyright and pytest are real.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval.fakes.github_api import FakeGitHub, comment_payload, labeled_payload, make_fixture_repo
from fixgraph.models.scripted import ScriptedChatModel
from tests.helpers.bot_harness import TOKEN, Bot
from tests.helpers.run_graph import run_task

pytestmark = pytest.mark.slow

BRANCH = "fixgraph/7-add-subtracts"


def script(runs: int) -> dict[str, list[dict[str, Any]]]:
    """Replies for ``runs`` whole runs of the graph on the calc fixture (add subtracts)."""
    one = {
        "Plan": [{"files": ["calc/__init__.py"], "reasoning": "add() is defined in calc/__init__.py."}],
        "ExploreStep": [{"next_files": [], "learned": "add returns a - b.", "confidence": "high",
                         "suspects": [{"file": "calc/__init__.py", "symbol": "add", "start_line": 1, "end_line": 2}]}],
        "ReproTestDraft": [{"path": "tests/test_add_issue.py", "explanation": "2 + 3 is 5.",
                            "content": "import calc\n\n\ndef test_add_adds():\n    assert calc.add(2, 3) == 5\n"}],
        "CodeChange": [{"edits": [{"path": "calc/__init__.py", "search": "    return a - b\n",
                                   "replace": "    return a + b\n"}],
                        "explanation": "add() returned the difference; it now returns the sum."}],
        "RuntimeCheck": [{"verdict": "Safe", "errors": []}],
        "PatchJudgment": [{"score": 0.95, "reasoning": "The sum is what the issue asks for."}],
    }
    return {k: v * runs for k, v in one.items()}


def git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[FakeGitHub, Path]]:
    fake = FakeGitHub(tmp_path / "served", tokens={TOKEN}).start()
    bare, _ = make_fixture_repo(tmp_path / "fixture")
    fake.add_repo("acme/calc", bare)
    fake.add_issue("acme/calc", 7, "add() subtracts", "`calc.add(2, 3)` returns -1; it should return 5.")
    fake.add_repo("other/calc", bare)
    fake.add_issue("other/calc", 7, "add() subtracts", "same")
    yield fake, bare
    fake.stop()


@pytest.mark.slow
def test_label_then_comment_gives_one_pr_with_a_fix(world: tuple[FakeGitHub, Path], tmp_path: Path) -> None:
    fake, bare = world
    model = ScriptedChatModel(script=script(runs=2))
    bot = Bot(fake, tmp_path, run_task, run_kwargs={"model_factory": lambda role: model}, dedupe_window_s=0,
              **{"tests.backend": "local"})
    try:
        # 1. A signed issues.labeled webhook.
        status, reply = bot.post("issues", labeled_payload("acme/calc", 7))
        assert status == 202 and reply and reply["queued"]
        assert bot.jobs.wait_idle(240)

        # The branch's diff against main fixes the bug: the fixture's failing test passes on it.
        diff = git(bare, "diff", "main", BRANCH).stdout
        assert "-    return a - b" in diff and "+    return a + b" in diff
        # The reproduction test rides along in the PR (never in a .diff prediction).
        assert "+++ b/tests/test_add_issue.py" in diff and "assert calc.add(2, 3) == 5" in diff
        for ref, should_pass in (("main", False), (BRANCH, True)):
            checkout = tmp_path / ref.replace("/", "_")
            assert git(tmp_path, "clone", "-q", "-b", ref, str(bare), str(checkout)).returncode == 0
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                                 cwd=checkout, capture_output=True, text=True)
            assert (run.returncode == 0) is should_pass, run.stdout
        assert git(bare, "rev-parse", f"{BRANCH}^").stdout == git(bare, "rev-parse", "main").stdout

        [pr] = fake.open_pulls("acme/calc")
        body = pr["body"]
        assert body.startswith("Fixes #7") and "Verdict: **Safe**" in body
        assert "### fix_score: " in body and "Measured by running tests" in body
        assert "### Reproduction test" in body and "failed before the fix and passes after it" in body
        assert "`calc/__init__.py` (+1 −1)" in body and "LLM call" in body
        assert pr["draft"] is False  # the reproduction test passes, nothing regressed
        comments = fake.comments_on("acme/calc", 7)
        assert comments[0].startswith("fixgraph is working on this issue")
        assert comments[-1].startswith(f"fixgraph opened a pull request: {pr['html_url']}")
        assert "Critic verdict: Safe" in comments[-1]
        first_head = git(bare, "rev-parse", BRANCH).stdout

        # 2. `/fixgraph` from a collaborator runs it again: the same PR, updated, not a second one.
        status, reply = bot.post("issue_comment", comment_payload("acme/calc", 7, "/fixgraph", user="carol",
                                                                 association="COLLABORATOR"))
        assert status == 202 and reply and reply["queued"]
        assert bot.jobs.wait_idle(240)
        assert len(fake.open_pulls("acme/calc")) == 1
        [pr] = fake.open_pulls("acme/calc")
        assert pr.get("_edits") == 1
        assert fake.comments_on("acme/calc", 7)[-1].startswith(f"fixgraph updated a pull request: {pr['html_url']}")
        assert git(bare, "rev-parse", BRANCH).stdout != first_head  # force-pushed a new commit
        assert "+    return a + b" in git(bare, "diff", "main", BRANCH).stdout

        # 3. The same command on a repository outside the allowlist does nothing.
        assert bot.post("issue_comment", comment_payload("other/calc", 7, "/fixgraph"))[0] == 204
        assert bot.jobs.wait_idle(5)
        assert fake.comments_on("other/calc", 7) == [] and fake.open_pulls("other/calc") == []
        assert len(bot.jobs.accepted) == 2
        assert TOKEN not in fake.all_text()
    finally:
        bot.close()
