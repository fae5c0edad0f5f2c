"""Evidence beyond the issue's words, on a real fixture repository: the tests that exercise the
behaviour an issue describes lead to the module they are named after; tracebacks as IPython and
pytest print them, and dashed option names, are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixgraph.localize import RepoIndex, combine, parse_problem
from tests.helpers.localize_repo import index_without_history, make_repo

# The issue speaks of plots, legends and hues, like the user-facing module plots.py does; the fault
# is in the small internal module the tests of that behaviour are named after (palette.py).
EXTRA = {
    "pkg/plots.py": (
        '"""Plots: draw a plot with a legend; the legend shows one entry per hue."""\n\n'
        "from pkg.palette import assign\n\n"
        "def plot(data, hue=None, legend=True):\n"
        '    """Draw the plot of data; with a hue, a legend lists the hue levels of the plot."""\n'
        "    colors = assign(sorted(set(hue or [])))\n"
        "    return {'plot': data, 'legend': legend, 'hue': hue, 'colors': colors}\n\n"
        "def legend_entries(plot_result):\n"
        '    """The legend of a plot: one entry per hue of the plot."""\n'
        "    return list(plot_result['colors'])\n"
    ),
    "pkg/palette.py": (
        '"""Color assignment."""\n\n'
        "def assign(levels):\n"
        "    return {lvl: i for i, lvl in enumerate(levels[:-1])}  # drops the last level\n"
    ),
    "tests/test_palette.py": (
        "from pkg.plots import plot, legend_entries\n\n"
        "def test_each_hue_level_gets_a_legend_entry():\n"
        "    result = plot([1, 2, 3], hue=['spring', 'summer', 'autumn'], legend=True)\n"
        "    assert legend_entries(result) == ['autumn', 'spring', 'summer']\n\n"
        "def test_hue_levels_spring_summer_autumn_colors():\n"
        "    result = plot([1, 2], hue=['spring', 'summer', 'autumn'])\n"
        "    assert len(result['colors']) == 3\n"
    ),
}

ISSUE = """Legend misses a hue level

```python
result = plot([1, 2, 3], hue=["spring", "summer", "autumn"], legend=True)
legend_entries(result)
```

gives only spring and summer: the autumn hue level has no legend entry.
"""


@pytest.fixture()
def index(tmp_path: Path) -> RepoIndex:
    return index_without_history(tmp_path, EXTRA)


def test_the_tests_of_the_behaviour_lead_to_the_module_they_are_named_after(index: RepoIndex) -> None:
    parts = index.rank_parts(ISSUE)
    # The words alone rank the user-facing module first, the internal one behind it.
    today = [c.path for c in combine(parts, 0.0, 0.0, 0.0, 0.0)]
    assert today[0] == "pkg/plots.py"
    # The test that reads like the issue is test_palette.py: its subject is palette.py.
    assert max(parts.tests, key=parts.tests.__getitem__) == "pkg/palette.py"
    ranked = [c.path for c in combine(parts, 0.0, 0.0, 0.0, 1.0)]
    assert ranked[0] == "pkg/palette.py"
    # Tests themselves are never the subject: the signal points at code.
    assert all(not p.startswith("tests/") for p in parts.tests)


def test_an_issue_no_test_resembles_gets_no_tests_signal(index: RepoIndex) -> None:
    assert index.rank_parts("nothing here resembles anything in the repository: zyzzyva").tests == {}


def test_subjects_of_a_test_are_the_nearest_module_of_its_name(tmp_path: Path) -> None:
    wt = make_repo(tmp_path, {
        "sympy/core/numbers.py": "def a():\n    pass\n",
        "sympy/functions/numbers.py": "def b():\n    pass\n",
        "sympy/core/tests/test_numbers.py": "def test_a():\n    pass\n",
        "src/_pytest/pathlib.py": "def c():\n    pass\n",
        "testing/test_pathlib.py": "def test_c():\n    pass\n",
        "pylint/lint/expand_modules.py": "def d():\n    pass\n",
        "tests/lint/unittest_expand_modules.py": "def test_d():\n    pass\n",
        "pkg/printing/__init__.py": "def e():\n    pass\n",
        "pkg/tests/test_printing.py": "def test_e():\n    pass\n",
        "pkg/tests/helpers.py": "def f():\n    pass\n",
    }, awkward=False)
    index = RepoIndex.build(wt, tmp_path / "cache", history=False)
    assert index.subjects_of_test("sympy/core/tests/test_numbers.py") == ["sympy/core/numbers.py"]
    assert index.subjects_of_test("testing/test_pathlib.py") == ["src/_pytest/pathlib.py"]
    assert index.subjects_of_test("tests/lint/unittest_expand_modules.py") == ["pylint/lint/expand_modules.py"]
    assert index.subjects_of_test("pkg/tests/test_printing.py") == ["pkg/printing/__init__.py"]
    assert index.subjects_of_test("pkg/tests/helpers.py") == []  # not named after a module
    assert index.subjects_of_test("tests/test_nothing_like_it.py") == []


def test_tracebacks_as_ipython_and_pytest_print_them_are_frames() -> None:
    problem = (
        "File ~/code/pkg/pkg/_core/plot.py:841, in Plot._plot(self, pyplot)\n"
        "    839 x = 1\n"
        "~/anaconda3/lib/python3.6/site-packages/pkg/wcs.py in wcs_pix2world(self, *args)\n"
        "src/pkg/python.py:123: in collect\n"
        '  File "/usr/lib/python3/site-packages/pkg/sessions.py", line 3, in merge_settings\n'
    )
    q = parse_problem(problem)
    # In the order written: the last frame is the deepest.
    assert q.frames == [("~/code/pkg/pkg/_core/plot.py", "_plot"),
                        ("~/anaconda3/lib/python3.6/site-packages/pkg/wcs.py", "wcs_pix2world"),
                        ("src/pkg/python.py", "collect"),
                        ("/usr/lib/python3/site-packages/pkg/sessions.py", "merge_settings")]


def test_an_ipython_frame_points_at_the_repository_file(index: RepoIndex) -> None:
    problem = ("IndexError after upgrading\n\nFile ~/code/pkg/pkg/palette.py:4, in assign(levels)\n"
               "IndexError: list index out of range\n")
    assert index.rank(problem, k=1)[0].path == "pkg/palette.py"


def test_dashed_option_names_are_also_searched_as_the_code_spells_them() -> None:
    q = parse_problem("`--recursive=y` ignores `ignore-paths`; same with import-mode=importlib")
    assert {"ignore_paths", "ignorepaths", "import_mode", "importmode"} <= set(q.terms)
    assert "recursive" in q.terms and "recursive_y" not in q.terms
