"""Repositories on disk: one cached bare clone per repo, one worktree per task.

Clones come from GitHub, or from a folder of local mirrors (``--repos DIR``) laid out as
``DIR/<owner>+<name>/repo`` (fetch's layout), ``DIR/<owner>+<name>``, ``DIR/<owner>/<name>`` or
``DIR/<name>``, bare or not. Clones and worktrees are created under a file lock, so workers can
share the cache; each task gets its own worktree, so no two tasks share a working copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import git

from fixgraph import phases
from fixgraph.records import file_lock
from fixgraph.repo import gitsafe
from fixgraph.sandbox import process as sandbox

# Every git command this process runs (GitPython's too) ignores hooks and outside config.
gitsafe.harden()


class WorkspaceError(Exception):
    """A repository could not be prepared; one line for the user."""


class PatchError(Exception):
    """A patch could not be applied or is not acceptable."""


def _git_env() -> dict[str, str]:
    # Never prompt for credentials; fail instead.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "GITHUB_TOKEN"))}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true")
    return gitsafe.hardened_env(env)


# Checkouts kept between tasks, per repository (worktrees/spare-<owner>+<name>-<id>); each holds a
# copy of the repository's tree, so the number is small.
SPARE_PREFIX = "spare-"
SPARES_PER_REPO = 2

NEUTRAL_ATTRIBUTES = "* !filter !diff !merge !ident !export-subst\n"


def _neutralize_attributes(bare: Path) -> None:
    """Highest-precedence attributes (shared by every worktree): no filter, textconv or merge driver
    that a repository's own .gitattributes names ever runs in fixgraph's checkouts."""
    path = bare / "info" / "attributes"
    if not path.is_file() or path.read_text(errors="replace") != NEUTRAL_ATTRIBUTES:
        path.parent.mkdir(exist_ok=True)
        path.write_text(NEUTRAL_ATTRIBUTES)


def find_mirror(mirrors: Path, repo: str) -> Path | None:
    owner, name = repo.split("/", 1)
    for cand in (mirrors / f"{owner}+{name}" / "repo", mirrors / f"{owner}+{name}",
                 mirrors / owner / name, mirrors / name):
        if (cand / "HEAD").is_file() or (cand / ".git").exists():
            return cand
    return None


def preflight(cache_dir: Path, mirrors: Path | None, tasks: list[tuple[str, str]]) -> None:
    """Check, writing nothing, that every (repo, base commit) can be checked out: a mirror (or the
    cached clone) exists, git can read it, and it has the commit. WorkspaceError says what is not.
    Without mirrors, repositories come from GitHub at run time and only the cache is consulted."""
    by_repo: dict[str, set[str]] = {}
    for repo, commit in tasks:
        by_repo.setdefault(repo, set()).add(commit)
    for repo, commits in sorted(by_repo.items()):
        if repo.count("/") != 1 or not all(part and part not in (".", "..") for part in repo.split("/")):
            raise WorkspaceError(f"repo {repo!r} is not owner/name")
        sources = []
        cached = cache_dir.resolve() / "repos" / (repo.replace("/", "+") + ".git")
        if (cached / "HEAD").is_file():
            sources.append(cached)
        if mirrors is not None:
            found = find_mirror(mirrors.resolve(), repo)
            if found is not None:
                sources.append(found)
            elif not sources:
                raise WorkspaceError(f"cannot clone {repo}: no mirror of it under {mirrors.resolve()}")
        if not sources:
            continue
        missing = set(commits)
        for src in sources:
            missing -= _commits_in(src, repo, missing)
        if missing:
            raise WorkspaceError(f"{repo} has no commit {sorted(missing)[0][:12]} (looked in {sources[-1]})")


def _commits_in(src: Path, repo: str, commits: set[str]) -> set[str]:
    wanted = sorted(commits)
    try:
        proc = subprocess.run(["git", "-C", str(src), "cat-file", "--batch-check"], capture_output=True,
                              input="".join(f"{c}^{{commit}}\n" for c in wanted).encode(), env=_git_env(), timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WorkspaceError(f"cannot read the mirror of {repo} at {src}: {exc}") from None
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise WorkspaceError(f"the mirror of {repo} at {src} is not a usable git repository: "
                             f"{detail[-1] if detail else 'git exited ' + str(proc.returncode)}")
    lines = proc.stdout.decode(errors="replace").splitlines()
    return {c for c, line in zip(wanted, lines, strict=False) if line.split()[1:2] == ["commit"]}


def clone_path(cache_dir: Path, repo: str) -> Path:
    """Where :class:`RepoCache` keeps its bare clone of ``repo`` (read without one: ``--check``)."""
    return cache_dir.resolve() / "repos" / (repo.replace("/", "+") + ".git")


def clone_holds(cache_dir: Path, repo: str, commit: str) -> bool:
    """Whether :class:`RepoCache`'s bare clone of ``repo`` exists and holds ``commit`` (asked
    without fetching: ``--check``)."""
    path = clone_path(cache_dir, repo)
    if not (path / "HEAD").is_file():
        return False
    try:
        return RepoCache._has_commit(git.Repo(path), commit)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False


# git's line for a file of the commit whose content the clone lacks (a mirror that left out its
# largest files); its last line ("Could not reset index file to revision ...") does not say so.
_UNREADABLE_BLOB = re.compile(r"unable to read sha1 file of (.+) \(([0-9a-f]{40})\)")


def _checkout_failure(exc: git.GitCommandError) -> str:
    """Why a checkout failed, in one line: the files whose content the clone lacks when that is the
    cause, else git's last line."""
    lines = (exc.stderr or "").strip().splitlines()
    lacking = [m for m in map(_UNREADABLE_BLOB.search, lines) if m]
    if lacking:
        path, blob = lacking[0].groups()
        more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
        return (f"the mirror lacks the content of {path} (blob {blob[:12]}){more}, "
                "so the commit cannot be checked out")
    return lines[-1] if lines else str(exc)


class RepoCache:
    def __init__(self, cache_dir: Path, mirrors: Path | None = None):
        self.cache_dir = cache_dir.resolve()
        self.mirrors = mirrors.resolve() if mirrors else None
        (self.cache_dir / "repos").mkdir(parents=True, exist_ok=True)
        (self.cache_dir / "worktrees").mkdir(parents=True, exist_ok=True)
        # Test processes never see the clones nor the worktrees (their hooks and config are what
        # fixgraph's own git would read).
        sandbox.protect(self.cache_dir / "repos")
        sandbox.protect(self.cache_dir / "worktrees")

    def source_url(self, repo: str) -> str:
        if self.mirrors is not None:
            found = find_mirror(self.mirrors, repo)
            if found is None:
                raise WorkspaceError(f"cannot clone {repo}: no mirror of it under {self.mirrors}")
            return str(found)
        return f"https://github.com/{repo}.git"

    def bare_path(self, repo: str) -> Path:
        return clone_path(self.cache_dir, repo)

    def ensure_clone(self, repo: str, commit: str | None = None) -> git.Repo:
        """The cached bare clone of ``repo``, fetched if ``commit`` is missing."""
        path = self.bare_path(repo)
        with file_lock(path.with_suffix(".lock")):
            if not (path / "HEAD").is_file():
                url = self.source_url(repo)
                tmp = path.with_suffix(".partial")
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    git.Repo.clone_from(url, tmp, bare=True, env=_git_env())
                except git.GitCommandError as exc:
                    shutil.rmtree(tmp, ignore_errors=True)
                    detail = (exc.stderr or "").strip().splitlines()
                    raise WorkspaceError(f"cannot clone {repo} from {url}: {detail[-1] if detail else exc}") from None
                tmp.rename(path)
            _neutralize_attributes(path)
            bare = git.Repo(path)
            if commit and not self._has_commit(bare, commit):
                try:
                    bare.git.fetch("origin", "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*", env=_git_env())
                except git.GitCommandError:
                    pass
                if not self._has_commit(bare, commit):
                    raise WorkspaceError(f"{repo} has no commit {commit[:12]}")
            return bare

    @staticmethod
    def _has_commit(repo: git.Repo, commit: str) -> bool:
        try:
            repo.git.cat_file("-e", f"{commit}^{{commit}}", env=_git_env())
            return True
        except git.GitCommandError:
            return False

    @phases.timed("git worktree")
    def worktree(self, repo: str, commit: str, key: str) -> Worktree:
        """A worktree for one task at ``commit``, clean; reused (and reset) when it exists."""
        bare = self.ensure_clone(repo, commit)
        safe = key.replace("/", "_")
        path = self.cache_dir / "worktrees" / safe
        with file_lock(self.bare_path(repo).with_suffix(".lock")):
            try:
                if not (path / ".git").exists():
                    shutil.rmtree(path, ignore_errors=True)
                    bare.git.worktree("prune")
                    if not self._take_spare(bare, repo, path):
                        # Twice: a worktree whose "add" was killed stays locked ("initializing").
                        bare.git.worktree("add", "--detach", "--force", "--force", str(path), commit)
                else:
                    # One task owns a worktree, so an index.lock in it was left by a killed process.
                    _remove_index_lock(path)
                wt = Worktree(path, commit)
                wt.reset()
            except git.GitCommandError as exc:
                # A half-made worktree would be reused by the next call; take it away.
                shutil.rmtree(path, ignore_errors=True)
                with contextlib.suppress(git.GitCommandError):
                    bare.git.worktree("prune")
                raise WorkspaceError(f"cannot check out {repo} at {commit[:12]}: {_checkout_failure(exc)}") from None
        return wt

    def remove_stale_worktrees(self, prefix: str, keep: set[str]) -> list[Path]:
        """Remove worktrees named ``prefix...`` except ``keep``: leftovers of a killed run."""
        removed = []
        for path in sorted((self.cache_dir / "worktrees").glob(f"{prefix}*")):
            if path.name in keep:
                continue
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        if removed:
            for bare in (self.cache_dir / "repos").glob("*.git"):
                with file_lock(bare.with_suffix(".lock")):
                    # prune keeps locked entries, and a worktree whose "add" was killed is locked.
                    for path in removed:
                        subprocess.run(["git", "worktree", "unlock", str(path)], cwd=bare, capture_output=True,
                                       env=_git_env())
                    subprocess.run(["git", "worktree", "prune"], cwd=bare, capture_output=True, env=_git_env())
        return removed

    def _spares(self, repo: str) -> list[Path]:
        return sorted((self.cache_dir / "worktrees").glob(f"{SPARE_PREFIX}{repo.replace('/', '+')}-*"))

    def _take_spare(self, bare: git.Repo, repo: str, path: Path) -> bool:
        """Move a spare checkout of ``repo`` to ``path`` (the caller resets it to the task's commit):
        a checkout made and deleted costs seconds on a large tree (django: 2-10 s to write its
        6,000 files, 9-11 s to delete them, on a busy machine), a move and a reset a fraction of
        one. Called under the clone's lock; a spare git will not move is deleted."""
        for spare in self._spares(repo):
            try:
                bare.git.worktree("move", str(spare), str(path))
                return True
            except git.GitCommandError:
                shutil.rmtree(spare, ignore_errors=True)
                bare.git.worktree("prune")
        return False

    def _park(self, bare: git.Repo, repo: str, wt: Worktree) -> bool:
        """Keep a task's checkout as a spare, reset to its base commit and cleaned first (no patch
        or file of the task stays in the cache), while the repository has fewer than
        ``SPARES_PER_REPO``; False when it is not kept. Called under the clone's lock."""
        if len(self._spares(repo)) >= SPARES_PER_REPO or not (wt.path / ".git").is_file():
            return False
        try:
            _remove_index_lock(wt.path)
            wt.reset()
            bare.git.worktree("move", str(wt.path), str(self.cache_dir / "worktrees" / (
                f"{SPARE_PREFIX}{repo.replace('/', '+')}-{uuid.uuid4().hex[:12]}")))
            return True
        except git.GitCommandError:
            return False

    @phases.timed("git worktree")
    def remove_worktree(self, repo: str, wt: Worktree) -> None:
        """Done with a task's worktree: kept as a spare for the next task of the repository, or
        deleted."""
        bare = git.Repo(self.bare_path(repo))
        with file_lock(self.bare_path(repo).with_suffix(".lock")):
            if self._park(bare, repo, wt):
                return
            try:
                # Twice, so a worktree left locked by a killed "add" goes too.
                bare.git.worktree("remove", "--force", "--force", str(wt.path))
            except git.GitCommandError:
                shutil.rmtree(wt.path, ignore_errors=True)
                bare.git.worktree("prune")


class Worktree:
    """A task's working copy at its base commit."""

    def __init__(self, path: Path, base_commit: str):
        self.path = path.resolve()
        self.base = base_commit
        self.repo = git.Repo(self.path)

    @phases.timed("git worktree")
    def reset(self) -> None:
        self.repo.git.reset("--hard", self.base)
        self.repo.git.clean("-ffdx")

    def resolve(self, rel: str) -> Path:
        """The absolute path of a repository-relative path, refusing anything outside the repo."""
        if not rel or rel.startswith("/") or "\x00" in rel:
            raise PatchError(f"path {rel!r} is not repository-relative")
        target = (self.path / rel).resolve()
        if not target.is_relative_to(self.path):
            raise PatchError(f"path {rel!r} is outside the repository")
        if target == self.path / ".git" or target.is_relative_to(self.path / ".git"):
            raise PatchError(f"path {rel!r} is inside .git")
        return target

    def read(self, rel: str, limit: int = 1_000_000) -> str | None:
        """A text file's content, or None when it is missing, binary, huge or a link outside."""
        try:
            path = self.resolve(rel)
        except PatchError:
            return None
        if not path.is_file() or path.stat().st_size > limit:
            return None
        data = path.read_bytes()
        if b"\x00" in data[:8192]:
            return None
        return data.decode("utf-8", errors="replace")

    def show(self, commit: str, rel: str, timeout_s: float = 60.0) -> str | None:
        """``rel``'s text at ``commit`` (git's object, not the working tree); None when it is not
        there or git did not answer in time."""
        try:
            proc = subprocess.run(["git", "-C", str(self.path), "show", f"{commit}:{rel}"], capture_output=True,
                                  env=_git_env(), timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None
        return proc.stdout.decode(errors="replace") if proc.returncode == 0 else None

    def exists(self, rel: str) -> bool:
        try:
            return self.resolve(rel).is_file()
        except PatchError:
            return False

    def tracked_files(self) -> list[str]:
        return [p for p in self.repo.git.ls_files("-z").split("\x00") if p]

    @phases.timed("git worktree")
    def diff(self) -> str:
        """The working copy's change against the base commit, new files included."""
        self.repo.git.add("-A")
        try:
            out = self.repo.git.diff("--cached", self.base, "--no-color", "--no-ext-diff", "--no-renames")
        finally:
            self.repo.git.reset("-q")
        return out + "\n" if out and not out.endswith("\n") else out

    @phases.timed("git worktree")
    def apply(self, patch: str, check_only: bool = False) -> None:
        if not patch.strip():
            raise PatchError("empty patch")
        _check_patch_paths(self, patch)
        args = ["git", "apply", "--whitespace=nowarn"] + (["--check"] if check_only else []) + ["-"]
        proc = subprocess.run(args, cwd=self.path, input=patch.encode(), capture_output=True, env=_git_env())
        if proc.returncode != 0:
            msg = proc.stderr.decode(errors="replace").strip().splitlines()
            raise PatchError(f"patch does not apply: {msg[0] if msg else 'git apply failed'}")


def _remove_index_lock(path: Path) -> None:
    gitfile = path / ".git"
    try:
        text = gitfile.read_text() if gitfile.is_file() else ""
    except OSError:
        return
    gitdir = Path(text.split("gitdir:", 1)[1].strip()) if "gitdir:" in text else gitfile
    (gitdir / "index.lock").unlink(missing_ok=True)


def _check_patch_paths(wt: Worktree, patch: str) -> None:
    from unidiff.errors import UnidiffParseError
    from unidiff.patch import PatchSet

    try:
        files = PatchSet(patch)
    except UnidiffParseError as exc:
        raise PatchError(f"not a unified diff: {exc}") from None
    if not files:
        raise PatchError("not a unified diff: no file headers")
    for pf in files:
        for name in (pf.source_file, pf.target_file):
            if name in (None, "/dev/null"):
                continue
            rel = name[2:] if name.startswith(("a/", "b/")) else name
            wt.resolve(rel)


def content_key(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]
