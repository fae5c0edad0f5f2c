"""Reading a runs folder: one sub-folder per run id, each with its task records.

The layout is :class:`fixgraph.records.RunStore`'s; ``eval.run`` adds ``run.json`` (which config
a run id belongs to) and puts the run's predictions in ``<run_id>/predictions/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_META = "run.json"


class RunsError(Exception):
    """The runs folder cannot be read; one line for the user."""


@dataclass
class Run:
    run_id: str
    path: Path
    config: str
    records: dict[str, dict[str, Any]]  # instance_id -> record
    record_paths: dict[str, Path]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def predictions_dir(self) -> Path:
        return self.path / "predictions"

    def final_records(self) -> dict[str, dict[str, Any]]:
        return {iid: rec for iid, rec in self.records.items() if rec.get("final")}


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


def load_run(path: Path) -> Run | None:
    """The run stored in ``path``, or None when it holds no task record."""
    records: dict[str, dict[str, Any]] = {}
    paths: dict[str, Path] = {}
    for rec_path in sorted((path / "records").glob("*.json")):
        rec = read_json(rec_path)
        if not isinstance(rec, dict) or not isinstance(rec.get("instance_id"), str):
            continue  # a torn or foreign file; the runner rewrites records atomically
        records[rec["instance_id"]] = rec
        paths[rec["instance_id"]] = rec_path
    if not records:
        return None
    meta = read_json(path / RUN_META)
    meta = meta if isinstance(meta, dict) else {}
    configs = {str(r.get("config")) for r in records.values() if r.get("config")}
    config = str(meta.get("config") or (sorted(configs)[0] if configs else path.name))
    return Run(run_id=path.name, path=path, config=config, records=records, record_paths=paths, meta=meta)


def load_runs(runs_dir: Path) -> list[Run]:
    if not runs_dir.is_dir():
        raise RunsError(f"runs folder not found: {runs_dir}")
    runs = [run for sub in sorted(runs_dir.iterdir()) if sub.is_dir() and (run := load_run(sub))]
    if not runs:
        raise RunsError(f"no runs in {runs_dir} (expected <run_id>/records/<instance_id>.json)")
    return runs
