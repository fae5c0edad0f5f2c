"""RepoIndex on a real fixture repository: ranking, map, views, options, bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fixgraph.localize import RepoIndex, count_tokens, parse_problem, views_within
from tests.helpers.localize_repo import SECRET, make_repo


@pytest.fixture()
def wt(tmp_path: Path):
    return make_repo(tmp_path)


@pytest.fixture()
def index(wt, tmp_path: Path) -> RepoIndex:
    return RepoIndex.build(wt, tmp_path / "cache")


def paths(ranked) -> list[str]:
    return [c.path for c in ranked]


def test_rank_puts_the_defining_file_first(index: RepoIndex) -> None:
    ranked = index.rank("Calling `merge_settings` with a None request setting crashes.")
    assert ranked[0].path == "pkg/sessions.py"
    assert "merge_settings" in ranked[0].symbols
    # Deterministic: the same query gives the same ranking, scores included.
    assert index.rank("Calling `merge_settings` with a None request setting crashes.") == ranked


def test_rank_follows_traceback_frames_with_foreign_prefixes(index: RepoIndex) -> None:
    problem = ('Traceback (most recent call last):\n'
               '  File "/usr/lib/python3/site-packages/pkg/models.py", line 7, in build\n'
               "TypeError: boom\n")
    assert paths(index.rank(problem))[0] == "pkg/models.py"


def test_rank_uses_dotted_names(index: RepoIndex) -> None:
    assert paths(index.rank("pkg.util.to_key_val_list drops items"))[0] == "pkg/util.py"


def test_tests_rank_below_the_code_they_test(index: RepoIndex) -> None:
    ranked = paths(index.rank("Session() in pkg/sessions.py loses headers; see test_session"))
    assert ranked.index("pkg/sessions.py") < ranked.index("tests/test_sessions.py")


def test_issue_with_no_identifiers_gives_a_ranking_without_error(index: RepoIndex) -> None:
    for problem in ["", "   ", "It does not work at all, please help!!", "??? ... !!!", "é à ü 日本語"]:
        ranked = index.rank(problem)
        assert all(index.exists(c.path) for c in ranked)
        assert index.repo_map(ranked, max_tokens=800)


def test_paths_in_the_issue_that_do_not_exist_are_ignored(index: RepoIndex) -> None:
    ranked = index.rank("The crash is in pkg/nothere.py and lib/gone/sessions_old.py, see merge_settings")
    assert "pkg/nothere.py" not in paths(ranked)
    assert paths(ranked)[0] == "pkg/sessions.py"
    assert not index.exists("pkg/nothere.py")
    assert index.nearest("pkg/session.py")[0] == "pkg/sessions.py"
    assert index.nearest("src/pkg/sessions.py")[0] == "pkg/sessions.py"
    assert index.nearest("") == [] or all(index.exists(p) for p in index.nearest(""))


def test_binary_huge_and_symlinked_files_are_listed_but_never_read(index: RepoIndex) -> None:
    ranked = paths(index.rank(f"merge_settings compute_total {SECRET} PNG"))
    for path in ("data/logo.bin", "data/huge.txt", "leak.txt", "pkg/alias.py"):
        assert path in index.paths
        assert path not in ranked
        assert not index.infos[path].readable
    assert "not shown" in index.view("data/logo.bin", [], 1000)
    assert "not shown" in index.view("data/huge.txt", [], 1000)
    leak = index.view("leak.txt", [], 1000)
    assert "symlink" in leak and SECRET not in leak
    assert SECRET not in index.repo_map(index.rank(SECRET))
    assert all(o.path not in ("leak.txt", "pkg/alias.py") for o in index.options(["pkg/sessions.py"], ["merge_settings"]))


def test_non_utf8_source_is_indexed_and_shown_with_replacements(index: RepoIndex) -> None:
    assert "pkg/latin.py" in paths(index.rank("parse_caf_menu is wrong"))
    view = index.view("pkg/latin.py", [], 1000)
    assert "def parse_caf" in view and "\ufffd" in view


def test_small_file_is_shown_whole_with_line_numbers(index: RepoIndex) -> None:
    view = index.view("pkg/models.py", [], 2000)
    assert "    8|         return merge_settings(headers, {})" in view
    assert "skeleton" not in view


def test_large_file_is_a_skeleton_with_bodies_only_for_focus(index: RepoIndex) -> None:
    text = index.read_text("pkg/big.py")
    assert text is not None and len(text.splitlines()) > 400
    view = index.view("pkg/big.py", ["Ledger.compute_total"], 2500)
    assert "skeleton" in view
    assert count_tokens(view) <= 2500
    # The focus body in full, with its line numbers.
    assert "result += entry  # BUG: None is not skipped" in view
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "BUG: None" in ln)
    assert f"{line:>5}|" in view
    # Other functions: signature and line range, not their bodies.
    assert "def helper_3(value):" in view and "filler line" not in view


def test_skeleton_shrinks_to_any_budget(index: RepoIndex) -> None:
    for budget in (300, 600, 1200):
        view = index.view("pkg/big.py", ["compute_total", "helper_1", "helper_2"], budget)
        assert count_tokens(view) <= budget
        assert view.startswith("# pkg/big.py")


def test_views_within_share_one_budget(index: RepoIndex) -> None:
    files = ["pkg/big.py", "pkg/sessions.py", "pkg/models.py", "pkg/util.py"]
    views = views_within(index, files, ["compute_total"], 2000)
    assert [p for p, _ in views] == files
    assert sum(count_tokens(v) for _, v in views) <= 2000
    # The small files fit whole; the big one gets what they leave.
    assert "skeleton" not in dict(views)["pkg/models.py"]


@pytest.mark.slow
def test_repo_map_fits_and_folds(tmp_path: Path) -> None:
    extra = {f"pkg/sub{i}/mod{j}.py": f"def func_{i}_{j}():\n    return {j}\n" for i in range(20) for j in range(15)}
    wt = make_repo(tmp_path, extra=extra, awkward=False)
    index = RepoIndex.build(wt, tmp_path / "cache")
    ranked = index.rank("func_3_4 returns the wrong value", k=10)
    assert ranked[0].path == "pkg/sub3/mod4.py"
    text = index.repo_map(ranked, max_tokens=600)
    assert count_tokens(text) <= 600
    assert "pkg/sub3/mod4.py" in text
    assert "sub7/ [15]" in text  # an unrelated folder, folded with its count
    roomy = index.repo_map(ranked, max_tokens=6000)
    assert "func_3_4()" in roomy


def test_options_offer_imports_tests_config_and_callers(index: RepoIndex) -> None:
    opts = {o.path: o.why for o in index.options(["pkg/sessions.py"], ["merge_settings"])}
    assert opts["pkg/util.py"] == "imported by pkg/sessions.py"
    assert opts["tests/test_sessions.py"] == "tests of pkg/sessions.py"
    assert opts["pkg/models.py"] == "calls merge_settings"
    assert opts["setup.cfg"] == "config"
    assert "pkg/sessions.py" not in opts


def test_index_is_cached_per_commit(wt, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    first = RepoIndex.build(wt, cache)
    from fixgraph import localize

    def no_reads(self, entries):  # noqa: ANN001
        raise AssertionError("the second build read files instead of the cache")

    monkeypatch.setattr(localize._WorktreeSource, "read_many", no_reads)
    monkeypatch.setattr(localize._WorktreeSource, "entries", no_reads)
    second = RepoIndex.build(wt, cache)
    assert second.paths == first.paths
    assert second.rank("merge_settings") == first.rank("merge_settings")


@pytest.mark.slow
def test_bare_repository_gives_the_same_index(wt, tmp_path: Path) -> None:
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(wt.path), str(bare)], check=True)
    from_git = RepoIndex.build_from_git(bare, wt.base, tmp_path / "cache2")
    from_wt = RepoIndex.build(wt, tmp_path / "cache3")
    problem = "Ledger.compute_total does not skip None; merge_settings too"
    assert from_git.rank(problem) == from_wt.rank(problem)
    assert from_git.view("pkg/big.py", ["compute_total"], 1500) == from_wt.view("pkg/big.py", ["compute_total"], 1500)
    assert not from_git.infos["leak.txt"].readable


def test_parse_problem_reads_code_shaped_names() -> None:
    q = parse_problem("Using `Dataset.to_stacked_array` from xarray.core.dataset fails:\n"
                      '  File "x/y/sessions.py", line 3, in merge_settings\n')
    assert "to_stacked_array" in q.idents and "Dataset" in q.idents
    assert "xarray.core.dataset" in q.dotted
    assert q.frames == [("x/y/sessions.py", "merge_settings")]


@pytest.mark.slow
def test_localization_bench_on_a_fixture_mirror(wt, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from eval.localization_bench import main

    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(wt.path), str(mirrors / "acme+pkg" / "repo")], check=True)
    patch = "diff --git a/pkg/sessions.py b/pkg/sessions.py\n--- a/pkg/sessions.py\n+++ b/pkg/sessions.py\n"
    rows = [
        {"instance_id": "acme__pkg-1", "repo": "acme/pkg", "base_commit": wt.base, "patch": patch,
         "problem_statement": "merge_settings drops the session's headers when the request has none"},
        {"instance_id": "other__x-1", "repo": "other/x", "base_commit": wt.base, "patch": patch,
         "problem_statement": "not mirrored, skipped"},
    ]
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["--dataset", str(dataset), "--repos", str(mirrors), "--cache-dir", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == ("overall recall@8: 1.000 (1 instances, one repository: not cross-validated); "
                       "recall@1 1.000; before 1.000/1.000; today 1.000/1.000; bm25 1.000/1.000")
    assert any(line.startswith("acme/pkg") for line in out)
    # Recall only: the same recall figures, without the reference and the timed columns.
    assert main(["--dataset", str(dataset), "--repos", str(mirrors), "--cache-dir", str(tmp_path / "c"),
                 "--no-bm25", "--no-timing"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "overall recall@8: 1.000 (1 instances, one repository: not cross-validated); recall@1 1.000; before 1.000/1.000; "
        "today 1.000/1.000")


@pytest.mark.slow
def test_localization_bench_resumes_from_its_rows(wt, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from eval import localization_bench
    from eval.localization_bench import main

    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(wt.path), str(mirrors / "acme+pkg" / "repo")], check=True)
    patch = "diff --git a/pkg/sessions.py b/pkg/sessions.py\n--- a/pkg/sessions.py\n+++ b/pkg/sessions.py\n"
    rows = [{"instance_id": f"acme__pkg-{i}", "repo": "acme/pkg", "base_commit": wt.base, "patch": patch,
             "problem_statement": "merge_settings drops the session's headers when the request has none"}
            for i in range(3)]
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "rows.jsonl"
    common = ["--dataset", str(dataset), "--repos", str(mirrors), "--cache-dir", str(tmp_path / "c"), "--no-bm25"]
    assert main([*common, "--limit", "2", "-o", str(out)]) == 0
    first = capsys.readouterr().out.strip().splitlines()[-1]
    assert first.startswith("overall recall@8: 1.000 (2 instances")
    written = out.read_text().splitlines()
    assert [json.loads(line)["instance_id"] for line in written] == ["acme__pkg-0", "acme__pkg-1"]
    # A kill in the middle of a write leaves half a line: that row is redone, the others are kept.
    out.write_text(written[0] + "\n" + written[1][:40])
    measured: list[str] = []
    real = localization_bench.measure

    def counting(inst, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        measured.append(inst.instance_id)
        return real(inst, *args, **kwargs)

    monkeypatch.setattr(localization_bench, "measure", counting)
    assert main([*common, "-o", str(out), "--resume"]) == 0
    assert measured == ["acme__pkg-1", "acme__pkg-2"]
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == ("overall recall@8: 1.000 (3 instances, one repository: not cross-validated); recall@1 1.000; "
                    "before 1.000/1.000; today 1.000/1.000")
    # Every row is in the file, the signals kept for the weight grid included.
    kept = localization_bench.load_rows(out)
    assert sorted(kept) == ["acme__pkg-0", "acme__pkg-1", "acme__pkg-2"]
    assert kept["acme__pkg-2"].parts.today["pkg/sessions.py"] > 0
    assert main([*common, "--resume"]) == 2
    assert "--resume needs -o/--output" in capsys.readouterr().err
    # --report-only reports the rows there and measures none; --stride 2 keeps the 1st and 3rd.
    # The file is left as it is: a run still going keeps appending to it, not to a replaced one.
    measured.clear()
    inode = out.stat().st_ino
    assert main([*common, "-o", str(out), "--resume", "--report-only", "--stride", "2"]) == 0
    assert measured == [] and "(2 instances" in capsys.readouterr().out.strip().splitlines()[-1]
    assert out.stat().st_ino == inode
    assert main([*common, "--report-only"]) == 2
    assert "--report-only needs --resume" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--dataset", "nope.jsonl", "--repos", "."], "dataset not found"),
    (["--dataset", "{dataset}", "--repos", "nope-dir"], "--repos: not a directory: nope-dir"),
    (["--dataset", "{dataset}", "--repos", "{empty}"], "no instance of the dataset has a mirror"),
    (["--dataset", "{dataset}", "--repos", ".", "--limit", "-1"], "--limit must not be negative"),
    (["--dataset", "{dataset}", "--repos", ".", "--stride", "0"], "--stride must be at least 1"),
])
def test_localization_bench_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  args: list[str], message: str) -> None:
    from eval.localization_bench import main

    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"instance_id": "a-1", "repo": "a/b", "base_commit": "x", "problem_statement": "p", '
                       '"patch": "diff --git a/f.py b/f.py\\n"}\n')
    (tmp_path / "empty").mkdir()
    args = [a.format(dataset=dataset, empty=tmp_path / "empty") for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and "Traceback" not in err[0]


def test_big_class_in_focus_is_outlined_not_dumped(tmp_path: Path) -> None:
    methods = "".join(f"    def method_{i}(self):\n        x = {i}\n        return x\n\n" for i in range(40))
    source = ('class Store:\n    """Keeps things."""\n\n    __slots__ = ("name",)\n    limit = 3\n\n'
              + methods + "    def put(self, item):\n        self.items.append(item)  # the bug\n")
    wt = make_repo(tmp_path, extra={"pkg/store.py": source + "\n" * 400}, awkward=False)
    index = RepoIndex.build(wt, tmp_path / "cache")
    view = index.view("pkg/store.py", ["Store", "Store.put"], 3000)
    assert '    4|     __slots__ = ("name",)' in view  # the class's own statements
    assert "def method_7(self):" in view and "x = 7" not in view  # other methods: signatures only
    assert "self.items.append(item)  # the bug" in view  # the focused method in full


@pytest.mark.slow
def test_localize_warm_bench_splits_the_time_and_compares_with_a_revision(wt, tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from eval.localize_warm_bench import main

    mirrors = tmp_path / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(wt.path), str(mirrors / "acme+pkg" / "repo")], check=True)
    patch = "diff --git a/pkg/sessions.py b/pkg/sessions.py\n"
    dataset = tmp_path / "lite.jsonl"
    dataset.write_text(json.dumps({"instance_id": "acme__pkg-1", "repo": "acme/pkg", "base_commit": wt.base,
                                   "patch": patch, "problem_statement": "merge_settings drops headers"}) + "\n")
    common = ["--dataset", str(dataset), "--repos", str(mirrors), "--repo", "acme/pkg", "--stride", "1",
              "--rounds", "1", "--cache-dir", str(tmp_path / "c")]
    assert main([*common, "--reference", "HEAD"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("warm median on acme/pkg: this code ") and "; HEAD " in out[-1]
    assert any(line.startswith("this code   load ") for line in out)
    assert any(line.startswith("HEAD        total ") for line in out)
    assert main([*common[:4], "--repo", "other/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no instance of other/x" in err[0]
