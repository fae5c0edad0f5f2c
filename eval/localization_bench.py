"""Localization benchmark: does the deterministic ranking put the gold patch's files on top?

    python -m eval.localization_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR [--limit N] \\
        [--execute [--env-dir ENVS] [--config NAME]] [-o ROWS.jsonl [--resume]] [--fit]

Runs over every instance whose repository has a mirror in DIR (``DIR/<owner>+<name>/repo``),
reading blobs straight from the mirror at the base commit (no checkout). For each repository and
overall it prints recall of the gold files within the top 1/3/5/8 of:

- ``today``: the ranking without history, quoted literals, tests, title or prose (``W_HISTORY =
  W_COCHANGE = W_LITERAL = W_TESTS = W_TITLE = W_PROSE = W_TEST_COCHANGE = 0``);
- ``hist``: the history signal alone (past commits whose messages resemble the issue);
- ``full``: the full ranking with the weights in ``fixgraph.localize`` (in-sample: they were
  chosen on these instances);
- ``cv``: the full ranking where each repository's instances are ranked with the weights that
  score best on the other repositories' instances (leave one repository out), the honest figure:
  best recall@8 + recall@1, ties to the better recall@k averaged over k = 1..10, then to the smaller
  weights (a line below gives the figure with ties straight to the smaller weights);
- ``bm25``: plain BM25 (bm25s) over whole ``.py`` files with the issue text as the query;
- ``before``: the linear formula with the weights shipped before the title and prose signals;
- ``rrcv``: the learned re-ranking of the formula's top 8 (``fixgraph.localize.rerank``), cross-validated:
  each repository ranked by a model fitted on the others' rows, its L2 chosen by leave one
  repository out among them (``--fit`` prints the coefficients fitted on all rows);

With ``--execute`` each issue's code is first run at its base commit in the test sandbox (the
Critic's runner and environments, ``scoring.runtime.issue_run``; traces cached), and the files it called
late enter the ranking as execution evidence (``W_EXECUTED``, searched by the grid with the other
weights); the report says how many instances had such evidence and why the others had none.
Without it every row has none, and the ranking is the text's.

then the full ranking's recall when each top-8 file also brings the modules it imports (one step,
as the Explorer's options do); the Explorer's prompt size in tokens when it reads the top 8 files
(the real template, rendered); the time per instance once the indexes are cached, and the time
and size of each history index. The last line is the headline: cross-validated recall@8, then
@1, with the in-sample, re-ranked, before, today's and BM25 figures of the same run.

With ``-o ROWS.jsonl`` every instance's row (its signals before weighting, its recalls and times)
is appended as soon as it is done; ``--resume`` skips the instances already in the file and reports
over all of them, so a run cut short (killed, or stopped with Ctrl-C) loses nothing. Rows are only
comparable when written by the same code: start a new file after changing the ranking.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fixgraph.dataset import Instance

KS = (1, 3, 5, 8)
# The weight grid searched by cross-validation: (W_HISTORY, W_COCHANGE, W_LITERAL, W_TESTS, W_TITLE,
# W_PROSE, W_TEST_COCHANGE, W_LITERAL_TOP). Co-change with the top files and quoted literals as a
# term of the formula stay at 0: cross-validated, tuning them generalized worse in the earlier passes
# (README, "Localization"), and every extra knob on 140 rows is one more way to overfit. The
# literals' reordering of the top 8 (W_LITERAL_TOP) is searched: it is the last step, so
# its points share the linear ranking. Co-change with the matching tests (W_TEST_COCHANGE, seventh
# pass) is searched on the same log-spaced steps as the others, up to 1.
# Execution evidence (W_EXECUTED) on coarse steps: most rows have none, so every
# extra step is a knob the few that do would tune.
LITERAL_TOP_WEIGHTS = (0.0, 0.2, 0.5, 1.0)
TEST_COCHANGE_WEIGHTS = (0.0, 0.1, 0.2, 0.5, 1.0)
EXECUTED_WEIGHTS = (0.0, 0.5, 1.0)
# A linear point: the formula's weights before W_LITERAL_TOP, then W_EXECUTED.
LINEAR_GRID = [(h, 0.0, 0.0, t, title, prose, tc, ex) for h in (0.0, 0.1, 0.2) for t in (0.0, 0.05, 0.1)
               for title in (0.0, 0.5, 0.8, 1.0) for prose in (0.0, 0.2, 0.5) for tc in TEST_COCHANGE_WEIGHTS
               for ex in EXECUTED_WEIGHTS]
# A point: ``combine``'s weights in its order (..., W_TEST_COCHANGE, W_LITERAL_TOP, W_EXECUTED).
GRID = [(*linear[:7], lt, linear[7]) for linear in LINEAR_GRID for lt in LITERAL_TOP_WEIGHTS]
Point = tuple[float, ...]
# The weights shipped before the title signal: the `before` column.
PREVIOUS: Point = (0.2, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0)


@dataclass
class Row:
    repo: str
    instance_id: str = ""
    gold: list[str] = field(default_factory=list)
    parts: Any = None  # RankParts, kept for the weight grid
    today: dict[int, float] = field(default_factory=dict)
    hist: dict[int, float] = field(default_factory=dict)
    cv: dict[int, float] = field(default_factory=dict)
    ours: dict[int, float] = field(default_factory=dict)
    prev: dict[int, float] = field(default_factory=dict)  # the weights shipped before the title (PREVIOUS)
    rrcv: dict[int, float] = field(default_factory=dict)  # the re-ranking, cross-validated
    imports: dict[int, float] = field(default_factory=dict)
    import_set: int = 0
    bm25: dict[int, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    map_tokens: int = 0
    warm_s: float = 0.0
    cold_s: float = 0.0
    # The repository's history index, as the row's run found it: build s, size MB, commits, note.
    history_index: tuple[float, float, int, str] | None = None
    missed: str = ""  # "gold [...] ranked [...]" when a gold file is outside the top 8
    # Execution evidence (--execute): what the run of the issue's code said, and its seconds
    # (0 when served from the trace cache).
    execution: str = ""
    exec_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("parts", "cv", "rrcv")}
        out["parts"] = asdict(self.parts) if self.parts is not None else None
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Row:
        from fixgraph.localize import RankParts

        kw = {k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "parts"}
        for k in ("today", "hist", "ours", "prev", "imports", "bm25"):
            kw[k] = {int(n): v for n, v in d.get(k, {}).items()}
        if kw.get("history_index") is not None:
            kw["history_index"] = tuple(kw["history_index"])
        fields = RankParts.__dataclass_fields__
        parts = RankParts(**{k: v for k, v in d["parts"].items() if k in fields}) if d.get("parts") else None
        return cls(parts=parts, **kw)


def load_rows(path: Path) -> dict[str, Row]:
    """Rows already written to ``path``; a line cut short by a kill is skipped (and redone)."""
    out: dict[str, Row] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            row = Row.from_json(json.loads(line))
            out[row.instance_id] = row
    return out


def gold_files(patch: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"^diff --git a/(\S+) b/", patch, re.M)))


def recall(gold: list[str], found: list[str]) -> float:
    return sum(1 for g in gold if g in found) / len(gold) if gold else 0.0


def bm25_ranking(index, problem: str, k: int) -> list[str]:  # noqa: ANN001 - RepoIndex
    import bm25s

    paths = [p for p in index.paths if p.endswith(".py") and index.infos[p].readable]
    data = index.source.read_many([index.entries[p] for p in paths])
    corpus = [data.get(p, b"").decode("utf-8", errors="replace") for p in paths]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False)
    query = bm25s.tokenize([problem], stopwords="en", show_progress=False, return_ids=False)
    if not query or not query[0]:
        return []
    docs, _ = retriever.retrieve(query, k=min(k, len(paths)), show_progress=False)
    return [paths[int(i)] for i in docs[0]]


def explorer_prompt_tokens(index, inst, ranked, settings) -> int:  # noqa: ANN001
    """The Explorer's real prompt (template rendered) when it has read the top files."""
    from agents.explorer import _ordered_options, explorer_messages, issue_focus
    from fixgraph.localize import count_tokens

    top = [c.path for c in ranked[: settings.max_files]]
    focus = issue_focus(index, inst.problem_statement)
    # With the file cap reached nothing more is offered, as in the Explorer's last iteration.
    options = ([] if len(top) >= settings.max_files else
               _ordered_options(index, inst.problem_statement, top, focus, settings.candidates_shown))
    msgs = explorer_messages(index, inst.repo, inst.problem_statement, top, focus, options, 1, settings)
    return sum(count_tokens(str(m.content)) for m in msgs)


def history_ranking(parts) -> list[str]:  # noqa: ANN001 - RankParts
    """The history signal alone, with the ranking's penalty for tests and docs."""
    from fixgraph.localize import penalty

    return [p for _, p in sorted((-s * penalty(p), p) for p, s in parts.history.items())]


# What a grid point scores on one row: recall@1, recall@8, and recall@k averaged over k = 1..SMOOTH_K.
Scores = tuple[float, float, float]
SMOOTH_K = 10


def grid_recalls(rows: list[Row]) -> dict[Point, list[Scores]]:
    """(recall@1, recall@8, mean recall@1..SMOOTH_K) of every row at every grid point."""
    from fixgraph.localize import combine, literal_first

    out: dict[Point, list[Scores]] = {point: [] for point in GRID}
    for r in rows:
        for linear in LINEAR_GRID:
            # The reordering of the top 8 is the formula's last step: one linear ranking serves it all.
            ranked = combine(r.parts, *linear[:7], 0.0, linear[7], k=SMOOTH_K)
            for lt in LITERAL_TOP_WEIGHTS:
                top = [c.path for c in literal_first(r.parts, ranked, lt)[:SMOOTH_K]]
                smooth = sum(recall(r.gold, top[:k]) for k in range(1, SMOOTH_K + 1)) / SMOOTH_K
                out[(*linear[:7], lt, linear[7])].append((recall(r.gold, top[:1]), recall(r.gold, top[:8]), smooth))
    return out


def best_point(recalls: dict[Point, list[Scores]], keep: list[int], smooth: bool = True) -> Point:
    """The grid point with the best recall@8 + recall@1 on rows ``keep``. Ties go to the point with
    the better recall@k averaged over k = 1..SMOOTH_K (``smooth``), then to smaller
    weights. The average credits a signal that moves gold files up without crossing rank 8 on the
    training rows; with ties straight to the smaller weight such a signal was left out whenever the
    training repositories happened to show no change at 1 or 8."""
    def objective(point: Point) -> tuple[float, ...]:
        vals = [recalls[point][i] for i in keep]
        tie = round(sum(v[2] for v in vals), 9) if smooth else 0.0
        return (round(sum(v[0] + v[1] for v in vals), 9), tie, *(-w for w in point))
    return max(GRID, key=objective)


def cross_validate(rows: list[Row], recalls: dict[Point, list[Scores]],
                   smooth: bool = True) -> tuple[dict[str, Point], Point, list[dict[int, float]]]:
    """Leave one repository out: each repository's rows get the linear weights best on the others'.
    Returns the point chosen without each repository, the point best on all rows, and each row's
    recalls at its fold's point."""
    from fixgraph.localize import combine

    repos = sorted({r.repo for r in rows})
    chosen: dict[str, Point] = {}
    held_out: list[dict[int, float]] = [{} for _ in rows]
    for repo in repos:
        train = [i for i, r in enumerate(rows) if r.repo != repo]
        if not train:
            continue
        point = best_point(recalls, train, smooth)
        chosen[repo] = point
        for i, r in enumerate(rows):
            if r.repo == repo:
                top = [c.path for c in combine(r.parts, *point, k=8)[:8]]
                held_out[i] = {k: recall(r.gold, top[:k]) for k in KS}
    return chosen, best_point(recalls, list(range(len(rows))), smooth), held_out


# The L2 strengths the learned re-ranking's fit chooses among, by leave-one-repository-out
# cross-validation over the training rows (nested inside the outer leave-one-repository-out).
L2_GRID = (0.001, 0.01, 0.1, 1.0, 10.0)


@dataclass
class Pool:
    x: Any  # np.ndarray, one row of FEATURES per pool file
    paths: list[str]
    gold: Any  # np.ndarray of 0/1
    rest: list[str]  # the linear ranking's files below the pool, in order


def pool_of(r: Row, point: Point) -> Pool:
    """The re-ranking's pool of row ``r`` when the linear formula has the weights ``point``."""
    import numpy as np

    from fixgraph.localize import combine, penalty
    from fixgraph.localize.rerank import FEATURES, features

    linear = combine(r.parts, *point)
    feats = features(r.parts, [(c.path, c.score) for c in linear], penalty)
    paths = list(feats)
    x = np.array([feats[p] for p in paths], dtype=np.float64).reshape(len(paths), len(FEATURES))
    gold = np.array([1.0 if p in r.gold else 0.0 for p in paths])
    return Pool(x, paths, gold, [c.path for c in linear[len(paths):]])


def learned_top(pool: Pool, w: Any) -> list[str]:  # noqa: ANN401 - np.ndarray
    from fixgraph.localize.rerank import top_of

    return top_of(pool.x, pool.paths, list(range(len(pool.paths))), w) + pool.rest


def _fit_rows(pools: list[Pool], l2: float) -> Any:  # noqa: ANN401
    from fixgraph.localize.rerank import fit

    return fit([(p.x, p.gold) for p in pools if p.gold.sum() > 0], l2)


def _score(pools: list[Pool], w: Any) -> float:  # noqa: ANN401
    """The share of gold files the model puts first, summed over instances (the pool is the
    formula's top 8, so recall@8 does not depend on the model)."""
    total = 0.0
    for p in pools:
        if p.gold.sum() > 0:
            first = learned_top(p, w)[0]
            total += float(p.gold[p.paths.index(first)]) / float(p.gold.sum())
    return total


def choose_l2(pools: list[Pool], repos: list[str]) -> float:
    """The L2 strength that scores best (recall@1) leaving each of ``repos`` out in turn."""
    def held_out(l2: float) -> float:
        total = 0.0
        for repo in sorted(set(repos)):
            train = [p for p, r in zip(pools, repos, strict=True) if r != repo]
            test = [p for p, r in zip(pools, repos, strict=True) if r == repo]
            total += _score(test, _fit_rows(train, l2))
        return total
    # Ties go to the stronger penalty: the simpler model.
    return max(reversed(L2_GRID), key=lambda l2: round(held_out(l2), 9))


def learned_cross_validate(rows: list[Row], folds: dict[str, Point],
                           shipped: Point) -> tuple[dict[str, float], float, Any]:
    """Each repository's rows ranked by the whole procedure run without it: the linear weights
    chosen on the other repositories (``folds``), the pools they give, a model fitted on the other
    repositories' pools with its L2 chosen by leave-one-repository-out among them. Then the
    shipped procedure: pools of the shipped weights, L2 and coefficients from all rows."""
    repos = [r.repo for r in rows]
    cache: dict[Point, list[Pool]] = {}

    def pools(point: Point) -> list[Pool]:
        if point not in cache:
            cache[point] = [pool_of(r, point) for r in rows]
        return cache[point]

    chosen: dict[str, float] = {}
    for repo, point in sorted(folds.items()):
        every = pools(point)
        train = [p for p, r in zip(every, repos, strict=True) if r != repo]
        l2 = choose_l2(train, [r for r in repos if r != repo])
        chosen[repo] = l2
        w = _fit_rows(train, l2)
        for r, p in zip(rows, every, strict=True):
            if r.repo == repo:
                top = learned_top(p, w)
                r.rrcv = {k: recall(r.gold, top[:k]) for k in KS}
    every = pools(shipped)
    l2_all = choose_l2(every, repos) if len(set(repos)) > 1 else L2_GRID[-1]
    return chosen, l2_all, _fit_rows(every, l2_all)


def execution_tools(args: argparse.Namespace) -> tuple[Any, Any]:
    """The test runner (config ``--config``, environments under ``--env-dir``) and the worktree
    cache the execution evidence needs."""
    from fixgraph.config import load_config
    from fixgraph.repo.workspace import RepoCache
    from scoring.execution.runner import make_runner

    cfg = load_config(args.config)
    tests = cfg.tests.model_copy(update={"env_dir": args.env_dir}) if args.env_dir else cfg.tests
    return make_runner(tests, args.cache_dir), RepoCache(args.cache_dir, mirrors=args.repos)


def execution_of(inst, args: argparse.Namespace) -> tuple[dict[str, float], str, float]:  # noqa: ANN001
    """The execution evidence of ``inst``'s issue (``fixgraph.localize.execution_signal``), its
    note and seconds: the issue's code run at the base commit in the test sandbox (the runner the
    Critic uses; its environment built on first use and cached, as is the trace)."""
    from fixgraph.localize import execution_signal
    from fixgraph.repo.workspace import WorkspaceError
    from scoring.runtime.issue_run import trace_issue

    runner, repos = args.execution_tools
    t0 = time.perf_counter()
    try:
        wt = repos.worktree(inst.repo, inst.base_commit, f"locbench-{inst.repo_slug}")
    except WorkspaceError as exc:
        return {}, f"execution: not run ({exc})", time.perf_counter() - t0
    trace = trace_issue(runner, inst, wt, inst.problem_statement)
    return execution_signal(trace.first), trace.note(), 0.0 if trace.cached else time.perf_counter() - t0


def measure(inst, git_dir: Path, args: argparse.Namespace, settings, first: bool) -> Row:  # noqa: ANN001
    """One instance's row: its signals, recalls, prompt size and times."""
    from fixgraph.localize import RepoIndex, combine, count_tokens
    from fixgraph.localize.history import HistoryIndex

    gold = gold_files(inst.patch)
    t0 = time.perf_counter()
    index = RepoIndex.build_from_git(git_dir, inst.base_commit, args.cache_dir)
    cold = time.perf_counter() - t0
    executed, note, exec_s = execution_of(inst, args) if args.execute else ({}, "execution: not asked (--execute)", 0.0)
    built = None
    if first:
        hist = HistoryIndex.open(git_dir, args.cache_dir)
        built = (hist.build_seconds, hist.size_bytes / 1e6, len(hist.shas), index.history_note)
    # Timed as the pipeline meets it once the indexes are cached: load, rank, map, views.
    t0 = time.perf_counter()
    if not args.no_timing:
        index = RepoIndex.build_from_git(git_dir, inst.base_commit, args.cache_dir)
    index.attach_execution(executed, note)
    ranked = index.rank(inst.problem_statement, k=settings.candidates_shown)
    repo_map = index.repo_map(ranked, max_tokens=settings.map_tokens)
    tokens = 0 if args.no_timing else explorer_prompt_tokens(index, inst, ranked, settings)
    warm = time.perf_counter() - t0
    # Co-change is not searched by the grid (GRID): not computed. Quoted literals are a feature
    # of the re-ranking.
    parts = index.rank_parts(inst.problem_statement, cochange=False, literal=True)
    top = [c.path for c in ranked]
    row = Row(inst.repo, inst.instance_id, gold=gold, parts=parts, prompt_tokens=tokens,
              map_tokens=count_tokens(repo_map), warm_s=warm, cold_s=cold, history_index=built,
              execution=note, exec_s=exec_s)
    today = [c.path for c in combine(parts, 0.0, 0.0, 0.0, 0.0)[: max(KS)]]
    hist_top = history_ranking(parts)
    sizes = []
    for k in KS:
        row.ours[k] = recall(gold, top[:k])
        row.today[k] = recall(gold, today[:k])
        row.hist[k] = recall(gold, hist_top[:k])
        expanded = list(top[:k])
        for p in top[:k]:
            expanded.extend(index.imports_of(p))
        expanded = list(dict.fromkeys(expanded))
        sizes.append(len(expanded))
        row.imports[k] = recall(gold, expanded)
    row.import_set = sizes[-1]
    if not args.no_bm25:
        ref = bm25_ranking(index, inst.problem_statement, max(KS))
        row.bm25 = {k: recall(gold, ref[:k]) for k in KS}
    if row.ours[8] < 1.0:
        row.missed = f"gold {gold} ranked {[top.index(g) + 1 if g in top else None for g in gold]}"
    return row


def _chosen(args: argparse.Namespace, instances: list[Instance]) -> tuple[dict[str, Path], list[Instance]]:
    """Each repository's mirror, and the instances to localize: with a mirror and a gold patch,
    of ``--only`` and ``--repo``, every ``--stride``-th of each repository in the dataset's order,
    up to ``--limit``."""
    from eval.options import instance_repo, only_repos, per_repository
    from fixgraph.repo.workspace import find_mirror

    mirrors: dict[str, Path] = {}
    for inst in instances:
        if inst.repo not in mirrors:
            found = find_mirror(args.repos, inst.repo)
            if found is not None:
                mirrors[inst.repo] = found
    chosen = [i for i in instances if i.repo in mirrors and gold_files(i.patch)]
    only = only_repos(",".join([args.only, *(args.repo or [])]), {i.repo for i in instances})
    if only:
        chosen = [i for i in chosen if i.repo in only]
    chosen = per_repository(chosen, args.stride, instance_repo)
    return mirrors, chosen[: args.limit] if args.limit else chosen


def run(args: argparse.Namespace) -> int:
    from eval.options import check_options, load_instances
    from eval.rows import open_rows, write_row
    from fixgraph import localize
    from fixgraph.config import ExplorerSettings
    from fixgraph.localize import LocalizeError
    from fixgraph.records import atomic_write
    from scoring.verdict.judge import InputError

    try:
        check_options(args)
        instances = load_instances(args)
        mirrors, chosen = _chosen(args, instances)
    except InputError as exc:
        print(f"localization_bench: {exc}", file=sys.stderr)
        return 2
    if not chosen:
        print(f"localization_bench: no instance of the dataset has a mirror under {args.repos}", file=sys.stderr)
        return 2
    settings = ExplorerSettings()
    args.execution_tools = execution_tools(args) if args.execute else None
    done: dict[str, Row] = {}
    if args.output is not None and args.resume and args.output.is_file():
        done = load_rows(args.output)
        if not args.report_only:
            # Written back whole, so that a half line left by a kill is not continued by the next row.
            # Not by a report: a run still going would go on appending to the file this replaces.
            atomic_write(args.output, "".join(json.dumps(r.to_json()) + "\n" for r in done.values()))
    out = None
    if args.output is not None and not args.report_only:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        out = open_rows(args.output, args.resume)
    seen_repos = {r.repo for r in done.values()}
    try:
        for n, inst in enumerate(chosen, 1):
            if inst.instance_id in done or args.report_only:
                continue
            try:
                row = measure(inst, mirrors[inst.repo], args, settings, first=inst.repo not in seen_repos)
            except LocalizeError as exc:
                print(f"localization_bench: {inst.instance_id}: {exc}", file=sys.stderr)
                return 2
            seen_repos.add(inst.repo)
            done[inst.instance_id] = row
            write_row(out, row.to_json())
            if args.verbose:
                print(f"[{n}/{len(chosen)}] {inst.instance_id} R@8={row.ours[8]:.2f} today={row.today[8]:.2f} "
                      f"tokens={row.prompt_tokens} warm={row.warm_s:.2f}s cold={row.cold_s:.1f}s",
                      file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print(f"interrupted: the figures below cover {len(done)} instances"
              + (" (rerun with --resume to continue)" if out is not None else ""), file=sys.stderr)
    finally:
        if out is not None:
            out.close()
    rows = [done[i.instance_id] for i in chosen if i.instance_id in done]
    if not rows:
        return 130
    # The full ranking is recomputed from each row's signals with the weights and coefficients
    # shipped now, so that rows written before they changed are still read right (--resume).
    from fixgraph.localize import rerank

    shipped = (localize.W_HISTORY, localize.W_COCHANGE, localize.W_LITERAL, localize.W_TESTS, localize.W_TITLE,
               localize.W_PROSE, localize.W_TEST_COCHANGE, localize.W_LITERAL_TOP, localize.W_EXECUTED)
    coef = rerank.coef_vector(rerank.COEF)
    for r in rows:
        pool = pool_of(r, shipped)
        linear = pool.paths + pool.rest
        ranked = learned_top(pool, coef) if rerank.COEF else linear
        before = [c.path for c in localize.combine(r.parts, *PREVIOUS)]
        r.prev = {k: recall(r.gold, before[:k]) for k in KS}
        r.ours = {k: recall(r.gold, ranked[:k]) for k in KS}
        where = [ranked.index(g) + 1 if g in ranked else None for g in r.gold]
        r.missed = "" if r.ours[8] >= 1.0 else f"gold {r.gold} ranked {where}"
    misses = [f"{r.instance_id}: {r.missed}" for r in rows if r.missed]
    built: dict[str, tuple[float, float, int, str]] = {}
    for r in rows:
        if r.repo not in built and r.history_index is not None:
            built[r.repo] = r.history_index
    recalls = grid_recalls(rows)
    folds, in_sample, held_out = cross_validate(rows, recalls)
    for r, cv in zip(rows, held_out, strict=True):
        r.cv = cv
    # The simpler procedure (ties straight to the smaller weights), reported beside it.
    folds_ties, _, held_out_ties = cross_validate(rows, recalls, smooth=False)
    l2_folds, l2_all, fitted = learned_cross_validate(rows, folds, shipped)
    if rerank.COEF:  # the shipped procedure includes the re-ranking: its figure is the honest one
        for r in rows:
            r.cv = dict(r.rrcv)
    print_table(rows, args.no_bm25)
    print()
    print(f"{'history index':<22}{'commits':>9}{'build s':>9}{'MB':>7}  at the first base")
    for repo, (secs, mb, commits, note) in sorted(built.items()):
        print(f"{repo:<22}{commits:>9}{secs:>9.1f}{mb:>7.1f}  {note}")
    print()
    def weights(point: Point) -> str:
        return ",".join(f"{w:g}" for w in point)
    ran = [r for r in rows if r.parts is not None and r.parts.executed]
    secs = [r.exec_s for r in rows if r.exec_s > 0]
    print(f"execution evidence: {len(ran)} of {len(rows)} instances"
          + (f" ({', '.join(f'{repo.split(chr(47))[1]} {n}' for repo, n in sorted(Counter(r.repo for r in ran).items()))})"
             if ran else "")
          + (f"; median {statistics.median(secs):.1f}s per traced run, cold" if secs else "")
          + "; without it: " + ", ".join(f"{n} {why}" for why, n in Counter(
              _why_none(r.execution) for r in rows if r not in ran).most_common(5)))
    print("weights (W_HISTORY, W_COCHANGE, W_LITERAL, W_TESTS, W_TITLE, W_PROSE, W_TEST_COCHANGE, W_LITERAL_TOP, "
          "W_EXECUTED): "
          f"shipped {weights(shipped)}; "
          f"best on all rows {weights(in_sample)}; chosen without each repository: "
          + ", ".join(f"{repo.split('/')[1]} {weights(point)}" for repo, point in sorted(folds.items())))
    def held(figures: list[dict[int, float]], k: int) -> float:
        return statistics.mean(f[k] for f in figures) if figures and all(figures) else float("nan")
    print(f"ties to the smaller weights (the simpler procedure): cv {held(held_out_ties, 8):.3f}/"
          f"{held(held_out_ties, 1):.3f}; chosen without each repository: "
          + ", ".join(f"{repo.split('/')[1]} {weights(point)}" for repo, point in sorted(folds_ties.items())))
    print(f"re-ranking L2: on all rows {l2_all:g}; chosen without each repository: "
          + ", ".join(f"{repo.split('/')[1]} {l2:g}" for repo, l2 in sorted(l2_folds.items())))
    if args.fit:
        print("fitted on all rows (fixgraph/localize/rerank.py COEF):")
        print("COEF = {" + ", ".join(f'"{n}": {v:.4g}' for n, v in zip(rerank.FEATURES, fitted, strict=True)) + "}")
    if args.show_misses and misses:
        print("\nmissed at 8:")
        for line in misses:
            print("  " + line)

    def mean(attr: str, k: int) -> float:
        vals = [getattr(r, attr)[k] for r in rows if k in getattr(r, attr)]
        return statistics.mean(vals) if vals else float("nan")

    if folds:
        head = f"overall recall@8: {mean('cv', 8):.3f} ({len(rows)} instances, cross-validated by repository)"
        head += f"; recall@1 {mean('cv', 1):.3f}; in-sample {mean('ours', 8):.3f}/{mean('ours', 1):.3f}"
        head += f"; re-ranked cv {mean('rrcv', 8):.3f}/{mean('rrcv', 1):.3f}"
    else:
        head = f"overall recall@8: {mean('ours', 8):.3f} ({len(rows)} instances, one repository: not cross-validated)"
        head += f"; recall@1 {mean('ours', 1):.3f}"
    head += f"; before {mean('prev', 8):.3f}/{mean('prev', 1):.3f}"
    head += f"; today {mean('today', 8):.3f}/{mean('today', 1):.3f}"
    if not args.no_bm25:
        head += f"; bm25 {mean('bm25', 8):.3f}/{mean('bm25', 1):.3f}"
    print(head)
    return 0


def _why_none(note: str) -> str:
    """A row's execution note cut to its kind: why it has no execution evidence."""
    if not note or "not asked" in note:
        return "not asked (--execute)"
    m = re.search(r"\((.*)\)", note)
    if m:
        return m.group(1).split(":")[0][:60]
    return "ran, no order (one statement or one file)" if "statements" in note else note[:60]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def print_table(rows: list[Row], no_bm25: bool) -> None:
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.repo].append(r)
    groups_sorted = sorted(groups.items()) + [("OVERALL", rows)]
    head = (f"{'repo':<20}{'n':>4} | {'today@1':>7}{'@8':>5} | {'hist@1':>6}{'@8':>5} | "
            f"{'before@1':>8}{'@8':>5} | {'rrcv@1':>6}{'@8':>5} | "
            f"{'full@1':>6}{'@3':>5}{'@5':>5}{'@8':>5} | {'cv@1':>5}{'@8':>5} | {'bm25@1':>6}{'@8':>5} | "
            f"{'+imp@8':>6}{'size':>5} | {'tok med':>7}{'p95':>6}{'map':>5} | {'warm s':>6}{'p95':>6}{'cold':>5}")
    print(head)
    print("-" * len(head))
    for name, rs in groups_sorted:
        def m(attr: str, k: int, rs: list[Row] = rs) -> str:
            vals = [getattr(r, attr).get(k) for r in rs]
            vals = [v for v in vals if v is not None]
            return f"{statistics.mean(vals):.2f}" if vals else "-"
        toks = [float(r.prompt_tokens) for r in rs]
        warm = [r.warm_s for r in rs]
        print(f"{name:<20}{len(rs):>4} | {m('today', 1):>7}{m('today', 8):>5} | {m('hist', 1):>6}{m('hist', 8):>5} | "
              f"{m('prev', 1):>8}{m('prev', 8):>5} | {m('rrcv', 1):>6}{m('rrcv', 8):>5} | "
              f"{m('ours', 1):>6}{m('ours', 3):>5}{m('ours', 5):>5}{m('ours', 8):>5} | {m('cv', 1):>5}{m('cv', 8):>5} | "
              f"{m('bm25', 1):>6}{m('bm25', 8):>5} | {m('imports', 8):>6}{statistics.mean(r.import_set for r in rs):>5.0f} | "
              f"{statistics.median(toks):>7.0f}{_pct(toks, 0.95):>6.0f}{_pct([float(r.map_tokens) for r in rs], 0.95):>5.0f} | "
              f"{statistics.median(warm):>6.2f}{_pct(warm, 0.95):>6.2f}{statistics.median(r.cold_s for r in rs):>5.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.localization_bench", description=(__doc__ or "").split("\n")[0])
    from eval.options import add_options

    add_options(p, rows="instance", without={"shard"},
                output_help="append each instance's row to this JSONL file as it is done")
    p.add_argument("--limit", type=int, default=0, help="only the first N matching instances")
    p.add_argument("--repo", action="append", help="only this repository, owner/name or name (repeatable; as --only)")
    p.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    p.add_argument("--execute", action="store_true",
                   help="run each issue's code at its base commit in the test sandbox (execution evidence)")
    p.add_argument("--config", default="redo", help="config whose [tests] settings --execute uses")
    p.add_argument("--env-dir", type=Path, help="where --execute's test environments live (default: <cache-dir>/envs)")
    p.add_argument("--no-bm25", action="store_true", help="skip the BM25 reference column")
    p.add_argument("--no-timing", action="store_true",
                   help="recall only: no warm reload and no Explorer prompt (their columns are then meaningless)")
    p.add_argument("--show-misses", action="store_true", help="list instances with a gold file outside the top 8")
    p.add_argument("--report-only", action="store_true",
                   help="with --resume: report over the rows already in --output, measure none (a run still going)")
    p.add_argument("--fit", action="store_true",
                   help="print the re-ranking's coefficients fitted on all rows (for fixgraph/localize/rerank.py)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.resume and args.output is None:
        print("localization_bench: --resume needs -o/--output", file=sys.stderr)
        return 2
    if args.report_only and not args.resume:
        print("localization_bench: --report-only needs --resume and -o/--output", file=sys.stderr)
        return 2
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
