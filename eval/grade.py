"""Grade a predictions file here, without Docker: a local stand-in for SWE-bench's harness.

    python -m eval.grade --predictions FILE.jsonl [--dataset PATH] [--repos DIR] [--workers N]
        [--run-id ID] [--resume] [--cache-dir DIR] [--logs DIR] [--report-dir DIR] [--reuse-from DIR]

Each prediction is graded as ``eval.local_harness`` says (the harness's steps, in this machine's
per-(repo, version) virtualenvs, graded by swebench's ``get_eval_report``). Per instance, as the
harness lays them out: ``<logs>/<run_id>/<model>/<instance_id>/report.json`` (the harness's
shape, plus ``grader``), ``test_output.txt``, ``patch.diff`` and ``grade.json`` (the local
status); one summary per run, ``<report-dir>/<model>.<run_id>.json``, in the harness's shape with
``not_runnable_ids`` apart. Every report and summary is marked ``grader: local (venv), not the
official harness``: its counts are never SWE-bench results. ``eval.ingest`` reads them as it reads
the harness's.

Unknown ids, duplicate ids and empty patches are each one line on stderr; the rest is graded (an
empty patch counts as the harness counts it, unresolved and not run). A run stopped midway resumes
with ``--resume``: what has a ``grade.json`` is not graded again. Last line:
``resolved=<r> unresolved=<u> patch_failed=<p> not_runnable=<n> empty=<e> of=<total>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from eval.local_harness import (
    NOT_RUNNABLE,
    PATCH_FAILED,
    RESOLVED,
    UNRESOLVED,
    Graded,
    Prediction,
    grade,
    grader_label,
)
from fixgraph.config import TestSettings
from fixgraph.dataset import DATASET_HELP, DatasetError, Instance, load_dataset_any
from fixgraph.records import atomic_write
from fixgraph.repo.workspace import RepoCache
from scoring.execution.runner import make_runner

DEFAULT_LOGS = Path("logs/run_evaluation")


class GradeError(Exception):
    """Input the grader cannot start from; one line for the user."""


@dataclass
class Loaded:
    predictions: list[Prediction]
    empty: list[Prediction] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line each: refused rows


def read_predictions(path: Path, known: set[str]) -> Loaded:
    """The predictions of a JSONL file (or a JSON list, or a JSON object keyed by id, as the
    harness takes them): refused rows are listed, one line each, and left out."""
    if not path.is_file():
        raise GradeError(f"predictions file not found: {path}")
    text = path.read_text(encoding="utf-8", errors="replace")
    rows: list[Any] = []
    if path.suffix == ".json":
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GradeError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
        rows = list(whole.values()) if isinstance(whole, dict) else whole if isinstance(whole, list) else []
    else:
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                rows.append(f"line {n}: not JSON ({exc.msg})")
    out = Loaded([])
    seen: set[str] = set()
    for n, row in enumerate(rows, 1):
        if isinstance(row, str):
            out.problems.append(f"{path}: {row}; skipped")
            continue
        iid = row.get("instance_id") if isinstance(row, dict) else None
        if not isinstance(iid, str) or not iid:
            out.problems.append(f"{path}: row {n} has no instance_id; skipped")
            continue
        if iid not in known:
            out.problems.append(f"{path}: unknown instance id {iid!r} (not in the dataset); skipped")
            continue
        if iid in seen:
            out.problems.append(f"{path}: duplicate instance id {iid!r} (row {n}); the first one is graded")
            continue
        seen.add(iid)
        patch = row.get("model_patch")
        pred = Prediction(iid, str(row.get("model_name_or_path") or "unknown"), patch if isinstance(patch, str) else "")
        if not pred.patch.strip():
            out.problems.append(f"{path}: {iid}: empty patch; not run, counted unresolved as the harness counts it")
            out.empty.append(pred)
        else:
            out.predictions.append(pred)
    return out


def model_dir(model: str) -> str:
    return model.replace("/", "__")


def instance_dir(logs: Path, run_id: str, pred: Prediction) -> Path:
    return logs / run_id / model_dir(pred.model) / pred.instance_id


def read_grade(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / "grade.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("status") else None


def write_grade(folder: Path, pred: Prediction, graded: Graded, label: str) -> dict[str, Any]:
    """The instance's files, grade.json last (its presence means graded)."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write(folder / "patch.diff", pred.patch)
    if graded.log:
        atomic_write(folder / "test_output.txt", graded.log)
    if graded.report:
        atomic_write(folder / "report.json", json.dumps({pred.instance_id: {**graded.report, "grader": label}},
                                                        indent=4) + "\n")
    rec = {"instance_id": pred.instance_id, "model_name_or_path": pred.model, "grader": label, **graded.record()}
    atomic_write(folder / "grade.json", json.dumps(rec, indent=2) + "\n")
    return rec


def reuse(src: Path, dst: Path, pred: Prediction, label: str) -> bool:
    """Copy another run's grade of the same patch, by the same grader, into ``dst`` (not graded yet)."""
    done = read_grade(src)
    if done is None or done.get("grader") != label or read_grade(dst) is not None:
        return False
    try:
        if (src / "patch.diff").read_text(encoding="utf-8") != pred.patch:
            return False
    except OSError:
        return False
    dst.mkdir(parents=True, exist_ok=True)
    for name in ("patch.diff", "test_output.txt", "report.json"):
        if (src / name).is_file():
            atomic_write(dst / name, (src / name).read_text(encoding="utf-8"))
    atomic_write(dst / "grade.json", json.dumps({**done, "reused_from": str(src)}, indent=2) + "\n")
    return True


def summary(label: str, run_id: str, total: int, loaded: Loaded, grades: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The harness's run summary (``<model>.<run_id>.json``), plus what it cannot run here apart."""
    def ids(status: str) -> list[str]:
        return sorted(i for i, g in grades.items() if g["status"] == status)

    resolved, unresolved, failed, not_runnable = ids(RESOLVED), ids(UNRESOLVED), ids(PATCH_FAILED), ids(NOT_RUNNABLE)
    empty = sorted(p.instance_id for p in loaded.empty)
    submitted = sorted({*grades, *empty, *(p.instance_id for p in loaded.predictions)})
    return {
        "grader": label, "run_id": run_id,
        "total_instances": total, "submitted_instances": len(submitted),
        "completed_instances": len(resolved) + len(unresolved), "resolved_instances": len(resolved),
        "unresolved_instances": len(unresolved), "empty_patch_instances": len(empty),
        "error_instances": len(failed), "not_runnable_instances": len(not_runnable),
        "completed_ids": sorted(resolved + unresolved), "incomplete_ids": sorted(set(submitted) - set(grades) - set(empty)),
        "empty_patch_ids": empty, "submitted_ids": submitted, "resolved_ids": resolved,
        "unresolved_ids": unresolved, "error_ids": failed, "patch_failed_ids": failed,
        "not_runnable_ids": {i: grades[i].get("reason", "") for i in not_runnable},
        "schema_version": 2,
    }


@dataclass
class GradeRun:
    """Where and how a run is graded."""

    run_id: str
    instances: dict[str, Instance]
    repos: Path | None
    cache_dir: Path
    logs: Path = DEFAULT_LOGS
    report_dir: Path = Path(".")
    workers: int = 1
    resume: bool = False
    backend: str = "venv"
    timeout_s: float = 1800.0
    progress: bool = True
    network: bool = False  # the tests may reach the network, as in the harness's containers
    reuse_from: Path | None = None  # another run's logs (<dir>/<model>/<instance>/): same patch, same grade
    no_specs: bool = False  # every env inferred from its repository, swebench's specs not asked

    @property
    def label(self) -> str:
        return grader_label(self.backend) + (", envs inferred (--no-specs)" if self.no_specs else "")


def grade_predictions(cfg: GradeRun, loaded: Loaded,
                      on_done: Callable[[str, dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Grade what ``loaded`` holds; write every instance's files and the run's summary (one per
    model); returns the summary of all of it. Raises :class:`GradeError` on a run id already
    graded without ``resume``."""
    grades: dict[str, dict[str, Any]] = {}
    todo: list[Prediction] = []
    for pred in loaded.predictions:
        reused = cfg.reuse_from is not None and reuse(cfg.reuse_from / model_dir(pred.model) / pred.instance_id,
                                                      instance_dir(cfg.logs, cfg.run_id, pred), pred, cfg.label)
        done = read_grade(instance_dir(cfg.logs, cfg.run_id, pred))
        if done is not None:
            if not cfg.resume and not reused:
                raise GradeError(f"run id {cfg.run_id!r} already has grades under {cfg.logs / cfg.run_id}; "
                                 "pass --resume to finish it, or another --run-id")
            grades[pred.instance_id] = done
        else:
            todo.append(pred)
    settings = TestSettings(backend=cfg.backend, timeout_s=cfg.timeout_s,  # type: ignore[arg-type]
                            cpu_s=int(cfg.timeout_s * 2), network_isolation=not cfg.network)
    runner = make_runner(settings, cfg.cache_dir)
    if cfg.no_specs and cfg.backend == "venv":
        from scoring.execution.envs import VenvEnvs
        from scoring.execution.runner import SubprocessRunner

        envs = VenvEnvs(cfg.cache_dir / "envs", cfg.cache_dir, settings, specs=lambda _repo, _version: None)
        runner = SubprocessRunner(settings, cfg.cache_dir, envs, "venv")
    cache = RepoCache(cfg.cache_dir, cfg.repos)
    bar = tqdm(total=len(loaded.predictions), initial=len(grades), desc=f"grading {cfg.run_id}", unit="pred",
               disable=not cfg.progress, file=sys.stderr)

    def one(pred: Prediction) -> tuple[Prediction, dict[str, Any]]:
        inst = cfg.instances[pred.instance_id]
        graded = grade(inst, pred, cache, runner, settings, cfg.cache_dir,
                       f"grade-{pred.instance_id}-{uuid.uuid4().hex[:8]}")
        return pred, write_grade(instance_dir(cfg.logs, cfg.run_id, pred), pred, graded, cfg.label)

    try:
        with ThreadPoolExecutor(max_workers=max(1, cfg.workers), thread_name_prefix="grade") as pool:
            for fut in as_completed([pool.submit(one, p) for p in todo]):
                pred, rec = fut.result()
                grades[pred.instance_id] = rec
                if on_done:
                    on_done(pred.instance_id, rec)
                bar.set_postfix_str(f"{pred.instance_id}: {rec['status']}", refresh=False)
                bar.update(1)
    finally:
        bar.close()
    out = summary(cfg.label, cfg.run_id, len(cfg.instances), loaded, grades)
    for model in sorted({p.model for p in [*loaded.predictions, *loaded.empty]}):
        mine = Loaded([p for p in loaded.predictions if p.model == model], [p for p in loaded.empty if p.model == model])
        ids = {p.instance_id for p in mine.predictions}
        cfg.report_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(cfg.report_dir / f"{model_dir(model)}.{cfg.run_id}.json",
                     json.dumps(summary(cfg.label, cfg.run_id, len(cfg.instances), mine,
                                        {i: g for i, g in grades.items() if i in ids}), indent=4) + "\n")
    return out


def headline(s: dict[str, Any]) -> str:
    return (f"resolved={s['resolved_instances']} unresolved={s['unresolved_instances']} "
            f"patch_failed={s['error_instances']} not_runnable={s['not_runnable_instances']} "
            f"empty={s['empty_patch_instances']} of={s['submitted_instances']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m eval.grade", description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--predictions", type=Path, required=True, help="the harness's predictions file (JSONL or JSON)")
    ap.add_argument("--dataset", help=DATASET_HELP)
    ap.add_argument("--repos", type=Path, default=None, help="folder of local repository mirrors")
    ap.add_argument("--workers", type=int, default=1, help="predictions graded at once")
    ap.add_argument("--run-id", default="", help="default: local-<predictions file's stem>")
    ap.add_argument("--resume", action="store_true", help="finish a run stopped midway; nothing is graded twice")
    ap.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("FIXGRAPH_CACHE_DIR", ".cache/fixgraph")))
    ap.add_argument("--logs", type=Path, default=DEFAULT_LOGS, help=f"per-instance reports (default {DEFAULT_LOGS})")
    ap.add_argument("--report-dir", type=Path, default=Path("."), help="where the run's summary goes")
    ap.add_argument("--backend", choices=["venv", "local"], default="venv",
                    help="venv: an env per (repo, version), as the harness's images; local: this interpreter")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per test run (the harness's default)")
    ap.add_argument("--reuse-from", type=Path, default=None,
                    help="another run's logs folder (<dir>/<model>/<instance_id>/): a prediction graded there "
                         "with the same patch by the same grader is copied, not graded again")
    ap.add_argument("--network", action="store_true",
                    help="let the tests reach the network, as the harness's containers do (requests' tests call "
                         "httpbin.org); off by default: the predictions are code from elsewhere")
    ap.add_argument("--no-specs", action="store_true",
                    help="venv backend: every env inferred from the repository's own files (scoring.execution.infer), "
                         "swebench's specs not asked: how far inference reaches on the twelve repositories")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        if args.workers < 1:
            raise GradeError("--workers must be at least 1")
        if args.repos is not None and not args.repos.is_dir():
            raise GradeError(f"--repos {args.repos} is not a directory")
        instances = {i.instance_id: i for i in load_dataset_any(args.dataset, args.cache_dir)}
        loaded = read_predictions(args.predictions, set(instances))
        for line in loaded.problems:
            print(f"warning: {line}", file=sys.stderr)
        if not loaded.predictions and not loaded.empty:
            raise GradeError(f"no prediction of {args.predictions} can be graded")
        cfg = GradeRun(run_id=args.run_id or f"local-{args.predictions.stem}", instances=instances, repos=args.repos,
                       cache_dir=args.cache_dir, logs=args.logs, report_dir=args.report_dir, workers=args.workers,
                       resume=args.resume, backend=args.backend, timeout_s=args.timeout,
                       progress=not args.no_progress, reuse_from=args.reuse_from,
                       network=args.network, no_specs=args.no_specs)
        out = grade_predictions(cfg, loaded)
    except (GradeError, DatasetError) as exc:
        print(f"eval.grade: error: {exc}", file=sys.stderr)
        return 2
    for iid, reason in out["not_runnable_ids"].items():
        print(f"not runnable here: {iid}: {reason[:200]}")
    print(f"grader: {cfg.label}")
    print(headline(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
