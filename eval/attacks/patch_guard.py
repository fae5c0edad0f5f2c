"""Attacks from patches: ways around the unsafe-patch guard, edits that leave the worktree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from eval.attacks import ATTACKS, Attack, attack
from eval.attacks.sandbox import _git, _mirror

# ---- unsafe-patch guard ----------------------------------------------------------------------


def _guard_attack(name: str, rel: str, old: str, new: str, rule: str) -> Callable[[Path], str]:
    def run(tmp: Path) -> str:
        from eval.fixtures.critic_repo import edit, make_repo
        from scoring.static.guard import check_patch

        wt = make_repo(tmp / "repo")
        found = {f.get("rule") for f in check_patch(wt, edit(wt, rel, old, new))}
        return "" if rule in found else f"not flagged as {rule} (found {sorted(r for r in found if r)})"
    return run


def _register_guard_attacks() -> None:
    from eval.fixtures.guard_cases import BYPASSES

    for name, (rel, old, new, rule) in sorted(BYPASSES.items()):
        ATTACKS.append(Attack("guard", f"patch: {name} ({rel})", _guard_attack(name, rel, old, new, rule)))


_register_guard_attacks()


@attack("guard", "a guard-blocked patch in the bot is never pushed")
def _guard_blocks_push(tmp: Path) -> str:
    from eval.fakes.github_api import FakeGitHub, fix_patch, make_fixture_repo
    from fixgraph.config import load_config
    from fixgraph.dataset import Task
    from fixgraph.github.client import GitHubAccess
    from fixgraph.github.pr import GitHubPublisher
    from fixgraph.publish import Outcome
    from fixgraph.repo.workspace import RepoCache

    token = "ghp_benchTOKEN0123456789"
    fake = FakeGitHub(tmp / "served", tokens={token}).start()
    try:
        bare, sha = make_fixture_repo(tmp / "fixture")
        fake.add_repo("acme/calc", bare)
        fake.add_issue("acme/calc", 7, "add() subtracts", "2+3 gives -1")
        (tmp / "mirrors").mkdir()
        (tmp / "mirrors" / "acme+calc").symlink_to(bare)
        wt = RepoCache(tmp / "cache", tmp / "mirrors").worktree("acme/calc", sha, "acme__calc-7")
        cfg = load_config("redo", env={"GITHUB_TOKEN": token, "GITHUB_BASE_URL": fake.base_url, "EVAL_MODE": "false"},
                          overrides={"github.request_pause_s": 0, "github.write_pause_s": 0, "critic.guard": "block"})
        session = GitHubAccess(cfg).session()
        pub = GitHubPublisher(cfg, session.gh.get_repo("acme/calc"), 7, "add() subtracts", session.token)
        inst = Task(instance_id="acme__calc-7", repo="acme/calc", base_commit=sha, problem_statement="p")
        flagged = [{"source": "guard", "rule": "process-exec", "message": "added code calls os.system()"}]
        result = pub.publish(Outcome(task=inst, patch=fix_patch(), explanation="", verdict="Unsafe",
                                     score={"fix_score": 0.9, "kind": "semantic"},  # type: ignore[arg-type]
                                     attempts=[], plan={}, files_read=[], usage={}, stop_reason="done",
                                     guard_warnings=flagged, worktree=wt))
        pushed = _git(bare, "branch", "--list", "fixgraph/*")
        if result.get("ok") or pushed or fake.open_pulls("acme/calc"):
            return f"pushed or opened: {result}"
        return ""
    finally:
        fake.stop()


# ---- path traversal in edits -------------------------------------------------------------------


@attack("edit-traversal", "a patch or an edit that writes outside the repository")
def _edit_traversal(tmp: Path) -> str:
    from fixgraph.repo.workspace import PatchError, RepoCache

    mirrors, sha = _mirror(tmp)
    wt = RepoCache(tmp / "cache", mirrors).worktree("acme/calc", sha, "task-1")
    escaped = []
    for rel in ("../../escape.txt", "/tmp/escape.txt", ".git/hooks/pre-commit", "calc/../../escape.txt"):
        patch = f"--- /dev/null\n+++ b/{rel}\n@@ -0,0 +1 @@\n+x\n"
        try:
            wt.apply(patch)
            escaped.append(rel)
        except PatchError:
            pass
    return f"applied: {escaped}" if escaped else ""


