"""The per-commit snapshot of the localization index: a warm load reads one file, ranks exactly as
the per-blob cache does, and a damaged snapshot costs only the speed-up."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixgraph import localize
from fixgraph.localize import RepoIndex
from tests.helpers.localize_repo import make_repo

ISSUES = ["Calling `merge_settings` with a None request setting crashes.",
          "Ledger.compute_total does not skip None entries",
          "sessions and ledgers: nothing in particular"]


def ranking(index: RepoIndex) -> list[list[tuple[str, float, list[str]]]]:
    return [[(c.path, c.score, c.symbols) for c in index.rank(issue, k=30)] for issue in ISSUES]


def test_a_warm_load_reads_the_snapshot_and_ranks_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wt = make_repo(tmp_path)
    cache = tmp_path / "cache"
    first = RepoIndex.build_from_git(wt.path / ".git", wt.base, cache, history=False)
    snaps = list((cache / "localize" / "snapshots").glob("*.npz"))
    assert len(snaps) == 1

    def no_blob_cache(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("the per-blob cache was read although the snapshot exists")

    with monkeypatch.context() as m:
        m.setattr("fixgraph.localize.index._BlobCache", no_blob_cache)  # where RepoIndex._build reads it
        warm = RepoIndex.build_from_git(wt.path / ".git", wt.base, cache, history=False)
    assert ranking(warm) == ranking(first)
    # Where no snapshot can be written (a full disk), terms are looked up file by file: same ranking.
    monkeypatch.setattr("fixgraph.localize.index._write_snapshot", lambda path, infos: None)
    plain = RepoIndex.build_from_git(wt.path / ".git", wt.base, tmp_path / "other", history=False)
    assert plain._term_index is None and ranking(plain) == ranking(first)
    assert warm.posting("merge") == plain.posting("merge") and warm.posting("merge")


def test_a_damaged_snapshot_falls_back_on_the_blob_cache(tmp_path: Path) -> None:
    wt = make_repo(tmp_path)
    cache = tmp_path / "cache"
    first = RepoIndex.build_from_git(wt.path / ".git", wt.base, cache, history=False)
    (snap,) = (cache / "localize" / "snapshots").glob("*.npz")
    snap.write_bytes(b"not a zip file at all")
    again = RepoIndex.build_from_git(wt.path / ".git", wt.base, cache, history=False)
    assert ranking(again) == ranking(first)
    assert snap.read_bytes()[:2] == b"PK"  # rewritten whole


def test_the_explorer_views_read_their_files_in_one_git_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each git process costs tens of milliseconds on a loaded machine: one per prompt, not one per file.
    wt = make_repo(tmp_path)
    index = RepoIndex.build_from_git(wt.path / ".git", wt.base, tmp_path / "cache", history=False)
    files = ["pkg/sessions.py", "pkg/models.py", "pkg/big.py"]
    alone = {p: index.view(p, [], 4000) for p in files}
    calls: list[int] = []
    real = localize._GitSource.read_many

    def counted(self, entries):  # noqa: ANN001, ANN202
        calls.append(len(entries))
        return real(self, entries)

    monkeypatch.setattr(localize._GitSource, "read_many", counted)
    views = dict(localize.views_within(index, files, [], 12000))
    assert calls == [3]
    assert views["pkg/sessions.py"] == alone["pkg/sessions.py"]  # small: shown whole either way
    # Read ahead once: a later read of the same file goes back to git, never a stale copy.
    assert index.read_text("pkg/sessions.py") is not None and calls == [3, 1]
