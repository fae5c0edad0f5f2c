"""Does any of the evaluation's hidden data reach the pipeline? A canary says.

    python -m eval.canary_bench --dataset ../shared/data/swebench_lite.jsonl --repos DIR \
        [--instances pallets__flask-4992,pytest-dev__pytest-5227,sympy__sympy-20590] [--control]

A unique string is planted in the four evaluation fields (``patch``, ``test_patch``,
``FAIL_TO_PASS``, ``PASS_TO_PASS``) of real Lite instances, every other byte unchanged, and the
whole graph runs on them with a scripted model whose replies come from the task side only (the
top file of the pipeline's own ranking, a probe test, a one-line edit). Then every request sent to
the model and every file the run wrote (records, predictions, checkpoints and their WAL, caches,
test baselines) is searched for the canary. ``--control`` runs the ``oracle-tests`` ablation the
same way, which puts the hidden tests in the loop on purpose: there the canary must show up, or
the search proves nothing.

Last line: ``canary_requests=<hits>/<requests> canary_files=<hits>/<files> completed=<n>/<n>``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from eval.options import add_options, check_options, load_instances
from fixgraph.config import ConfigError, load_config
from fixgraph.dataset import Instance
from fixgraph.localize import RepoIndex
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.repo.workspace import RepoCache, WorkspaceError
from graph import build_graph
from pipeline.tasks import run_tasks
from scoring.verdict.judge import InputError

CANARY = "FIXGRAPH-CANARY-5d1e0c77"
DEFAULT = "pallets__flask-4992,pytest-dev__pytest-5227,sympy__sympy-20590"


def plant(inst: Instance) -> Instance:
    """The instance with the canary in each evaluation field, the rest unchanged."""
    return inst.model_copy(update={
        "patch": inst.patch + f"\n# {CANARY}\n",
        "test_patch": inst.test_patch.replace("\n+", f"\n+# {CANARY}\n+", 1),
        "FAIL_TO_PASS": [*inst.FAIL_TO_PASS, f"{CANARY}::test_fail"],
        "PASS_TO_PASS": [*inst.PASS_TO_PASS, f"{CANARY}::test_pass"],
    })


def task_side_script(inst: Instance, repos: RepoCache, cache: Path) -> dict[str, list[Any]]:
    """Replies built from what the pipeline itself may know: the repository and the issue."""
    wt = repos.worktree(inst.repo, inst.base_commit, f"canary-plan-{inst.instance_id}")
    try:
        top = RepoIndex.build(wt, cache).rank(inst.problem_statement, k=1)[0]
        path = top.path
        text = wt.read(path) or ""
        lines = text.splitlines(keepends=True)
        line = next((ln for ln in lines if ln.startswith(("import ", "from ")) and lines.count(ln) == 1), lines[0])
        test_dir = "/".join(path.split("/")[:-1] + ["tests"]) if inst.repo == "sympy/sympy" else "testing" \
            if inst.repo == "pytest-dev/pytest" else "tests"
    finally:
        repos.remove_worktree(inst.repo, wt)
    edit = {"path": path, "search": line, "replace": line.rstrip("\n") + "  # fixgraph probe\n"}
    return {
        "Plan": [{"files": [path], "reasoning": "the top of the ranking"}],
        "ExploreStep": [{"next_files": [], "suspects": [{"file": path}], "learned": "probe", "confidence": "high"}],
        "ReproTestDraft": [{"path": f"{test_dir}/test_fixgraph_probe.py",
                            "content": "def test_probe():\n    assert False, 'a probe that always fails'\n"}] * 3,
        "CodeChange": [{"edits": [edit], "explanation": "probe"}] * 3,
        "RuntimeCheck": [{"verdict": "Safe", "errors": []}] * 3,
        "PatchJudgment": [{"score": 0.5, "reasoning": "probe"}] * 3,
    }


def scan(root: Path) -> tuple[int, list[str]]:
    """(files scanned, files holding the canary) under ``root``; built environments are skipped."""
    hits, n = [], 0
    for path in root.rglob("*"):
        if not path.is_file() or "envs" in path.relative_to(root).parts:
            continue
        n += 1
        if CANARY.encode() in path.read_bytes():
            hits.append(str(path.relative_to(root)))
    return n, hits


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.canary_bench", description=(__doc__ or "").split("\n")[0])
    add_options(p, without={"only", "stride", "shard", "output", "resume"})
    p.add_argument("--instances", default=DEFAULT)
    p.add_argument("--config", default="redo")
    p.add_argument("--tests-backend", default="local", choices=["local", "venv"])
    p.add_argument("--env-dir", type=Path, help="built venvs to reuse (venv backend)")
    p.add_argument("--control", action="store_true", help="run the oracle-tests ablation instead (must leak)")
    args = p.parse_args(argv)
    try:
        check_options(args)
        wanted = [s.strip() for s in args.instances.split(",") if s.strip()]
        rows = {i.instance_id: i for i in load_instances(args)}
        missing = [w for w in wanted if w not in rows]
        if missing:
            raise InputError(f"not in the dataset: {', '.join(missing)}")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="fixgraph-canary-"))
    try:
        cfg = load_config("oracle-tests" if args.control else args.config, env={"OPENAI_API_KEY": "sk-canary"},
                          overrides={"cache_dir": str(work / "cache"), "runs_dir": str(work / "runs"),
                                     "predictions_dir": str(work / "predictions"),
                                     "tests.backend": args.tests_backend, "budget.task_dollars": 100.0,
                                     **({"tests.env_dir": str(args.env_dir)} if args.env_dir else {})})
        repos = RepoCache(cfg.cache_dir, args.repos)
        planted = [plant(rows[w]) for w in wanted]
        seen: list[str] = []
        completed = 0
        for inst in planted:
            model = ScriptedChatModel(script=task_side_script(inst, repos, cfg.cache_dir))
            summary = run_tasks([inst], cfg, build_graph=build_graph, run_id="canary", repos=args.repos,
                                model_factory=lambda role, m=model: m, progress=False)
            prompts = ["\n".join(str(m.content) for m in msgs) for _, msgs in model.seen]
            seen += prompts
            rec = json.loads((cfg.runs_dir / "canary" / "records" / f"{inst.instance_id}.json").read_text())
            completed += summary.finished == 1 and rec["status"] != "failed"
            print(f"{inst.instance_id}: {rec['status']} ({rec['stop_reason']}); {len(prompts)} requests, "
                  f"{sum(CANARY in x for x in prompts)} with the canary; repro {rec['repro'].get('status')}",
                  file=sys.stderr)
        n_files, hits = 0, []
        for root in (cfg.runs_dir, cfg.predictions_dir, cfg.cache_dir):
            if root.exists():
                k, h = scan(root)
                n_files += k
                hits += [f"{root.name}/{x}" for x in h]
        for h in hits[:20]:
            print(f"canary in {h}")
        leaked = sum(CANARY in x for x in seen)
        print(f"config {cfg.label}: {len(planted)} instances, {len(seen)} requests, {n_files} files written")
        print(f"canary_requests={leaked}/{len(seen)} canary_files={len(hits)}/{n_files} "
              f"completed={completed}/{len(planted)}")
        return 0
    except (ConfigError, WorkspaceError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
