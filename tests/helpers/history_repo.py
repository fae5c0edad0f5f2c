"""A fixture repository with a crafted history, for the history signal of localization.

The files say nothing about refunds; only the history does: a past fix of pkg/accounting.py says
"refunds" in its message, a 40-file reformatting says it louder, and a commit made after the base
commit (the one the issue is ranked at) says it about pkg/util.py.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.localize_repo import FILES

ISSUE = "Totals are wrong when an account has refunds: refunds are counted twice in the statement."

ACCOUNTING = (
    '"""Accounting: the totals of an account, for its statement."""\n\n\n'
    "def settle(account, moves):\n"
    "    for move in moves:\n"
    "        account.apply(move)\n"
    "    return account\n\n\n"
    "def apply_credit(account, amount):\n"
    "    account.balance += amount\n"
)
# A file whose text matches the issue better than accounting.py does, so that without history the
# ranking puts it first.
STATEMENT = (
    '"""Statements: totals of an account, printed."""\n\n\n'
    "def statement_totals(account):\n"
    "    amounts = [m.amount for m in account.moves]\n"
    "    return sum(amounts)\n"
)


@dataclass
class HistoryRepo:
    path: Path
    base: str  # the commit the issue is ranked at
    later: str  # a commit after it, whose message matches the issue
    fix: str  # the past fix of pkg/accounting.py
    merge: str  # a merge commit (first-parent diff: pkg/ledger_report.py)


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str | bytes, when: int) -> str:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(repo, "add", "-A")
    msg = repo.parent / "msg.txt"
    msg.write_bytes(message if isinstance(message, bytes) else message.encode())
    date = f"{when} +0000"
    _git(repo, "commit", "-q", "-F", str(msg), env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    return _git(repo, "rev-parse", "HEAD")


def make_history_repo(root: Path) -> HistoryRepo:
    repo = root / "repo"
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    day = 86400
    t = 1_600_000_000
    _commit(repo, {**FILES, "pkg/accounting.py": ACCOUNTING, "pkg/statement.py": STATEMENT,
                   "pkg/ledger_report.py": "def report():\n    return ''\n"}, "Initial import", t)
    fix = _commit(repo, {"pkg/accounting.py": ACCOUNTING + "\n\ndef apply_refund(account, amount):\n"
                         "    account.balance += amount\n"},
                  "Fix refunds counted twice in account totals\n\nA refund was applied as a credit too.", t + day)
    # A reformatting of 40 files whose message repeats the issue's words: it must not dominate.
    gen = {f"pkg/gen/mod_{i:02d}.py": f"def value_{i}():\n    return {i}\n" for i in range(40)}
    _commit(repo, gen, "Refunds totals statement refunds: reformat everything (refunds, totals, account)", t + 2 * day)
    # Not UTF-8: a latin-1 message with no encoding header, as old repositories have. ``git
    # commit`` would convert it, so the commit object is written by hand.
    _commit(repo, {"pkg/util.py": FILES["pkg/util.py"] + "\n# caf\xe9\n"}, "placeholder", t + 3 * day)
    raw = subprocess.run(["git", "cat-file", "commit", "HEAD"], cwd=repo, check=True, capture_output=True).stdout
    header = raw.partition(b"\n\n")[0]
    latin = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"], cwd=repo, check=True,
                           capture_output=True, input=header + b"\n\nCaf\xe9 menu: keep accents in keys\n")
    _git(repo, "reset", "-q", "--soft", latin.stdout.decode().strip())
    # A merged pull request: the merge's message carries the title, its first-parent diff the files.
    _git(repo, "checkout", "-q", "-b", "topic")
    _commit(repo, {"pkg/ledger_report.py": "def report():\n    return 'ledger'\n"}, "wip", t + 4 * day)
    _git(repo, "checkout", "-q", "main")
    date = f"{t + 5 * day} +0000"
    _git(repo, "merge", "-q", "--no-ff", "topic", "-m", "Merge pull request #7 from someone/topic\n\n"
         "Ledger report prints the ledger name", env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
    merge = _git(repo, "rev-parse", "HEAD")
    base = _commit(repo, {"README.rst": FILES["README.rst"] + "\nMore words.\n"}, "Docs: a sentence", t + 6 * day)
    later = _commit(repo, {"pkg/util.py": FILES["pkg/util.py"] + "\n\ndef no_double_refunds():\n    return 1\n"},
                    ISSUE, t + 7 * day)
    return HistoryRepo(repo, base, later, fix, merge)
