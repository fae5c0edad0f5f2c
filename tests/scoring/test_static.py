"""The differential static phase on a real fixture repository with real pyright."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from eval.fixtures.critic_repo import edit, git, make_repo, snapshot
from fixgraph.config import CriticSettings
from fixgraph.repo.workspace import Worktree
from scoring.static.differential import StaticAnalysisUnavailable, StaticResult, analyze_patch, normalize

SETTINGS = CriticSettings()


@pytest.fixture(scope="module")
def wt(tmp_path_factory: pytest.TempPathFactory) -> Worktree:
    return make_repo(tmp_path_factory.mktemp("static") / "repo")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("static-cache")


def analyze(wt: Worktree, patch: str, cache: Path, settings: CriticSettings = SETTINGS) -> StaticResult:
    """Run the phase and check the contract that it leaves the worktree exactly as it found it."""
    before = snapshot(wt)
    result = analyze_patch(wt, patch, settings=settings, cache_dir=cache)
    assert snapshot(wt) == before
    return result


@pytest.mark.slow
def test_undefined_name_is_new_runtime_evidence(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    result = analyze(wt, patch, cache)
    assert result.status == "ok"
    assert [(f["source"], f["rule"], f["symbol"], f["line"]) for f in result.new] == [
        ("pyright", "reportUndefinedVariable", "total_area", 16)]
    assert '"shapez" is not defined' in result.new[0]["message"]


@pytest.mark.slow
def test_wrong_arity_call_is_found_in_its_method(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "return Circle(self.r * k)", "return Circle(self.r, k)")
    result = analyze(wt, patch, cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportCallIssue", "Circle.scaled")]
    assert "positional argument" in result.new[0]["message"]


@pytest.mark.slow
def test_moved_code_with_an_old_error_is_not_new(wt: Worktree, cache: Path) -> None:
    # legacy() already calls an undefined name; moving it to the top of the file changes every
    # line number but not what is wrong.
    legacy = "\n\ndef legacy(c):\n    return undefined_helper(c)\n"
    wt.reset()
    text = (wt.path / "pkg/shapes.py").read_text()
    moved = text.replace(legacy, "\n").replace("import math\n", "import math\n\n\ndef legacy(c):\n"
                                                                "    return undefined_helper(c)\n", 1)
    patch = edit(wt, "pkg/shapes.py", text, moved)
    result = analyze(wt, patch, cache)
    assert result.status == "ok"
    assert result.new == [] and result.all_new == []


@pytest.mark.slow
def test_same_message_in_another_function_is_new(wt: Worktree, cache: Path) -> None:
    # REDO's set of message strings misses this: '"undefined_helper" is not defined' exists already.
    patch = edit(wt, "pkg/shapes.py", 'return "circle of radius %s" % c.r',
                 'return "circle of radius %s" % undefined_helper(c)')
    result = analyze(wt, patch, cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportUndefinedVariable", "describe")]


@pytest.mark.slow
def test_attribute_error_pyright_already_reports_on_base_code_is_not_evidence(wt: Worktree, cache: Path) -> None:
    # pyright says Circle has no radius about code that works (set at run time, as Sphinx's
    # config does); the same complaint about the patch's new function is that misjudgement again.
    patch = edit(wt, "pkg/shapes.py", "    return c.radius  #",
                 "    return diameter_of(c) / 2\n\n\ndef diameter_of(c: Circle):\n    return 2 * c.radius  #")
    result = analyze(wt, patch, cache)
    assert result.new == []
    assert [(f["rule"], f["symbol"]) for f in result.all_new] == [("reportAttributeAccessIssue", "diameter_of")]


@pytest.mark.slow
def test_second_copy_of_an_old_error_is_new_and_points_at_the_added_line(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "    return undefined_helper(c)\n",
                 "    first = undefined_helper(c)\n    return undefined_helper(first)\n")
    result = analyze(wt, patch, cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportUndefinedVariable", "legacy")]
    assert result.new[0]["code"] in ("first = undefined_helper(c)", "return undefined_helper(first)")


@pytest.mark.slow
def test_fine_patch_has_no_new_diagnostic(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "return Circle(self.r * k)", "return Circle(r=self.r * k)")
    result = analyze(wt, patch, cache)
    assert result.status == "ok" and result.new == [] and result.all_new == []
    assert result.seconds > 0


@pytest.mark.slow
def test_unknown_attribute_of_self_is_found(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "return math.pi * self.r ** 2", "return math.pi * self.radius ** 2")
    result = analyze(wt, patch, cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportAttributeAccessIssue", "Circle.area")]


@pytest.mark.slow
def test_caller_of_a_changed_signature_is_checked(wt: Worktree, cache: Path) -> None:
    # unit_area is untouched, but it calls area(), whose signature the patch changes.
    patch = edit(wt, "pkg/shapes.py", "    def area(self):\n", "    def area(self, unit):\n")
    result = analyze(wt, patch, cache)
    assert ("reportCallIssue", "unit_area") in [(f["rule"], f["symbol"]) for f in result.new]


@pytest.mark.slow
def test_src_layout_imports_resolve(wt: Worktree, cache: Path) -> None:
    # srcpkg lives under src/: unless pyright looks there, scale() is Unknown and any call passes.
    patch = edit(wt, "src/srcpkg/api.py", "return scale(x, 2)", "return scale(x)")
    result = analyze(wt, patch, cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportCallIssue", "double")]
    assert '"k"' in result.new[0]["message"]


@pytest.mark.slow
def test_attribute_that_exists_nowhere_is_evidence(wt: Worktree, cache: Path) -> None:
    # c is an unannotated parameter, so pyright cannot know it has no radius_in_cm; but nothing in
    # the repository or the standard library has an attribute of that name.
    patch = edit(wt, "pkg/shapes.py", '% c.r\n', '% c.radius_in_cm\n')
    result = analyze(wt, patch, cache)
    assert [(f["source"], f["rule"], f["symbol"], f["line"]) for f in result.new] == [
        ("names", "UnknownAttribute", "describe", 20)]
    assert '"radius_in_cm"' in result.new[0]["message"]


@pytest.mark.slow
@pytest.mark.parametrize("old,new", [
    ('% c.r\n', '% c.r.hex()\n'),  # a method of float: the standard library has it
    ('% c.r\n', '% c.area()\n'),  # defined in the repository
    ('% c.r\n', '% np.format_float_positional(c.r)\nimport numpy as np\n'),  # third-party module
    ('        self.r = r\n', '        self.r = r\n        self.diameter = 2 * r\n\n    def d(self):\n'
                            '        return self.diameter\n'),  # the patch defines it
])
def test_attribute_check_is_silent_on_attributes_that_exist(wt: Worktree, cache: Path, old: str, new: str) -> None:
    result = analyze(wt, edit(wt, "pkg/shapes.py", old, new), cache)
    assert result.status == "ok"
    assert [f for f in result.all_new if f["source"] == "names"] == []


@pytest.mark.slow
@pytest.mark.parametrize("param,evidence", [("int", True), ("int | str", False)])
def test_operator_issue_counts_only_when_it_fails_for_the_whole_type(wt: Worktree, cache: Path, param: str,
                                                                     evidence: bool) -> None:
    # "x" + int always raises TypeError; with int | str pyright complains because one member
    # would, which in untyped code is mostly a union of its own inference.
    patch = edit(wt, "pkg/shapes.py", "def bounds(c):", f'def label(k: {param}):\n    return "x" + k\n\n\ndef bounds(c):')
    result = analyze(wt, patch, cache)
    assert [f["rule"] for f in result.all_new] == ["reportOperatorIssue"]
    assert [f["rule"] for f in result.new] == (["reportOperatorIssue"] if evidence else [])


@pytest.mark.slow
@pytest.mark.parametrize("line,evidence", [
    ("from pkg.nothere import thing", True),  # the repository's own package has no such module
    ("from .nothere import thing", True),
    ("from pkg.util import load", False),  # exists
    ("import some_package_not_installed_here", False),  # may just be missing on this machine
])
def test_import_of_a_module_the_repository_lacks_is_evidence(wt: Worktree, cache: Path, line: str,
                                                              evidence: bool) -> None:
    patch = edit(wt, "pkg/shapes.py", "import math\n", f"import math\n{line}\n")
    result = analyze(wt, patch, cache)
    assert [f["rule"] for f in result.new] == (["reportRelativeImport"] if evidence else [])


@pytest.mark.slow
def test_possibly_unbound_variable_is_evidence(wt: Worktree, cache: Path) -> None:
    # An UnboundLocalError waiting for c.r == 0 (sphinx-8801 failed this way).
    patch = edit(wt, "pkg/shapes.py", '    return "circle of radius %s" % c.r',
                 '    if c.r:\n        text = "circle of radius %s" % c.r\n    return text')
    result = analyze(wt, patch, cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportPossiblyUnboundVariable", "describe")]


@pytest.mark.slow
def test_unpacking_what_an_untouched_function_returns_is_checked(wt: Worktree, cache: Path) -> None:
    # bounds() is untouched and returns three values; its body must not be stubbed out, or the
    # ValueError in describe() would be invisible (sympy-18698 failed this way).
    patch = edit(wt, "pkg/shapes.py", '    return "circle of radius %s" % c.r',
                 '    lo, hi = bounds(c)\n    return "circle from %s to %s" % (lo, hi)')
    result = analyze(wt, patch, cache)
    assert [(f["symbol"], "Tuple size mismatch" in f["message"]) for f in result.new] == [("describe", True)]


@pytest.mark.slow
@pytest.mark.parametrize(("infer", "expected"), [
    (False, []),
    (True, [("reportAttributeAccessIssue", "double")]),
])
def test_what_another_modules_unannotated_function_returns_is_inferred_only_when_asked(
        wt: Worktree, cache: Path, infer: bool, expected: list[tuple[str, str]]) -> None:
    # version() in core.py returns an int, but only call-site inference knows it: by default other
    # modules' unannotated functions return Unknown (the speed and false-alarm trade-off), while
    # the touched file's own functions are still inferred (the test above).
    patch = edit(wt, "src/srcpkg/api.py", "import scale\n\n\ndef double(x):\n    return scale(x, 2)",
                 "import scale, version\n\n\ndef double(x):\n    return scale(x, 2) + version().area()")
    result = analyze(wt, patch, cache, CriticSettings(infer_unannotated=infer))
    assert result.status == "ok"
    assert [(f["rule"], f["symbol"]) for f in result.new] == expected


@pytest.mark.slow
@pytest.mark.parametrize("api_edit", [
    # a comment in double(), whose call to scale() the patch leaves as it was
    ("    return scale(x, 2)", "    # twice\n    return scale(x, 2)"),
    # a new function elsewhere in api.py: double() is checked because it calls the changed scale()
    ("import scale\n", "import scale\n\n\ndef triple(x):\n    return x * 3\n"),
])
def test_a_call_broken_by_a_signature_changed_in_another_touched_file_is_new(
        wt: Worktree, cache: Path, api_edit: tuple[str, str]) -> None:
    # The base side of api.py must see core.py at the base: if it saw the patched scale(x), the
    # old call scale(x, 2) would be wrong on both sides and look old.
    wt.reset()
    core, api = wt.path / "src/srcpkg/core.py", wt.path / "src/srcpkg/api.py"
    core.write_text(core.read_text().replace("def scale(x, k):\n    return x * k", "def scale(x):\n    return x * 2"))
    api.write_text(api.read_text().replace(*api_edit))
    result = analyze(wt, wt.diff(), cache)
    assert [(f["file"], f["rule"], f["symbol"]) for f in result.new] == [
        ("src/srcpkg/api.py", "reportCallIssue", "double")]


@pytest.mark.slow
def test_pyflakes_adds_what_pyright_does_not_report(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", 'return "circle of radius %s" % c.r', 'return "circle %s of radius %s" % (c.r,)')
    result = analyze(wt, patch, cache)
    assert ("pyflakes", "PercentFormatPositionalCountMismatch") in [(f["source"], f["rule"]) for f in result.new]
    quiet = analyze(wt, patch, cache, CriticSettings(pyflakes=False))
    assert all(f["source"] != "pyflakes" for f in quiet.new + quiet.all_new)


@pytest.mark.slow
def test_unused_import_is_new_but_not_evidence(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "import math\n", "import math\nimport os\n")
    result = analyze(wt, patch, cache)
    assert result.new == []
    assert [f["rule"] for f in result.all_new] == ["UnusedImport"]


@pytest.mark.slow
def test_syntax_error_after_the_patch_is_evidence(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "def describe(c):", "def describe(c)")
    result = analyze(wt, patch, cache)
    assert result.status == "ok"
    assert [(f["source"], f["rule"], f["line"]) for f in result.new] == [("python", "syntax", 19)]
    assert "SyntaxError" in result.new[0]["message"]


@pytest.mark.slow
def test_new_file_is_analyzed_whole(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/extra.py", "", "from pkg.shapes import Circle\n\n\ndef big():\n    return Circle(1, 2)\n")
    result = analyze(wt, patch, cache)
    assert [(f["file"], f["rule"], f["symbol"]) for f in result.new] == [("pkg/extra.py", "reportCallIssue", "big")]


@pytest.mark.slow
def test_base_side_is_cached_and_reused(wt: Worktree, tmp_path: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    first = analyze(wt, patch, tmp_path)
    cached = list((tmp_path / "static-before").rglob("*.json"))
    assert len(cached) == 1
    second = analyze(wt, patch, tmp_path)
    assert second.new == first.new
    assert list((tmp_path / "static-before").rglob("*.json")) == cached


# ---- bad input ------------------------------------------------------------------------------


def test_patch_that_does_not_apply_cannot_be_analyzed(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    wt.reset()  # the worktree no longer holds the patch
    result = analyze(wt, patch, cache)
    assert result.status == "cannot_analyze" and result.new == []
    assert "does not apply" in result.reason


def test_not_a_diff_cannot_be_analyzed(wt: Worktree, cache: Path) -> None:
    wt.reset()
    result = analyze(wt, "this is not a diff\n", cache)
    assert result.status == "cannot_analyze" and "not a unified diff" in result.reason


def test_non_python_patch_is_ok_with_a_reason(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "README.md", "# demo\n", "# demo\n\nMore words.\n")
    result = analyze(wt, patch, cache)
    assert result.status == "ok" and result.new == []
    assert result.reason == "the patch touches no Python file"


def test_file_that_does_not_parse_before_cannot_be_analyzed(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/legacy.py", "def old(:\n", "def old():\n")
    result = analyze(wt, patch, cache)
    assert result.status == "cannot_analyze"
    assert result.reason == "pkg/legacy.py does not parse before the patch"


def test_missing_pyright_raises_a_clear_error(wt: Worktree, cache: Path, monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    with pytest.raises(StaticAnalysisUnavailable, match="pyright not found"):
        analyze_patch(wt, patch, settings=CriticSettings(pyright="no-such-pyright"), cache_dir=cache)
    bin_dir = tmp_path / "bin"  # a PATH with git on it and no pyright
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    monkeypatch.setenv("PATH", str(bin_dir))
    # pyright is looked for beside the interpreter too: make that folder the bare one.
    monkeypatch.setattr("scoring.static.differential.sys.executable", str(bin_dir / "python"))
    with pytest.raises(StaticAnalysisUnavailable, match="pyright not found"):
        analyze_patch(wt, patch, settings=SETTINGS, cache_dir=cache)


def test_crashing_pyright_raises_a_clear_error(wt: Worktree, cache: Path, tmp_path: Path) -> None:
    fake = tmp_path / "pyright"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'pyright 0.0.1'; exit 0; fi\n"
                    "echo 'boom' >&2\nexit 3\n")
    fake.chmod(0o755)
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    with pytest.raises(StaticAnalysisUnavailable, match=r"pyright failed \(exit 3\): boom"):
        analyze(wt, patch, cache, CriticSettings(pyright=str(fake)))


def test_static_off_in_config_runs_nothing(wt: Worktree, cache: Path) -> None:
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    result = analyze(wt, patch, cache, CriticSettings(static=False, pyright="no-such-pyright"))
    assert result.status == "ok" and result.new == [] and "off" in result.reason


def test_normalize_drops_what_moves() -> None:
    assert normalize('"x" is declared on line 12\n  more detail') == '"x" is declared on line N'
    assert normalize('Import "_fixgraph_before_shapes" at 0x7f00ab') == 'Import "shapes" at 0xADDR'


FEED = '''\
def pieces(text):
    if text:
        return ("a", "b")
    return (b"a", b"b")


def content(text):
    return b"".join(pieces(text))


def other(text):
    return len(pieces(text))
'''


@pytest.fixture(scope="module")
def feed(tmp_path_factory: pytest.TempPathFactory) -> Worktree:
    # pyright already complains at the base that content() may join str: its inference of pieces()
    # (the code runs; requests' Response.content joining iter_content's chunks is the real case).
    root = tmp_path_factory.mktemp("feed")
    (root / "pkg").mkdir()
    (root / "pkg/__init__.py").write_text("")
    (root / "pkg/feed.py").write_text(FEED)
    for args in (("init", "-q", "-b", "main"), ("config", "user.email", "t@example.com"), ("config", "user.name", "t"),
                 ("add", "-A"), ("commit", "-q", "-m", "base")):
        git(root, *args)
    return Worktree(root, git(root, "rev-parse", "HEAD").strip())


@pytest.mark.slow
def test_an_old_complaint_whose_quoted_types_changed_is_not_new(feed: Worktree, cache: Path) -> None:
    patch = edit(feed, "pkg/feed.py", 'return ("a", "b")', 'return ("a", "b", "c")')
    result = analyze(feed, patch, cache)
    assert result.status == "ok" and result.new == [] and result.all_new == []


@pytest.mark.slow
@pytest.mark.parametrize("old,new,symbol", [
    # The same complaint in a function that had none is new...
    ("    return len(pieces(text))", '    return b"-".join(pieces(text))', "other"),
    # ...and so is a second one where the base had one.
    ('    return b"".join(pieces(text))', '    return b"".join(pieces(text)) + b"".join(pieces(text))', "content"),
])
def test_the_same_complaint_elsewhere_or_once_more_is_new(feed: Worktree, cache: Path, old: str, new: str,
                                                         symbol: str) -> None:
    result = analyze(feed, edit(feed, "pkg/feed.py", old, new), cache)
    assert [(f["rule"], f["symbol"]) for f in result.new] == [("reportArgumentType", symbol)]


@pytest.mark.slow
@pytest.mark.parametrize("path", ["reproduce.py", "tests/test_more.py", "pkg/tests/test_more.py"])
def test_what_a_scratch_script_or_test_file_would_raise_is_not_evidence(wt: Worktree, cache: Path, path: str) -> None:
    patch = edit(wt, path, "", "from pkg.shapes import Circle\n\n\ndef check():\n    return Circle(1, 2)\n")
    result = analyze(wt, patch, cache)
    assert [(f["file"], f["rule"]) for f in result.all_new] == [(path, "reportCallIssue")]
    assert result.new == []
