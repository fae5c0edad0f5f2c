"""Run records for several configs on a handful of tasks, and the harness's reports for them.

The per-instance ``report.json`` files are built with the installed swebench's own grading
functions (``get_eval_tests_report``, ``get_resolution_status``) in the shape
``get_eval_report`` returns, and written where ``run_instance`` writes them; the run summary is
written by the harness's own ``make_run_report``. So ``eval.ingest`` reads what the harness
would leave on disk, not a guess at it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, ResolvedStatus
from swebench.harness.grading import get_eval_tests_report, get_resolution_status

TASKS = [
    "pallets__flask-4045", "pallets__flask-4992", "pallets__flask-5063",
    "psf__requests-1963", "psf__requests-2317",
    "sympy__sympy-13971", "sympy__sympy-18057", "sympy__sympy-20590",
]

# Harness verdicts per config; None = empty patch (the harness never runs it).
RESOLVED: dict[str, dict[str, bool | None]] = {
    "baseline": {"pallets__flask-4045": True, "pallets__flask-4992": False, "pallets__flask-5063": False,
                 "psf__requests-1963": False, "psf__requests-2317": True, "sympy__sympy-13971": False,
                 "sympy__sympy-18057": None, "sympy__sympy-20590": False},
    "static": {"pallets__flask-4045": True, "pallets__flask-4992": True, "pallets__flask-5063": False,
               "psf__requests-1963": False, "psf__requests-2317": True, "sympy__sympy-13971": False,
               "sympy__sympy-18057": None, "sympy__sympy-20590": True},
    "redo": {"pallets__flask-4045": False, "pallets__flask-4992": True, "pallets__flask-5063": True,
             "psf__requests-1963": True, "psf__requests-2317": True, "sympy__sympy-13971": True,
             "sympy__sympy-18057": False, "sympy__sympy-20590": True},
}
# Verdict sequences of each task's attempts (the last is the final verdict).
VERDICTS: dict[str, dict[str, list[str]]] = {
    "baseline": {t: ["Skipped"] for t in TASKS},
    "static": {**{t: ["Safe"] for t in TASKS}, "sympy__sympy-20590": ["Unsafe", "Safe"],
               "sympy__sympy-13971": ["Unsafe"], "sympy__sympy-18057": ["NoVerdict"]},
    "redo": {**{t: ["Safe"] for t in TASKS}, "pallets__flask-5063": ["Unsafe", "Safe"],
             "sympy__sympy-13971": ["Unsafe", "Safe"], "sympy__sympy-18057": ["Unsafe", "Unsafe", "Unsafe"]},
}
FIX_SCORES = {"pallets__flask-4045": 0.3, "pallets__flask-4992": 1.0, "pallets__flask-5063": 1.0,
              "psf__requests-1963": 1.0, "psf__requests-2317": 1.0, "sympy__sympy-13971": 0.9,
              "sympy__sympy-18057": 0.2, "sympy__sympy-20590": 1.0}
USAGE = {"baseline": (1000, 200, 0.01, 30.0), "static": (2000, 400, 0.02, 60.0),
         "redo": (4000, 800, 0.05, 120.0), "quick": (500, 100, 0.005, 10.0),
         "oracle-tests": (4000, 800, 0.05, 120.0)}


def repo_of(iid: str) -> str:
    owner, _, rest = iid.partition("__")
    return f"{owner}/{rest.rsplit('-', 1)[0]}"


def model_name(config: str) -> str:
    return f"fixgraph/{config}"


def patch_for(iid: str, attempt: int = 1) -> str:
    return (f"diff --git a/src/{iid}.py b/src/{iid}.py\n--- a/src/{iid}.py\n+++ b/src/{iid}.py\n"
            f"@@ -1 +1 @@\n-old\n+new {attempt}\n")


def record(config: str, run_id: str, iid: str, diff_path: Path) -> dict[str, Any]:
    no_critic = config == "baseline" or config not in VERDICTS
    verdicts = VERDICTS.get(config, {}).get(iid, ["Skipped"] if no_critic else ["Safe"])
    empty = RESOLVED.get(config, {}).get(iid, False) is None
    status = "empty" if empty else "patched"
    if config == "static" and iid == "sympy__sympy-18057":
        status = "failed"
    tin, tout, dollars, seconds = USAGE[config]
    scored = config in ("redo", "quick")
    fix = ({"fix_score": FIX_SCORES.get(iid, 1.0), "kind": "semantic" if iid == "sympy__sympy-13971" else "tests",
            "test_pass_rate": FIX_SCORES.get(iid, 1.0), "no_regression": 1.0, "code_quality": 1.0, "llm_score": None}
           if scored else {"fix_score": 0.0, "kind": "none"})
    attempts = [{"number": i + 1, "patch": "" if empty else patch_for(iid, i + 1), "verdict": v,
                 "findings": [{"source": "pyright", "message": "x"}] if v == "Unsafe" else [],
                 "score": fix} for i, v in enumerate(verdicts)]
    return {
        "instance_id": iid, "run_id": run_id, "config": config, "repo": repo_of(iid),
        "final": True, "status": status, "stop_reason": "done",
        "failed": "LLM server answered 500" if status == "failed" else "",
        "verdict": verdicts[-1], "fix_score": fix, "attempts": attempts, "n_attempts": len(attempts),
        "critic_flagged": "Unsafe" in verdicts, "files_read": ["src/x.py"], "reruns": [],
        "usage": {"input_tokens": tin, "output_tokens": tout, "dollars": dollars, "calls": 3, "by_node": {}},
        "seconds": seconds, "model_name_or_path": model_name(config), "diff_path": str(diff_path),
    }


def write_run(runs: Path, config: str, run_id: str, tasks: list[str] = TASKS) -> list[dict[str, Any]]:
    """Records, .diff files and the predictions JSONL of one run; returns the predictions."""
    preds_dir = runs / run_id / "predictions"
    (runs / run_id / "records").mkdir(parents=True, exist_ok=True)
    preds_dir.mkdir(parents=True, exist_ok=True)
    (runs / run_id / "run.json").write_text(json.dumps({"run_id": run_id, "config": config}))
    preds = []
    for iid in tasks:
        rec = record(config, run_id, iid, preds_dir / f"{iid}.diff")
        patch = rec["attempts"][-1]["patch"]
        (preds_dir / f"{iid}.diff").write_text(patch)
        (runs / run_id / "records" / f"{iid}.json").write_text(json.dumps(rec, indent=2, sort_keys=True))
        preds.append({"instance_id": iid, "model_name_or_path": model_name(config), "model_patch": patch})
    (preds_dir / f"{run_id}.jsonl").write_text("".join(json.dumps(p) + "\n" for p in preds))
    return preds


def harness_report(iid: str, resolved: bool) -> dict[str, Any]:
    """What ``get_eval_report(..., include_tests_status=True)`` returns for one instance."""
    f2p, p2p = [f"tests/test_{iid}.py::test_fix"], [f"tests/test_{iid}.py::test_old"]
    status_map = {f2p[0]: "PASSED" if resolved else "FAILED", p2p[0]: "PASSED"}
    tests = get_eval_tests_report(status_map, {"instance_id": iid, FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p})
    full = get_resolution_status(tests) == ResolvedStatus.FULL.value
    assert full == resolved
    return {iid: {"patch_is_None": False, "patch_exists": True, "patch_successfully_applied": True,
                  "resolved": full, "infra_failure": False, "tests_status": tests}}


@contextlib.contextmanager
def chdir(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def write_harness(workdir: Path, run_id: str, config: str, preds: list[dict[str, Any]],
                  summary_dir: Path | None = None, verdicts: dict[str, bool | None] | None = None) -> None:
    """Per-instance reports under ``workdir/logs/run_evaluation`` as ``run_instance`` writes them,
    and optionally the run summary written by the harness's own ``make_run_report``. ``verdicts``:
    each task's resolution (default: ``RESOLVED[config]``)."""
    for pred in preds:
        resolved = (RESOLVED[config] if verdicts is None else verdicts)[pred["instance_id"]]
        if resolved is None:  # empty patch: the harness does not run it
            continue
        folder = (workdir / "logs" / "run_evaluation" / run_id
                  / pred["model_name_or_path"].replace("/", "__") / pred["instance_id"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.json").write_text(json.dumps(harness_report(pred["instance_id"], resolved), indent=4))
    if summary_dir is not None:
        from swebench.harness.reporting import make_run_report

        with chdir(workdir), contextlib.redirect_stdout(None):
            make_run_report({p["instance_id"]: p for p in preds}, [{"instance_id": p["instance_id"]} for p in preds],
                            run_id, client=None, report_dir=str(summary_dir))


def build(tmp: Path, configs: tuple[str, ...] = ("baseline", "static", "redo"), with_quick: bool = True,
          stray_report: bool = True) -> Path:
    """runs/ with one run per config (run id ``t-<config>``); harness logs under tmp/logs.

    ``quick`` is a config with no harness results; the baseline's summary is written by the harness's
    ``make_run_report`` into its run folder; a stray report names a task no run has.
    """
    runs = tmp / "runs"
    for config in configs:
        run_id = f"t-{config}"
        preds = write_run(runs, config, run_id)
        write_harness(tmp, run_id, config, preds, summary_dir=runs / run_id if config == "baseline" else None)
    if with_quick:
        write_run(runs, "quick", "t-quick")
    if stray_report:
        folder = tmp / "logs" / "run_evaluation" / "t-redo" / "fixgraph__redo" / "pallets__flask-9999"
        folder.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps(harness_report("pallets__flask-9999", True), indent=4))
    return runs
