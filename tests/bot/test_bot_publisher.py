"""GitHubPublisher against a real bare repo served over authenticated HTTP by the fake GitHub."""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eval.fakes.github_api import BUGGY, FakeGitHub, fix_patch, make_fixture_repo, reject_pushes, show
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Task
from fixgraph.github.client import GitHubAccess
from fixgraph.github.pr import MARKER, GitHubPublisher, branch_name, git_auth, render_body
from fixgraph.publish import Outcome
from fixgraph.repo.workspace import RepoCache, Worktree

TOKEN = "ghp_publisherSECRET0123456789"
BUGGY_SWAPPED = BUGGY.replace("a - b", "b + a")


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeGitHub]:
    gh = FakeGitHub(tmp_path / "served", tokens={TOKEN}).start()
    yield gh
    gh.stop()


def config(fake: FakeGitHub, **overrides: Any) -> RunConfig:
    env = {"GITHUB_TOKEN": TOKEN, "GITHUB_BASE_URL": fake.base_url, "EVAL_MODE": "false"}
    return load_config("redo", env=env, overrides={"github.request_pause_s": 0, "github.write_pause_s": 0,
                                                    **overrides})


def outcome_for(wt: Worktree, sha: str, score: dict[str, Any] | None = None,
                guard: list[dict[str, Any]] | None = None, patch: str | None = None) -> Outcome:
    patch = fix_patch() if patch is None else patch
    score = score or {"fix_score": 0.92, "kind": "tests", "test_pass_rate": 1.0, "no_regression": 1.0,
                      "code_quality": 0.8, "tests_run": 1, "fail_to_pass": {"tests/test_calc.py::test_add": "PASSED"},
                      "pass_to_pass": {}}
    inst = Task(instance_id="acme__calc-7", repo="acme/calc", base_commit=sha, problem_statement="add subtracts")
    return Outcome(
        task=inst, patch=patch, explanation="add() now adds instead of subtracting.", verdict="Safe",
        score=score,  # type: ignore[arg-type]
        attempts=[{"number": 1, "patch": patch, "verdict": "Safe",
                   "findings": [{"source": "pyflakes", "rule": "unused-import", "message": "os imported but unused",
                                 "file": "calc/__init__.py", "line": 1, "severity": "warning"}]}],
        plan={"files": ["calc/__init__.py"], "reasoning": "The issue names add(); it lives in calc."},
        files_read=["calc/__init__.py"],
        usage={"input_tokens": 1200, "output_tokens": 300, "dollars": 0.0123, "calls": 4},
        stop_reason="fix_score over threshold", guard_warnings=guard or [], worktree=wt)


@pytest.fixture
def setup(tmp_path: Path, fake: FakeGitHub) -> tuple[Path, str, Worktree]:
    bare, sha = make_fixture_repo(tmp_path / "fixture")
    fake.add_repo("acme/calc", bare)
    fake.add_issue("acme/calc", 7, "add() subtracts!", "2+3 gives -1")
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    (mirrors / "acme+calc").symlink_to(bare)
    wt = RepoCache(tmp_path / "cache", mirrors).worktree("acme/calc", sha, "acme__calc-7")
    return bare, sha, wt


def publisher(fake: FakeGitHub, cfg: RunConfig) -> GitHubPublisher:
    session = GitHubAccess(cfg).session()
    repo = session.gh.get_repo("acme/calc")
    return GitHubPublisher(cfg, repo, 7, "add() subtracts!", session.token)


def test_branch_name_is_number_and_slug() -> None:
    assert branch_name(7, "add() subtracts!") == "fixgraph/7-add-subtracts"
    assert branch_name(12, "???") == "fixgraph/12-issue"
    assert len(branch_name(1, "x" * 200)) <= len("fixgraph/1-") + 40


@pytest.mark.slow
def test_push_opens_pr_then_second_run_updates_it(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    bare, sha, wt = setup
    cfg = config(fake)
    first = publisher(fake, cfg).publish(outcome_for(wt, sha))
    assert first["ok"] and not first["updated"] and not first["draft"], first
    assert "a + b" in show(bare, "fixgraph/7-add-subtracts", "calc/__init__.py")
    [pr] = fake.open_pulls("acme/calc")
    assert pr["head"]["label"] == "acme:fixgraph/7-add-subtracts" and pr["base"]["ref"] == "main"
    body = pr["body"]
    assert body.startswith("Fixes #7")
    assert "Verdict: **Safe**" in body and "fix_score: 0.92" in body and "Measured by running tests" in body
    assert "`calc/__init__.py` (+1 −1)" in body and "tests/test_calc.py::test_add`: PASSED" in body
    assert "1200 input + 300 output tokens" in body and "$0.0123" in body
    assert "os imported but unused" in body and MARKER in body
    # The commit sits on the base commit, so the PR shows only the fix.
    parent = subprocess.run(["git", "--git-dir", str(bare), "rev-parse", "fixgraph/7-add-subtracts^"],
                            capture_output=True, text=True, check=True).stdout.strip()
    assert parent == sha

    # Second run with a different (worse) patch: same PR, branch force-updated.
    worse = fix_patch(BUGGY_SWAPPED)
    second = publisher(fake, cfg).publish(outcome_for(wt, sha, patch=worse))
    assert second["ok"] and second["updated"] and second["pr_number"] == first["pr_number"], second
    assert len(fake.open_pulls("acme/calc")) == 1
    assert "b + a" in show(bare, "fixgraph/7-add-subtracts", "calc/__init__.py")
    assert fake.open_pulls("acme/calc")[0]["_edits"] == 1


@pytest.mark.slow
def test_semantic_score_is_said_plainly_and_low_score_is_draft(fake: FakeGitHub,
                                                               setup: tuple[Path, str, Worktree]) -> None:
    _, sha, wt = setup
    cfg = config(fake)
    score = {"fix_score": 0.55, "kind": "semantic", "llm_score": 0.6, "code_quality": 0.4, "tests_run": 0}
    result = publisher(fake, cfg).publish(outcome_for(wt, sha, score=score))
    assert result["ok"] and result["draft"], result
    body = fake.open_pulls("acme/calc")[0]["body"]
    assert "This score is semantic, not from tests" in body
    assert "fix_score 0.55 is under the threshold 0.80" in body and "No tests ran" in body


@pytest.mark.slow
def test_update_moves_the_pr_between_draft_and_ready(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    _, sha, wt = setup
    cfg = config(fake)
    low = {"fix_score": 0.3, "kind": "semantic", "llm_score": 0.3, "code_quality": 0.4}
    assert publisher(fake, cfg).publish(outcome_for(wt, sha, score=low))["draft"] is True
    assert fake.open_pulls("acme/calc")[0]["draft"] is True
    again = publisher(fake, cfg).publish(outcome_for(wt, sha))  # tests pass now: 0.92
    assert again["updated"] and again["draft"] is False and fake.open_pulls("acme/calc")[0]["draft"] is False
    back = publisher(fake, cfg).publish(outcome_for(wt, sha, score=low))
    assert back["draft"] is True and fake.open_pulls("acme/calc")[0]["draft"] is True
    assert len(fake.open_pulls("acme/calc")) == 1


@pytest.mark.slow
def test_edited_issue_title_still_updates_the_same_pr(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    bare, sha, wt = setup
    cfg = config(fake)
    first = publisher(fake, cfg).publish(outcome_for(wt, sha))
    session = GitHubAccess(cfg).session()
    renamed = GitHubPublisher(cfg, session.gh.get_repo("acme/calc"), 7, "Addition is broken", session.token)
    second = renamed.publish(outcome_for(wt, sha, patch=fix_patch(BUGGY_SWAPPED)))
    assert second["updated"] and second["pr_number"] == first["pr_number"]
    assert second["branch"] == "fixgraph/7-add-subtracts" and len(fake.open_pulls("acme/calc")) == 1
    assert "b + a" in show(bare, "fixgraph/7-add-subtracts", "calc/__init__.py")


@pytest.mark.slow
def test_guard_warning_makes_a_draft(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    _, sha, wt = setup
    result = publisher(fake, config(fake)).publish(
        outcome_for(wt, sha, guard=[{"rule": "test-edit", "message": "the patch edits tests/test_calc.py"}]))
    assert result["draft"] and fake.open_pulls("acme/calc")[0]["draft"] is True
    assert "the patch edits tests/test_calc.py" in fake.open_pulls("acme/calc")[0]["body"]


@pytest.mark.slow
def test_rejected_push_opens_no_pr(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    bare, sha, wt = setup
    reject_pushes(bare)
    result = publisher(fake, config(fake)).publish(outcome_for(wt, sha))
    assert not result["ok"] and "rejected" in result["error"] and "GH006" in result["error"], result
    assert fake.open_pulls("acme/calc") == []
    assert TOKEN not in result["error"]


@pytest.mark.slow
def test_pr_refused_after_push_deletes_the_branch(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    bare, sha, wt = setup
    fake.refuse_pulls = "Validation Failed"
    pub = publisher(fake, config(fake))
    result = pub.publish(outcome_for(wt, sha))
    assert not result["ok"] and "422" in result["error"]
    refs = subprocess.run(["git", "--git-dir", str(bare), "for-each-ref", "refs/heads/fixgraph"],
                          capture_output=True, text=True, check=True).stdout
    assert refs == "" and fake.open_pulls("acme/calc") == []


@pytest.mark.slow
def test_empty_patch_publishes_nothing(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    _, sha, wt = setup
    result = publisher(fake, config(fake)).publish(outcome_for(wt, sha, patch=""))
    assert not result["ok"] and "no patch" in result["error"]
    assert fake.git_requests == [] and fake.open_pulls("acme/calc") == []


@pytest.mark.slow
def test_token_stays_out_of_argv_env_logs_and_body(fake: FakeGitHub, setup: tuple[Path, str, Worktree],
                                                   spawned: list[tuple[Any, dict[str, str]]],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    _, sha, wt = setup
    caplog.set_level(logging.DEBUG)
    result = publisher(fake, config(fake)).publish(outcome_for(wt, sha))
    assert result["ok"], result
    # The push did authenticate: the fake git server saw a good Basic credential.
    assert any(s.path.endswith("git-receive-pack") and s.status == 200 for s in fake.git_requests)
    git_spawns = [(a, e) for a, e in spawned if "push" in list(a)]
    assert git_spawns, "the push ran no git process"
    for args, env in spawned:
        assert TOKEN not in " ".join(map(str, args))
        assert all(TOKEN not in v for v in env.values())
    assert TOKEN not in caplog.text
    assert TOKEN not in fake.open_pulls("acme/calc")[0]["body"]


def test_credential_files_are_private_and_removed() -> None:
    with git_auth("https://example.com/a/b.git", "tok-123456") as args:
        helper = Path(args[3].removeprefix("credential.helper=!").strip("'"))
        secret = helper.parent / "credential"
        assert oct(helper.parent.stat().st_mode & 0o777) == "0o700"
        assert oct(secret.stat().st_mode & 0o777) == "0o600"
        assert "tok-123456" not in " ".join(args) and "tok-123456" not in helper.read_text()
    assert not helper.parent.exists()
    with git_auth("/local/bare.git", "tok-123456") as args:
        assert args == []


@pytest.mark.slow
def test_body_renders_without_tests_or_findings(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    _, sha, wt = setup
    out = outcome_for(wt, sha, score={"fix_score": 0.0, "kind": "none"})
    out.attempts = []
    body = render_body(out, config(fake), 7)
    assert "No findings" in body and "No score" in body and "No tests ran" in body


@pytest.mark.slow
def test_standalone_publisher_finds_repo_and_issue_from_the_instance(fake: FakeGitHub,
                                                                     setup: tuple[Path, str, Worktree]) -> None:
    # graph.py with EVAL_MODE=false builds GitHubPublisher(cfg) once for the whole run.
    bare, sha, wt = setup
    refused = GitHubPublisher(config(fake)).publish(outcome_for(wt, sha))
    assert "not in FIXGRAPH_ALLOWLIST" in refused["reason"] and fake.requests == []
    pub = GitHubPublisher(config(fake, **{"github.allowlist": ("acme/calc",)}))
    result = pub.publish(outcome_for(wt, sha))
    assert result["ok"] and result["branch"] == "fixgraph/7-add-subtracts", result
    assert fake.open_pulls("acme/calc")[0]["title"] == "Fix #7: add() subtracts!"
    out = outcome_for(wt, sha)
    out.task = out.task.model_copy(update={"instance_id": "acme__calc"})
    assert "does not end with an issue number" in pub.publish(out)["reason"]


@pytest.mark.slow
def test_guard_blocked_patch_is_never_pushed(fake: FakeGitHub, setup: tuple[Path, str, Worktree]) -> None:
    bare, sha, wt = setup
    cfg = config(fake, **{"critic.guard": "block"})
    flagged = [{"source": "guard", "rule": "process-exec", "message": "added code calls os.system()"}]
    result = publisher(fake, cfg).publish(outcome_for(wt, sha, guard=flagged))
    assert not result["ok"] and "guard blocks" in result["error"]
    assert fake.open_pulls("acme/calc") == []
    branches = subprocess.run(["git", "branch", "--list", "fixgraph/*"], cwd=bare, capture_output=True, text=True)
    assert branches.stdout.strip() == ""  # nothing reached the remote


def test_pr_agent_never_chooses_a_blocked_attempt() -> None:
    from agents.pr_agent import choose

    flagged = {"number": 2, "patch": "x", "score": {"fix_score": 0.9},
               "findings": [{"source": "guard", "rule": "network"}]}
    clean = {"number": 1, "patch": "y", "score": {"fix_score": 0.1}, "findings": []}
    assert choose([clean, flagged], guard_blocks=True) == clean  # type: ignore[list-item]
    assert choose([flagged], guard_blocks=True) is None  # type: ignore[list-item]
    assert choose([clean, flagged], guard_blocks=False) == flagged  # type: ignore[list-item]


def test_a_push_that_meets_a_connection_reset_is_retried(tmp_path, monkeypatch) -> None:
    """A network hiccup on push is tried again; a rejection is not."""
    import git as gitpython

    from fixgraph.github import pr as github_pr

    calls: list[list[str]] = []

    class Flaky:
        def execute(self, argv, env=None):  # noqa: ANN001
            calls.append(argv)
            if len(calls) == 1:
                raise gitpython.GitCommandError(argv, 128, stderr="fatal: unable to access 'http://x/': "
                                                "Recv failure: Connection reset by peer")
            return "ok"

    monkeypatch.setattr(github_pr.time, "sleep", lambda s: None)
    assert github_pr.run_git(Flaky(), "http://127.0.0.1:1/a.git", "tok", "push", "x", secrets=[]) == "ok"  # type: ignore[arg-type]
    assert len(calls) == 2

    class Rejects:
        def execute(self, argv, env=None):  # noqa: ANN001
            calls.append(argv)
            raise gitpython.GitCommandError(argv, 1, stderr="remote: GH006: Protected branch update failed")

    calls.clear()
    with pytest.raises(github_pr.RemoteGitError, match="GH006"):
        github_pr.run_git(Rejects(), "http://127.0.0.1:1/a.git", "tok", "push", "x", secrets=[])  # type: ignore[arg-type]
    assert len(calls) == 1
