"""How many of SWEDE's runtime-error positives could the repository's existing tests reveal at all?

    python -m eval.runtime_ceiling --predictions FILE [FILE ...] --dataset ../shared/data/swebench_lite.jsonl \\
        [--repos DIR] [--only owner/name,...] [--critic-rows ROWS.jsonl ...]

An evaluation-side reading of the labels ``eval.critic_bench`` scores against (it reads the
instance's ``FAIL_TO_PASS`` and ``PASS_TO_PASS``, as benchmarks may; the pipeline never does).
A positive's label comes from the harness's log of the instance's hidden test files. The runtime
column (``ours_static+runtime``) can add a true positive only where an existing test, one that
passed at the base, raises a non-assertion exception with a frame in a file the patch touched
(``scoring.runtime.findings``). So each positive is put in one class, from the tests its log names, the
exception each raised and the frames under it:

- ``p2p_runtime_touched``: a ``PASS_TO_PASS`` test (an existing test that passes at the base and
  with the gold patch) raises a non-assertion exception, and a frame in a touched file is in its
  traceback (for a test named only in pytest's summary line: anywhere in the log). The only class
  the runtime column can reveal from the harness's own test files;
- ``p2p_runtime_elsewhere``: such a test raises, but no frame of a touched file is shown (a
  recursion in code the patch did not change, a test harness that breaks on a newer Python): a
  regression, not a runtime finding;
- ``f2p_only``: only ``FAIL_TO_PASS`` tests raise (tests the instance adds or changes: they call
  APIs or behaviour that only the hidden tests ask for);
- ``unknown``: the log's excerpt and tail name no failing test with its exception (logs are cut).

A test of another file can still reveal a patch's crash (the selection runs files the harness
did not), so the figure is a ceiling for the harness's files, not for every test of the
repository; ``unknown`` rows are counted as revealable to keep it an upper bound. With
``--critic-rows`` (critic_bench ``-o`` rows), only the rows they judged count, and those the static
phase already flags are counted as caught. Last line: ``ceiling_tp=<n> ceiling_F1=<f> needed_tp=<n> positives=<n>``: the most true
positives the runtime column could reach (static TP, every revealable positive it misses, and
the positives the runtime column caught through tests outside the harness's files),
the F1 that gives with the static phase's false positives and no new ones, and the true
positives an F1 of 0.60 needs at those false positives.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.critic_bench import label
from eval.options import add_options, check_options, dataset_map
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import find_mirror
from scoring.execution.choose_tests import is_test_file
from scoring.execution.specs import patch_files
from scoring.runtime.findings import NOT_RUNTIME
from scoring.verdict.judge import InputError, load_predictions, run_reporting_errors

TARGET_F1 = 0.60
CLASSES = ("p2p_runtime_touched", "unknown_touched", "p2p_runtime_elsewhere", "f2p_only", "unknown_elsewhere")
REVEALABLE = ("p2p_runtime_touched", "unknown_touched")
# A failing test's header: pytest's `____ Class.test_x[p] ____`, sympy's `____ path.py:test_x ____`.
_HEADER = re.compile(r"^_{3,} (\S+?) _{3,}$", re.M)
# pytest's summary: `FAILED path::test - TypeError: ...` (the type may be cut: `- Typ...`).
_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+)(?:.*? - (\S+?)(?::|\.\.\.|$))?", re.M)
_FRAME = re.compile(r'File "([^"]+)", line \d+|^(\S+\.py):\d+: ', re.M)
# The exception that ended a traceback: `TypeError: ...`, pytest's `E   TypeError: ...`.
_EXC = re.compile(r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit|Warning|Interrupt|Failed))\b", re.M)


@dataclass
class Failure:
    test: str  # as the log names it
    exc: str  # exception type ("" when the log does not say)
    frames: list[str] = field(default_factory=list)  # None of these: from a summary line only
    summary_only: bool = False


def failures(text: str) -> list[Failure]:
    """Failing tests the log text names, with their exception and the frames under them. The text
    before the first header (the excerpt starts mid-traceback) is a failure of an unnamed test."""
    out: list[Failure] = []
    heads = list(_HEADER.finditer(text))
    cuts = [(None, 0, heads[0].start() if heads else len(text))]
    cuts += [(m.group(1), m.end(), heads[i + 1].start() if i + 1 < len(heads) else len(text))
             for i, m in enumerate(heads)]
    for test, start, end in cuts:
        body = text[start:end]
        excs = _EXC.findall(body)
        frames = [a or b for a, b in _FRAME.findall(body)]
        if test is not None or (excs and frames):
            out.append(Failure(test or "", excs[-1].rsplit(".", 1)[-1] if excs else "", frames))
    named = {f.test.replace(".", "::"): f for f in out if f.test}
    for test, exc in _SUMMARY.findall(text):
        # A summary line without the type: the failure's own section may have it.
        block = next((f for t, f in named.items() if test.endswith("::" + t) or test == t), None)
        if not exc and block is not None:
            out.append(Failure(test, block.exc, block.frames))
        else:
            out.append(Failure(test, exc.rsplit(".", 1)[-1], summary_only=True))
    return out


def is_runtime(exc: str) -> bool:
    if not exc or exc.startswith(("As", "assert")):  # AssertionError, cut or whole
        return False
    return exc not in NOT_RUNTIME


def which(test: str, ids: list[str]) -> bool:
    """Does a test the log names (``path::Class::test[p]``, ``Class.test[p]``, sympy's
    ``path.py:test``, cut at a space) stand for one of ``ids``?"""
    if ":" in test and "::" not in test:  # sympy: path.py:test_x; the dataset names test_x
        test = test.rsplit(":", 1)[1]
    elif "::" not in test:  # a pytest header: Class.test_x[p]
        test = test.replace(".", "::")
    return any(i == test or i.startswith(test) or i.endswith("::" + test) or (i.split("::")[-1] == test)
               for i in ids)


def touched_files(patch: str) -> list[str]:
    return [f for f in patch_files(patch) if f.endswith(".py") and not is_test_file(f)]


def in_touched(frames: list[str], touched: list[str]) -> bool:
    return any(fr == t or fr.endswith("/" + t) for fr in frames for t in touched)


def classify(row: dict[str, Any], inst: Instance) -> tuple[str, str]:
    """(class, the test that decided it) for one positive row."""
    log = row.get("log") or {}
    text = f"{log.get('error_excerpt') or ''}\n{log.get('log_tail') or ''}"
    touched = touched_files(row.get("model_patch") or "")
    all_frames = [a or b for a, b in _FRAME.findall(text)]
    fails = [f for f in failures(text) if is_runtime(f.exc)]

    def touches(f: Failure) -> bool:
        return in_touched(all_frames if f.summary_only else f.frames, touched)

    p2p = [f for f in fails if f.test and which(f.test, inst.PASS_TO_PASS)]
    for f in p2p:
        if touches(f):
            return "p2p_runtime_touched", f.test
    # A runtime error of an unnamed test in a touched file may be an existing test's: counted as
    # revealable, to keep the ceiling an upper bound.
    unnamed = [f for f in fails if not f.test and touches(f)]
    if unnamed:
        return "unknown_touched", ""
    if p2p:
        return "p2p_runtime_elsewhere", p2p[0].test
    f2p = [f for f in fails if f.test and which(f.test, inst.FAIL_TO_PASS)]
    if f2p:
        return "f2p_only", f2p[0].test
    if in_touched(all_frames, touched):
        return "unknown_touched", ""
    return "unknown_elsewhere", ""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.runtime_ceiling", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--predictions", type=Path, nargs="+", required=True, help="labelled predictions JSONL file(s)")
    add_options(p, without={"stride", "shard", "output", "resume"}, repos_required=False)
    p.add_argument("--critic-rows", type=Path, nargs="*", default=[],
                   help="critic_bench -o rows: the static phase's verdicts, and the runtime column's where it ran")
    p.add_argument("--static-tp", type=int, default=-1,
                   help="the static phase's true positives on these rows when no --critic-rows cover them")
    p.add_argument("--static-fp", type=int, default=-1, help="the static phase's false positives on these rows")
    p.add_argument("-v", "--verbose", action="store_true", help="list every positive with its class")
    return p


def run(args: argparse.Namespace) -> int:
    check_options(args)
    dataset, only = dataset_map(args)
    critic: dict[tuple[str, str], dict[str, Any]] = {}
    for path in args.critic_rows:
        if not path.is_file():
            raise InputError(f"--critic-rows: no such file: {path}")
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
                critic[(rec["system"], rec["instance_id"])] = rec
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    counts: Counter[str] = Counter()
    caught_static: Counter[str] = Counter()
    negatives = static_fp = runtime_tp = runtime_fp = beyond = 0
    lines: list[str] = []
    for path in args.predictions:
        for row in load_predictions(path):
            inst = dataset.get(row["instance_id"])
            truth = label(row)
            if truth is None or inst is None or (only and inst.repo not in only):
                continue
            if args.repos is not None and find_mirror(args.repos, inst.repo) is None:
                continue
            rec = critic.get((row.get("system", ""), inst.instance_id))
            if critic and rec is None:  # with critic rows: the rows they judged, and only those
                continue
            static = bool(rec and (rec.get("ours") or {}).get("unsafe"))
            runtime = bool(rec and (rec.get("runtime") or {}).get("unsafe"))
            if not truth:
                negatives += 1
                static_fp += static
                runtime_fp += runtime and not static
                continue
            kind, test = classify(row, inst)
            counts[kind] += 1
            caught_static[kind] += static
            runtime_tp += runtime and not static
            # Caught by a test outside the harness's files: beyond the classes' reach, counted as seen.
            beyond += runtime and not static and kind not in REVEALABLE
            if args.verbose:
                lines.append(f"  {row.get('system', '')[-4:]} {inst.instance_id:32s} {kind:22s} "
                             f"{'static ' if static else ''}{'runtime ' if runtime else ''}{test[:70]}")
    positives = sum(counts.values())
    if not positives:
        raise InputError("no labelled positives to classify")
    out = [f"positives: {positives}; negatives: {negatives}"
           + (f"; critic rows matched: {sum(1 for _ in critic)}" if critic else "")]
    for kind in CLASSES:
        out.append(f"  {kind:22s} {counts[kind]:4d} ({counts[kind] / positives:.0%})"
                   + (f", static phase flags {caught_static[kind]}" if critic else ""))
    out += lines
    static_tp = sum(caught_static.values()) if critic else args.static_tp
    fp = static_fp if critic else args.static_fp
    if static_tp < 0 or fp < 0:
        out.append("(pass --critic-rows, or --static-tp and --static-fp, for the F1 ceiling)")
        static_tp, fp = 0, 0
    revealable = sum(counts[k] for k in REVEALABLE)
    missed = revealable - (sum(caught_static[k] for k in REVEALABLE) if critic else 0)
    # Without per-row static verdicts assume none of the revealable rows is a static TP: the most
    # the runtime column could add.
    ceiling_tp = min(positives, static_tp + missed + beyond)
    ceiling_f1 = 2 * ceiling_tp / (ceiling_tp + fp + positives) if positives else 0.0
    needed = TARGET_F1 * (fp + positives) / (2 - TARGET_F1)
    out.append(f"static phase: TP {static_tp} FP {fp}; revealable in the harness's files: {revealable} "
               f"(p2p_runtime_touched + unknown_touched), of which the static phase misses {missed}")
    if critic:
        out.append(f"runtime column, where it ran: {runtime_tp} TP and {runtime_fp} FP beyond the static phase; "
                   f"{beyond} of those TPs from a test outside the harness's files (added to the ceiling)")
    out.append(f"F1 {TARGET_F1:.2f} at {fp} false positives needs {needed:.1f} true positives of {positives}")
    out.append(f"ceiling_tp={ceiling_tp} ceiling_F1={ceiling_f1:.3f} needed_tp={int(-(-needed // 1))} "
               f"positives={positives}")
    print("\n".join(out))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_reporting_errors(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
