"""Crash context for the Coder, after HealBench: exception, repository frames, crashing locals.

Under pytest the ``fixgraph_crash`` plugin (``pytest_crash_plugin.py``) records each failing test
as JSON; for other runners (sympy's ``bin/test``, django's ``runtests.py``) the last Python
traceback in the log is read instead, which gives the frames but no locals.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

PLUGIN_MODULE = "fixgraph_crash"
PLUGIN_SOURCE = Path(__file__).with_name("pytest_crash_plugin.py")
MAX_CRASHES = 3
MAX_CHARS = 4000


def install_plugin(dest_dir: Path) -> Path:
    """Copy the plugin where the test process can import it (a dir put on its PYTHONPATH)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    (dest_dir / f"{PLUGIN_MODULE}.py").write_text(PLUGIN_SOURCE.read_text())
    return dest_dir


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def format_records(records: list[dict[str, Any]], wanted: list[str]) -> str:
    """Text for the Coder about the failing tests in ``wanted`` (their order), crashes first.

    An exception other than AssertionError raised in repository code is the most useful kind,
    so those come before plain assertion failures.
    """
    by_id: dict[str, dict[str, Any]] = {}
    for rec in records:
        by_id.setdefault(str(rec.get("nodeid", "")), rec)
    chosen = [by_id[t] for t in wanted if t in by_id]
    chosen.sort(key=lambda r: r.get("type") == "AssertionError")
    blocks = [_format_one(rec) for rec in chosen[:MAX_CRASHES]]
    text = "\n\n".join(blocks)
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 15] + "\n[... cut ...]"


def _format_one(rec: dict[str, Any]) -> str:
    lines = [f"Test {rec.get('nodeid')} failed ({rec.get('when', 'call')}): "
             f"{rec.get('type')}: {rec.get('message', '')}".rstrip()]
    frames = rec.get("frames") or []
    if frames:
        lines.append("Repository frames, innermost last:")
        for fr in frames:
            lines.append(f"  {fr.get('file')}:{fr.get('line')} in {fr.get('function')}")
            if fr.get("source"):
                lines.append(f"    {fr['source']}")
    local_vars = rec.get("locals") or {}
    if local_vars and frames:
        lines.append(f"Locals of {frames[-1].get('function')} when it raised:")
        lines.extend(f"  {name} = {val}" for name, val in local_vars.items())
    return "\n".join(lines)


_TB_START = "Traceback (most recent call last):"
# sympy's bin/test prints each failure under "____ sympy/x/tests/test_y.py:test_z ____", short form.
_SYMPY_HEADER = re.compile(r"^_{3,} (\S+?\.py):(\S+) _{3,}$", re.M)
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure)\w*)(?::\s?(.*))?$")


def from_log(log: str, repo_root: Path, wanted: list[str] | None = None) -> str:
    """Crash context read from a runner's text output (no locals): sympy's failure blocks, or
    else the last Python traceback. Blocks of tests in ``wanted`` only, when names are known;
    exceptions other than AssertionError first. "" when there is nothing to read."""
    blocks: list[tuple[str, str]] = []  # (test name, text after the header)
    headers = list(_SYMPY_HEADER.finditer(log))
    for i, m in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(log)
        if wanted is None or m.group(2) in wanted or f"{m.group(1)}:{m.group(2)}" in wanted:
            blocks.append((f"{m.group(1)}:{m.group(2)}", log[m.end():end]))
    if not headers:
        start = log.rfind(_TB_START)
        if start >= 0:
            blocks.append(("", log[start + len(_TB_START):]))
    parsed = [p for p in (_parse_block(name, text, str(repo_root)) for name, text in blocks) if p]
    parsed.sort(key=lambda p: p[0] == "AssertionError")
    text = "\n\n".join(p[1] for p in parsed[:MAX_CRASHES])
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 15] + "\n[... cut ...]"


def _parse_block(name: str, text: str, root: str) -> tuple[str, str] | None:
    lines = text.splitlines()
    frames: list[str] = []
    exc = ""
    i = 0
    while i < len(lines):
        m = _FRAME.match(lines[i])
        if m:
            path, lineno, func = m.groups()
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            src = nxt.strip() if nxt.startswith("    ") and not _FRAME.match(nxt) else ""
            if path.startswith(root) and "site-packages" not in path:
                rel = path[len(root):].lstrip("/")
                frames.append(f"  {rel}:{lineno} in {func}" + (f"\n    {src}" if src else ""))
            i += 2 if src else 1
            continue
        if frames and _EXC_LINE.match(lines[i].strip()):
            exc = lines[i].strip()
            break
        i += 1
    if not exc:
        return None
    head = f"Test {name} failed: {exc[:1000]}" if name else f"The tests crashed: {exc[:1000]}"
    out = [head]
    if frames:
        out += ["Repository frames, innermost last:", *frames[-12:]]
    return exc.split(":", 1)[0], "\n".join(out)
