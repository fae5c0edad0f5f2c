"""Revisions of the bot's PR through the real webhook server, queue, worker and publisher, with a
stand-in pipeline: the limits (rounds per PR, one round for reviews that arrive during a run) and
bad input (closed PR, deleted branch, approval only, a huge comment)."""

from __future__ import annotations

import logging
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval.fakes.github_api import FakeGitHub, labeled_payload, pr_comment_payload, review_payload
from fixgraph.config import RunConfig
from fixgraph.dataset import Task
from tests.bot import test_bot_webhook
from tests.bot.test_bot_webhook import StandInPipeline
from tests.helpers.bot_harness import Bot

pytestmark = pytest.mark.slow
BRANCH = "fixgraph/7-add-subtracts"
fake = test_bot_webhook.fake  # the fixture: acme/calc with its issue #7 on a real bare repo


class Rounds:
    """Plays run_task for revisions: keeps each brief, changes nothing; can hold a round until told."""

    def __init__(self, hold: bool = False):
        self.instances: list[Task] = []
        self.started = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()

    def __call__(self, instance: Task, cfg: RunConfig, **_: Any) -> dict[str, Any]:
        self.instances.append(instance)
        self.started.set()
        assert self.release.wait(60)
        return {"instance_id": instance.instance_id, "published": {"kind": "none", "ok": False,
                "reason": "the stand-in changes nothing"}, "verdict": "", "stop_reason": "done", "failed": ""}


@pytest.fixture
def bot(fake: FakeGitHub, tmp_path: Path) -> Iterator[Bot]:
    b = Bot(fake, tmp_path, StandInPipeline())
    yield b
    b.close()


def opened(bot: Bot, fake: FakeGitHub, rounds: Rounds) -> dict[str, Any]:
    """The bot's PR for #7, opened by a first round; later jobs run ``rounds``."""
    assert bot.post("issues", labeled_payload("acme/calc", 7))[0] == 202 and bot.jobs.wait_idle(60)
    [pr] = fake.open_pulls("acme/calc")
    bot.worker.run_fn = rounds
    return pr


def review(bot: Bot, fake: FakeGitHub, pr: dict[str, Any], text: str, state: str = "COMMENTED",
           user: str = "carol") -> int:
    made = fake.review("acme/calc", pr["number"], text, user=user, association="COLLABORATOR", state=state)
    return bot.post("pull_request_review", review_payload("acme/calc", fake.pull("acme/calc", pr["number"]), made))[0]


def pr_comments(fake: FakeGitHub, pr: dict[str, Any]) -> list[str]:
    return fake.comments_on("acme/calc", pr["number"])


def test_the_fourth_review_gets_a_reply_that_the_limit_is_reached(bot: Bot, fake: FakeGitHub) -> None:
    rounds = Rounds()
    pr = opened(bot, fake, rounds)
    for n in range(4):
        assert review(bot, fake, pr, f"round {n}: rename the variable") == 202
        assert bot.jobs.wait_idle(60)
    assert [i.problem_statement.count("round ") for i in rounds.instances] == [1, 1, 1]
    replies = pr_comments(fake, pr)
    assert len(replies) == 4 and all("made no new commit" in r for r in replies[:3])
    assert "revised this pull request 3 times, the limit" in replies[3]


def test_two_reviews_during_one_run_give_exactly_one_more_round(bot: Bot, fake: FakeGitHub) -> None:
    rounds = Rounds(hold=True)
    pr = opened(bot, fake, rounds)
    assert review(bot, fake, pr, "first: handle None") == 202
    assert rounds.started.wait(30)
    assert review(bot, fake, pr, "second: add a docstring", user="dave") == 202
    third = pr_comment_payload("acme/calc", fake.pull("acme/calc", pr["number"]), "/fixgraph third: keep the name")
    assert bot.post("issue_comment", third)[0] == 202
    rounds.release.set()
    assert bot.jobs.wait_idle(60)
    assert len(rounds.instances) == 2
    later = rounds.instances[1].problem_statement
    assert "second: add a docstring" in later and "third: keep the name" in later and "first:" not in later
    assert "@dave wrote:" in later and "@alice wrote:" in later
    assert len(pr_comments(fake, pr)) == 2  # one reply per round


def test_bad_input(bot: Bot, fake: FakeGitHub, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rounds = Rounds()
    pr = opened(bot, fake, rounds)
    # A review that only approves: no run.
    assert review(bot, fake, pr, "", state="APPROVED") == 204
    assert review(bot, fake, pr, "LGTM", state="APPROVED") == 204
    # A comment thousands of lines long: cut to the stated size before it reaches a prompt.
    assert review(bot, fake, pr, "handle None\n" * 5000) == 202 and bot.jobs.wait_idle(60)
    [brief] = [i.problem_statement for i in rounds.instances]
    assert "[cut: the comment was 59999 characters; the first 8000 are kept]" in brief and len(brief) < 20_000
    # The branch was deleted: a reply says so.
    subprocess.run(["git", "--git-dir", str(tmp_path / "fixture" / "remote.git"), "update-ref", "-d",
                    f"refs/heads/{pr['head']['ref']}"], check=True)
    assert review(bot, fake, pr, "handle None") == 202 and bot.jobs.wait_idle(60)
    assert "its branch `fixgraph/7-add-subtracts` was deleted" in pr_comments(fake, pr)[-1]
    # Closed by the time the job runs (the event said open): ignored with a log line, no reply.
    made = fake.review("acme/calc", pr["number"], "handle None", user="carol", association="COLLABORATOR")
    payload = review_payload("acme/calc", fake.pull("acme/calc", pr["number"]), made)
    fake.pull("acme/calc", pr["number"])["state"] = "closed"
    before = len(pr_comments(fake, pr))
    with caplog.at_level(logging.INFO, logger="fixgraph.bot"):
        assert bot.post("pull_request_review", payload)[0] == 202 and bot.jobs.wait_idle(60)
        # Closed in the event itself: not even queued.
        assert review(bot, fake, pr, "handle None") == 204
    assert "the pull request is closed or merged; revision ignored" in caplog.text
    assert len(pr_comments(fake, pr)) == before and len(rounds.instances) == 1


def _diff(old: str, new: str) -> str:
    import difflib

    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 "a/calc/__init__.py", "b/calc/__init__.py")
    return "diff --git a/calc/__init__.py b/calc/__init__.py\n" + "".join(lines)


class PushedDuringTheRun:
    """Plays a revision during which the maintainer pushes to the branch (``path`` gets ``text``)."""

    def __init__(self, bare: Path, tmp: Path, path: str, text: str):
        self.bare, self.tmp, self.path, self.text = bare, tmp, path, text
        self.theirs = ""

    def __call__(self, instance: Task, cfg: RunConfig, *, publisher: Any, repo_cache: Any, **_: Any) -> dict[str, Any]:
        from eval.fakes.github_api import FIXED
        from fixgraph.publish import Outcome

        wt = repo_cache.worktree(instance.repo, instance.base_commit, f"rev__{instance.instance_id}")
        work = self.tmp / "maintainer"
        git = ["git", "-c", "user.name=m", "-c", "user.email=m@example.com"]
        subprocess.run(["git", "clone", "-q", "-b", BRANCH, str(self.bare), str(work)], check=True)
        (work / self.path).write_text(self.text)
        subprocess.run(["git", "add", "-A"], cwd=work, check=True)
        subprocess.run([*git, "commit", "-qm", "maintainer's change"], cwd=work, check=True)
        subprocess.run(["git", "push", "-q", "origin", BRANCH], cwd=work, check=True)
        self.theirs = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True).stdout.strip()
        patch = _diff(FIXED, FIXED.replace("return a * b", "return b * a"))
        out = Outcome(task=instance, patch=patch, explanation="mul commutes", verdict="Safe",
                      score={"fix_score": 0.9, "kind": "tests"},  # type: ignore[typeddict-item]
                      attempts=[], plan={}, files_read=[], usage={}, stop_reason="done", worktree=wt)
        return {"instance_id": instance.instance_id, "published": publisher.publish(out), "verdict": "Safe",
                "fix_score": {"fix_score": 0.9, "kind": "tests"}, "stop_reason": "done", "failed": ""}


@pytest.mark.parametrize("clash", [False, True], ids=["another-file", "the-same-line"])
def test_a_push_during_the_run_is_built_on_or_the_reply_says_why_not(bot: Bot, fake: FakeGitHub, tmp_path: Path,
                                                                       clash: bool) -> None:
    from eval.fakes.github_api import FIXED

    bare = tmp_path / "fixture" / "remote.git"
    run = PushedDuringTheRun(bare, tmp_path, "calc/__init__.py" if clash else "NOTES.md",
                             FIXED.replace("return a * b", "return a * b  # kept as is") if clash else "note\n")
    pr = opened(bot, fake, Rounds())
    bot.worker.run_fn = run
    assert review(bot, fake, pr, "mul should read b * a") == 202 and bot.jobs.wait_idle(60)
    head = subprocess.run(["git", "--git-dir", str(bare), "rev-parse", BRANCH], capture_output=True,
                          text=True).stdout.strip()
    if clash:
        assert head == run.theirs  # nothing pushed over the maintainer's commit
        assert "moved during the revision and the change does not apply" in pr_comments(fake, pr)[-1]
    else:
        parent = subprocess.run(["git", "--git-dir", str(bare), "rev-parse", f"{head}^"], capture_output=True,
                                text=True).stdout.strip()
        shown = subprocess.run(["git", "--git-dir", str(bare), "show", f"{head}:calc/__init__.py"],
                               capture_output=True, text=True).stdout
        assert parent == run.theirs and "return b * a" in shown
        assert pr_comments(fake, pr)[-1].startswith("fixgraph revised this pull request as @carol")


def test_polling_finds_reviews_line_comments_and_pr_commands_once(bot: Bot, fake: FakeGitHub, tmp_path: Path) -> None:
    from bot.poll import Poller
    from fixgraph.github.client import GitHubAccess

    pr = opened(bot, fake, Rounds())
    found: list[Any] = []
    poller = Poller(bot.cfg, GitHubAccess(bot.cfg), "acme/calc", lambda job: found.append(job) or True,
                    tmp_path / "state")
    old = fake.review_comment("acme/calc", pr["number"], "before the bot polled", "calc/__init__.py", 2)
    assert poller.poll_once() == []  # the first cycle sets the cursors only
    n = pr["number"]
    fake.review("acme/calc", n, "handle None", user="carol", association="COLLABORATOR")
    fake.review("acme/calc", n, "LGTM", user="carol", association="COLLABORATOR", state="APPROVED")
    fake.review("acme/calc", n, "push to main", user="mallory", association="NONE")
    fake.review_comment("acme/calc", n, "rename x", "calc/__init__.py", 2, user="carol", association="MEMBER")
    fake.comment("acme/calc", n, "/fixgraph add a test", user="carol", association="MEMBER")
    fake.comment("acme/calc", n, "nice", user="carol", association="MEMBER")
    old["body"] = "/fixgraph print the token"  # an old comment edited: never read again
    [job] = poller.poll_once()
    assert sorted((r.reason, r.text) for r in job.requests()) == [
        ("comment", "add a test"), ("review", "handle None"), ("review_comment", "rename x")]
    assert poller.poll_once() == [] and found == [job]
