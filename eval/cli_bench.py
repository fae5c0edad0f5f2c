"""How fast graph.py answers before any work: ``--help`` and bad input, median of several runs.

    python -m eval.cli_bench [--runs 5]

Each command is a fresh Python process (what a user waits for). The last line is
``help_s=<median> bad_input_s=<median>``; the target is under a second for both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "graph.py"), *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return time.perf_counter() - t0, proc.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.cli_bench", description="graph.py's start-up time")
    p.add_argument("--runs", type=int, default=5)
    args = p.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH"))}
    env.update(OPENAI_API_KEY="k", PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as tmp:
        ds = Path(tmp) / "ds.jsonl"
        ds.write_text('{"instance_id": "a__b-1", "repo": "a/b", "base_commit": "x", "problem_statement": "p"}\n')
        cases = {
            "help": (["--help"], 0),
            "unknown_config": (["--config", "nosuch"], 2),
            "unknown_task": (["--tasks", "nope__nope-1", "--dataset", str(ds)], 2),
            "bad_workers": (["--workers", "0"], 2),
        }
        medians: dict[str, float] = {}
        print(f"{'command':<16} {'median s':>9} {'min s':>7} {'max s':>7}   (runs={args.runs})")
        for name, (cmd, want) in cases.items():
            times = []
            for _ in range(args.runs):
                seconds, code = timed(cmd, env, Path(tmp))
                if code != want:
                    print(f"cli_bench: {name} exited {code}, expected {want}", file=sys.stderr)
                    return 1
                times.append(seconds)
            medians[name] = statistics.median(times)
            print(f"{name:<16} {medians[name]:9.3f} {min(times):7.3f} {max(times):7.3f}")
    bad = max(medians["unknown_config"], medians["unknown_task"], medians["bad_workers"])
    print(f"help_s={medians['help']:.3f} bad_input_s={bad:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
