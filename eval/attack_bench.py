"""Hostile code and hostile clients against the real sandbox, git, guard, CLI and webhook server.

    python -m eval.attack_bench            # every attack, about ten minutes
    python -m eval.attack_bench --quick    # the fast subset the test suite runs
    python -m eval.attack_bench --only sandbox-limits,webhook

Each attack does what an attacker would (a test process that writes a git hook into the
repository cache, reads ``/proc/<parent>/environ``, leaves a ``setsid`` daemon; a patch that
hides ``os.system`` behind ``getattr``; a client that sends a negative ``Content-Length``...) and
reports whether the defence held. Everything runs on this machine: loopback sockets, temporary
folders, bounded in count and in time. Runs as root (the sandbox drops to an unprivileged uid)
and as an unprivileged user (the sandbox uses a user namespace); the first line says which.
Last line: ``tried=<n> held=<n> failed=<n>``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

from eval.attacks import (  # noqa: F401 - each registers its attacks
    ATTACKS,
    Attack,
    cluster,
    command_line,
    install,
    patch_guard,
    repro,
    review,
    sandbox,
    sockets,
    webhook,
)

# ---- running ---------------------------------------------------------------------------------


def who() -> str:
    from fixgraph.sandbox.process import sandbox_mode

    uid = os.geteuid()
    name = "root" if uid == 0 else f"uid {uid}"
    how = {"uid": "tests drop to an unprivileged uid", "userns": "tests run in a user namespace",
           "none": "no namespaces here: the sandbox is off"}[sandbox_mode()]
    return f"running as {name}: {how}"


def place(placement: str) -> str | None:
    """The folder the attacks' own folders (their fixgraph cache, runs, sockets) go in: ``tmp`` (the
    temp folder, which the sandbox hides anyway) or ``outside`` (a folder beside the user's home,
    where fixgraph's defaults put its cache and runs)."""
    if placement == "tmp":
        return None
    folder = Path.home() / ".cache" / "fixgraph-attack-bench"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


def run(selected: list[Attack], time_limit_s: float = 1500.0, placement: str = "tmp") -> list[tuple[Attack, str, float]]:
    results = []
    where = place(placement)
    start = time.monotonic()
    for a in selected:
        if time.monotonic() - start > time_limit_s:
            results.append((a, "not run: the bench's time limit was reached", 0.0))
            continue
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fixgraph-attack-", dir=where) as tmp:
            try:
                problem = a.run(Path(tmp))
            except Exception as exc:  # an attack that crashes the code under attack is a failure
                problem = f"crashed: {type(exc).__name__}: {str(exc)[:200]}"
        results.append((a, problem, time.monotonic() - t0))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.attack_bench", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--quick", action="store_true", help="only the fast attacks (the test suite's subset)")
    p.add_argument("--only", help="comma-separated attack classes")
    p.add_argument("--time-limit", type=float, default=1500.0, help="seconds for the whole bench")
    p.add_argument("--placement", choices=["tmp", "outside", "both"], default="both",
                   help="where the attacks' folders (fixgraph's cache and runs, sockets) sit: under the temp "
                        "folder, outside it (beside the user's home, as fixgraph's defaults are), or both runs")
    args = p.parse_args(argv)
    selected = [a for a in ATTACKS if (a.quick or not args.quick)
                and (not args.only or a.cls in args.only.split(","))]
    print(who())
    placements = ["tmp", "outside"] if args.placement == "both" else [args.placement]
    results = []
    for placement in placements:
        # Where the folders sit matters only to what runs in the sandbox: the rest runs once.
        todo = [a for a in selected if placement == placements[0] or a.sandbox]
        print(f"placement: {placement} ({place(placement) or tempfile.gettempdir()}), {len(todo)} attacks")
        results += [(dataclasses.replace(a, name=f"{a.name} [{placement}]") if len(placements) > 1 else a, problem, secs)
                    for a, problem, secs in run(todo, args.time_limit / len(placements), placement)]
    classes: dict[str, list[tuple[Attack, str, float]]] = {}
    for r in results:
        classes.setdefault(r[0].cls, []).append(r)
    for cls, rows in classes.items():
        held = sum(not problem for _, problem, _ in rows)
        print(f"{cls:16} tried={len(rows)} held={held} failed={len(rows) - held}")
        for a, problem, secs in rows:
            print(f"    {'held  ' if not problem else 'FAILED'} {a.name} ({secs:.1f}s)" + (f": {problem}" if problem else ""))
    held = sum(not problem for _, problem, _ in results)
    print(f"tried={len(results)} held={held} failed={len(results) - held}")
    return 0 if held == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
