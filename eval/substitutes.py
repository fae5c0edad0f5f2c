"""Which interpreter substitutes are safe: eval.gold_bench's rows under the spec's Python against its
rows under another minor, per (repo, version).

    python -m eval.substitutes --spec runs/gold_spec.jsonl --python 3.11=runs/gold_py3.11.jsonl \\
        [--python 3.10=runs/gold_py3.10.jsonl ...]

A pair (repo, version, substitute) is safe when every row of that (repo, version) measured under
both agrees: the gold patch's tests ran under both, the substitute's gold fix_score is at least
``MIN_FIX_SCORE``, and its test_pass_rate, no_regression and the empty patch's test_pass_rate equal
the spec's (the same verdicts, not only a high score). Each compared row is printed with its
figures; the table for ``scoring.execution.interpreters.SAFE_SUBSTITUTES`` follows. Last line:
``safe=<pairs> of=<pairs compared>``.
"""
from __future__ import annotations

import argparse
import errno
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from eval.rows import instance_key, previous_rows
from scoring.execution.specs import repo_specs

MIN_FIX_SCORE = 0.95
# The figures that must be equal under both interpreters (rounded: 2 of 3 tests is 0.667 in both).
SAME = ("gold_test_pass_rate", "gold_no_regression", "empty_test_pass_rate")


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """gold_bench's rows by instance (a line cut by a kill is skipped); a missing file is an error."""
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path))
    return previous_rows(path, instance_key)


def agrees(spec: dict[str, Any], sub: dict[str, Any]) -> tuple[bool, str]:
    """Whether the substitute's row says what the spec's says; else why not, in a few words."""
    if not spec.get("runnable"):
        return False, f"not runnable under the spec's Python: {str(spec.get('reason', ''))[:80]}"
    if not sub.get("runnable"):
        return False, f"not runnable: {str(sub.get('reason', ''))[:80]}"
    if (sub.get("gold_fix_score") or 0.0) < MIN_FIX_SCORE:
        return False, f"gold fix_score {sub.get('gold_fix_score')} < {MIN_FIX_SCORE}"
    for key in SAME:
        a, b = spec.get(key), sub.get(key)
        if (round(a, 3) if isinstance(a, float) else a) != (round(b, 3) if isinstance(b, float) else b):
            return False, f"{key} {a} under the spec's Python, {b} under the substitute"
    return True, "same verdicts"


def compare(spec_rows: dict[str, dict[str, Any]], subs: dict[str, dict[str, dict[str, Any]]],
            cache: Path) -> tuple[list[str], dict[tuple[str, str], dict[str, tuple[str, ...]]], int]:
    """The report's lines, the table of safe pairs, and how many pairs were compared."""
    lines = [f"{'instance':<32} {'spec':<5} {'sub':<5} {'fix_score':>9}  verdict"]
    votes: dict[tuple[str, str, str, str], list[bool]] = defaultdict(list)
    for minor, rows in sorted(subs.items()):
        for iid, sub in sorted(rows.items()):
            spec = spec_rows.get(iid)
            if spec is None:
                continue
            wanted = str((repo_specs(cache, spec["repo"], spec["version"]) or {}).get("python", "?"))
            if wanted == minor:
                continue
            ok, why = agrees(spec, sub)
            votes[(spec["repo"], spec["version"], wanted, minor)].append(ok)
            score = sub.get("gold_fix_score")
            lines.append(f"{iid:<32} {wanted:<5} {minor:<5} {score if score is not None else '-':>9}  "
                         f"{'safe' if ok else 'NOT safe'}: {why}")
    table: dict[tuple[str, str], dict[str, tuple[str, ...]]] = {}
    for (repo, version, wanted, minor), oks in sorted(votes.items()):
        if all(oks):
            entry = table.setdefault((repo, version), {})
            entry[wanted] = (*entry.get(wanted, ()), minor)
    return lines, table, len(votes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.substitutes", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--spec", type=Path, required=True, help="eval.gold_bench's rows under the spec's Python")
    ap.add_argument("--python", action="append", default=[], metavar="X.Y=ROWS",
                    help="eval.gold_bench --python X.Y's rows (repeatable)")
    ap.add_argument("--cache-dir", type=Path, default=Path(".cache/fixgraph"))
    args = ap.parse_args(argv)
    subs: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        spec_rows = read_rows(args.spec)
        for item in args.python:
            minor, _, path = item.partition("=")
            if not re.fullmatch(r"\d+\.\d+", minor) or not path:
                print(f"error: --python {item!r} is not X.Y=ROWS", file=sys.stderr)
                return 2
            subs[minor] = read_rows(Path(path))
    except OSError as exc:
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 2
    lines, table, compared = compare(spec_rows, subs, args.cache_dir)
    print("\n".join(lines))
    print("SAFE_SUBSTITUTES = {")
    for (repo, version), entry in sorted(table.items()):
        print(f"    ({repo!r}, {version!r}): {entry!r},")
    print("}")
    print(f"safe={sum(len(v) for e in table.values() for v in e.values())} of={compared}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
