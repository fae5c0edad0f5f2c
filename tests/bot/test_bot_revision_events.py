"""Which events on a pull request ask the bot for a revision of its own PR, and which are ignored."""

from __future__ import annotations

import threading
from typing import Any

from bot.events import MAX_REVIEW_CHARS, Ignored, Revision, from_webhook, revision_trigger
from bot.jobs import JobQueue
from fixgraph.config import GitHubSettings
from fixgraph.github.pr import MARKER

GH = GitHubSettings(allowlist=("octo/demo",), bot_login="fixgraph-bot")


def _pr(**over: Any) -> dict[str, Any]:
    pr = {"number": 7, "state": "open", "merged": False, "body": f"Fixes #3\n\n{MARKER}\n",
          "head": {"ref": "fixgraph/3-crash"}, "user": {"login": "fixgraph-bot"}}
    pr.update(over)
    return pr


def test_line_comment_from_a_member_is_a_revision_with_its_file_and_line() -> None:
    got = revision_trigger("octo/demo", _pr(), "review_comment", "also handle None", "maint", "MEMBER", GH,
                           path="pkg/mod.py", line=12)
    assert got == Revision("octo/demo", 7, "review_comment", "maint", "also handle None", "pkg/mod.py", 12)


def test_command_comment_keeps_only_the_instructions() -> None:
    got = revision_trigger("octo/demo", _pr(), "comment", "/fixgraph add a test", "maint", "OWNER", GH)
    assert isinstance(got, Revision) and got.text == "add a test"


def test_ignored_cases() -> None:
    cases = [
        (_pr(), "review", "do it", "stranger", "NONE"),                       # untrusted reviewer
        (_pr(user={"login": "someone"}), "review", "do it", "maint", "MEMBER"),  # not the bot's PR
        (_pr(body="no marker"), "review", "do it", "maint", "MEMBER"),
        (_pr(state="closed"), "review", "do it", "maint", "MEMBER"),
        (_pr(merged=True), "review", "do it", "maint", "MEMBER"),
        (_pr(), "review", "", "maint", "MEMBER"),                              # approve only
        (_pr(), "comment", "looks good", "maint", "MEMBER"),                   # not a command
        (_pr(), "review", "do it", "fixgraph-bot", "MEMBER"),                  # the bot itself
    ]
    for pr, reason, text, login, assoc in cases:
        assert isinstance(revision_trigger("octo/demo", pr, reason, text, login, assoc, GH), Ignored), (pr, text)
    assert isinstance(revision_trigger("other/repo", _pr(), "review", "x", "maint", "MEMBER", GH), Ignored)


def test_a_huge_comment_is_cut_to_the_stated_size() -> None:
    got = revision_trigger("octo/demo", _pr(), "review", "x" * 100_000, "maint", "MEMBER", GH)
    assert isinstance(got, Revision)
    assert len(got.text) < MAX_REVIEW_CHARS + 200 and "[cut:" in got.text


def _payload(event: str, **item: Any) -> dict[str, Any]:
    key = {"pull_request_review": "review", "pull_request_review_comment": "comment"}[event]
    body = {"id": 41, "body": "also handle None", "user": {"login": "maint"}, "author_association": "MEMBER"}
    return {"action": "submitted" if key == "review" else "created", "pull_request": _pr(),
            "repository": {"full_name": "octo/demo"}, "installation": {"id": 5}, key: body | item}


def test_webhook_review_events_become_revisions() -> None:
    got = from_webhook("pull_request_review", _payload("pull_request_review", state="changes_requested"), GH)
    assert got == Revision("octo/demo", 7, "review", "maint", "also handle None", installation_id=5)
    got = from_webhook("pull_request_review_comment",
                       _payload("pull_request_review_comment", path="pkg/mod.py", line=12), GH)
    assert got == Revision("octo/demo", 7, "review_comment", "maint", "also handle None", "pkg/mod.py", 12, 5, 41)
    on_pr = {"action": "created", "repository": {"full_name": "octo/demo"},
             "issue": {k: v for k, v in _pr().items() if k != "head"} | {"pull_request": {"url": "x"}},
             "comment": {"id": 9, "body": "/fixgraph add a test", "user": {"login": "maint"},
                         "author_association": "OWNER"}}
    got = from_webhook("issue_comment", on_pr, GH)
    assert isinstance(got, Revision) and (got.reason, got.text, got.key) == ("comment", "add a test", "octo/demo#7")


def test_webhook_review_events_that_start_nothing() -> None:
    approved = _payload("pull_request_review", state="approved", body="LGTM, and also handle None")
    edited = _payload("pull_request_review_comment") | {"action": "edited"}
    dismissed = _payload("pull_request_review") | {"action": "dismissed"}
    on_a_person_s_pr = _payload("pull_request_review") | {"pull_request": _pr(body="mine", user={"login": "dave"})}
    for event, payload in (("pull_request_review", approved), ("pull_request_review_comment", edited),
                           ("pull_request_review", dismissed), ("pull_request_review", on_a_person_s_pr),
                           ("pull_request_review", {"action": "submitted"}), ("pull_request_review", [1])):
        assert isinstance(from_webhook(event, payload, GH), Ignored), payload


def test_reviews_during_a_run_are_held_for_exactly_one_more_round() -> None:
    started, release, ran = threading.Event(), threading.Event(), []

    def handler(job: Any) -> None:
        ran.append(job)
        started.set()
        assert release.wait(10)

    jobs = JobQueue(handler, workers=2)
    try:
        first = Revision("octo/demo", 7, "review", "a", "one")
        assert jobs.submit(first) and started.wait(10)
        assert jobs.submit(Revision("octo/demo", 7, "review", "b", "two"))
        assert jobs.submit(Revision("octo/demo", 7, "review_comment", "c", "three", "x.py", 3))
        release.set()
        assert jobs.wait_idle(10)
    finally:
        jobs.close()
    assert [tuple(r.text for r in job.requests()) for job in ran] == [("one",), ("two", "three")]
