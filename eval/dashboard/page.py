"""One self-contained HTML page comparing configs run on the same tasks.

    python -m eval.dashboard RUNS_DIR -o dashboard.html [--baseline baseline] [--runs ID,ID] [--seed 0]

Resolved rates come from the official harness, or from the local grader (``eval.grade``) where
the records say so (``eval.ingest`` puts both in the records); each config shows which, and a
delta compares only tasks graded by the same one. The mean fix_score is the pipeline's own estimate and is labelled internal wherever it appears.
A config without harness results still shows its internal figures, marked as such.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from eval.dashboard import charts
from eval.dashboard.rundata import Run, RunsError, load_runs
from eval.dashboard.stats import Paired, bootstrap_delta_ci, mcnemar_exact, pair
from fixgraph.records import atomic_write

TEMPLATES = Path(__file__).resolve().parent / "templates"
RESAMPLES = 10_000


class DashboardError(Exception):
    """Bad input for the dashboard; one line for the user."""


# ---- per-config figures ---------------------------------------------------------------------


def resolved_of(rec: dict[str, Any]) -> bool | None:
    harness = rec.get("harness")
    if isinstance(harness, dict) and isinstance(harness.get("resolved"), bool):
        return harness["resolved"]
    return None


def grader_of(rec: dict[str, Any]) -> str | None:
    """"official" or "local": who graded the task's resolved verdict (None: nobody did)."""
    if resolved_of(rec) is None:
        return None
    return "local" if str(rec["harness"].get("grader") or "official").startswith("local") else "official"


def fix_score_of(rec: dict[str, Any]) -> tuple[float | None, str]:
    fs = rec.get("fix_score")
    if not isinstance(fs, dict):
        return None, "none"
    kind = str(fs.get("kind") or "none")
    value = fs.get("fix_score")
    if kind == "none" or not isinstance(value, int | float):
        return None, "none"
    return float(value), kind


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _attempts(rec: dict[str, Any]) -> list[dict[str, Any]]:
    att = rec.get("attempts")
    return [a for a in att if isinstance(a, dict)] if isinstance(att, list) else []


def n_attempts(rec: dict[str, Any]) -> int:
    n = rec.get("n_attempts")
    return int(n) if isinstance(n, int) else len(_attempts(rec))


def retry_causes(rec: dict[str, Any]) -> list[str]:
    """Why each attempt but the last was followed by another (agents/critic.py should_retry)."""
    causes = []
    for att in _attempts(rec)[:-1]:
        verdict = att.get("verdict")
        raw_score = att.get("score")
        score: dict[str, Any] = raw_score if isinstance(raw_score, dict) else {}
        if verdict == "CannotApply":
            causes.append("patch did not apply")
        elif verdict == "Unsafe":
            causes.append("judged Unsafe")
        elif score.get("kind") == "tests":
            causes.append("tests: fix_score under threshold")
        else:
            causes.append("fix_score under threshold")
    return causes


def retried_after_flag(rec: dict[str, Any]) -> bool:
    """True when the Critic judged an attempt Unsafe and another attempt followed it."""
    atts = _attempts(rec)
    first_unsafe = next((i for i, a in enumerate(atts) if a.get("verdict") == "Unsafe"), None)
    if first_unsafe is not None:
        return first_unsafe < len(atts) - 1
    return bool(rec.get("critic_flagged")) and n_attempts(rec) > 1


@dataclass
class ConfigView:
    index: int
    run: Run
    tasks: dict[str, dict[str, Any]]
    in_flight: int
    harness_n: int = 0
    harness_errors: int = 0  # the harness could not evaluate these (counted unresolved, as it does)
    resolved: int = 0
    graders: Counter[str] = field(default_factory=Counter)  # official | local -> tasks graded so
    fix_values: list[float] = field(default_factory=list)
    fix_semantic: int = 0
    status: Counter[str] = field(default_factory=Counter)
    tokens: list[float] = field(default_factory=list)
    dollars: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    attempts: Counter[int] = field(default_factory=Counter)
    flagged: int = 0
    flagged_retried: int = 0
    retry_resolved: int = 0
    retry_harness: int = 0
    retry_safe: int = 0
    flagged_final_unsafe: int = 0
    # Every retry, whatever caused it: a config whose retries all came from test results is not
    # a config that never retried.
    tasks_retried: int = 0
    retries: Counter[str] = field(default_factory=Counter)

    @property
    def name(self) -> str:
        return self.run.config

    @property
    def oracle(self) -> bool:
        """The hidden tests were in the loop: an upper bound for studying the Critic, not a result."""
        return "oracle-tests" in self.name or any(t.get("tests_source") == "oracle" for t in self.tasks.values())

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def n(self) -> int:
        return len(self.tasks)

    @property
    def harness_state(self) -> str:
        if self.harness_n == 0:
            return "none"
        return "complete" if self.harness_n == self.n else "partial"

    @property
    def grader(self) -> str:
        """Who produced the resolved count: "official", "local", "mixed", or "" (nobody)."""
        return "mixed" if len(self.graders) > 1 else next(iter(self.graders), "")

    @property
    def resolved_rate(self) -> float | None:
        return self.resolved / self.harness_n if self.harness_n else None

    @property
    def fix_mean(self) -> float | None:
        return statistics.fmean(self.fix_values) if self.fix_values else None

    def mean(self, name: str) -> float:
        values: list[float] = getattr(self, name)
        return statistics.fmean(values) if values else 0.0

    def total(self, name: str) -> float:
        return float(sum(getattr(self, name)))

    @property
    def attempts_mean(self) -> float:
        total = sum(self.attempts.values())
        return sum(k * v for k, v in self.attempts.items()) / total if total else 0.0


def config_view(index: int, run: Run) -> ConfigView:
    tasks = run.final_records()
    view = ConfigView(index=index, run=run, tasks=tasks, in_flight=len(run.records) - len(tasks))
    for rec in tasks.values():
        res = resolved_of(rec)
        if res is not None:
            view.harness_n += 1
            view.resolved += int(res)
            view.graders[grader_of(rec) or ""] += 1
            view.harness_errors += int(bool(rec["harness"].get("error")))
        value, kind = fix_score_of(rec)
        if value is not None:
            view.fix_values.append(value)
            view.fix_semantic += int(kind == "semantic")
        view.status[str(rec.get("status") or "unknown")] += 1
        raw_usage = rec.get("usage")
        usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
        view.tokens.append(_num(usage.get("input_tokens")) + _num(usage.get("output_tokens")))
        view.dollars.append(_num(usage.get("dollars")))
        view.seconds.append(_num(rec.get("seconds")))
        view.attempts[n_attempts(rec)] += 1
        causes = retry_causes(rec)
        view.tasks_retried += int(bool(causes))
        view.retries.update(causes)
        if rec.get("critic_flagged"):
            view.flagged += 1
            if retried_after_flag(rec):
                view.flagged_retried += 1
                view.retry_safe += int(rec.get("verdict") == "Safe")
                if res is not None:
                    view.retry_harness += 1
                    view.retry_resolved += int(res)
            if rec.get("verdict") == "Unsafe":
                view.flagged_final_unsafe += 1
    return view


# ---- comparisons against the baseline ---------------------------------------------------------


@dataclass
class Comparison:
    view: ConfigView
    common: int  # tasks finished by both
    paired: Paired | None  # on tasks both have harness results for
    p_value: float | None
    ci: tuple[float, float] | None
    per_task: dict[str, str]  # instance_id -> win | loss | tie (harness) or "" when not comparable
    fix_delta: float | None  # mean per-task fix_score difference (internal), tasks both scored
    fix_n: int
    note: str = ""  # tasks left out of the delta (other grader), or why there is none
    grader: str = ""  # whose verdicts the paired delta compares: "official" or "local"


def compare(base: ConfigView, other: ConfigView, seed: int) -> Comparison:
    """The paired comparison on common tasks both have a verdict for, from one grader only: the
    official harness's where there are such pairs, else the local grader's (a task graded by
    different graders, or by the other grader, is left out and counted in the note)."""
    common = sorted(set(base.tasks) & set(other.tasks))
    pairs: dict[str, list[tuple[str, bool, bool]]] = {"official": [], "local": []}
    crossed = 0
    fix_diffs: list[float] = []
    for iid in common:
        ra, rb = resolved_of(base.tasks[iid]), resolved_of(other.tasks[iid])
        ga, gb = grader_of(base.tasks[iid]), grader_of(other.tasks[iid])
        if ra is not None and rb is not None:
            if ga == gb and ga is not None:
                pairs[ga].append((iid, ra, rb))
            else:
                crossed += 1  # an official verdict and a local one are never one delta
        fa, _ = fix_score_of(base.tasks[iid])
        fb, _ = fix_score_of(other.tasks[iid])
        if fa is not None and fb is not None:
            fix_diffs.append(fb - fa)
    grader = "official" if pairs["official"] else "local"
    chosen = pairs[grader]
    left = crossed + len(pairs["local"] if grader == "official" else [])
    note = (f"{left} common task{'s' if left != 1 else ''} left out: graded by "
            f"{'different graders' if crossed else 'the local grader'}") if left else ""
    fix_delta = statistics.fmean(fix_diffs) if fix_diffs else None
    if not chosen:
        if note:
            note = f"not compared: {base.grader or 'no'} grader against {other.grader or 'no'} grader ({note})"
        return Comparison(other, len(common), None, None, None, {}, fix_delta, len(fix_diffs), note)
    a = [ra for _, ra, _ in chosen]
    b = [rb for _, _, rb in chosen]
    per_task = {iid: "win" if rb and not ra else "loss" if ra and not rb else "tie" for iid, ra, rb in chosen}
    paired = pair(a, b)
    return Comparison(
        view=other, common=len(common), paired=paired,
        p_value=mcnemar_exact(paired.wins, paired.losses),
        ci=bootstrap_delta_ci(a, b, resamples=RESAMPLES, seed=seed),
        per_task=per_task, fix_delta=fix_delta, fix_n=len(fix_diffs), note=note, grader=grader,
    )


# ---- formatting -----------------------------------------------------------------------------


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}%"


def pp(x: float) -> str:
    """Percentage points with a sign; a true zero has none."""
    v = 100 * x
    return "0.0 pp" if abs(v) < 0.05 else f"{v:+.1f} pp"


def pval(p: float | None) -> str:
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def money(x: float) -> str:
    return f"${x:.4f}" if x < 1 else f"${x:.2f}"


def tokens(x: float) -> str:
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


# ---- the page -------------------------------------------------------------------------------


def select_runs(runs: list[Run], wanted: str | None) -> list[Run]:
    if not wanted:
        return runs
    ids = [w.strip() for w in wanted.split(",") if w.strip()]
    by_id = {r.run_id: r for r in runs}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise DashboardError(f"--runs: no run {missing[0]!r} in the runs folder (have: {', '.join(by_id)})")
    return [by_id[i] for i in ids]


def pick_baseline(views: list[ConfigView], name: str | None) -> ConfigView:
    if name is None:
        # Not asked for one: the config called baseline, else (no such config) the first run.
        if not any(v.name == "baseline" for v in views):
            return views[0]
        name = "baseline"
    by_run = [v for v in views if v.run_id == name]
    if by_run:
        return by_run[0]
    by_config = [v for v in views if v.name == name]
    if len(by_config) > 1:
        latest = max(by_config, key=_recency)
        ids = ", ".join(v.run_id for v in by_config)
        print(f"dashboard: --baseline {name!r} matches runs {ids} (the same config); using the latest, "
              f"{latest.run_id} (pass --baseline RUN_ID to choose another)", file=sys.stderr)
        return latest
    if not by_config:
        have = ", ".join(f"{v.name} ({v.run_id})" for v in views)
        raise DashboardError(f"--baseline {name!r}: no run of that config or with that run id (have: {have})")
    return by_config[0]


def _recency(v: ConfigView) -> tuple[str, float]:
    """When the run last finished a task (records say), then when its records last changed."""
    finished = [str(r.get("finished_at") or "") for r in v.run.records.values()]
    records = v.run.path / "records"
    return max(finished, default=""), records.stat().st_mtime if records.is_dir() else 0.0


def _grader_mark(v: ConfigView) -> str:
    """What a resolved figure's label adds when the official harness did not produce it all."""
    return {"local": ", local", "mixed": ", mixed graders"}.get(v.grader, "")


def _label(v: ConfigView, views: list[ConfigView]) -> str:
    """The config name, or name plus run id when two runs share a config."""
    same = [w for w in views if w.name == v.name]
    return v.name if len(same) == 1 else f"{v.name} ({v.run_id})"


def _link(target: Path | None, out_dir: Path) -> str | None:
    if target is None or not target.is_file():
        return None
    return Path(os.path.relpath(target.resolve(), out_dir.resolve())).as_posix()


def _diff_file(run: Run, rec: dict[str, Any]) -> Path | None:
    # The run's own patch first: predictions/<id>.diff outside eval.run's layout is the latest
    # run's, maybe another run's.
    for own in (run.path / "patches" / f"{rec['instance_id']}.diff", run.predictions_dir / f"{rec['instance_id']}.diff"):
        if own.is_file():
            return own
    recorded = rec.get("diff_path")
    if isinstance(recorded, str) and recorded:
        path = Path(recorded)
        for cand in (path, run.path.parent.parent / path):
            if cand.is_file():
                return cand
    return None


def build_context(runs: list[Run], baseline: str | None, out: Path, seed: int) -> dict[str, Any]:
    views = [config_view(i, r) for i, r in enumerate(runs)]
    base = pick_baseline(views, baseline)
    # The baseline reads first everywhere; colours stay tied to the run, not the position.
    views = [base] + [v for v in views if v is not base]
    labels = {v.run_id: _label(v, views) for v in views}
    others = [v for v in views if v is not base]
    comps = [compare(base, v, seed) for v in others]
    out_dir = out.parent

    # Per-repo rows: tasks counted per config; resolved where the harness says.
    repos: dict[str, dict[str, dict[str, Any]]] = {}
    all_tasks: dict[str, str] = {}
    for v in views:
        for iid, rec in v.tasks.items():
            repo = str(rec.get("repo") or iid.rsplit("-", 1)[0].replace("__", "/"))
            all_tasks[iid] = repo
            cell = repos.setdefault(repo, {}).setdefault(v.run_id, {"n": 0, "h": 0, "resolved": 0, "fix": []})
            cell["n"] += 1
            res = resolved_of(rec)
            if res is not None:
                cell["h"] += 1
                cell["resolved"] += int(res)
            fs, _ = fix_score_of(rec)
            if fs is not None:
                cell["fix"].append(fs)
    repo_rows = []
    for repo in sorted(repos):
        cells = []
        for v in views:
            c = repos[repo].get(v.run_id, {"n": 0, "h": 0, "resolved": 0, "fix": []})
            cells.append({
                "run_id": v.run_id, "n": c["n"], "harness_n": c["h"], "resolved": c["resolved"],
                "rate": pct(c["resolved"] / c["h"]) if c["h"] else None,
                "fix": f"{statistics.fmean(c['fix']):.2f}" if c["fix"] else None,
            })
        deltas = []
        for comp in comps:
            outcomes = [comp.per_task[i] for i, r in all_tasks.items() if r == repo and i in comp.per_task]
            deltas.append({"run_id": comp.view.run_id, "wins": outcomes.count("win"),
                           "losses": outcomes.count("loss"), "ties": outcomes.count("tie"), "n": len(outcomes)})
        repo_rows.append({"repo": repo, "n": len({i for i, r in all_tasks.items() if r == repo}),
                          "cells": cells, "deltas": deltas})

    task_rows = []
    for iid in sorted(all_tasks, key=lambda i: (all_tasks[i], i)):
        cells = []
        for v in views:
            rec = v.run.records.get(iid)
            if rec is None:
                cells.append(None)
                continue
            fs, kind = fix_score_of(rec)
            res = resolved_of(rec)
            cells.append({
                "run_id": v.run_id, "final": bool(rec.get("final")),
                "status": str(rec.get("status") or "?"), "verdict": str(rec.get("verdict") or ""),
                "resolved": res, "fix": f"{fs:.2f}" if fs is not None else None, "fix_kind": kind,
                "attempts": n_attempts(rec), "flagged": bool(rec.get("critic_flagged")),
                "dollars": money(_num((rec.get("usage") or {}).get("dollars"))),
                "seconds": f"{_num(rec.get('seconds')):.0f}s",
                "diff": _link(_diff_file(v.run, rec), out_dir),
                "record": _link(v.run.record_paths.get(iid), out_dir),
                "outcome": next((c.per_task.get(iid, "") for c in comps if c.view is v), ""),
            })
        task_rows.append({"instance_id": iid, "repo": all_tasks[iid], "cells": cells})

    def lab(v: ConfigView) -> str:
        return labels[v.run_id]

    chart = {
        "resolved": charts.hbars(
            "resolved", "Resolved rate per config (official harness, or local grader where marked)",
            [(lab(v), v.resolved_rate, f"{pct(v.resolved_rate)} ({v.resolved}/{v.harness_n}{_grader_mark(v)})"
              if v.harness_n else "no harness results", v.index) for v in views], max_value=1.0),
        "fix": charts.hbars(
            "fix", "Mean fix_score per config (internal estimate, not ground truth)",
            [(lab(v), v.fix_mean, f"{v.fix_mean:.2f} ({len(v.fix_values)} scored)" if v.fix_mean is not None
              else "not scored", v.index) for v in views], max_value=1.0),
        "delta": charts.intervals(
            "delta", f"Delta in resolved rate vs {lab(base)}, with bootstrap 95% interval",
            [(lab(c.view), c.paired.delta, c.ci[0], c.ci[1], f"{pp(c.paired.delta)} [{pp(c.ci[0])}, {pp(c.ci[1])}]")
             for c in comps if c.paired is not None and c.ci is not None], fmt=pp),
        "outcomes": charts.stacked(
            "outcomes", f"Per-task outcome vs {lab(base)} (harness)",
            [(lab(c.view), [("win", c.paired.wins, "#55a868"), ("loss", c.paired.losses, "#c44e52"),
                            ("tie, both resolved", c.paired.both, "#8fb1d9"),
                            ("tie, neither", c.paired.neither, "#d0d0d0")])
             for c in comps if c.paired is not None]),
        "repos": charts.grouped(
            "repos", "Resolved rate per repository (harness; configs without results omitted)",
            [r["repo"].split("/")[-1] for r in repo_rows],
            [(lab(v), [(repos[r["repo"]][v.run_id]["resolved"] / repos[r["repo"]][v.run_id]["h"])
                       if v.run_id in repos[r["repo"]] and repos[r["repo"]][v.run_id]["h"] else None
                       for r in repo_rows], v.index) for v in views if v.harness_n],
            max_value=1.0, fmt=lambda x: f"{100 * x:.0f}%"),
        "dollars": charts.hbars("dollars", "Mean cost per task (US dollars)",
                                [(lab(v), v.mean("dollars"), money(v.mean("dollars")), v.index) for v in views]),
        "tokens": charts.hbars("tokens", "Mean tokens per task (input + output)",
                               [(lab(v), v.mean("tokens"), tokens(v.mean("tokens")), v.index) for v in views]),
        "seconds": charts.hbars("seconds", "Mean wall time per task (seconds)",
                                [(lab(v), v.mean("seconds"), f"{v.mean('seconds'):.0f}s", v.index) for v in views]),
        "attempts": charts.grouped(
            "attempts", "Attempts per task (number of tasks)",
            [str(k) for k in range(1, max([k for v in views for k in v.attempts] + [1]) + 1)],
            [(lab(v), [float(v.attempts.get(k, 0)) for k in range(1, max([k for w in views for k in w.attempts] + [1]) + 1)],
              v.index) for v in views], fmt=lambda x: f"{x:.0f}"),
        "critic": charts.stacked(
            "critic", "Critic flags: what followed a patch judged Unsafe",
            [(lab(v), [("retry resolved (harness)", v.retry_resolved, "#55a868"),
                       ("retry not resolved", v.retry_harness - v.retry_resolved, "#c44e52"),
                       ("retry, no harness result", v.flagged_retried - v.retry_harness, "#8fb1d9"),
                       ("no retry", v.flagged - v.flagged_retried, "#d0d0d0")])
             for v in views if v.flagged]),
    }
    # Charts with nothing to draw are left out rather than shown empty.
    shown = {k: c for k, c in chart.items() if 'class="mark' in str(c)}

    summary = {
        "baseline": base.run_id, "seed": seed, "resamples": RESAMPLES,
        "configs": [{
            "config": v.name, "run_id": v.run_id, "tasks": v.n, "in_flight": v.in_flight,
            "harness": v.harness_state, "grader": v.grader, "harness_tasks": v.harness_n, "resolved": v.resolved,
            "resolved_rate": v.resolved_rate, "fix_score_mean_internal": v.fix_mean,
            "fix_scored": len(v.fix_values), "mean_dollars": v.mean("dollars"),
            "mean_tokens": v.mean("tokens"), "mean_seconds": v.mean("seconds"),
            "attempts_mean": v.attempts_mean, "critic_flagged": v.flagged,
            "flagged_retried": v.flagged_retried, "tasks_retried": v.tasks_retried,
            "retries": dict(v.retries), "retry_resolved": v.retry_resolved,
        } for v in views],
        "comparisons": [{
            "run_id": c.view.run_id, "against": base.run_id, "common_tasks": c.common,
            "paired_tasks": c.paired.n if c.paired else 0,
            "wins": c.paired.wins if c.paired else None, "losses": c.paired.losses if c.paired else None,
            "ties": c.paired.ties if c.paired else None, "delta": c.paired.delta if c.paired else None,
            "p_value": c.p_value, "ci": list(c.ci) if c.ci else None, "fix_delta_internal": c.fix_delta,
            "grader": c.grader or None, "note": c.note,
        } for c in comps],
    }
    return {
        "views": views, "base": base, "comps": comps, "labels": labels, "repo_rows": repo_rows,
        "task_rows": task_rows, "charts": shown, "summary_json": Markup(_script_json(summary)),
        "n_tasks": len(all_tasks), "any_internal_only": any(v.harness_state != "complete" for v in views),
        "resamples": RESAMPLES, "seed": seed,
        "pct": pct, "pp": pp, "pval": pval, "money": money, "tokens": tokens,
    }


def _script_json(data: Any) -> str:
    # Inside <script>, "</" would end the element early.
    return json.dumps(data, sort_keys=True).replace("</", "<\\/")


def render(runs_dir: Path, out: Path, baseline: str | None = None, wanted: str | None = None,
           seed: int = 0) -> str:
    runs = select_runs(load_runs(runs_dir), wanted)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    ctx = build_context(runs, baseline, out, seed)
    return env.get_template("dashboard.html.j2").render(runs_dir=str(runs_dir), **ctx)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.dashboard", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, metavar="RUNS_DIR")
    parser.add_argument("-o", "--output", type=Path, default=Path("dashboard.html"))
    parser.add_argument("--baseline", default=None,
                        help="config name or run id to compare against (default: the config named "
                             "baseline, else the first run)")
    parser.add_argument("--runs", default=None, help="comma-separated run ids to show (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    args = parser.parse_args(argv)
    try:
        html = render(args.runs_dir, args.output, args.baseline, args.runs, args.seed)
    except (RunsError, DashboardError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    atomic_write(args.output, html)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
