"""pyright's language server kept between checks gives the command line's diagnostics, real pyright on
real files: across a change to an imported file, a file added, the repository's own pyright config,
and a server that dies, hangs or answers garbage (the command line then runs, and the notes say so)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from eval.fixtures.critic_repo import edit, make_repo
from fixgraph.config import CriticSettings
from scoring.static import pyright_server
from scoring.static.differential import (
    SIDE_PREFIX,
    Diag,
    analyze_patch,
    pyright_command,
    pyright_config,
    run_pyright,
)

SETTINGS = CriticSettings()

HELPERS = '''\
def pair(x):
    return (x, x)


def get(mapping, key):
    return mapping.get(key)
'''

APP = '''\
from . import helpers
from .helpers import get, pair
import pkg.helpers


def use(m):
    a, b = pair(1)
    helpers.get(m, "k")
    pkg.helpers.get(m)
    value = get({}, "k")
    return value.upper() + a + b + missing_name


def later():
    from .extra import thing
    return thing(1)
'''


@pytest.fixture(autouse=True)
def _no_servers_of_other_tests():
    # The servers are the process's: a pipeline test earlier in this worker leaves its own running,
    # and the counts below are of this test's.
    pyright_server.shutdown()
    yield
    pyright_server.shutdown()


def _repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "helpers.py").write_text(HELPERS)
    (root / "pkg" / "app.py").write_text(APP)
    return root


def _both(root: Path, cache: Path, texts: dict[str, str]) -> tuple[dict[Path, list[Diag]], dict[Path, list[Diag]]]:
    """The command line's and the server's diagnostics of copies written beside the real files, as
    the static phase writes them."""
    cmd = pyright_command(SETTINGS)
    files: dict[Path, str] = {}
    for rel, text in texts.items():
        path = root / rel
        copy = path.with_name(f"{SIDE_PREFIX}after_{path.name}")
        copy.write_text(text)
        files[copy] = text
    try:
        cli = run_pyright(cmd, root, list(files), cache, 120, pyright_config(SETTINGS))
        notes: list[str] = []
        server = run_pyright(cmd, root, list(files), cache, 120, pyright_config(SETTINGS), server=True,
                             texts=files, notes=notes)
    finally:
        for copy in files:
            copy.unlink()
    assert notes == []
    return cli, server


def _rows(found: dict[Path, list[Diag]]) -> dict[str, list[tuple[str, str, int, str]]]:
    return {p.name: sorted((d.rule, d.message, d.line, d.severity) for d in diags) for p, diags in found.items()}


@pytest.mark.slow
def test_server_gives_the_command_lines_diagnostics_across_changes(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    texts = {"pkg/app.py": APP, "pkg/helpers.py": HELPERS}
    try:
        cli, server = _both(root, cache, texts)
        first = _rows(cli)
        assert _rows(server) == first
        app = [(rule, line) for rule, _, line, _ in first[f"{SIDE_PREFIX}after_app.py"]]
        assert ("reportUndefinedVariable", 11) in app  # missing_name
        assert ("reportCallIssue", 9) in app  # pkg.helpers.get(m): a missing argument
        assert ("reportMissingImports", 15) in app  # .extra does not exist yet

        # An imported file changes between two checks, in the same mtime second as the last check:
        # pair() returns three values, get() takes one argument.
        (root / "pkg" / "helpers.py").write_text(
            HELPERS.replace("return (x, x)", "return (x, x, x)").replace("def get(mapping, key)", "def get(mapping)"))
        cli, server = _both(root, cache, {"pkg/app.py": APP})
        second = _rows(cli)
        assert _rows(server) == second
        assert second[f"{SIDE_PREFIX}after_app.py"] != first[f"{SIDE_PREFIX}after_app.py"]
        assert any("Tuple size mismatch" in msg for _, msg, _, _ in second[f"{SIDE_PREFIX}after_app.py"])

        # A module added: the import that did not resolve does now (a new server sees it). The
        # first server, idle, must not look meanwhile: pyright acts on a file event for one of its
        # library folders 5 s after it, and had it seen extra.py then, it would still resolve the
        # import once extra.py is gone (below).
        (root / "pkg" / "extra.py").write_text("def thing():\n    return 1\n")
        time.sleep(6)
        cli, server = _both(root, cache, {"pkg/app.py": APP})
        third = _rows(cli)
        assert _rows(server) == third
        rules = [rule for rule, _, _, _ in third[f"{SIDE_PREFIX}after_app.py"]]
        assert "reportMissingImports" not in rules
        assert "reportCallIssue" in rules  # thing(1): thing takes no argument

        # And removed again.
        (root / "pkg" / "extra.py").unlink()
        cli, server = _both(root, cache, {"pkg/app.py": APP})
        assert _rows(cli) == second
        assert _rows(server) == second
    finally:
        pyright_server.shutdown()


@pytest.mark.slow
def test_the_repositorys_own_pyright_config_changes_nothing(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    cache = tmp_path / "cache"
    try:
        plain_cli, plain_server = _both(root, cache, {"pkg/app.py": APP})
        assert _rows(plain_server) == _rows(plain_cli)
        pyright_server.shutdown()
        # What a hostile repository could carry to silence pyright or send it out of the worktree.
        (root / "pyrightconfig.json").write_text(
            '{"typeCheckingMode": "off", "ignore": ["**"], "exclude": ["**"], "extraPaths": ["/"], '
            '"reportUndefinedVariable": "none", "executionEnvironments": [{"root": "/"}]}')
        (root / "pyproject.toml").write_text('[tool.pyright]\ntypeCheckingMode = "off"\nignore = ["**"]\n')
        cli, server = _both(root, cache, {"pkg/app.py": APP})
        assert _rows(server) == _rows(cli) == _rows(plain_cli)
    finally:
        pyright_server.shutdown()


@pytest.mark.slow
def test_a_server_serves_the_next_worktree_with_the_same_files(tmp_path: Path) -> None:
    # Two tasks of one repository at one commit: the second worktree is read through the same
    # server, its files compared with the first's (here one imported file differs).
    first = _repo(tmp_path / "one")
    second = _repo(tmp_path / "two")
    (second / "pkg" / "helpers.py").write_text(HELPERS.replace("return (x, x)", "return (x, x, x)"))
    cache = tmp_path / "cache"
    try:
        cli_one, server_one = _both(first, cache, {"pkg/app.py": APP})
        assert len(pyright_server._servers) == 1
        used = pyright_server._servers[0][1]
        cli_two, server_two = _both(second, cache, {"pkg/app.py": APP})
        assert [srv for _, srv in pyright_server._servers] == [used]
        assert _rows(server_one) == _rows(cli_one)
        assert _rows(server_two) == _rows(cli_two) != _rows(cli_one)
        # A worktree with other files gets a server of its own; the first stays for its worktree.
        (second / "pkg" / "extra.py").write_text("def thing():\n    return 1\n")
        cli_three, server_three = _both(second, cache, {"pkg/app.py": APP})
        assert _rows(server_three) == _rows(cli_three)
        assert len(pyright_server._servers) == 2 and used in [srv for _, srv in pyright_server._servers]
        folders = [srv.workspace for _, srv in pyright_server._servers]
        assert all((f / pyright_server.LINK).is_symlink() for f in folders)
    finally:
        pyright_server.shutdown()
    # Stopped servers leave no folder in the cache, and the worktrees their links pointed at stay whole.
    assert not any(f.exists() for f in folders)
    assert (second / "pkg" / "extra.py").is_file() and (first / "pkg" / "app.py").is_file()


FAKE_SERVERS = {
    "exits": "import sys; sys.exit(3)",
    "garbage": "import sys; sys.stdout.write('Content-Length: 5\\r\\n\\r\\nnope!'); sys.stdout.flush(); sys.stdin.read()",
    "hangs": "import sys, time; sys.stdin.read(); time.sleep(60)",
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(FAKE_SERVERS))
def test_a_server_that_fails_falls_back_to_one_process_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    wt = make_repo(tmp_path / "repo")
    monkeypatch.setattr(pyright_server, "langserver_command", lambda cmd: [sys.executable, "-c", FAKE_SERVERS[kind]])
    settings = CriticSettings(static_timeout_s=20)
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    try:
        result = analyze_patch(wt, patch, settings=settings, cache_dir=tmp_path / "cache")
    finally:
        pyright_server.shutdown()
    assert result.status == "ok"
    # The finding the command line gives (tests/scoring/test_static.py), not a silent pass.
    assert [(f.get("rule"), f.get("symbol")) for f in result.new] == [("reportUndefinedVariable", "total_area")]
    assert result.notes and all(n.endswith("this check ran as one pyright process") for n in result.notes)
    assert "language server" in result.notes[0]


def test_snapshot_sees_edits_additions_and_removals_and_skips_the_copies(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    (root / "README.md").write_text("not python")
    first = pyright_server.Snapshot.take(root, SIDE_PREFIX)
    assert set(first.entries) == {"pkg", "pkg/__init__.py", "pkg/helpers.py", "pkg/app.py"}
    (root / "pkg" / f"{SIDE_PREFIX}after_app.py").write_text("x = 1\n")
    (root / "README.md").write_text("still not python")
    again = pyright_server.Snapshot.take(root, SIDE_PREFIX)
    structural, changed = again.changes_since(first)
    assert not structural
    # Written within two seconds of the first listing: sent again, whatever their stat says.
    assert set(changed) == {"pkg/__init__.py", "pkg/helpers.py", "pkg/app.py"}
    (root / "pkg" / "new.py").write_text("")
    assert pyright_server.Snapshot.take(root, SIDE_PREFIX).changes_since(again)[0]
    (root / "pkg" / "new.py").unlink()
    (root / "pkg" / "sub").mkdir()
    assert pyright_server.Snapshot.take(root, SIDE_PREFIX).changes_since(again)[0]


def test_snapshot_does_not_follow_a_link_out_of_the_worktree(tmp_path: Path) -> None:
    root = _repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.py").write_text("")
    (root / "pkg" / "linked").symlink_to(outside, target_is_directory=True)
    (root / "pkg" / "loop").symlink_to(root, target_is_directory=True)
    entries = pyright_server.Snapshot.take(root, SIDE_PREFIX).entries
    assert "pkg/linked" in entries and "pkg/loop" in entries
    assert not any(p.startswith(("pkg/linked/", "pkg/loop/")) for p in entries)
