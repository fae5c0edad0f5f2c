"""A smoke run of a real local model on real tasks (a benchmark, not in CI; it installs nothing).

Given a running OpenAI-compatible server (``--base-url``, or whatever fixgraph's discovery finds
on this machine; docs/local-models.md says how to start llama-cpp-python's with a small model
from the package index), it runs three SWE-bench Lite tasks from local mirrors and reports, per
node: calls, tokens, seconds per call, timeouts, re-asks (and why: truncated, empty, invalid);
per task: how it ended and why; and whether the server was idle soon after the run (a
one-token request answered at once: no abandoned generation left queued).

    python -m eval.local_model_smoke --repos DIR --dataset ../shared/data/swebench_lite.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from eval.options import add_options
from fixgraph.config import ConfigError, load_config
from fixgraph.dataset import DatasetError, load_dataset_any, select
from fixgraph.models.discover import local_servers, resolve_llm
from fixgraph.models.llm import CallEvent

DEFAULT_TASKS = "pallets__flask-4992,psf__requests-2317,pallets__flask-5063"
COUNTS = ("timeouts", "reasks", "truncated", "empty", "invalid")


class CallTimes:
    """Seconds of each answered or failed try, per node (from the runner's call events)."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}
        self.lock = threading.Lock()

    def __call__(self, task: str, ev: CallEvent) -> None:
        if ev.kind in ("done", "retry", "failed"):
            with self.lock:
                self.seconds.setdefault(ev.node, []).append(ev.seconds)


def idle_seconds(base_url: str, model: str, timeout_s: float = 30.0) -> float | None:
    """How long a one-token request takes right after the run; None if not within ``timeout_s``."""
    body = json.dumps({"model": model, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/chat/completions", data=body,
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer local"})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - the server under test
            resp.read()
    except urllib.error.HTTPError:
        pass  # an answer all the same: the server is not busy
    except OSError:
        return None
    return time.monotonic() - t0


def report(records: list[dict[str, Any]], times: CallTimes, idle: float | None) -> list[str]:
    lines = ["node        calls  tokens_in  tokens_out  s/call(mean)  s/call(max)  " + "  ".join(COUNTS)]
    nodes: dict[str, dict[str, float]] = {}
    for rec in records:
        for node, counts in ((rec.get("usage") or {}).get("by_node") or {}).items():
            mine = nodes.setdefault(node, {})
            for k, v in counts.items():
                mine[k] = mine.get(k, 0) + v
    for node in sorted(set(nodes) | set(times.seconds)):
        c, secs = nodes.get(node, {}), times.seconds.get(node, [])
        mean = f"{statistics.fmean(secs):.1f}" if secs else "-"
        top = f"{max(secs):.1f}" if secs else "-"
        lines.append(f"{node:<11} {int(c.get('calls', 0)):>5}  {int(c.get('input_tokens', 0)):>9}  "
                     f"{int(c.get('output_tokens', 0)):>10}  {mean:>12}  {top:>11}  "
                     + "  ".join(f"{int(c.get(k, 0)):>{len(k)}}" for k in COUNTS))
    for rec in records:
        lines.append(f"{rec['instance_id']}: {rec['status']} in {rec['seconds']:.0f} s ({rec['stop_reason']})")
    lines.append(f"server idle after the run: a 1-token request answered in {idle:.1f} s" if idle is not None
                 else "server NOT idle after the run: a 1-token request got no answer within 30 s")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.local_model_smoke",
                                description="A smoke run of a real local model on three real tasks.")
    p.add_argument("--base-url", help="the server's base URL (default: discover a local server)")
    p.add_argument("--model", help="the model for every role (default: the server's first)")
    p.add_argument("--tasks", default=DEFAULT_TASKS, help="comma-separated instance ids")
    add_options(p, without={"only", "stride", "shard", "resume"}, output_help="also write the records' summary as JSON here")
    p.add_argument("--config", default="redo")
    p.add_argument("--run-id", default="local-smoke")
    args = p.parse_args(argv)
    env = dict(os.environ)
    if args.base_url:
        env["OPENAI_BASE_URL"] = args.base_url
    overrides = {f"llm.models.{r}": args.model for r in ("planner", "explorer", "coder", "critic")} if args.model else {}
    try:
        cfg, found = resolve_llm(load_config(args.config, env=env, overrides=overrides), local_servers())
        instances = select(load_dataset_any(args.dataset, cfg.cache_dir), args.tasks)
    except (ConfigError, DatasetError) as exc:
        print(f"local_model_smoke: error: {exc}", file=sys.stderr)
        return 2
    if not args.repos.is_dir():
        print(f"local_model_smoke: error: --repos {args.repos} is not a folder", file=sys.stderr)
        return 2
    if found:
        print(found, file=sys.stderr)
    from graph import build_graph
    from pipeline.tasks import run_tasks

    times = CallTimes()
    summary = run_tasks(instances, cfg, build_graph=build_graph, run_id=args.run_id, repos=args.repos, progress=False, event_lines=True,
                        on_call=times)
    records = [r for r in (json.loads(f.read_text()) for f in sorted((cfg.runs_dir / args.run_id / "records").glob("*.json")))
               if r["instance_id"] in {i.instance_id for i in instances}]
    idle = idle_seconds(cfg.llm.base_url or "", cfg.llm.models.planner)
    for line in report(records, times, idle) + [summary.line()]:
        print(line)
    if args.output:
        args.output.write_text(json.dumps({"records": [{k: r.get(k) for k in ("instance_id", "status", "stop_reason",
                                                                           "seconds", "usage")} for r in records],
                                        "seconds_per_call": times.seconds, "idle_s": idle}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
