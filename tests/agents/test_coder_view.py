"""What the Coder is shown: raw code it can quote, within its token budget."""

from __future__ import annotations

import subprocess

import pytest

from agents.coder import coder_files
from fixgraph.localize import RepoIndex, count_tokens
from fixgraph.repo.workspace import RepoCache

pytestmark = pytest.mark.slow


def _repo(tmp_path):
    repo = tmp_path / "mirrors" / "fx+big"
    (repo / "pkg").mkdir(parents=True)
    funcs = "".join(f"def f{i}(x):\n    \"\"\"Doc {i}.\"\"\"\n    y = x + {i}\n    return y * 2\n\n\n" for i in range(600))
    (repo / "pkg" / "big.py").write_text(funcs)
    (repo / "pkg" / "other.py").write_text(funcs.replace("def f", "def g"))
    (repo / "pkg" / "small.py").write_text("def tiny():\n    return 1\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    wt = RepoCache(tmp_path / "cache", tmp_path / "mirrors").worktree("fx/big", head, "cv")
    return wt, RepoIndex.build(wt, tmp_path / "cache")


def test_large_files_become_windows_or_outlines_within_budget(tmp_path):
    wt, index = _repo(tmp_path)
    line = 1 + 6 * 300  # def f300
    suspects = [{"file": "pkg/big.py", "symbol": "f300", "start_line": line, "end_line": line + 3}]
    files = coder_files(wt, index, ["pkg/other.py", "pkg/small.py", "pkg/big.py"], suspects, 4000, 60)
    by_path = {f["path"]: f for f in files}
    assert [f["path"] for f in files][0] == "pkg/big.py"  # suspect files first
    big = by_path["pkg/big.py"]
    assert big["kind"] == "code" and "def f300(x):\n    \"\"\"Doc 300.\"\"\"" in big["content"]
    assert "def f0(x)" not in big["content"] and "lines omitted" in big["content"]
    assert by_path["pkg/small.py"] == {"path": "pkg/small.py", "kind": "code",
                                       "content": "def tiny():\n    return 1\n"}
    assert by_path["pkg/other.py"]["kind"] == "outline"
    assert sum(count_tokens(f["content"]) for f in files) <= 4000


def test_small_files_are_shown_whole(tmp_path):
    wt, index = _repo(tmp_path)
    files = coder_files(wt, index, ["pkg/small.py"], [], 4000, 60)
    assert files == [{"path": "pkg/small.py", "kind": "code", "content": "def tiny():\n    return 1\n"}]
