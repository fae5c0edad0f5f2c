"""Localization: which files of a repository an issue is about, and how to show them to the LLM.

The folder holds the repository index and what it is made of:

- ``files``: per-file analysis (classes and functions, imports, module-level statements, quoted
  messages, term counts) and ``count_tokens``, the token estimate every prompt budget uses;
- ``sources``: where file contents come from (a worktree or a bare repository), the per-blob cache
  of analyses and the per-commit snapshot;
- ``query``: what an issue names (``parse_problem``), the ranking's signals (``RankParts``) and how
  they are combined (``combine``, ``penalty``, ``literal_first``);
- ``index``: ``RepoIndex``, built once per (repository, commit), and its ranking; the formula and
  its shipped weights (``W_*``) are in that module's header;
- ``views``: what the LLM is shown: the Planner's map, the Explorer's views of files and the files
  it may read next (``RepoViews``, mixed into ``RepoIndex``; ``views_within``);
- ``history``: what past commits said and touched; ``rerank``: the learned re-ranking of the top
  candidates; ``snippets``: the issue's code as something to run; ``terms``: the shared tokenizer.

Imports: this package sits on the floor of fixgraph. It may import config, state, dataset,
records, repo/workspace and its own modules; never
scoring, agents, graph, bot or eval, which are built on it. Its modules import one another by
module (``from fixgraph.localize.files import ...``), never through this package.

Below, every name that code outside the package imports from ``fixgraph.localize``, so that those
imports need not know the modules. A name is read where it is used: to patch one (a weight, the
blob cache), patch the module that reads it (``fixgraph.localize.index`` for the ``W_*`` weights and
what ``RepoIndex`` builds with, ``fixgraph.localize.query`` for ``LITERAL_TOP``); patching it here
changes nothing.
"""

from fixgraph.localize.files import analyze, count_tokens, is_message
from fixgraph.localize.index import (
    W_COCHANGE,
    W_EXECUTED,
    W_HISTORY,
    W_LITERAL,
    W_LITERAL_TOP,
    W_PROSE,
    W_TEST_COCHANGE,
    W_TESTS,
    W_TITLE,
    LocalizeError,
    RepoIndex,
)
from fixgraph.localize.query import (
    LITERAL_TOP,
    Candidate,
    Option,
    RankParts,
    combine,
    execution_signal,
    is_test_path,
    literal_first,
    parse_problem,
    penalty,
)
from fixgraph.localize.sources import _BlobCache, _GitSource, _WorktreeSource
from fixgraph.localize.terms import terms_of
from fixgraph.localize.views import clean_path, views_within

__all__ = [
    "LITERAL_TOP",
    "W_COCHANGE",
    "W_EXECUTED",
    "W_HISTORY",
    "W_LITERAL",
    "W_LITERAL_TOP",
    "W_PROSE",
    "W_TEST_COCHANGE",
    "W_TESTS",
    "W_TITLE",
    "Candidate",
    "LocalizeError",
    "Option",
    "RankParts",
    "RepoIndex",
    "analyze",
    "clean_path",
    "combine",
    "count_tokens",
    "execution_signal",
    "is_message",
    "is_test_path",
    "literal_first",
    "parse_problem",
    "penalty",
    "terms_of",
    "views_within",
    # Private, for the tests that read or patch them (tests/test_localize*.py, test_sqlite_open.py).
    "_BlobCache",
    "_GitSource",
    "_WorktreeSource",
]
