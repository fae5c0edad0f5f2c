"""A review on the bot's PR starts a revision, end to end: the real graph (scripted model) against
the loopback fake GitHub and a real bare repository as the remote, by webhook and by polling."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from bot.poll import Poller
from eval.fakes.github_api import FakeGitHub, labeled_payload, review_comment_payload
from fixgraph.github.client import GitHubAccess
from fixgraph.models.scripted import ScriptedChatModel
from tests.bot import test_bot_e2e
from tests.bot.test_bot_e2e import script
from tests.helpers.bot_harness import TOKEN, Bot, bot_config
from tests.helpers.run_graph import run_task

pytestmark = pytest.mark.slow

BRANCH = "fixgraph/7-add-subtracts"
ASK = "also handle None: treat a missing argument as 0"
REVISED = "    return (a or 0) + (b or 0)\n"
world = test_bot_e2e.world  # the fixture: acme/calc with its issue #7 on a real bare repo


def revision_script() -> dict[str, list[dict[str, Any]]]:
    """One run of the graph that makes the change the review asks for (the Reproducer is not
    asked: the first round's test is kept)."""
    return {
        "Plan": [{"files": ["calc/__init__.py"], "reasoning": "The review is about add()."}],
        "ExploreStep": [{"next_files": [], "learned": "add returns a + b.", "confidence": "high",
                         "suspects": [{"file": "calc/__init__.py", "symbol": "add", "start_line": 1, "end_line": 2}]}],
        "CodeChange": [{"edits": [{"path": "calc/__init__.py", "search": "    return a + b\n", "replace": REVISED}],
                        "explanation": "add() treats None as 0, as the review asked."}],
        "RuntimeCheck": [{"verdict": "Safe", "errors": []}],
        "PatchJudgment": [{"score": 0.95, "reasoning": "The sum, with None as 0."}],
    }


def both_rounds() -> dict[str, list[dict[str, Any]]]:
    first, second = script(runs=1), revision_script()
    return {k: first.get(k, []) + second.get(k, []) for k in {*first, *second}}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def scripted_bot(fake: FakeGitHub, tmp: Path) -> tuple[ScriptedChatModel, Bot]:
    """The bot with the real graph, scripted for the first round and one revision."""
    model = ScriptedChatModel(script=both_rounds())
    return model, Bot(fake, tmp, run_task, run_kwargs={"model_factory": lambda role: model}, dedupe_window_s=0,
                      cfg=bot_config(fake, tmp, **{"tests.backend": "local"}))


def first_round(bot: Bot, fake: FakeGitHub) -> dict[str, Any]:
    status, _ = bot.post("issues", labeled_payload("acme/calc", 7))
    assert status == 202 and bot.jobs.wait_idle(240)
    [pr] = fake.open_pulls("acme/calc")
    return pr


def maintainer_commit(bare: Path, tmp: Path) -> str:
    work = tmp / "maintainer"
    git(tmp, "clone", "-q", "-b", BRANCH, str(bare), str(work))
    (work / "NOTES.md").write_text("The maintainer's own note.\n")
    git(work, "add", "-A")
    git(work, "-c", "user.name=m", "-c", "user.email=m@example.com", "commit", "-q", "-m", "maintainer's note")
    git(work, "push", "-q", "origin", BRANCH)
    return git(work, "rev-parse", "HEAD")


def check_revised(fake: FakeGitHub, bare: Path, tmp: Path, pr: dict[str, Any], parent: str) -> None:
    """The second commit on the branch changes the commented line; the PR body, a reply in the
    comment's thread and the revision's record say so."""
    head = git(bare, "rev-parse", BRANCH)
    assert git(bare, "rev-parse", f"{head}^") == parent  # built on top, not force-pushed over
    change = git(bare, "diff", parent, head)
    assert "-    return a + b" in change and f"+{REVISED.rstrip()}" in change
    assert git(bare, "show", "-s", "--format=%s", head).startswith("Revise #7 as asked by @carol")
    assert len(fake.open_pulls("acme/calc")) == 1
    assert "### Revised" in fake.pull("acme/calc", pr["number"])["body"]
    replies = [c for c in fake.review_comments_on("acme/calc", pr["number"]) if c["user"]["login"] != "carol"]
    assert len(replies) == 1 and replies[0]["body"].startswith("fixgraph revised this pull request as @carol")
    assert "Critic verdict: Safe" in replies[0]["body"]
    [path] = [p for p in (tmp / "runs").glob("bot-*/records/*.json")
              if "revision" in json.loads(p.read_text())]
    record = json.loads(path.read_text())
    assert ASK in record["revision"]["brief"] and "+    return a + b" in record["revision"]["brief"]
    assert "On `calc/__init__.py`, line 2, @carol wrote:" in record["revision"]["brief"]
    assert record["verdict"] == "Safe" and record["published"]["commit"] == head
    # The Critic ran the first round's reproduction test on the revision (no new one was asked for).
    assert record["repro"]["path"] == "tests/test_add_issue.py" and record["fix_score"]["kind"] == "tests"
    assert TOKEN not in fake.all_text() and TOKEN not in path.read_text()


def test_a_line_comment_by_webhook_gives_a_second_commit_on_the_same_branch(
        world: tuple[FakeGitHub, Path], tmp_path: Path) -> None:
    fake, bare = world
    model, bot = scripted_bot(fake, tmp_path)
    try:
        pr = first_round(bot, fake)
        parent = maintainer_commit(bare, tmp_path)  # the maintainer's own commit stays under the revision
        comment = fake.review_comment("acme/calc", pr["number"], ASK, "calc/__init__.py", 2, user="carol",
                                      association="COLLABORATOR")
        status, _ = bot.post("pull_request_review_comment", review_comment_payload("acme/calc", pr, comment))
        assert status == 202 and bot.jobs.wait_idle(240)
        check_revised(fake, bare, tmp_path, pr, parent)
        assert "NOTES.md" in git(bare, "ls-tree", "--name-only", BRANCH)
        # The Planner and the Coder read the reviewer's words and the PR's diff.
        for tool in ("Plan", "CodeChange"):
            assert ASK in model.prompts_for(tool)[-1] and "+    return a + b" in model.prompts_for(tool)[-1]
    finally:
        bot.close()


def test_the_same_through_polling(world: tuple[FakeGitHub, Path], tmp_path: Path) -> None:
    fake, bare = world
    model, bot = scripted_bot(fake, tmp_path)
    try:
        pr = first_round(bot, fake)
        poller = Poller(bot.cfg, GitHubAccess(bot.cfg), "acme/calc", bot.jobs.submit, tmp_path / "state")
        assert poller.poll_once() == []  # the first cycle only sets the cursors
        parent = git(bare, "rev-parse", BRANCH)
        fake.review_comment("acme/calc", pr["number"], ASK, "calc/__init__.py", 2, user="carol",
                            association="COLLABORATOR")
        found = poller.poll_once()
        assert [(t.number, t.reason) for t in found] == [(pr["number"], "review_comment")]
        assert bot.jobs.wait_idle(240)
        check_revised(fake, bare, tmp_path, pr, parent)
        assert poller.poll_once() == []  # the bot's own reply starts nothing
    finally:
        bot.close()
