"""A task whose environment this machine cannot build, end to end through graph.py: what the run
says before its first LLM call, and what it delivers with and without ``--require-tests``.

    python -m eval.no_tests_bench --dataset ../shared/data/swebench_lite.jsonl --repos MIRRORS \\
        [--task matplotlib__matplotlib-24149] [--beside sympy__sympy-20442] \\
        [--predictions ../shared/data/lite_predictions/moatless_20240609_gpt4o.jsonl] [--cache-dir DIR]

The machine is made to lack matplotlib's build libraries for the run only (pkg-config is pointed
at an empty folder: FreeType and Qhull are not found). ``--task``'s model replays a real agent's
patch from ``--predictions`` (one the harness did not resolve); ``--beside`` is a task whose env
builds, with the gold patch replayed, so the set is not stopped outright for having no runnable
task. Both run through ``graph.py`` against a loopback OpenAI-compatible server, twice: as is,
then with ``--require-tests``. Printed per run: the lines graph.py said before its first task
event, then per task the record's status, score kind and fix_score, and whether a ``.diff`` was
written. Last line: ``as_is=<task's status>/<kind>/<diff> require_tests=<status>/<kind>/<diff>``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from eval.fixtures.oracle import oracle_script
from eval.hidden import test_file_from_test_patch
from eval.options import add_options, load_instances
from fixgraph.dataset import DatasetError, Instance, select
from fixgraph.repo.workspace import RepoCache
from scoring.verdict.judge import InputError

ROOT = Path(__file__).resolve().parent.parent
PREDICTIONS = Path("../shared/data/lite_predictions/moatless_20240609_gpt4o.jsonl")


class ByTask:
    """One scripted model per task: a request goes to the task whose problem statement it quotes."""

    def __init__(self, scripts: dict[str, dict[str, list[dict[str, Any]]]], statements: dict[str, str]):
        self.responders = {iid: ScriptResponder(s) for iid, s in scripts.items()}
        self.marks = {iid: text.strip()[:120] for iid, text in statements.items()}

    def __call__(self, tool: str, body: dict[str, Any]) -> dict[str, Any]:
        text = json.dumps(body.get("messages"))
        for iid, mark in self.marks.items():
            if json.dumps(mark)[1:-1] in text:
                return self.responders[iid](tool, body)
        raise KeyError("a request that quotes no task's problem statement")


def agent_patch(path: Path, instance_id: str) -> str:
    """An unresolved prediction of ``instance_id`` from an agent's JSONL (harness outcome beside it)."""
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.get("instance_id") == instance_id and row.get("model_patch") and row.get("resolved") is False:
            return row["model_patch"]
    raise DatasetError(f"{path}: no unresolved prediction of {instance_id}")


def scripts(insts: list[Instance], patch: str, repos: Path, cache: Path) -> dict[str, dict[str, Any]]:
    """Evaluation side: each task's replies, its own test file as the reproduction test."""
    cache_repos = RepoCache(cache, repos)
    out: dict[str, dict[str, Any]] = {}
    for n, inst in enumerate(insts):
        wt = cache_repos.worktree(inst.repo, inst.base_commit, f"no-tests-{inst.instance_id}")
        try:
            repro = test_file_from_test_patch(inst, wt)
        finally:
            cache_repos.remove_worktree(inst.repo, wt)
        replayed = inst.model_copy(update={"patch": patch}) if n == 0 else inst
        out[inst.instance_id] = oracle_script(replayed, repro)
    return out


def run_graph(ds: str, ids: list[str], repos: Path, cache: Path, work: Path, url: str, extra: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE"))}
    (work / "no-pc").mkdir(parents=True, exist_ok=True)
    env.update(OPENAI_API_KEY="sk-no-tests-bench", OPENAI_BASE_URL=url, EVAL_MODE="true",
               FIXGRAPH_CACHE_DIR=str(cache), FIXGRAPH_LOCAL_SERVERS="",
               PKG_CONFIG_PATH="", PKG_CONFIG_LIBDIR=str(work / "no-pc"))
    proc = subprocess.run([sys.executable, str(ROOT / "graph.py"), "--tasks", ",".join(ids), "--dataset", str(ds),
                           "--repos", str(repos.resolve()), "--no-progress", "--run-id", work.name, *extra],
                          cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    print(f"  exit {proc.returncode}")
    return proc.stderr


def report(work: Path, ids: list[str], stderr: str) -> str:
    """Print what the run said before its first task and each task's outcome; the first task's cell."""
    lines = stderr.splitlines()
    first = next((n for n, line in enumerate(lines) if any(t in line for t in ids)), len(lines))
    for line in lines[:first]:
        print(f"  said: {line}")
    cell = ""
    for iid in ids:
        rec_path = next((p for p in (work / "runs").rglob(f"{iid}.json")), None)
        rec = json.loads(rec_path.read_text()) if rec_path else {}
        attempts = rec.get("attempts") or [{}]
        score = attempts[-1].get("score") or {}
        diff = any(work.rglob(f"predictions/**/{iid}.diff")) or (work / "predictions" / f"{iid}.diff").exists()
        status, kind = rec.get("status", "no record"), score.get("kind", "none")
        print(f"  {iid}: status={status} kind={kind} fix_score={score.get('fix_score')} diff={'yes' if diff else 'no'}"
              + (f" ({rec.get('failed')})" if rec.get("failed") else ""))
        cell = cell or f"{status}/{kind}/{'diff' if diff else 'no-diff'}"
    return cell


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.no_tests_bench", description=(__doc__ or "").split("\n")[0])
    add_options(p, without=("only", "stride", "shard", "output", "resume"))
    p.add_argument("--task", default="matplotlib__matplotlib-24149", help="the task whose env cannot be built")
    p.add_argument("--beside", default="sympy__sympy-20442", help="a task whose env builds, run in the same set")
    p.add_argument("--predictions", type=Path, default=PREDICTIONS, help="an agent's predictions with harness outcomes")
    p.add_argument("--cache-dir", type=Path, help="environments and clones (default: a temporary folder)")
    args = p.parse_args(argv)
    try:
        insts = select(load_instances(args), f"{args.task},{args.beside}")
        patch = agent_patch(args.predictions, args.task)
    except (InputError, DatasetError, OSError, json.JSONDecodeError) as exc:
        print(f"no_tests_bench: {exc}", file=sys.stderr)
        return 2
    ids = [i.instance_id for i in insts]
    dataset = str(Path(args.dataset).resolve()) if Path(args.dataset).is_file() else args.dataset
    with tempfile.TemporaryDirectory(prefix="no-tests-") as tmp:
        cache = args.cache_dir or Path(tmp) / "cache"
        replies = scripts(insts, patch, args.repos, cache)
        responder = ByTask(replies, {i.instance_id: i.problem_statement for i in insts})
        cells = []
        with FakeLLMServer(responder, models=("gpt-4o-mini",)) as srv:
            for name, extra in (("as_is", []), ("require_tests", ["--require-tests"])):
                print(f"{name}: graph.py --tasks {','.join(ids)}{' ' + ' '.join(extra) if extra else ''}")
                work = Path(tmp) / name
                work.mkdir()
                cells.append(report(work, ids, run_graph(dataset, ids, args.repos, cache, work, srv.base_url, extra)))
    print(f"as_is={cells[0]} require_tests={cells[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
