"""A small real git repository for the Critic's tests, and helpers to put a patch in it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fixgraph.workspace import Worktree

SHAPES = '''\
import math


class Circle:
    def __init__(self, r):
        self.r = r

    def area(self):
        return math.pi * self.r ** 2

    def scaled(self, k):
        return Circle(self.r * k)


def total_area(shapes):
    return sum(s.area() for s in shapes)


def describe(c):
    return "circle of radius %s" % c.r


def unit_area():
    return Circle(1).area()


def legacy(c):
    return undefined_helper(c)


def bounds(c):
    return 0, c.r, 2 * c.r


def radius_of(c: Circle):
    return c.radius  # set at run time: a type checker does not know Circle has it
'''

UTIL = '''\
import json
import os
import subprocess


def load(path):
    with open(path) as fh:
        return json.load(fh)


def tidy(path):
    if os.path.exists(path):
        return path
    return None


def build(target):
    cmd = ["make", target]
    return subprocess.run(cmd, check=True)


def validate_name(name):
    if not name:
        raise ValueError("a name is required")
    return name


def first(items, key):
    try:
        return items[key]
    except KeyError:
        return None
'''

FILES = {
    "pkg/__init__.py": "",
    "pkg/shapes.py": SHAPES,
    "pkg/util.py": UTIL,
    "pkg/legacy.py": "def old(:\n    pass\n",
    "tests/test_shapes.py": "from pkg.shapes import Circle\n\n\ndef test_area():\n    assert Circle(1).area() > 3\n",
    # A src layout (as pytest and flask have): absolute imports resolve from src/.
    "src/srcpkg/__init__.py": "",
    "src/srcpkg/core.py": "def scale(x, k):\n    return x * k\n\n\ndef version():\n    return 3\n",
    "src/srcpkg/api.py": "from srcpkg.core import scale\n\n\ndef double(x):\n    return scale(x, 2)\n",
    "README.md": "# demo\n",
    ".github/workflows/ci.yml": "on: push\n",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path) -> Worktree:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    for rel, text in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    return Worktree(root, git(root, "rev-parse", "HEAD").strip())


def edit(wt: Worktree, rel: str, old: str, new: str) -> str:
    """Reset the worktree, replace ``old`` by ``new`` in ``rel``, and return the patch."""
    wt.reset()
    path = wt.path / rel
    text = path.read_text() if path.exists() else ""
    if old:
        assert old in text, f"{old!r} not in {rel}"
        text = text.replace(old, new, 1)
    else:
        text = new
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return wt.diff()


def snapshot(wt: Worktree) -> str:
    """Everything about the working copy that the Critic must leave as it found it."""
    return git(wt.path, "status", "--porcelain", "--untracked-files=all", "--ignored") + wt.diff()
