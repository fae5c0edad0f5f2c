"""The history signal of localization, on a fixture repository with a crafted history."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import pytest

from fixgraph.localize import LocalizeError, RepoIndex, combine, terms_of
from fixgraph.localize.history import HistoryIndex, parse_log
from tests.helpers.history_repo import ISSUE, HistoryRepo, make_history_repo
from tests.helpers.localize_repo import make_repo


@pytest.fixture(scope="module")
def hist_repo(tmp_path_factory: pytest.TempPathFactory) -> HistoryRepo:
    return make_history_repo(tmp_path_factory.mktemp("hist"))


def git_dir(repo: HistoryRepo) -> Path:
    return repo.path / ".git"


# These tests are about the history signal, so they rank with it weighted as it was shipped before
# the title signal (cross-validated, the title now takes its place: W_HISTORY is 0, README).
W_SIGNAL = 0.2


def top(index: RepoIndex, problem: str = ISSUE, k: int = 8) -> list[str]:
    return [c.path for c in combine(index.rank_parts(problem), W_SIGNAL, 0.0, 0.0, 0.0)[:k]]


@pytest.mark.slow
def test_a_past_fix_whose_message_matches_the_issue_puts_its_file_first(hist_repo: HistoryRepo,
                                                                       tmp_path: Path) -> None:
    without = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.base, tmp_path / "c", history=False)
    # The files alone point elsewhere (statement.py talks about totals and accounts)...
    assert top(without)[0] != "pkg/accounting.py"
    index = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.base, tmp_path / "c")
    assert index.history is not None and "commits before the base" in index.history_note
    # ...the past fix of refunds counted twice points at accounting.py.
    assert top(index)[0] == "pkg/accounting.py"
    parts = index.rank_parts(ISSUE)
    assert max(parts.history, key=lambda p: parts.history[p]) == "pkg/accounting.py"
    assert index.rank(ISSUE) == index.rank(ISSUE)  # deterministic


@pytest.mark.slow
def test_a_commit_after_the_base_is_never_used(hist_repo: HistoryRepo, tmp_path: Path) -> None:
    index = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.base, tmp_path / "c")
    view = index.history
    assert view is not None
    hist = view.index
    later = hist.sha_idx[hist_repo.later]
    # The later commit is in the index (built from the branch tip), but not in the view at the base.
    assert not view.mask[later] and view.mask[hist.sha_idx[hist_repo.base]]
    scores = view.commit_scores(Counter(terms_of(ISSUE)))
    assert later not in scores and scores
    assert "pkg/util.py" not in index.rank_parts(ISSUE).history
    # The same query at the later commit does use it: the test above can see a leak.
    after = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.later, tmp_path / "c")
    assert after.history is not None
    assert later in after.history.commit_scores(Counter(terms_of(ISSUE)))
    assert "pkg/util.py" in after.rank_parts(ISSUE).history


def test_a_huge_refactoring_commit_does_not_dominate(hist_repo: HistoryRepo, tmp_path: Path) -> None:
    index = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.base, tmp_path / "c")
    view = index.history
    assert view is not None
    hist = view.index
    scores = view.commit_scores(Counter(terms_of(ISSUE)))
    big = max(scores, key=lambda i: scores[i])
    # The reformatting's message matches the issue best of all commits...
    assert hist.nfiles[big] == 40 and big != hist.sha_idx[hist_repo.fix]
    # ...yet, weighted by focus, no file it touched comes near the focused fix.
    history = index.rank_parts(ISSUE).history
    best_gen = max(v for p, v in history.items() if p.startswith("pkg/gen/"))
    assert history["pkg/accounting.py"] > 3 * best_gen
    ranked = top(index, k=50)
    assert ranked[:2] == ["pkg/accounting.py", "pkg/statement.py"]
    assert all(ranked.index(p) > 1 for p in ranked if p.startswith("pkg/gen/"))


def test_merge_commits_carry_their_pull_request_files(hist_repo: HistoryRepo, tmp_path: Path) -> None:
    hist = HistoryIndex.open(git_dir(hist_repo), tmp_path / "c")
    i = hist.sha_idx[hist_repo.merge]
    files = [hist.paths[f] for f in hist.file_ids[hist.file_ptr[i]:hist.file_ptr[i + 1]]]
    assert files == ["pkg/ledger_report.py"]
    index = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.base, tmp_path / "c")
    assert "pkg/ledger_report.py" in index.rank_parts("the ledger report prints no name").history


def test_non_utf8_messages_are_read_with_replacements(hist_repo: HistoryRepo, tmp_path: Path) -> None:
    raw = subprocess.run(["git", "--git-dir", str(git_dir(hist_repo)), "log", "-1", "--format=%B",
                          "--grep=menu"], capture_output=True, check=True).stdout
    assert b"\xe9" in raw and b"\xc3\xa9" not in raw  # stored as latin-1, no encoding header
    index = RepoIndex.build_from_git(git_dir(hist_repo), hist_repo.base, tmp_path / "c")
    assert index.history is not None
    messages = [m for m in index.history.messages(list(range(len(index.history.index.shas)))) if "menu" in m]
    assert messages == ["Caf\ufffd menu: keep accents in keys"]
    assert "pkg/util.py" in index.rank_parts("accents in keys of the menu").history


def test_parse_log_follows_renames() -> None:
    raw = (b"\x00\x01" + b"a" * 40 + b"\x00" + b"p" * 40 + b"\x001600000000\x00Move util\n\x00\x00\n"
           b"R097\x00pkg/old.py\x00pkg/new.py\x00M\x00pkg/x.py\x00")
    (commit,) = parse_log(raw)
    assert commit.files == ["pkg/new.py", "pkg/x.py"] and commit.renames == [("pkg/old.py", "pkg/new.py")]


def test_files_touched_under_an_old_name_count_for_the_new_one(tmp_path: Path) -> None:
    wt = make_repo(tmp_path, awkward=False)
    repo = wt.path
    env_date = {"GIT_AUTHOR_DATE": "1600000000 +0000", "GIT_COMMITTER_DATE": "1600000000 +0000"}

    def git(*args: str) -> str:
        import os
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                              env={**os.environ, **env_date}).stdout.strip()

    (repo / "pkg" / "util.py").write_text("def to_key_val_list(value):\n    return list(value or ())\n")
    git("commit", "-q", "-am", "Fix quaternion rotation drops the scalar part")
    git("mv", "pkg/util.py", "pkg/helpers.py")
    git("commit", "-q", "-m", "Move util to helpers")
    index = RepoIndex.build_from_git(repo / ".git", git("rev-parse", "HEAD"), tmp_path / "c")
    assert index.history is not None
    history = index.rank_parts("quaternion rotation loses its scalar part").history
    assert "pkg/helpers.py" in history and "pkg/util.py" not in history


def test_shallow_mirror_ranks_as_today_and_says_so(hist_repo: HistoryRepo, tmp_path: Path) -> None:
    shallow = tmp_path / "shallow.git"
    subprocess.run(["git", "clone", "-q", "--bare", "--depth", "1", "--branch", "main",
                    f"file://{hist_repo.path}", str(shallow)], check=True, capture_output=True)
    head = subprocess.run(["git", "--git-dir", str(shallow), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    index = RepoIndex.build_from_git(shallow, head, tmp_path / "c")
    assert index.history is None and "absent (shallow mirror)" in index.history_note
    plain = RepoIndex.build_from_git(shallow, head, tmp_path / "c", history=False)
    assert index.rank(ISSUE) == plain.rank(ISSUE)


def test_no_history_before_the_base_ranks_as_today(tmp_path: Path) -> None:
    wt = make_repo(tmp_path, awkward=False)  # one commit
    index = RepoIndex.build(wt, tmp_path / "c")
    assert index.history is None and "absent (no commits before the base)" in index.history_note
    plain = RepoIndex.build(wt, tmp_path / "c", history=False)
    assert index.rank("merge_settings drops headers") == plain.rank("merge_settings drops headers")


def test_a_base_commit_missing_from_the_mirror_is_one_clear_error(hist_repo: HistoryRepo, tmp_path: Path) -> None:
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(LocalizeError) as err:
        RepoIndex.build_from_git(git_dir(hist_repo), missing, tmp_path / "c")
    assert str(err.value) == f"base commit {missing} is not in {git_dir(hist_repo)}"


def test_the_history_index_is_built_once_and_cached(hist_repo: HistoryRepo, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from fixgraph.localize import history

    first = HistoryIndex.open(git_dir(hist_repo), tmp_path / "c")
    history._OPEN.clear()  # a new process: the in-memory copy is gone, the SQLite file is not

    def no_log(*args, **kwargs):  # noqa: ANN002, ANN003
        raise AssertionError("the history was read again instead of the cache")

    monkeypatch.setattr(history, "_log", no_log)
    second = HistoryIndex.open(git_dir(hist_repo), tmp_path / "c")
    assert second.shas == first.shas and second.size_bytes > 0


def test_the_view_of_a_base_is_kept_and_never_lent_to_another_base(hist_repo: HistoryRepo,
                                                                      tmp_path: Path) -> None:
    index = HistoryIndex.open(git_dir(hist_repo), tmp_path / "c")
    view = index.at(hist_repo.base)
    # The Planner and each Explorer step ask again: the same view, its rename maps built once.
    assert view is not None and index.at(hist_repo.base) is view
    later = index.at(hist_repo.later)
    assert later is not None and later is not view
    assert later.mask[index.sha_idx[hist_repo.later]] and not view.mask[index.sha_idx[hist_repo.later]]
    assert index.at(hist_repo.base) is view


def test_a_base_beyond_the_indexed_tips_is_added(tmp_path: Path) -> None:
    wt = make_repo(tmp_path, awkward=False)
    repo = wt.path
    (repo / "pkg" / "util.py").write_text("def to_key_val_list(value):\n    return list(value or ())\n")
    subprocess.run(["git", "commit", "-q", "-am", "Fix quaternion rotation"], cwd=repo, check=True)
    first = RepoIndex.build_from_git(repo / ".git", wt.base, tmp_path / "c")
    assert first.history is None  # one commit before the first base
    subprocess.run(["git", "commit", "-q", "--allow-empty", "-m", "detached work"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout.strip()
    subprocess.run(["git", "reset", "-q", "--hard", "HEAD~1"], cwd=repo, check=True)  # no ref reaches it
    later = RepoIndex.build_from_git(repo / ".git", head, tmp_path / "c")
    assert later.history is not None and later.history.n_commits == 3
    assert "pkg/util.py" in later.rank_parts("quaternion rotation").history


def _bench_rows(repo: str, base: str, gold: str, problem: str, n: int) -> list[dict]:
    patch = f"diff --git a/{gold} b/{gold}\n--- a/{gold}\n+++ b/{gold}\n"
    return [{"instance_id": f"{repo.replace('/', '__')}-{i}", "repo": repo, "base_commit": base, "patch": patch,
             "problem_statement": problem} for i in range(n)]


@pytest.mark.slow
def test_localization_bench_cross_validates_across_repositories(hist_repo: HistoryRepo, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from eval.localization_bench import main

    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(hist_repo.path), str(mirrors / "acme+hist" / "repo")], check=True)
    wt = make_repo(tmp_path / "plain", awkward=False)
    subprocess.run(["git", "clone", "-q", "--bare", str(wt.path), str(mirrors / "acme+pkg" / "repo")], check=True)
    rows = (_bench_rows("acme/hist", hist_repo.base, "pkg/accounting.py", ISSUE, 2)
            + _bench_rows("acme/pkg", wt.base, "pkg/sessions.py", "merge_settings drops the session's headers", 1))
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--dataset", str(dataset), "--repos", str(mirrors), "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("overall recall@8: ") and "cross-validated by repository" in out[-1]
    assert "; today " in out[-1] and "; bm25 " in out[-1]
    hist_line = next(line for line in out if line.startswith("acme/hist "))
    assert "history: " in next(line for line in out if line.startswith("acme/hist ") and "commits" in line)
    # The history column sees accounting.py first (hist@1 is the second figure after n).
    assert hist_line.split("|")[2].split()[0] == "1.00"
    assert any(line.startswith("acme/pkg") and "absent (no commits before the base)" in line for line in out)


def test_localization_bench_base_missing_from_the_mirror_is_one_line(hist_repo: HistoryRepo, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from eval.localization_bench import main

    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(hist_repo.path), str(mirrors / "acme+hist" / "repo")], check=True)
    dataset = tmp_path / "lite.jsonl"
    rows = _bench_rows("acme/hist", "0123456789abcdef0123456789abcdef01234567", "pkg/accounting.py", ISSUE, 1)
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--dataset", str(dataset), "--repos", str(mirrors), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "base commit 0123456789abcdef0123456789abcdef01234567 is not in" in err[0]


def test_ancestry_is_cached_per_base_commit(hist_repo: HistoryRepo, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from fixgraph.localize import history

    hist = HistoryIndex.open(git_dir(hist_repo), tmp_path / "c")
    first = hist.at(hist_repo.base)
    assert first is not None
    real_git = history._git

    def no_rev_list(git_dir: Path, *args: str, **kwargs):  # noqa: ANN003, ANN202
        assert args[0] != "rev-list", "the ancestry was computed again instead of read from the cache"
        return real_git(git_dir, *args, **kwargs)

    monkeypatch.setattr(history, "_git", no_rev_list)
    again = hist.at(hist_repo.base)
    assert again is not None and (again.mask == first.mask).all()
    assert not again.mask[hist.sha_idx[hist_repo.later]]


def test_a_cached_base_costs_one_git_process(hist_repo: HistoryRepo, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from fixgraph.localize import history

    hist = HistoryIndex.open(git_dir(hist_repo), tmp_path / "c")
    assert hist.at(hist_repo.base) is not None
    started: list[str] = []
    real_run = history.subprocess.run

    def counting(cmd, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        started.append(cmd[3])
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(history.subprocess, "run", counting)
    assert history.history_status(git_dir(hist_repo), hist_repo.base, tmp_path / "c")[0] is not None
    assert started == ["rev-parse"]  # the base resolved; shallowness read from the git dir, not asked
