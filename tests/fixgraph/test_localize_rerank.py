"""The learned re-ranking of localization and the evidence only it reads, on real
fixture repositories: public API resolved through the packages' re-exports, handlers of the
classes an issue names, past fixes whose messages name the same code."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from fixgraph.localize import RepoIndex, combine, rerank
from tests.helpers.history_repo import _commit, _git
from tests.helpers.localize_repo import FILES, index_without_history

# A package whose public ``hstack`` lives in a submodule, re-exported twice; other files define a
# method ``hstack`` (not public API) and talk about stacking more than the real one does.
API = {
    "pkg/__init__.py": '"""The package."""\nfrom pkg.sessions import Session\nfrom pkg.matrices import Matrix, hstack\n',
    "pkg/matrices/__init__.py": "from .dense import Matrix, hstack\nfrom . import sparse\n",
    "pkg/matrices/dense.py": (
        "class Matrix:\n    def __init__(self, rows):\n        self.rows = rows\n\n\n"
        "def hstack(*matrices):\n    return Matrix([sum(r, []) for r in zip(*(m.rows for m in matrices))])\n"
    ),
    "pkg/matrices/sparse.py": "def _private():\n    return 0\n\n\ndef sparse_zeros(n):\n    return {}\n",
    "pkg/stacking.py": (
        '"""Stacking: stack matrices side by side, stack columns, stack rows; hstack and vstack."""\n\n\n'
        "class Stacker:\n    def hstack(self, matrices):\n        '''Stack matrices: columns after columns.'''\n"
        "        return [m for m in matrices]\n"
    ),
    "pkg/products.py": "class Product:\n    def doit(self):\n        return 1\n",
    "pkg/printer.py": (
        "class Printer:\n    def _print_Product(self, expr):\n        return 'Product(...)'\n\n"
        "    def _print_Sum(self, expr):\n        return 'Sum(...)'\n"
    ),
}


@pytest.fixture()
def index(tmp_path: Path) -> RepoIndex:
    return index_without_history(tmp_path, API)


def test_public_api_is_resolved_through_the_packages_reexports(index: RepoIndex) -> None:
    exports = index.exports()
    assert exports["hstack"] == ["pkg/matrices/dense.py"]
    assert exports["Matrix"] == ["pkg/matrices/dense.py"]
    # A module imported whole exports its public names, not its private ones.
    assert exports["sparse_zeros"] == ["pkg/matrices/sparse.py"]
    assert "_private" not in exports
    parts = index.rank_parts("`hstack(A, B)` stacks matrices side by side wrongly: the stacked columns are lost")
    # The method of the same name, and the file that talks most about stacking, are not the API.
    assert list(parts.api) == ["pkg/matrices/dense.py"]
    linear = [c.path for c in combine(parts, 0.0, 0.0, 0.0, 0.0)]
    assert linear[0] == "pkg/stacking.py"


def test_handlers_of_a_named_class_point_at_the_printer(index: RepoIndex) -> None:
    parts = index.rank_parts("The output of `print(Product(x))` is unreadable")
    assert parts.handler == {"pkg/printer.py": 1.0}
    # A name the repository does not define as anything gets no handler.
    assert index.rank_parts("The output of `print(Integral(x))` is unreadable").handler == {}


def test_the_learned_ranking_orders_the_pool_and_keeps_the_rest(index: RepoIndex,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    issue = "`hstack(A, B)` stacks matrices side by side wrongly: the stacked columns are lost"
    linear = index.rank(issue, k=100)
    assert linear[0].path == "pkg/stacking.py"  # COEF empty: the linear formula alone
    monkeypatch.setattr(rerank, "COEF", {"api": 5.0, "base": 1.0})
    # The signals computed for the linear ranking lack the quoted literals: recomputed.
    learned = index.rank(issue, k=100)
    assert learned[0].path == "pkg/matrices/dense.py"
    assert sorted(c.path for c in learned) == sorted(c.path for c in linear)
    scores = [c.score for c in learned]
    assert scores == sorted(scores, reverse=True)


def test_fit_learns_which_feature_marks_the_gold_file() -> None:
    rng = np.random.default_rng(0)
    api = rerank.FEATURES.index("api")
    instances = []
    for _ in range(40):
        x = rng.random((12, len(rerank.FEATURES)))
        x[:, [rerank.FEATURES.index(n) for n in rerank.UNPENALIZED]] = 0.0  # no linear order to lean on
        gold = np.zeros(12)
        gold[int(np.argmax(x[:, api]))] = 1.0
        instances.append((x, gold))
    w = rerank.fit(instances, l2=0.001)
    assert int(np.argmax(w)) == api
    x, gold = instances[0]
    paths = [f"f{i}.py" for i in range(12)]
    assert rerank.top_of(x, paths, list(range(12)), w)[0] == paths[int(np.argmax(gold))]
    assert not rerank.fit([], l2=1.0).any()


def test_past_fixes_naming_the_same_code_lead_to_their_files_and_never_later_ones(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    t = 1_600_000_000
    _commit(repo, FILES, "Initial import", t)
    _commit(repo, {"pkg/models.py": FILES["pkg/models.py"] + "\n# headers may be None\n"},
            "Fix merge_settings with None headers in Request.build", t + 86400)
    base = _git(repo, "rev-parse", "HEAD")
    _commit(repo, {"pkg/util.py": FILES["pkg/util.py"] + "\n# later\n"},
            "merge_settings: to_key_val_list of None", t + 2 * 86400)
    index = RepoIndex.build_from_git(repo / ".git", base, tmp_path / "cache")
    parts = index.rank_parts("Calling `merge_settings(None, {})` fails when nothing was set.")
    assert max(parts.hist_api, key=parts.hist_api.__getitem__) == "pkg/models.py"
    assert "pkg/util.py" not in parts.hist_api  # the commit after the base is never used
    # Without history the signal is absent and the ranking works as before.
    bare = RepoIndex.build_from_git(repo / ".git", base, tmp_path / "cache", history=False)
    assert bare.rank_parts("Calling `merge_settings(None, {})` fails.").hist_api == {}
    assert subprocess.run(["git", "-C", str(repo), "log", "--oneline"], capture_output=True, text=True,
                          check=True).stdout.count("\n") == 3


def test_the_title_names_the_feature_the_body_buries(index: RepoIndex) -> None:
    issue = ("Session headers lost when merging settings\n\n"
             "Our ledger computes totals of entries; with the ledger entries below the totals come out "
             "right, the ledger describe works, the ledger total of the entries too. Entries, totals, ledger:\n"
             "    ledger.compute_total(entries)\n")
    parts = index.rank_parts(issue)
    assert max(parts.title, key=parts.title.__getitem__) == "pkg/sessions.py"
    assert [c.path for c in combine(parts, 0.0, 0.0, 0.0, 0.0)][0] == "pkg/big.py"
    assert [c.path for c in combine(parts, 0.0, 0.0, 0.0, 0.0, 1.0)][0] == "pkg/sessions.py"
