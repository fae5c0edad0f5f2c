"""Put the official harness's verdicts into the run records.

    python -m eval.ingest RUNS_DIR [--harness-logs DIR ...]

For each run id R in RUNS_DIR this reads the harness's per-instance reports,
``<logs>/run_evaluation/R/<model>/<instance_id>/report.json``, and its run summary
(``<model>.R.json``, written to the harness's ``--report_dir``: ``RUNS_DIR/R`` when ``eval.run``
started the harness, else the folder it ran in), and adds to each task record::

    "harness": {"resolved": bool, "report": {...} | null, "source": "report.json" | "summary" | "empty patch",
                "grader": "official" | "local (venv), not the official harness"}

``grader`` is the report's or summary's own (``eval.grade`` marks everything it writes); a report
without one is the official harness's. The dashboard never puts the two in one delta.

A per-instance report wins over the summary. Tasks with an empty patch are never run by the
harness, which counts them unresolved; once a run has harness results they are marked so too.
A report for an instance the run does not have is warned about and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.dashboard.rundata import Run, RunsError, load_runs, read_json
from fixgraph.records import atomic_write

DEFAULT_LOGS = Path("logs/run_evaluation")
OFFICIAL = "official"


def grader_of(data: dict[str, Any]) -> str:
    """Who wrote a report entry or a summary: ``eval.grade``'s label, else the official harness."""
    grader = data.get("grader")
    return grader if isinstance(grader, str) and grader else OFFICIAL


@dataclass
class RunIngest:
    run_id: str
    reports: int = 0
    from_summary: int = 0
    empty: int = 0
    summary: Path | None = None
    skipped: list[str] = field(default_factory=list)
    with_harness: int = 0
    total: int = 0


def logs_root(path: Path) -> Path:
    """Accept the harness's ``run_evaluation`` folder, the ``logs`` folder above it, or the folder above that."""
    for cand in (path / "run_evaluation", path / "logs" / "run_evaluation"):
        if cand.is_dir():
            return cand
    return path


def find_reports(roots: list[Path], run_id: str,
                 models: set[str] | None = None) -> dict[str, tuple[Path, dict[str, Any]]]:
    """instance_id -> (path, the report's entry for it).

    ``models`` are the harness folder names of the run's ``model_name_or_path``: a report under
    another model folder means the harness run id was reused for other predictions, so it is not
    this run's verdict.
    """
    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    for root in roots:
        for path in sorted((root / run_id).glob("*/*/report.json")):
            iid = path.parent.name
            model = path.parent.parent.name
            if models and model not in models:
                _warn(f"{path}: harness run id {run_id!r} also holds predictions of model {model!r}, not "
                      f"this run's ({', '.join(sorted(models))}); skipped: use one harness run id per run")
                continue
            data = read_json(path)
            entry = data.get(iid) if isinstance(data, dict) else None
            if not isinstance(entry, dict) or "resolved" not in entry:
                _warn(f"{path}: not a harness report for {iid} (no {iid!r} entry with 'resolved'); skipped")
                continue
            found[iid] = (path, entry)
    return found


def find_summary(dirs: list[Path], run_id: str) -> tuple[Path, dict[str, Any]] | None:
    """The harness's run summary (``<model>.<run_id>.json``) or an sb-cli report for the run."""
    for folder in dirs:
        if not folder.is_dir():
            continue
        for pattern in (f"*.{run_id}.json", f"*__{run_id}.json"):
            for path in sorted(folder.glob(pattern)):
                data = read_json(path)
                if isinstance(data, dict) and isinstance(data.get("resolved_ids"), list):
                    return path, data
    return None


def ingest_run(run: Run, roots: list[Path], summary_dirs: list[Path]) -> RunIngest:
    result = RunIngest(run_id=run.run_id, total=len(run.records))
    models = {str(r["model_name_or_path"]).replace("/", "__") for r in run.records.values()
              if r.get("model_name_or_path")}
    reports = find_reports(roots, run.run_id, models)
    summary = find_summary([run.path, *summary_dirs], run.run_id)
    harness: dict[str, dict[str, Any]] = {}

    if summary is not None:
        result.summary, data = summary
        unresolved = set()
        for key in ("unresolved_ids", "empty_patch_ids", "error_ids", "completed_ids"):
            unresolved |= {str(i) for i in data.get(key) or []}
        resolved = {str(i) for i in data["resolved_ids"]}
        errors = {str(i) for i in data.get("error_ids") or []}
        for iid in sorted(resolved | unresolved):
            if iid not in run.records:
                result.skipped.append(iid)
                _warn(f"{result.summary}: instance {iid} is not in run {run.run_id}; skipped")
                continue
            harness[iid] = {"resolved": iid in resolved, "report": None, "source": "summary",
                            "error": iid in errors, "grader": grader_of(data)}
        atomic_write(run.path / "harness_summary.json", json.dumps(data, indent=2, sort_keys=True) + "\n")

    for iid, (path, entry) in sorted(reports.items()):
        if iid not in run.records:
            result.skipped.append(iid)
            _warn(f"{path}: instance {iid} is not in run {run.run_id}; skipped")
            continue
        harness[iid] = {"resolved": bool(entry["resolved"]), "report": entry, "source": "report.json",
                        "grader": grader_of(entry)}
        result.reports += 1
    result.from_summary = sum(1 for h in harness.values() if h["source"] == "summary")

    if harness:
        # The harness skips empty patches and counts them unresolved; say so rather than leave a gap.
        for iid, rec in run.records.items():
            if iid not in harness and rec.get("final") and not _has_patch(run, iid, rec):
                graders = {h.get("grader", OFFICIAL) for h in harness.values()}
                harness[iid] = {"resolved": False, "report": None, "source": "empty patch",
                                "grader": graders.pop() if len(graders) == 1 else OFFICIAL}
                result.empty += 1

    for iid, entry in harness.items():
        rec = dict(run.records[iid])
        if not rec.get("final"):
            _warn(f"{run.run_id}: {iid} is still in flight; its harness result is kept for later")
        rec["harness"] = entry
        run.records[iid] = rec
        atomic_write(run.record_paths[iid], json.dumps(rec, indent=2, sort_keys=True, default=str) + "\n")
    result.with_harness = sum(1 for rec in run.records.values() if isinstance(rec.get("harness"), dict))
    return result


def _has_patch(run: Run, iid: str, rec: dict[str, Any]) -> bool:
    diff = run.predictions_dir / f"{iid}.diff"
    if diff.is_file():
        return bool(diff.read_text(encoding="utf-8", errors="replace").strip())
    return rec.get("status") == "patched"


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.ingest", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, metavar="RUNS_DIR")
    parser.add_argument("--harness-logs", type=Path, action="append", default=None, metavar="DIR",
                        help="the harness's logs (logs/run_evaluation, or the folder holding it); "
                             "repeatable; default ./logs/run_evaluation")
    parser.add_argument("--summaries", type=Path, action="append", default=None, metavar="DIR",
                        help="where to look for the harness's run summaries besides RUNS_DIR/<run_id> "
                             "(default: the current folder and the folder above the logs)")
    args = parser.parse_args(argv)

    try:
        runs = load_runs(args.runs_dir)
    except RunsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    roots = [logs_root(p) for p in (args.harness_logs or [DEFAULT_LOGS])]
    summary_dirs = list(args.summaries or [Path.cwd(), *{r.parent.parent for r in roots}])
    known = {run.run_id for run in runs}
    for root in roots:
        if root.is_dir():
            for other in sorted(p.name for p in root.iterdir() if p.is_dir() and p.name not in known):
                _warn(f"{root / other}: harness results for run id {other!r}, which {args.runs_dir} does not have; skipped")
    any_found = False
    for run in runs:
        res = ingest_run(run, roots, summary_dirs)
        any_found = any_found or res.with_harness > 0
        where = f", summary {res.summary}" if res.summary else ""
        print(f"{run.run_id} ({run.config}): {res.reports} reports{where}, {res.empty} empty patches; "
              f"{res.with_harness} of {res.total} tasks have harness results")
    if not any_found:
        print(f"error: no harness results for any run under {', '.join(map(str, roots))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
