"""The bot end to end except the graph: webhook server -> job queue -> worker -> publisher -> fake GitHub.

The pipeline is a stand-in that commits a known fix through the real publisher; the real graph
runs in test_bot_e2e.py.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.events import Trigger, sign
from bot.jobs import JobQueue
from bot.worker import NO_BODY
from eval.fakes.github_api import (
    FakeGitHub,
    comment_payload,
    fix_patch,
    labeled_payload,
    make_fixture_repo,
    reject_pushes,
    show,
)
from fixgraph.config import RunConfig
from fixgraph.dataset import Task
from fixgraph.github.client import scrub_environ
from fixgraph.github.pr import MARKER
from fixgraph.publish import Outcome, Publisher
from fixgraph.repo.workspace import RepoCache
from tests.helpers.bot_harness import SECRET, TOKEN, Bot


class StandInPipeline:
    """Plays run_task: a worktree at the base commit, the known fix, the real publisher."""

    def __init__(self, delay: float = 0.0):
        self.instances: list[Task] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, instance: Task, cfg: RunConfig, *, publisher: Publisher, repo_cache: RepoCache,
                 store: Any = None, **_: Any) -> dict[str, Any]:
        with self.lock:
            self.instances.append(instance)
        time.sleep(self.delay)
        wt = repo_cache.worktree(instance.repo, instance.base_commit, f"standin__{instance.instance_id}")
        score = {"fix_score": 0.6, "kind": "semantic", "llm_score": 0.7, "code_quality": 0.4}
        out = Outcome(task=instance, patch=fix_patch(), explanation="add adds", verdict="Safe",
                      score=score,  # type: ignore[arg-type]
                      attempts=[{"number": 1, "patch": fix_patch(), "verdict": "Safe", "findings": []}],
                      plan={"files": ["calc/__init__.py"], "reasoning": "add is in calc"}, files_read=[],
                      usage={"input_tokens": 10, "output_tokens": 5, "dollars": 0.001, "calls": 1},
                      stop_reason="done", worktree=wt)
        published = publisher.publish(out)
        return {"instance_id": instance.instance_id, "published": published, "verdict": "Safe",
                "fix_score": score, "stop_reason": "done", "failed": ""}


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    gh = FakeGitHub(tmp_path / "served", tokens={TOKEN}).start()
    bare, _sha = make_fixture_repo(tmp_path / "fixture")
    gh.add_repo("acme/calc", bare)
    gh.add_issue("acme/calc", 7, "add() subtracts", "add(2, 3) returns -1")
    gh.comment("acme/calc", 7, "Same here on 3.12.", user="bob", association="NONE")
    yield gh
    gh.stop()


@pytest.fixture
def pipeline() -> StandInPipeline:
    return StandInPipeline()


@pytest.fixture
def bot(fake: FakeGitHub, tmp_path: Path, pipeline: StandInPipeline) -> Iterator[Bot]:
    b = Bot(fake, tmp_path, pipeline)
    yield b
    b.close()


@pytest.mark.slow
def test_signed_label_event_runs_a_job_and_comments(bot: Bot, fake: FakeGitHub, pipeline: StandInPipeline,
                                                    tmp_path: Path) -> None:
    status, reply = bot.post("issues", labeled_payload("acme/calc", 7))
    assert status == 202 and reply == {"queued": True, "job": "acme/calc#7"}
    assert bot.jobs.wait_idle(30)
    [inst] = pipeline.instances
    head = show(tmp_path / "fixture" / "remote.git", "main", "calc/__init__.py")
    assert "a - b" in head
    assert inst.instance_id == "acme__calc-7" and inst.repo == "acme/calc"
    assert isinstance(inst, Task) and not hasattr(inst, "FAIL_TO_PASS")  # a real issue has no hidden tests
    assert inst.problem_statement.startswith("add() subtracts\n\nadd(2, 3) returns -1")
    assert "@bob wrote:\nSame here on 3.12." in inst.problem_statement
    comments = fake.comments_on("acme/calc", 7)
    assert len(comments) == 3  # bob's, the start, the end
    assert comments[1].startswith("fixgraph is working on this issue") and MARKER in comments[1]
    [pr] = fake.open_pulls("acme/calc")
    assert pr["html_url"] in comments[2] and "as a draft" in comments[2]  # 0.6 < 0.8
    assert "semantic, not from tests" in comments[2]
    assert "a + b" in show(tmp_path / "fixture" / "remote.git", "fixgraph/7-add-subtracts", "calc/__init__.py")


@pytest.mark.slow
@pytest.mark.parametrize("signature", [None, "sha256=" + "0" * 64, "sha1=abc"])
def test_bad_or_missing_signature_is_401_and_queues_nothing(bot: Bot, fake: FakeGitHub, signature: str | None) -> None:
    if signature is None:
        status, _ = bot.post("issues", labeled_payload("acme/calc", 7), secret=None)
    else:
        status, _ = bot.post("issues", labeled_payload("acme/calc", 7), signature=signature)
    assert status == 401
    # Signed with another secret: also refused.
    assert bot.post("issues", labeled_payload("acme/calc", 7), secret="wrong")[0] == 401
    assert bot.jobs.accepted == [] and fake.requests == []


@pytest.mark.slow
def test_malformed_json_is_400(bot: Bot) -> None:
    assert bot.post("issues", raw=b'{"action": "labeled", ')[0] == 400
    assert bot.post("issues", raw=b"\xff\xfe")[0] == 400
    assert bot.jobs.accepted == []


@pytest.mark.slow
def test_form_encoded_delivery_is_accepted(bot: Bot) -> None:
    import urllib.parse

    raw = urllib.parse.urlencode({"payload": json.dumps(labeled_payload("acme/calc", 7))}).encode()
    req = urllib.request.Request(bot.url, data=raw, method="POST", headers={
        "X-GitHub-Event": "issues", "Content-Type": "application/x-www-form-urlencoded",
        "X-Hub-Signature-256": sign(SECRET, raw)})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 202
    assert bot.jobs.wait_idle(30)
    bad = b"payload=%7Bnot-json"
    req = urllib.request.Request(bot.url, data=bad, method="POST", headers={
        "X-GitHub-Event": "issues", "Content-Type": "application/x-www-form-urlencoded",
        "X-Hub-Signature-256": sign(SECRET, bad)})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 400
    # JSON sent under the form content type (no payload= field) is refused cleanly too.
    assert bot.post("issues", raw=b'{"action": "labeled"}', content_type="application/x-www-form-urlencoded")[0] == 400


@pytest.mark.slow
def test_unhandled_events_are_204(bot: Bot, fake: FakeGitHub) -> None:
    assert bot.post("push", {"ref": "refs/heads/main", "repository": {"full_name": "acme/calc"}})[0] == 204
    opened = labeled_payload("acme/calc", 7) | {"action": "opened"}
    assert bot.post("issues", opened)[0] == 204
    assert bot.post("issues", labeled_payload("acme/calc", 7, label="bug"))[0] == 204
    on_pr = labeled_payload("acme/calc", 7)
    on_pr["issue"]["pull_request"] = {"url": "x"}
    assert bot.post("issues", on_pr)[0] == 204
    assert bot.post("issues", [1, 2])[0] == 204
    odd = comment_payload("acme/calc", 7, "/fixgraph")
    odd["comment"]["body"] = 42
    odd["comment"]["author_association"] = ["OWNER"]
    assert bot.post("issue_comment", odd)[0] == 204
    assert bot.post("ping", {"zen": "Keep it simple."})[0] == 200
    assert bot.jobs.accepted == [] and fake.requests == []


@pytest.mark.slow
def test_comment_command_from_allowed_user_triggers(bot: Bot, fake: FakeGitHub, pipeline: StandInPipeline) -> None:
    assert bot.post("issue_comment", comment_payload("acme/calc", 7, "please fix", association="OWNER"))[0] == 204
    assert bot.post("issue_comment", comment_payload("acme/calc", 7, "/fixgraph", user="mallory",
                                                     association="NONE"))[0] == 204
    own = comment_payload("acme/calc", 7, f"/fixgraph is working\n{MARKER}", user="fixgraph-bot[bot]")
    assert bot.post("issue_comment", own)[0] == 204
    assert bot.jobs.accepted == []
    fake.comment("acme/calc", 7, "/fixgraph please", user="carol", association="COLLABORATOR")
    status, reply = bot.post("issue_comment", comment_payload("acme/calc", 7, "/fixgraph please", user="carol",
                                                             association="COLLABORATOR"))
    assert status == 202 and reply and reply["queued"]
    assert bot.jobs.wait_idle(30)
    assert len(pipeline.instances) == 1 and len(fake.open_pulls("acme/calc")) == 1
    # The command itself is not part of the problem; the other comments are.
    assert "/fixgraph" not in pipeline.instances[0].problem_statement
    assert "Same here on 3.12." in pipeline.instances[0].problem_statement
    [start] = [c for c in fake.comments_on("acme/calc", 7) if c.startswith("fixgraph is working")]
    assert "with the `/fixgraph`" in start and "@carol" in start


@pytest.mark.slow
def test_allowed_users_setting_lets_a_non_member_trigger(fake: FakeGitHub, tmp_path: Path,
                                                         pipeline: StandInPipeline) -> None:
    b = Bot(fake, tmp_path, pipeline, **{"github.allowed_users": ("mallory",)})
    try:
        status, _ = b.post("issue_comment", comment_payload("acme/calc", 7, "/fixgraph", user="Mallory",
                                                            association="NONE"))
        assert status == 202
        assert b.jobs.wait_idle(30)
    finally:
        b.close()


@pytest.mark.slow
def test_repo_outside_allowlist_is_ignored(bot: Bot, fake: FakeGitHub) -> None:
    fake.add_repo("evil/calc", None)
    fake.add_issue("evil/calc", 1, "x", "y")
    assert bot.post("issues", labeled_payload("evil/calc", 1))[0] == 204
    assert bot.post("issue_comment", comment_payload("evil/calc", 1, "/fixgraph"))[0] == 204
    assert bot.jobs.accepted == [] and fake.requests == []


@pytest.mark.slow
def test_label_added_twice_quickly_gives_one_job(fake: FakeGitHub, tmp_path: Path) -> None:
    slow = StandInPipeline(delay=0.5)
    b = Bot(fake, tmp_path, slow)
    try:
        first = b.post("issues", labeled_payload("acme/calc", 7))
        second = b.post("issues", labeled_payload("acme/calc", 7))
        assert first == (202, {"queued": True, "job": "acme/calc#7"})
        assert second[0] == 202 and second[1] and second[1]["queued"] is False
        assert b.jobs.wait_idle(30)
        # Even once the job is done, a redelivery within the window is still the same job.
        assert b.post("issues", labeled_payload("acme/calc", 7))[1] == {
            "queued": False, "job": "acme/calc#7", "reason": "a job for this issue is already in flight"}
        assert len(slow.instances) == 1 and len(fake.open_pulls("acme/calc")) == 1
    finally:
        b.close()


@pytest.mark.slow
def test_issue_with_empty_body(bot: Bot, fake: FakeGitHub, pipeline: StandInPipeline) -> None:
    fake.add_issue("acme/calc", 8, "add is wrong", None)
    assert bot.post("issues", labeled_payload("acme/calc", 8))[0] == 202
    assert bot.jobs.wait_idle(30)
    [inst] = pipeline.instances
    assert inst.problem_statement == f"add is wrong\n\n{NO_BODY}\n"
    assert "pull request" in fake.comments_on("acme/calc", 8)[-1]


@pytest.mark.slow
def test_repo_that_cannot_be_cloned_gets_a_comment(bot: Bot, fake: FakeGitHub, pipeline: StandInPipeline) -> None:
    fake.add_repo("acme/gone", None)  # the API knows it; git has no such repository
    fake.add_issue("acme/gone", 3, "bug", "details")
    assert bot.post("issues", labeled_payload("acme/gone", 3))[0] == 202
    assert bot.jobs.wait_idle(30)
    assert pipeline.instances == []
    last = fake.comments_on("acme/gone", 3)[-1]
    assert last.startswith("fixgraph gave up: could not clone acme/gone") and TOKEN not in last


@pytest.mark.slow
def test_rejected_push_is_reported_and_leaves_no_pr(bot: Bot, fake: FakeGitHub, tmp_path: Path) -> None:
    reject_pushes(tmp_path / "fixture" / "remote.git")
    assert bot.post("issues", labeled_payload("acme/calc", 7))[0] == 202
    assert bot.jobs.wait_idle(30)
    assert fake.open_pulls("acme/calc") == []
    last = fake.comments_on("acme/calc", 7)[-1]
    assert "fixgraph gave up: push of fixgraph/7-add-subtracts was rejected" in last and "GH006" in last


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["retry_after", "reset"])
def test_rate_limit_403_is_waited_out(bot: Bot, fake: FakeGitHub, kind: str) -> None:
    fake.rate_limit_once("POST", r"/issues/7/comments$", kind=kind, seconds=1)
    t0 = time.monotonic()
    assert bot.post("issues", labeled_payload("acme/calc", 7))[0] == 202
    assert bot.jobs.wait_idle(60)
    statuses = [s.status for s in fake.requests if s.method == "POST" and s.path.endswith("/issues/7/comments")]
    assert statuses[:2] == [403, 201], statuses
    assert time.monotonic() - t0 >= 1.0
    assert fake.comments_on("acme/calc", 7)[1].startswith("fixgraph is working")
    assert len(fake.open_pulls("acme/calc")) == 1


@pytest.mark.slow
def test_token_never_leaks(bot: Bot, fake: FakeGitHub, monkeypatch: pytest.MonkeyPatch,
                           spawned: list[tuple[Any, dict[str, str]]],
                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    scrub_environ()  # what `python -m bot` does once the config has read the token
    assert "GITHUB_TOKEN" not in os.environ
    caplog.set_level(logging.DEBUG)
    fake.add_repo("acme/gone", None)
    fake.add_issue("acme/gone", 3, "bug", "details")
    assert bot.post("issues", labeled_payload("acme/calc", 7))[0] == 202
    assert bot.post("issues", labeled_payload("acme/gone", 3))[0] == 202
    assert bot.jobs.wait_idle(30)
    assert len(fake.open_pulls("acme/calc")) == 1
    clones = [a for a, _ in spawned if "clone" in list(a) or "fetch" in list(a)]
    assert clones and any("push" in list(a) for a, _ in spawned)
    for args, env in spawned:
        assert TOKEN not in " ".join(map(str, args))
        assert all(TOKEN not in v for v in env.values()), args
    assert TOKEN not in caplog.text
    assert TOKEN not in fake.all_text()
    # And git did authenticate with it, through the credential helper.
    assert any(s.status == 200 and s.path.endswith("git-receive-pack") for s in fake.git_requests)


@pytest.mark.slow
def test_healthz(bot: Bot) -> None:
    with urllib.request.urlopen(bot.url.replace("/webhook", "/healthz"), timeout=5) as resp:
        assert resp.status == 200


@pytest.mark.slow
def test_missing_issue_drops_the_job_quietly(bot: Bot, fake: FakeGitHub, pipeline: StandInPipeline) -> None:
    assert bot.post("issues", labeled_payload("acme/calc", 99))[0] == 202
    assert bot.jobs.wait_idle(30)
    assert pipeline.instances == [] and bot.jobs.pending() == 0
    assert [s.status for s in fake.requests if s.path.endswith("/issues/99")] == [404]


def test_job_queue_bounds_concurrency_and_dedupes_by_issue() -> None:
    running, peak, lock = [0], [0], threading.Lock()
    release = threading.Event()

    def job(_: Trigger) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        release.wait(5)
        with lock:
            running[0] -= 1

    now = [0.0]
    q = JobQueue(job, workers=2, dedupe_window_s=10, clock=lambda: now[0])
    try:
        assert all(q.submit(Trigger("a/b", n, "label", "x")) for n in (1, 2, 3))
        assert not q.submit(Trigger("A/b", 1, "comment", "y"))  # same issue, in flight
        deadline = time.monotonic() + 10
        while peak[0] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # room for a third, were the bound broken
        assert peak[0] == 2 and q.pending() == 3
        release.set()
        assert q.wait_idle(10)
        assert not q.submit(Trigger("a/b", 1, "label", "x"))  # done, but inside the window
        now[0] = 11.0
        assert q.submit(Trigger("a/b", 1, "label", "x"))  # a later, deliberate re-trigger
        assert q.wait_idle(10)
    finally:
        q.close()
