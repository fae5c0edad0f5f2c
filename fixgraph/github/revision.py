"""Publishing a revision of the bot's own pull request: a new commit on top of its branch.

The run started from the branch's head, so the patch is the change the review asked for. It goes
on as one more commit, pushed without force: a maintainer's commits on the branch are never
replaced. When the branch moved during the run, the commit is replayed on its new head and pushed
again (once); when it does not apply there, nothing is pushed and the reply says why.

A revision answers someone's words rather than an issue, so the guard's warnings block it
whatever ``critic.guard`` says: a review cannot get a workflow, a config file or a secret pushed.
"""

from __future__ import annotations

from typing import Any

import git
from github.GithubException import GithubException
from github.PullRequest import PullRequest
from github.Repository import Repository

from fixgraph.config import RunConfig
from fixgraph.github.client import TokenSource
from fixgraph.github.pr import (
    MARKER,
    GitHubPublisher,
    RemoteGitError,
    _one_line,
    draft_reasons,
    git_env,
    render_body,
    run_git,
)
from fixgraph.publish import Outcome
from fixgraph.records import redact
from fixgraph.repo.workspace import PatchError, Worktree

# Hidden in the bot's reply after each revision round: the rounds a PR had are counted from them.
REVISION_MARKER = "<!-- fixgraph revision -->"


class BranchMoved(Exception):
    pass


class RevisionPublisher(GitHubPublisher):
    def __init__(self, cfg: RunConfig, repo: Repository, pr: PullRequest, issue_number: int, issue_title: str,
                 token: TokenSource, asked: str):
        super().__init__(cfg, repo, issue_number, issue_title, token)
        self.pr = pr
        self.branch = pr.head.ref  # the PR's own branch, whatever the issue's title says now
        self.asked = asked  # who asked, for the commit message and the PR body

    def _commit_tree(self, wt: Worktree, message: str) -> None:
        gh = self.cfg.github
        wt.repo.git.execute(["git", "-c", f"user.name={gh.commit_name}", "-c", f"user.email={gh.commit_email}",
                             "commit", "-q", "--no-verify", "-m", redact(message, self._secrets())], env=git_env())

    def commit(self, wt: Worktree, outcome: Outcome) -> str:
        wt.reset()
        wt.apply(outcome.patch)
        wt.repo.git.add("-A")
        if not wt.repo.git.status("--porcelain").strip():
            raise PatchError("the revision changes nothing on the branch")
        self._commit_tree(wt, f"Revise #{self.number} as asked by {self.asked}\n\n"
                              f"{_one_line(outcome.explanation, 600)}\n\n"
                              f"Proposed by fixgraph. Critic verdict: {outcome.verdict or 'NoVerdict'}; "
                              f"fix_score {float(outcome.score.get('fix_score') or 0.0):.2f} "
                              f"({outcome.score.get('kind', 'none')}).\n\nRefs #{self.number}\n")
        return wt.repo.head.commit.hexsha

    def push(self, wt: Worktree, sha: str) -> None:
        """Push ``sha`` as the branch's next commit; replayed once on the branch's new head if it moved."""
        target = f"refs/heads/{self.branch}"
        try:
            run_git(wt.repo.git, self.push_url, self.token(), "push", "--porcelain", self.push_url,
                    f"{sha}:{target}", secrets=self.cfg.secrets())
            return
        except RemoteGitError:
            pass  # rejected as not a fast-forward (someone pushed) or refused: look at the branch
        run_git(wt.repo.git, self.push_url, self.token(), "fetch", "--quiet", self.push_url, target,
                secrets=self.cfg.secrets())
        moved = wt.repo.git.rev_parse("FETCH_HEAD")
        wt.repo.git.checkout("--quiet", "--detach", moved)
        try:
            gh = self.cfg.github
            wt.repo.git.execute(["git", "-c", f"user.name={gh.commit_name}", "-c", f"user.email={gh.commit_email}",
                                 "cherry-pick", "--allow-empty", sha], env=git_env())
        except git.GitCommandError:
            wt.repo.git.execute(["git", "cherry-pick", "--abort"], env=git_env(), with_exceptions=False)
            raise BranchMoved(f"{self.branch} moved during the revision and the change does not apply on its "
                              "new head") from None
        run_git(wt.repo.git, self.push_url, self.token(), "push", "--porcelain", self.push_url,
                f"{wt.repo.head.commit.hexsha}:{target}", secrets=self.cfg.secrets())

    def body(self, outcome: Outcome) -> str:
        note = f"### Revised\n\nThe last commit answers a review by {_one_line(self.asked, 120)}.\n\n"
        return render_body(outcome, self.cfg, self.number).replace(MARKER, redact(note, self._secrets()) + MARKER)

    def publish(self, outcome: Outcome) -> dict[str, Any]:
        if not outcome.patch.strip():
            return self._fail(f"no change to propose ({outcome.stop_reason or 'the pipeline produced none'})")
        if outcome.guard_warnings:
            rules = ", ".join(sorted({str(w.get("rule") or "guard") for w in outcome.guard_warnings}))
            return self._fail(f"the unsafe-patch guard flagged the revision ({rules}): not pushed")
        wt = outcome.worktree
        if wt is None:
            return self._fail("no worktree to commit the revision from")
        try:
            sha = self.commit(wt, outcome)
            self.push(wt, sha)
            sha = wt.repo.head.commit.hexsha
        except (PatchError, git.GitCommandError) as exc:
            return self._fail(f"could not commit the revision: {_one_line(str(exc), 200)}")
        except (RemoteGitError, BranchMoved) as exc:
            return self._fail(f"push of {self.branch} was rejected: {exc}")
        reasons = draft_reasons(outcome, self.cfg.critic.fix_score_threshold)
        try:
            self.pr.edit(body=self.body(outcome))
            self._set_draft(self.pr, bool(reasons))
        except GithubException as exc:
            return self._fail(f"the commit is pushed but GitHub refused the PR's new body ({exc.status})", commit=sha)
        return {"kind": "github_pr", "ok": True, "pr_url": self.pr.html_url, "pr_number": self.pr.number,
                "branch": self.branch, "commit": sha, "draft": bool(reasons), "draft_reasons": reasons,
                "updated": True, "revision": True}
