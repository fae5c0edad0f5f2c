"""How often the Critic blocks a right patch: its false alarms on SWE-bench Lite's gold patches.

    python -m eval.gold_critic --dataset ../shared/data/swebench_lite.jsonl --repos DIR \\
        [--stride K] [--limit N] [--shard I/N] [--phases static,replay,tests] [--backend local] \\
        [-o ROWS.jsonl] [--resume]

Every instance's ``patch`` (the reference fix, resolved by definition) goes through the Critic's
phases, each judged as the Critic judges it (no veto before evidence):

- ``static``: the differential static phase. ``gold_false_alarm_static`` counts the gold patches a
  finding sure without running vetoes (``scoring.verdict.weigh.certain``); ``static_any`` counts
  those with any finding at all: what a veto on the static phase alone would flag. REDO's
  static phase (eval/redo_static.py) runs in the same run, on the same worktree:
  ``redo_static_false_alarm``.
- ``replay``: the issue's own code run with the patch against the base (``scoring.runtime.replay``,
  no LLM); a gold patch it finds an introduced, changed or persisting crash in is a false alarm.
- ``tests``: the selected existing tests of the patched code (no reproduction test: none is
  written without an LLM; no hidden test), with the static suspicions traced and weighed
  (``scoring.verdict.weigh``); a false alarm is a suspicion the tests confirm, a runtime finding
  from a crashed test, or a regression (``no_regression`` < 1). Without a reproduction test the
  fix_score has no ``test_pass_rate`` (the loop gets it from the Reproducer or the LLM), so the
  threshold is not applied here; the row keeps the score parts. ``tests_unpinned`` leaves out the
  rejections caused only by existing tests the instance's hidden test_patch edits (the gold patch
  changes what they pin; evaluation side only).
- ``end_to_end`` (with ``tests``): both phases as the loop decides. A sure finding vetoes; else
  the tests decide where they ran (as ``tests_scored``); where none ran, a suspicion decides
  (``untested``).

Each phase's line is ``gold_false_alarm_<phase>=<share> (<rejected>/<judged>)``, with every
rejected case listed under it. A phase that could not run on a row (no environment, the issue has
no code) does not count that row; the line says how many ran.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import git

from eval.options import add_options, check_options, dataset_map, row_repo, sample, take
from eval.redo_static import redo_static
from eval.rows import (
    instance_key,
    mirrored_rows,
    open_rows,
    previous_rows,
    run_tag,
    run_terminable,
    write_row,
)
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree
from fixgraph.state import Finding
from scoring.execution.outcomes import own_outcome
from scoring.execution.runner import make_runner
from scoring.execution.testenv import SuiteRunner
from scoring.runtime import replay
from scoring.runtime.findings import evidence, findings_of
from scoring.static import differential as static
from scoring.verdict import fix_score, weigh
from scoring.verdict.fix_score import W_QUALITY, W_REGRESSION, W_TESTS
from scoring.verdict.judge import InputError

PHASES = ("static", "replay", "tests")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m eval.gold_critic", description=(__doc__ or "").split("\n")[0])
    add_options(p)
    p.add_argument("--instances", default="",
                   help="comma-separated instance ids: judge only these (after --stride; e.g. the rows whose static "
                        "phase found a suspicion, to run their tests)")
    p.add_argument("--limit", type=int, default=0,
                   help="judge only the first N instances (after --stride, taken from each repository in turn)")
    p.add_argument("--phases", default="static", help=f"comma-separated, of {', '.join(PHASES)}")
    p.add_argument("--config", default="redo", help="the run config (configs/NAME.toml)")
    p.add_argument("--backend", choices=("venv", "docker", "local"), default=None,
                   help="the test backend for replay and tests (default: the config's)")
    p.add_argument("--cache-dir", type=Path, default=None, help="worktrees (default: a temporary folder)")
    p.add_argument("--built-only", action="store_true",
                   help="only instances whose test environment is already built under the cache dir (venv backend)")
    p.add_argument("--report", action="store_true",
                   help="only print the figures of the rows in --output (several files' rows concatenated)")
    return p


def _static(cfg: RunConfig, cmd: list[str], wt: Worktree, patch: str, static_cache: Path) -> dict[str, Any]:
    r = redo_static(cmd, wt, patch)
    s = static.analyze_patch(wt, patch, settings=cfg.critic, cache_dir=static_cache)
    sure = [f for f in s.new if weigh.certain(f)]
    return {"redo": {"unsafe": r.unsafe, "new": r.new_messages[:10], "seconds": r.seconds},
            "status": s.status, "reason": s.reason, "seconds": s.seconds,
            "certain": [dict(f) for f in sure], "suspicions": [dict(f) for f in s.new if not weigh.certain(f)]}


def _tests(runner: SuiteRunner, cfg: RunConfig, inst: Instance, wt: Worktree, patch: str,
           suspicions: list[dict[str, Any]]) -> dict[str, Any]:
    start = time.monotonic()
    texts = {f: wt.read(f) or "" for f in sorted({str(s.get("file", "")) for s in suspicions if s.get("file")})}
    outcome = own_outcome(runner, inst.task(), wt, patch, [], cfg.regression, trace=weigh.trace_specs([Finding(**f) for f in suspicions], texts))
    crashes = findings_of(evidence(outcome, patch, cfg.critic.repro_crashes), cfg.regression.runtime_scope)
    weighed = weigh.weigh([Finding(**f) for f in suspicions], ran=outcome.runnable, lines=outcome.lines,
                          crashes=outcome.regression_crashes + outcome.repro_crashes,
                          texts=texts, why_not=outcome.reason)
    score = fix_score.compute(outcome, 1.0, None)
    regressed = outcome.regression_ran and (score.get("no_regression") or 0.0) < 1.0
    confirmed = [f for f in weighed if f.get("status") == "confirmed"]
    return {"ran": outcome.regression_ran, "reason": outcome.reason[:300],
            "rejected": bool(confirmed or crashes or regressed),
            "weighed": [dict(f) for f in weighed], "crashes": [dict(f) for f in crashes],
            "broken": outcome.broken()[:10], "no_regression": score.get("no_regression"),
            "tests_run": len(outcome.pass_to_pass_before), "seconds": round(time.monotonic() - start, 2)}


def _judge(args: argparse.Namespace, cfg: RunConfig, cmd: list[str], phases: set[str], repos: RepoCache,
           runner: SuiteRunner | None, inst: Instance, static_cache: Path) -> dict[str, Any]:
    rec: dict[str, Any] = {"instance_id": inst.instance_id, "repo": inst.repo}
    try:
        # Runs side by side (shards, phases) each have their own worktree.
        tag = "-".join(sorted(phases)) + f"-{run_tag(args)}"
        wt = repos.worktree(inst.repo, inst.base_commit, f"gold-{inst.repo_slug}-{tag}")
        wt.apply(inst.patch)
    except (WorkspaceError, git.GitCommandError, PatchError) as exc:
        rec["skipped"] = str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else type(exc).__name__
        return rec
    try:
        if "static" in phases or "tests" in phases:
            try:
                rec["static"] = _static(cfg, cmd, wt, inst.patch, static_cache)
            except static.StaticAnalysisUnavailable as exc:  # pyright cut by its timeout on a busy machine
                rec["skipped"] = f"static analysis did not finish: {exc}"
                return rec
        if "replay" in phases and runner is not None:
            rec["replay"] = replay.replay_issue(runner, inst.task(), wt, inst.patch,
                                                timeout_s=cfg.critic.replay_timeout_s).to_dict()
        if "tests" in phases and runner is not None:
            rec["tests"] = _tests(runner, cfg, inst, wt, inst.patch, rec["static"]["suspicions"])
    finally:
        wt.reset()
    return rec


def _verdicts(rec: dict[str, Any], threshold: float = 0.8) -> dict[str, bool | None]:
    """Each phase's verdict on one row: True a false alarm, False passed, None not judged."""
    st, rp, ts = rec.get("static"), rec.get("replay"), rec.get("tests")
    ok = st is not None and st["status"] == "ok"
    return {
        "redo_static": bool(st["redo"]["unsafe"]) if st is not None else None,
        "static": bool(st["certain"]) if ok and st is not None else None,
        "static_any": bool(st["certain"] or st["suspicions"]) if ok and st is not None else None,
        "replay": bool(rp["summaries"]) if rp is not None and rp.get("ran") else None,
        "tests": bool(ts["rejected"]) if ts is not None and ts.get("ran") else None,
        "end_to_end": _end_to_end(rec, threshold) if ts is not None and ok and st is not None else None,
    }


def _end_to_end(rec: dict[str, Any], threshold: float) -> bool | None:
    """The loop's decision with both phases: a sure finding vetoes; else the tests decide where
    they ran (runtime evidence, or a regression that puts fix_score with a passing reproduction
    test under ``threshold``); where they did not, a suspicion decides (``untested``); a patch with neither tests
    nor findings is left to the LLM's score, not judged here (None)."""
    st, ts = rec["static"], rec["tests"]
    if st["certain"]:
        return True
    if ts.get("ran"):
        return bool(ts["rejected"]) and _below_threshold(rec, threshold)
    return True if st["suspicions"] else None


def _why(rec: dict[str, Any], phase: str) -> str:
    if phase == "end_to_end":
        if rec["static"]["certain"]:
            return "sure: " + _why(rec, "static")
        if rec["tests"].get("ran"):
            return "tests: " + _why(rec, "tests")
        return f"untested ({rec['tests'].get('reason', '')[:100]}): " + _why(rec, "static_any")
    if phase in ("static", "static_any"):
        fs = rec["static"]["certain"] + ([] if phase == "static" else rec["static"]["suspicions"])
        return "; ".join(f"{f.get('source')}/{f.get('rule')} {f.get('file')}:{f.get('line')}: "
                         f"{str(f.get('message', '')).splitlines()[0][:120]}" for f in fs[:3])
    if phase == "redo_static":
        return "; ".join(m.splitlines()[0][:120] for m in rec["static"]["redo"]["new"][:3])
    if phase == "replay":
        return str(rec["replay"]["note"])[:300]
    ts = rec["tests"]
    parts = [f"{f.get('rule')} {f.get('file')}:{f.get('line')} {f.get('status')}" for f in ts["weighed"]
             if f.get("status") == "confirmed"]
    parts += [str(f.get("message", ""))[:150] for f in ts["crashes"][:2]]
    if ts.get("no_regression") is not None and ts["no_regression"] < 1.0:
        parts.append(f"no_regression={ts['no_regression']:.3f}: " + ", ".join(ts["broken"][:3]))
    return "; ".join(parts)


_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)")


def edited_by_test_patch(test: str, test_patch: str) -> bool:
    """Whether the instance's ``test_patch`` edits the existing test ``test``: a changed line inside
    its function (the hunk's header or the last ``def`` above the line names it) or naming it. A
    gold patch that changes what that test pins breaks its old version, which the Critic runs.
    Evaluation side only: the test_patch is hidden data."""
    name = re.split(r"[\s\[(]", test.split("::")[-1].strip(), maxsplit=1)[0]
    if not name:
        return False
    word = re.compile(rf"\b{re.escape(name)}\b")
    current = ""
    for line in test_patch.splitlines():
        if line.startswith(("+++", "---", "diff ")):
            current = ""
        elif line.startswith("@@"):
            header = _DEF.match(line.split("@@")[-1]) if line.count("@@") >= 2 else None
            current = header.group(1) if header else ""
        elif line[:1] in (" ", "+", "-"):
            found = _DEF.match(line[1:])
            current = found.group(1) if found else current
            if line[:1] != " " and (current == name or word.search(line)):
                return True
    return False


def _pinned(rec: dict[str, Any], test_patches: dict[str, str]) -> bool:
    """A tests-phase rejection only for existing tests the gold test_patch edits."""
    ts = rec.get("tests") or {}
    broken = ts.get("broken") or []
    patch = test_patches.get(rec["instance_id"], "")
    return bool(broken) and not _runtime_evidence(ts) and all(edited_by_test_patch(t, patch) for t in broken)


def _runtime_evidence(ts: dict[str, Any]) -> bool:
    """The tests phase saw a crash finding or confirmed a suspicion (not only a regression)."""
    return bool(ts.get("crashes")) or any(f.get("status") == "confirmed" for f in ts.get("weighed", []))


def _below_threshold(rec: dict[str, Any], threshold: float) -> bool:
    ts = rec["tests"]
    if _runtime_evidence(ts):
        return True
    nr = ts.get("no_regression")
    return nr is not None and fix_score.weighted(1.0, float(nr), 1.0) < threshold


def report(recs: list[dict[str, Any]], phases: set[str], test_patches: dict[str, str] | None = None,
           threshold: float = 0.8) -> None:
    shown = [p for p in ("static", "static_any", "redo_static", "replay", "tests", "end_to_end")
             if (p.startswith(("static", "redo")) and ("static" in phases or "tests" in phases)) or p in phases
             or (p == "end_to_end" and "tests" in phases)]
    judged = [r for r in recs if "skipped" not in r]
    print(f"rows: {len(recs)} ({len(recs) - len(judged)} skipped: cannot check out or apply); "
          f"repositories: {len({r['repo'] for r in judged})}")
    for phase in shown:
        verdicts = [(r, _verdicts(r, threshold)[phase]) for r in judged]
        ran = [(r, v) for r, v in verdicts if v is not None]
        bad = [r for r, v in ran if v]
        share = len(bad) / len(ran) if ran else 0.0
        name = {"static_any": "static_any (any finding: a veto on the static phase)",
                "redo_static": "redo_static",
                "end_to_end": "end_to_end (a sure finding; else the tests, as tests_scored; else an untested suspicion)",
                }.get(phase, phase)
        print(f"gold_false_alarm_{phase}={share:.3f} ({len(bad)}/{len(ran)})  {name}")
        for r in bad:
            print(f"    {r['instance_id']}: {_why(r, phase)}")
    if test_patches is not None and "tests" in shown:
        ran = [r for r in judged if _verdicts(r)["tests"] is not None]
        bad = [r for r in ran if _verdicts(r)["tests"]]
        pinned = [r for r in bad if _pinned(r, test_patches)]
        rest = len(bad) - len(pinned)
        print(f"gold_false_alarm_tests_unpinned={rest / len(ran) if ran else 0.0:.3f} ({rest}/{len(ran)})  "
              f"tests, leaving out the {len(pinned)} rejected only by existing tests the gold test_patch edits: "
              + (", ".join(r["instance_id"] for r in pinned) or "none"))
        # The loop's score with the reproduction test passing, as a right patch's should: only a
        # regression deep enough to bring it under the threshold, or runtime evidence, rejects.
        scored = [r for r in bad if _below_threshold(r, threshold)]
        print(f"gold_false_alarm_tests_scored={len(scored) / len(ran) if ran else 0.0:.3f} ({len(scored)}/{len(ran)})  "
              f"tests, a regression counted only where fix_score with a passing reproduction test "
              f"({W_TESTS:g} + {W_REGRESSION:g}*no_regression + {W_QUALITY:g}) is under {threshold:g}")
        for r in scored:
            print(f"    {r['instance_id']}: {_why(r, 'tests')}")
    for phase in shown:
        secs = sorted(_seconds(r, phase) for r in judged if _verdicts(r, threshold)[phase] is not None)
        if secs:
            print(f"median_s_{phase}={secs[len(secs) // 2]:.2f}")


def _seconds(rec: dict[str, Any], phase: str) -> float:
    if phase == "redo_static":
        return float(rec["static"]["redo"]["seconds"])
    if phase in ("static", "static_any"):
        return float(rec["static"]["seconds"])
    if phase == "end_to_end":
        return float(rec["static"]["seconds"]) + float(rec["tests"]["seconds"])
    return float(rec[phase]["seconds"])


def _built(cfg: RunConfig, inst: Instance) -> bool:
    """Whether the venv backend's environment for ``inst`` is built and usable."""
    path = cfg.cache_dir / "envs" / f"{inst.repo.replace('/', '+')}__{inst.version}" / "env.json"
    try:
        return bool(json.loads(path.read_text()).get("ok"))
    except (OSError, ValueError, AttributeError):
        return False


def _round_robin(rows: list[dict[str, Any]], dataset: dict[str, Instance]) -> list[dict[str, Any]]:
    """The same rows, one repository after another in turn: a run cut short (or ``--limit``) still
    spans every repository."""
    by_repo: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_repo.setdefault(dataset[row["instance_id"]].repo, []).append(row)
    queues = list(by_repo.values())
    out: list[dict[str, Any]] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out += [q[i] for q in queues if i < len(q)]
    return out


def run(args: argparse.Namespace) -> int:
    phases = {p.strip() for p in args.phases.split(",") if p.strip()}
    if not phases or phases - set(PHASES):
        raise InputError(f"--phases: expected some of {', '.join(PHASES)}, got {args.phases!r}")
    shard = check_options(args)
    cfg = load_config(args.config, overrides={"tests.backend": args.backend} if args.backend else None)
    dataset, only = dataset_map(args)
    skipped: dict[str, int] = {}
    rows = mirrored_rows([{"instance_id": i} for i in dataset], dataset, args.repos, only, skipped)
    rows = _round_robin(sample(rows, row_repo(dataset), args.stride), dataset)
    wanted = {i.strip() for i in args.instances.split(",") if i.strip()}
    if wanted:
        unknown = sorted(wanted - {r["instance_id"] for r in rows})
        if unknown:
            raise InputError(f"--instances: not among the chosen instances (dataset, mirrors, --only, --stride): "
                             f"{', '.join(unknown[:5])}")
        rows = [r for r in rows if r["instance_id"] in wanted]
    if args.built_only:
        rows = [r for r in rows if _built(cfg, dataset[r["instance_id"]])]
    rows = take(rows, args.limit, shard)
    if not rows:
        raise InputError("no instance with a mirror to judge")
    previous = previous_rows(args.output, instance_key) if args.resume or args.report else {}
    if args.report:
        report([previous[r["instance_id"]] for r in rows if r["instance_id"] in previous], phases,
               {i: inst.test_patch for i, inst in dataset.items()}, cfg.critic.fix_score_threshold)
        return 0
    cmd = static.pyright_command(cfg.critic)
    static.pyright_version(cmd)
    work = Path(tempfile.mkdtemp(prefix="gold-critic-"))
    repos = RepoCache((args.cache_dir or work).resolve(), mirrors=args.repos)
    runner = make_runner(cfg.tests, cfg.cache_dir.resolve()) if phases & {"replay", "tests"} else None
    out = open_rows(args.output, args.resume)
    recs: list[dict[str, Any]] = []
    print(f"judging {len(rows)} gold patches, phases {sorted(phases)}", file=sys.stderr)
    try:
        for n, row in enumerate(rows, 1):
            inst = dataset[row["instance_id"]]
            rec = previous.get(inst.instance_id)
            if rec is None:
                rec = _judge(args, cfg, cmd, phases, repos, runner, inst, work / "static")
                write_row(out, rec)
            recs.append(rec)
            v = _verdicts(rec)
            print(f"[{n}/{len(rows)}] {inst.instance_id} "
                  + " ".join(f"{k}={'-' if x is None else 'X' if x else 'ok'}" for k, x in v.items()), file=sys.stderr)
    except KeyboardInterrupt:
        print(f"interrupted: the figures below cover the {len(recs)} rows judged so far", file=sys.stderr)
    finally:
        if out is not None:
            out.close()
        shutil.rmtree(work, ignore_errors=True)
    report(recs, phases, {i: inst.test_patch for i, inst in dataset.items()}, cfg.critic.fix_score_threshold)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_terminable(run, parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
