"""Judge any agent's predictions without running them: one verdict per instance.

    python -m scoring.verdict.judge --predictions PREDS.jsonl --dataset LITE.jsonl --repos DIR [--llm] -o OUT.jsonl

Each instance's patch is applied in a worktree at its base commit (from the mirrors in DIR), then
the unsafe-patch guard, the differential static phase and, with ``--llm``, the LLM runtime-error
check (only for patches the static phase passes, as in REDO) judge it. The verdict is

- ``Unsafe``: the static phase found a runtime error the patch introduces, the LLM did, or the
  guard flagged it and the config's guard policy is ``block``;
- ``Safe``: none of that (with ``--llm``: the LLM said Safe);
- ``CannotAnalyze``: the patch does not apply, is empty, or a touched file does not parse before
  the patch (the reason says which); never counted as Safe;
- ``NoVerdict``: with ``--llm``, the LLM gave no verdict; never counted as Safe.

Output is JSON Lines, one row per instance, written as it goes; a rerun skips the instances
already in OUT (delete it to start over).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import git

from fixgraph.config import ConfigError, CriticSettings, RunConfig, load_config
from fixgraph.dataset import DatasetError, Instance, load_jsonl
from fixgraph.models.llm import LLM, LLMFailure, Meter, RunMeter, default_factory
from fixgraph.models.transport import CallPolicy
from fixgraph.repo.workspace import PatchError, RepoCache, WorkspaceError, Worktree, find_mirror
from fixgraph.state import Finding
from scoring.runtime import llm_check
from scoring.static import differential as static
from scoring.static import guard


class InputError(Exception):
    """Bad command-line input; one line for the user."""


@dataclass
class Verdict:
    instance_id: str
    verdict: str  # Safe | Unsafe | CannotAnalyze | NoVerdict
    reason: str = ""
    errors: list[Finding] = field(default_factory=list)
    guard: list[Finding] = field(default_factory=list)
    llm: dict[str, Any] | None = None
    seconds: float = 0.0
    static_seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # how the checks ran (a pyright fallback, say)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_predictions(path: Path) -> list[dict[str, Any]]:
    """SWE-bench predictions: JSONL rows, a JSON list, or a JSON object keyed by instance id."""
    if not path.is_file():
        raise InputError(f"predictions not found: {path}")
    text = path.read_text(encoding="utf-8", errors="replace")
    rows: list[Any]
    stripped = text.lstrip()
    if stripped.startswith("[") or (stripped.startswith("{") and "\n{" not in stripped.strip()):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON ({exc.msg})") from None
        rows = list(data.values()) if isinstance(data, dict) and "instance_id" not in data else (
            data if isinstance(data, list) else [data])
    else:
        rows = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: malformed JSON line ({exc.msg})") from None
    out = []
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
            raise InputError(f"{path}: prediction {i} has no instance_id")
        patch = row.get("model_patch")
        if patch is not None and not isinstance(patch, str):
            raise InputError(f"{path}: prediction {row['instance_id']} has a model_patch that is not text")
        out.append(row)
    if not out:
        raise InputError(f"{path}: no predictions")
    return out


def judge(wt: Worktree, instance: Instance, patch: str, *, settings: CriticSettings, cache_dir: Path,
          llm: LLM | None = None) -> Verdict:
    """The verdict on ``patch``, which the worktree holds applied on top of the base commit."""
    start = time.monotonic()
    found = guard.check_patch(wt, patch) if settings.guard != "off" else []
    result = static.analyze_patch(wt, patch, settings=settings, cache_dir=cache_dir)
    v = Verdict(instance.instance_id, "Safe", result.reason, list(result.new), found,
                static_seconds=result.seconds, notes=list(result.notes))
    if result.status == "cannot_analyze":
        v.verdict = "CannotAnalyze"
    elif result.new:
        v.verdict = "Unsafe"
    elif llm is not None and settings.llm_check:
        check, usage = llm_check.runtime_check(llm, instance.task(), wt, patch, calls=settings.llm_check_calls)
        v.llm = {"verdict": check.verdict if check else None, "usage": usage,
                 "errors": [e.model_dump() for e in check.errors] if check else []}
        if check is None:
            v.verdict, v.reason = "NoVerdict", "the LLM gave no verdict"
        elif check.verdict == "Unsafe":
            v.verdict = "Unsafe"
            v.errors = llm_check.to_findings(check, wt)
    if found and settings.guard == "block" and v.verdict in ("Safe", "NoVerdict"):
        v.verdict, v.reason = "Unsafe", "the unsafe-patch guard blocks it"
    v.seconds = round(time.monotonic() - start, 3)
    return v


def _cannot(instance_id: str, reason: str) -> Verdict:
    return Verdict(instance_id, "CannotAnalyze", reason)


def make_llm(cfg: RunConfig, run: RunMeter) -> LLM:
    return LLM(default_factory(cfg), Meter(cfg.budget, cfg.llm.prices, run), cfg.llm.structured_reasks,
               policy=CallPolicy.of(cfg.llm), node_caps=cfg.llm.node_output_tokens)


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    settings = cfg.critic
    if args.llm:
        cfg.require_llm()
    static.pyright_version(static.pyright_command(settings))  # fail before any work
    preds = load_predictions(args.predictions)
    dataset = {i.instance_id: i for i in load_jsonl(args.dataset)}
    if not args.repos.is_dir():
        raise InputError(f"--repos: not a directory: {args.repos}")
    if args.limit:
        preds = preds[: args.limit]
    done: set[str] = set()
    if args.output.is_file():
        for line in args.output.read_text(encoding="utf-8").splitlines():
            try:
                done.add(json.loads(line)["instance_id"])
            except (json.JSONDecodeError, KeyError, TypeError):
                continue
    cache_dir = (args.cache_dir or cfg.cache_dir).resolve()
    repos = RepoCache(cache_dir, mirrors=args.repos)
    run_meter = RunMeter(cfg.budget.run_dollars)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    with args.output.open("a", encoding="utf-8") as out:
        for row in preds:
            iid = row["instance_id"]
            if iid in done:
                continue
            v = _judge_row(row, dataset.get(iid), repos, args, settings, cache_dir,
                           make_llm(cfg, run_meter) if args.llm else None)
            counts[v.verdict] = counts.get(v.verdict, 0) + 1
            out.write(json.dumps(v.to_json()) + "\n")
            out.flush()
            print(f"{iid}: {v.verdict}{' (' + v.reason + ')' if v.reason else ''} {v.seconds:.1f}s", file=sys.stderr)
    summary = ", ".join(f"{k} {n}" for k, n in sorted(counts.items())) or "nothing new to judge"
    print(f"wrote {args.output}: {summary}")
    return 0


def _judge_row(row: dict[str, Any], instance: Instance | None, repos: RepoCache, args: argparse.Namespace,
               settings: CriticSettings, cache_dir: Path, llm: LLM | None) -> Verdict:
    iid = row["instance_id"]
    patch = row.get("model_patch") or ""
    if instance is None:
        return _cannot(iid, "not in the dataset")
    if not patch.strip():
        return _cannot(iid, "empty patch")
    if find_mirror(args.repos, instance.repo) is None:
        return _cannot(iid, f"no mirror of {instance.repo} under --repos")
    try:
        wt = repos.worktree(instance.repo, instance.base_commit, f"critic-{instance.repo_slug}")
    except WorkspaceError as exc:
        return _cannot(iid, str(exc))
    except git.GitCommandError as exc:
        lines = (exc.stderr or "").strip().splitlines()
        return _cannot(iid, f"cannot check out {instance.base_commit[:12]}: {lines[-1] if lines else exc}")
    try:
        wt.apply(patch)
    except PatchError as exc:
        return _cannot(iid, str(exc))
    try:
        return judge(wt, instance, patch, settings=settings, cache_dir=cache_dir, llm=llm)
    finally:
        wt.reset()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scoring.verdict.judge", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--predictions", type=Path, required=True, help="SWE-bench predictions (JSONL or JSON)")
    p.add_argument("--dataset", type=Path, required=True, help="SWE-bench JSONL with the instances")
    p.add_argument("--repos", type=Path, required=True, help="folder of repository mirrors (owner+name/repo)")
    p.add_argument("--llm", action="store_true", help="also run the LLM runtime-error check (needs OPENAI_API_KEY)")
    p.add_argument("--config", default="redo", help="config name in configs/ or a TOML path (default: redo)")
    p.add_argument("-o", "--output", type=Path, required=True, help="verdicts, JSON Lines")
    p.add_argument("--limit", type=int, default=0, help="judge only the first N predictions")
    p.add_argument("--cache-dir", type=Path, default=None, help="worktrees and analysis cache (default: config's)")
    return p


def run_reporting_errors(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command of this family: ``.env`` loaded, bad input as one line and exit 2."""
    try:
        from dotenv import load_dotenv

        load_dotenv()
        return run(args)
    except (InputError, ConfigError, DatasetError, static.StaticAnalysisUnavailable, LLMFailure) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return run_reporting_errors(run, args)
    except KeyboardInterrupt:
        print("interrupted; rerun to continue where it stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
