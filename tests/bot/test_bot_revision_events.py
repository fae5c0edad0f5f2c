"""Which events on a pull request ask the bot for a revision of its own PR, and which are ignored."""

from __future__ import annotations

from typing import Any

from bot.events import MAX_REVIEW_CHARS, Ignored, Revision, revision_trigger
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
