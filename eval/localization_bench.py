"""Localization benchmark: does the deterministic ranking put the gold patch's files on top?

    python -m eval.localization_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR [--limit N]

Runs over every instance whose repository has a mirror in DIR (``DIR/<owner>+<name>/repo``),
reading blobs straight from the mirror at the base commit (no checkout). For each repository and
overall it prints: recall of the gold files within the top 1/3/5/8 of ``RepoIndex.rank``; the
same when each of those files also brings the modules it imports (one step, as the Explorer's
options do); plain BM25 (bm25s) over whole ``.py`` files with the issue text as the query,
measured in the same run, as the reference; the Explorer's prompt size in tokens when it reads the
top 8 files with skeletons (the real template, rendered); and the time per instance once the
index is cached. The last line is the overall recall@8.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

KS = (1, 3, 5, 8)


@dataclass
class Row:
    repo: str
    ours: dict[int, float] = field(default_factory=dict)
    imports: dict[int, float] = field(default_factory=dict)
    import_set: int = 0
    bm25: dict[int, float] = field(default_factory=dict)
    prompt_tokens: int = 0
    map_tokens: int = 0
    warm_s: float = 0.0
    cold_s: float = 0.0


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


def run(args: argparse.Namespace) -> int:
    from fixgraph.config import ExplorerSettings
    from fixgraph.dataset import DatasetError, load_jsonl
    from fixgraph.localize import RepoIndex, count_tokens
    from fixgraph.workspace import find_mirror

    try:
        instances = load_jsonl(args.dataset)
    except DatasetError as exc:
        print(f"localization_bench: {exc}", file=sys.stderr)
        return 2
    if not args.repos.is_dir():
        print(f"localization_bench: --repos {args.repos} is not a directory", file=sys.stderr)
        return 2
    mirrors: dict[str, Path] = {}
    for inst in instances:
        if inst.repo not in mirrors:
            found = find_mirror(args.repos, inst.repo)
            if found is not None:
                mirrors[inst.repo] = found
    chosen = [i for i in instances if i.repo in mirrors and gold_files(i.patch)]
    if args.repo:
        chosen = [i for i in chosen if i.repo in args.repo]
    if args.limit:
        chosen = chosen[: args.limit]
    if not chosen:
        print(f"localization_bench: no instance of the dataset has a mirror under {args.repos}", file=sys.stderr)
        return 2
    settings = ExplorerSettings()
    rows: list[Row] = []
    misses: list[str] = []
    for n, inst in enumerate(chosen, 1):
        gold = gold_files(inst.patch)
        t0 = time.perf_counter()
        index = RepoIndex.build_from_git(mirrors[inst.repo], inst.base_commit, args.cache_dir)
        cold = time.perf_counter() - t0
        # Timed as the pipeline meets it once the map is cached: load, rank, map, views.
        t0 = time.perf_counter()
        index = RepoIndex.build_from_git(mirrors[inst.repo], inst.base_commit, args.cache_dir)
        ranked = index.rank(inst.problem_statement, k=settings.candidates_shown)
        repo_map = index.repo_map(ranked, max_tokens=settings.map_tokens)
        tokens = explorer_prompt_tokens(index, inst, ranked, settings)
        warm = time.perf_counter() - t0
        top = [c.path for c in ranked]
        row = Row(inst.repo, prompt_tokens=tokens, map_tokens=count_tokens(repo_map), warm_s=warm, cold_s=cold)
        sizes = []
        for k in KS:
            row.ours[k] = recall(gold, top[:k])
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
        rows.append(row)
        if row.ours[8] < 1.0:
            misses.append(f"{inst.instance_id}: gold {gold} ranked {[top.index(g) + 1 if g in top else None for g in gold]}")
        if args.verbose:
            print(f"[{n}/{len(chosen)}] {inst.instance_id} R@8={row.ours[8]:.2f} "
                  f"tokens={tokens} warm={warm:.2f}s cold={cold:.1f}s", file=sys.stderr, flush=True)
    print_table(rows, args.no_bm25)
    if args.show_misses and misses:
        print("\nmissed at 8:")
        for line in misses:
            print("  " + line)
    overall = statistics.mean(r.ours[8] for r in rows)
    print(f"overall recall@8: {overall:.3f} ({len(rows)} instances)")
    return 0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def print_table(rows: list[Row], no_bm25: bool) -> None:
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.repo].append(r)
    groups_sorted = sorted(groups.items()) + [("OVERALL", rows)]
    head = (f"{'repo':<22}{'n':>4} | {'ours@1':>7}{'@3':>6}{'@5':>6}{'@8':>6} | {'+imp@1':>7}{'@3':>6}{'@5':>6}{'@8':>6}"
            f"{'size@8':>7} | {'bm25@1':>7}{'@3':>6}{'@5':>6}{'@8':>6} | {'tok med':>8}{'p95':>7} | {'warm s':>7}{'p95':>6}{'cold s':>7}")
    print(head)
    print("-" * len(head))
    for name, rs in groups_sorted:
        def m(attr: str, k: int, rs: list[Row] = rs) -> str:
            vals = [getattr(r, attr).get(k) for r in rs]
            vals = [v for v in vals if v is not None]
            return f"{statistics.mean(vals):.2f}" if vals else "-"
        toks = [float(r.prompt_tokens) for r in rs]
        warm = [r.warm_s for r in rs]
        print(f"{name:<22}{len(rs):>4} | {m('ours', 1):>7}{m('ours', 3):>6}{m('ours', 5):>6}{m('ours', 8):>6} | "
              f"{m('imports', 1):>7}{m('imports', 3):>6}{m('imports', 5):>6}{m('imports', 8):>6}"
              f"{statistics.mean(r.import_set for r in rs):>7.1f} | "
              f"{m('bm25', 1):>7}{m('bm25', 3):>6}{m('bm25', 5):>6}{m('bm25', 8):>6} | "
              f"{statistics.median(toks):>8.0f}{_pct(toks, 0.95):>7.0f}{_pct([float(r.map_tokens) for r in rs], 0.95):>8.0f} | "
              f"{statistics.median(warm):>7.2f}{_pct(warm, 0.95):>6.2f}{statistics.median(r.cold_s for r in rs):>7.1f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.localization_bench", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dataset", type=Path, required=True, help="SWE-bench-format JSONL")
    p.add_argument("--repos", type=Path, required=True, help="folder of git mirrors (<owner>+<name>/repo)")
    p.add_argument("--limit", type=int, default=0, help="only the first N matching instances")
    p.add_argument("--repo", action="append", help="only this owner/name (repeatable)")
    p.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    p.add_argument("--no-bm25", action="store_true", help="skip the BM25 reference column")
    p.add_argument("--show-misses", action="store_true", help="list instances with a gold file outside the top 8")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.limit < 0:
        print("localization_bench: --limit must be >= 0", file=sys.stderr)
        return 2
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
