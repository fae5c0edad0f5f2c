"""The services a repository's committed table declares (``scoring.execution.infer.Service``),
started for each test run inside its sandbox, before its tests, and stopped after
(``scoring.execution.serve_declared``, run by the env's own interpreter).

A run whose services are not all up runs no test: its error names the service and why (no command
for a bare name fixgraph does not know, a binary on neither the env's nor the machine's PATH, a
server that exits first or is not listening in its seconds), and the task is scored without tests.
The command is the committed table's, read from the task's base commit, never from an issue.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from scoring.execution.infer import Service, services_of

SOURCE = Path(__file__).with_name("serve_declared.py")
OUT_VAR = "FIXGRAPH_SERVICES_FILE"  # a sandbox output file (``fixgraph.sandbox.process.OUTPUT_FILE_VARS``)
OUT_NAME = "services.jsonl"


def declared(spec: dict[str, Any] | None) -> tuple[Service, ...]:
    """The services the env's spec declares: an inferred env's, from its committed table."""
    return services_of(spec) if spec and spec.get("inferred") else ()


def services_key(services: tuple[Service, ...]) -> str:
    """What the runs' key adds for ``services``: runs with them answer otherwise than runs without."""
    text = json.dumps([s.as_dict() for s in services], sort_keys=True)
    return "svc-" + hashlib.sha256(text.encode()).hexdigest()[:10]


def unusable(services: tuple[Service, ...]) -> str:
    """Why the run cannot start ``services`` before it runs anything ("" when it can)."""
    for service in services:
        if not service.command:
            return (f"service {service.name} not started: no command for service {service.name} "
                    "(declare it as {name, command, port} in the committed table)")
    return ""


def wrapped(python: str, services: tuple[Service, ...], argv: list[str], run_env: dict[str, str],
            run_dir: Path) -> list[str]:
    """``argv`` behind the starter of ``services``, run by the env's ``python``; ``run_env`` names the
    file the starter says what it started in."""
    run_env[OUT_VAR] = str(run_dir / OUT_NAME)
    payload = [{**s.as_dict(), "env": s.variables()} for s in services]
    return [python, "-I", "-c", SOURCE.read_text(), json.dumps(payload), "--", *argv]


def outcome(run_dir: Path, services: tuple[Service, ...], timed_out: bool) -> tuple[str, list[str]]:
    """(the run's error when a service was not up, else "", the notes of those started)."""
    seen: dict[str, dict[str, Any]] = {}
    path = run_dir / OUT_NAME
    try:
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        text = ""
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            seen.setdefault(entry["name"], entry)
    notes: list[str] = []
    for service in services:
        entry = seen.get(service.name)
        if entry is None:
            why = "the run's timeout came first" if timed_out else "the starter did not run"
            return f"service {service.name} not started: {why}", notes
        if not entry.get("ok"):
            return f"service {service.name} not started: {str(entry.get('reason', '?'))[:300]}", notes
        notes.append(f"service {service.name} started on 127.0.0.1:{entry.get('port')} "
                     f"in {entry.get('seconds', '?')}s, stopped after the tests")
    return "", notes
