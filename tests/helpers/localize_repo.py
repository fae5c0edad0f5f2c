"""A small real git repository for localization tests, with the awkward files real repos have:
a large module, a binary, a file over 1 MB, a latin-1 source, symlinks inside and outside."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fixgraph.localize import RepoIndex
from fixgraph.repo.workspace import Worktree

SECRET = "OUTSIDE_SECRET_TOKEN_7f3a"


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def big_module(n: int = 60) -> str:
    parts = ['"""A large module: many small functions, one that matters."""', "", "import math", ""]
    for i in range(n):
        parts += [f"def helper_{i}(value):", f'    """Helper number {i}."""', "    total = value",
                  *[f"    total = total + {j}  # filler line {j}" for j in range(5)],
                  "    return total", ""]
    parts += ["", "class Ledger:", '    """Keeps entries."""', "",
              "    def compute_total(self, entries):",
              '        """Sum the entries, skipping None."""',
              "        result = 0",
              "        for entry in entries:",
              "            result += entry  # BUG: None is not skipped",
              "        return result", "",
              "    def describe(self):", "        return 'ledger'", ""]
    return "\n".join(parts) + "\n"


FILES: dict[str, str] = {
    "setup.cfg": "[metadata]\nname = pkg\n",
    "README.rst": "pkg\n===\n\nA package for sessions and ledgers.\n",
    "pkg/__init__.py": '"""The package."""\nfrom pkg.sessions import Session\n',
    "pkg/sessions.py": (
        '"""Sessions keep settings across requests."""\n\n'
        "from pkg import util\n\n\n"
        "def merge_settings(request_setting, session_setting):\n"
        '    """Merge a request setting into the session\'s."""\n'
        "    if session_setting is None:\n"
        "        return request_setting\n"
        "    merged = dict(session_setting)\n"
        "    merged.update(request_setting)\n"
        "    return merged\n\n\n"
        "class Session:\n"
        '    """A session."""\n\n'
        "    def __init__(self):\n"
        "        self.headers = {}\n\n"
        "    def request(self, method, url, headers=None):\n"
        "        return merge_settings(headers or {}, self.headers)\n"
    ),
    "pkg/models.py": (
        '"""Request models."""\n\n'
        "from pkg.sessions import merge_settings\n\n\n"
        "class Request:\n"
        "    def build(self, headers):\n"
        "        return merge_settings(headers, {})\n"
    ),
    "pkg/util.py": "def to_key_val_list(value):\n    return list(value)\n",
    "pkg/big.py": big_module(),
    "tests/test_sessions.py": "from pkg.sessions import Session\n\n\ndef test_session():\n    assert Session()\n",
}


def make_repo(root: Path, extra: dict[str, str] | None = None, awkward: bool = True) -> Worktree:
    """A committed repository under ``root / 'repo'``; returns a Worktree at its HEAD."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    for rel, text in {**FILES, **(extra or {})}.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if awkward:
        (repo / "data").mkdir()
        (repo / "data" / "logo.bin").write_bytes(b"\x89PNG\x00\x00merge_settings\x00" * 100)
        (repo / "data" / "huge.txt").write_text("merge_settings compute_total\n" * 60_000)  # > 1 MB
        (repo / "pkg" / "latin.py").write_bytes("# caf\xe9\ndef parse_caf\xe9_menu():\n    return 'na\xefve'\n"
                                                .encode("latin-1"))
        outside = root / "outside.txt"
        outside.write_text(f"{SECRET} merge_settings\n")
        (repo / "leak.txt").symlink_to(outside)
        (repo / "pkg" / "alias.py").symlink_to("sessions.py")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "fixture")
    return Worktree(repo, _git(repo, "rev-parse", "HEAD"))


def index_without_history(root: Path, extra: dict[str, str]) -> RepoIndex:
    """The ranking index of the fixture repository plus ``extra``, history left out: the tests of
    one signal at a time."""
    wt = make_repo(root, extra, awkward=False)
    return RepoIndex.build_from_git(wt.path / ".git", wt.base, root / "cache", history=False)
