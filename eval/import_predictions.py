"""A predictions file made elsewhere (another agent's run) as a run folder the dashboard reads.

    python -m eval.import_predictions FILE.jsonl --runs-dir runs [--run-id ID] [--tasks ID,ID,...]

Writes ``<runs-dir>/<run_id>/run.json`` (config: the file's ``system``, else its stem),
``records/<instance_id>.json`` (final, ``patched`` or ``empty``; no pipeline figures: the
dashboard shows those as not scored) and ``predictions/`` (a ``.diff`` per task and
``<run_id>.jsonl`` in the harness's format, ``model_name_or_path`` set to the run id, so that each
imported run is its own model folder in the harness's logs). Grade the folder's predictions with
``eval.grade`` (or the official harness), then ``eval.ingest`` and ``eval.dashboard``. A row's
official ``resolved``, when the file has one, is not imported: the grader decides.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from eval.dashboard.rundata import RUN_META
from fixgraph.records import atomic_write


class PredictionsImportError(Exception):
    """Bad input; one line for the user."""


def import_file(path: Path, runs_dir: Path, run_id: str = "", tasks: set[str] | None = None) -> tuple[str, int]:
    """Write the run folder; returns (run id, number of tasks)."""
    if not path.is_file():
        raise PredictionsImportError(f"predictions file not found: {path}")
    rows: list[dict[str, Any]] = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PredictionsImportError(f"{path}: line {n} is not JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise PredictionsImportError(f"{path}: line {n} has no instance_id")
        if tasks is None or row["instance_id"] in tasks:
            rows.append(row)
    if not rows:
        raise PredictionsImportError(f"{path}: no prediction to import" + (" among --tasks" if tasks is not None else ""))
    config = str(rows[0].get("system") or path.stem)
    run_id = run_id or config
    run_dir = runs_dir / run_id
    preds = run_dir / "predictions"
    seen: set[str] = set()
    lines = []
    for row in rows:
        iid = row["instance_id"]
        if iid in seen:
            continue
        seen.add(iid)
        patch = row.get("model_patch") or ""
        atomic_write(preds / f"{iid}.diff", patch)
        rec = {"instance_id": iid, "run_id": run_id, "config": config, "final": True,
               "status": "patched" if patch.strip() else "empty", "model_name_or_path": run_id,
               "repo": iid.rsplit("-", 1)[0].replace("__", "/"), "imported_from": str(path),
               "diff_path": str(preds / f"{iid}.diff")}
        atomic_write(run_dir / "records" / f"{iid}.json", json.dumps(rec, indent=2, sort_keys=True) + "\n")
        lines.append(json.dumps({"instance_id": iid, "model_name_or_path": run_id, "model_patch": patch}))
    atomic_write(preds / f"{run_id}.jsonl", "\n".join(lines) + "\n")
    atomic_write(run_dir / RUN_META, json.dumps({"run_id": run_id, "config": config, "imported_from": str(path),
                                                 "tasks": sorted(seen)}, indent=2) + "\n")
    return run_id, len(seen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.import_predictions", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("predictions", type=Path, metavar="FILE.jsonl")
    ap.add_argument("--runs-dir", type=Path, default=Path("runs"))
    ap.add_argument("--run-id", default="", help="default: the file's system (or its stem)")
    ap.add_argument("--tasks", default="", help="comma-separated instance ids to keep (default: all)")
    args = ap.parse_args(argv)
    tasks = {t.strip() for t in args.tasks.split(",") if t.strip()} or None
    try:
        run_id, n = import_file(args.predictions, args.runs_dir, args.run_id, tasks)
    except PredictionsImportError as exc:
        print(f"eval.import_predictions: error: {exc}", file=sys.stderr)
        return 2
    print(f"{run_id}: {n} tasks in {args.runs_dir / run_id}; next: python -m eval.grade --predictions "
          f"{args.runs_dir / run_id / 'predictions' / f'{run_id}.jsonl'} --run-id {run_id} "
          f"--report-dir {args.runs_dir / run_id} --resume")
    return 0


if __name__ == "__main__":
    sys.exit(main())
