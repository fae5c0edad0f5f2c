"""Crash context for the Coder, after HealBench: exception, repository frames, crashing locals.

Under pytest the ``fixgraph_crash`` plugin (``pytest_crash_plugin.py``) records each failing test
as JSON; for other runners the log is read instead, which gives the frames but no locals: sympy's
``bin/test`` and django's ``runtests.py`` (unittest) by their blocks per failing test, anything else
by its last Python traceback.
"""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Iterable, Mapping
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


def plugin_silence(crash_file: Path, status_file: Path, statuses: Mapping[str, str]) -> str:
    """Why a pytest run with failing tests has no crash record ("" when it has one, or nothing
    failed): the plugin's own error, or that it never loaded. The Coder then gets the log's
    traceback, which has no locals; the run's notes say so."""
    failed = [t for t, st in statuses.items() if st in ("FAILED", "ERROR")]
    if not failed or read_records(crash_file):
        return ""
    err = crash_file.with_name(crash_file.name + ".err")
    if err.is_file():
        first = err.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
        return f"the crash plugin failed, so no locals: {first[0][:300] if first else '(no message)'}"
    if not status_file.is_file():
        return "the crash plugin did not load (no status file), so no locals"
    return f"the crash plugin recorded none of the {len(failed)} failing tests, so no locals"


def read_statuses(path: Path) -> dict[str, str]:
    """The plugin's ``STATUS nodeid`` lines: each test's last reported outcome (a failed teardown
    after a passed call makes it ERROR, as pytest's summary says)."""
    if not path.is_file():
        return {}
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        status, _, nodeid = line.partition(" ")
        if nodeid and status in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
            out[nodeid] = status if out.get(nodeid) != "FAILED" else "FAILED"
    return out


def fatal_signal(returncode: int) -> int:
    """The signal that killed a test process (a crash in compiled code), 0 for none: a negative return
    code outside a sandbox, 128 + N from the sandbox's jail."""
    sig = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    return sig if sig in _FATAL_SIGNALS else 0


_FATAL_SIGNALS = {int(s) for s in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL)}


def unfinished_test(path: Path) -> str:
    """The last test the plugin saw start and never saw end ("" when every started test ended)."""
    if not path.is_file():
        return ""
    started, ended = "", set()
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        status, _, nodeid = line.partition(" ")
        if status == "STARTED":
            started = nodeid
        elif nodeid:
            ended.add(nodeid)
    return started if started and started not in ended else ""


def signal_record(nodeid: str, sig: int) -> dict[str, Any]:
    """A crash record for a test whose process a signal killed: the finding is the signal."""
    name = signal.Signals(sig).name
    return {"nodeid": nodeid, "when": "call", "type": name,
            "message": f"the test process was killed by {name} (signal {sig}): a crash in compiled code",
            "frames": [], "locals": {}}


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
    elif frames and rec.get("locals_note"):
        lines.append(f"Locals of {frames[-1].get('function')}: none recorded ({rec['locals_note']})")
    return "\n".join(lines)


_TB_START = "Traceback (most recent call last):"
_CONFTEST = "ImportError while loading conftest"
_CHAINED = ("During handling of the above exception, another exception occurred:",
            "The above exception was the direct cause of the following exception:")
# sympy's bin/test prints each failure under "____ sympy/x/tests/test_y.py:test_z ____", short form.
# sympy centres "path.py:test" in 80 columns of "_": a long name leaves two, or none.
_SYMPY_HEADER = re.compile(r"^_* (\S+?\.py):(\S+) _*$", re.M)
_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
# sympy's raises() that did not raise ends in "sympy.testing.pytest.Failed: DID NOT RAISE" (or
# _pytest.outcomes.Failed): a failed expectation, as pytest says, not a crash of the code.
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure|Failed)\w*)(?::\s?(.*))?$")


def records_from_log(log: str, repo_root: Path, wanted: list[str] | None = None) -> list[dict[str, Any]]:
    """The failures a runner's text output shows, as records shaped like the plugin's (no locals):
    sympy's failure blocks (``nodeid`` ``file:test``), django's (unittest's) ``ERROR:``/``FAIL:``
    blocks (``nodeid`` the runner's ``test_x (app.tests.Class)``), or else the last Python
    traceback (``nodeid`` ""). Blocks of tests in ``wanted`` only, when names are known."""
    blocks: list[tuple[str, str]] = []  # (test name, text after the header)
    headers = list(_SYMPY_HEADER.finditer(log))
    for i, m in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(log)
        if wanted is None or m.group(2) in wanted or f"{m.group(1)}:{m.group(2)}" in wanted:
            blocks.append((f"{m.group(1)}:{m.group(2)}", log[m.end():end]))
    if not headers and "= FAILURES =" in log:
        found = _pytest_records(log, str(repo_root), wanted)
        if found:
            return found
    if not headers and _DJANGO_HEADER.search(log):
        found = _django_records(log, str(repo_root), wanted)
        if found:
            return found
    if not headers and _CONFTEST in log:
        # pytest could not import a conftest (it imports the patched package): no test ran, and
        # the short traceback under this line is every selected test's (nodeid "").
        rec = _pytest_block(log[log.find(_CONFTEST):], str(repo_root))
        if rec is not None:
            return [{**rec, "nodeid": ""}]
    if not headers:
        start = log.rfind(_TB_START)
        if start >= 0:
            blocks.append(("", log[start + len(_TB_START):]))
        # A chain: the last traceback may be the runner's own error while it handled the test's
        # (sympy 1.0's bin/test on a test module that no longer imports dies of its reporter's
        # AttributeError); the exceptions before it in the chain are read too.
        while start > 0:
            prev = log.rfind(_TB_START, 0, start)
            if prev < 0 or not any(link in log[prev:start] for link in _CHAINED):
                break
            blocks.insert(0, ("", log[prev + len(_TB_START):start]))
            start = prev
    return [r for r in (_parse_block(name, text, str(repo_root)) for name, text in blocks) if r]


# unittest's report (django's runtests.py): per failing test a line of "=", "ERROR: test_x
# (app.tests.Class)" (a subTest's parameters after it; "...Class.test_x)" from Python 3.11), the first
# line of the test's docstring if it has one, a line of "-", then the traceback.
_DJANGO_HEADER = re.compile(r"^={20,}\n(ERROR|FAIL): ([\w.]+ \([\w.]+\))[^\n]*\n(?:(?!-{20,}\n)([^\n]*)\n)?-{20,}$",
                            re.M)
# Where the last block ends: the next one, or the run's summary.
_UNITTEST_END = re.compile(r"^(?:={20,}|-{20,}\nRan \d+ tests?)", re.M)
MAX_LOG_BLOCKS = 500


def _django_records(log: str, root: str, wanted: list[str] | None) -> list[dict[str, Any]]:
    """One record per ``ERROR:``/``FAIL:`` block of a test in ``wanted`` (its full id, or the first
    line of its docstring, which swebench's parser names it by): the block's last traceback (the
    exception the test ended with; a chain's causes come before it), with the innermost repository
    frame. A label the runner could not import (``app.tests (unittest.loader._FailedTest)``) is no
    test's: its record (``nodeid`` "") explains the tests the run never reached, as a runner's own
    traceback does. A block cut short, or with no traceback, gives nothing."""
    chosen = set(wanted) if wanted is not None else None
    out: list[dict[str, Any]] = []
    for n, m in enumerate(_DJANGO_HEADER.finditer(log)):
        if n >= MAX_LOG_BLOCKS:
            break
        test, doc = m.group(2), (m.group(3) or "").strip()
        if test.endswith("(unittest.loader._FailedTest)"):
            test = doc = ""
        elif chosen is not None and test not in chosen and doc not in chosen:
            continue
        end_m = _UNITTEST_END.search(log, m.end())
        text = log[m.end():end_m.start() if end_m else len(log)]
        start = text.rfind(_TB_START)
        if start < 0:
            continue
        rec = _parse_block(test, text[start + len(_TB_START):], root)
        if rec is not None:
            out.append({**rec, "doc": doc} if doc else rec)
    return out


# pytest's long report, for runs where the plugin cannot be loaded (tox, which passes the test
# process neither PYTHONPATH nor the plugin's variables): a section per failing test, entries
# "path.py:12: in func" and the last one "path.py:40: TypeError" under "E   TypeError: ...".
_PYTEST_HEADER = re.compile(r"^_{3,} (\S(?:.*\S)?) _{3,}$", re.M)
_PYTEST_ENTRY = re.compile(r"^(\S+\.py):(\d+): ?(?:in (\S+)|([A-Za-z_][\w.]*))?$")
_DEF = re.compile(r"^\s*(?:async\s+)?def (\w+)")


def _pytest_records(log: str, root: str, wanted: list[str] | None) -> list[dict[str, Any]]:
    """Records (no locals) from pytest's long report, one per section of a test in ``wanted``
    (matched by ``Class.test[param]`` against the ids' ends; every section without ``wanted``)."""
    out: list[dict[str, Any]] = []
    start = log.find("= FAILURES =")
    # The failures' region ends where pytest's next report begins (PASSES holds captured output).
    stop = min([i for i in (log.find(t, start) for t in ("= PASSES =", "short test summary info",
                                                          "= warnings summary =")) if i > 0] or [len(log)])
    headers = [m for m in _PYTEST_HEADER.finditer(log, start, stop) if not set(m.group(1)) <= {"_", " "}]
    for i, m in enumerate(headers):
        title = m.group(1)
        name = title.removeprefix("ERROR at setup of ").removeprefix("ERROR at teardown of ")
        base, bracket, param = name.partition("[")
        suffix = base.replace(".", "::") + bracket + param
        if wanted is None:
            nodeid = name
        else:
            nodeid = next((t for t in wanted if t == suffix or t.endswith("::" + suffix)), "")
            if not nodeid:
                continue
        end = headers[i + 1].start() if i + 1 < len(headers) else stop
        rec = _pytest_block(log[m.end():end], root)
        if rec is not None:
            out.append({**rec, "nodeid": nodeid})
    return out


def _pytest_block(text: str, root: str) -> dict[str, Any] | None:
    lines = text.splitlines()
    frames: list[dict[str, Any]] = []
    etype = message = ""
    listing: list[str] = []  # the code shown since the last entry
    for n, line in enumerate(lines):
        m = _PYTEST_ENTRY.match(line)
        if not m:
            listing.append(line)
            if line.startswith("E   ") and not message:
                message = line[1:].strip()
            continue
        path, lineno, func, exc = m.groups()
        if path.startswith(root):
            path = path[len(root):].lstrip("/")
        if func is None:
            func = next((d.group(1) for d in map(_DEF.match, reversed(listing)) if d), "")
        src = next((ln[1:].strip() for ln in reversed(listing) if ln.startswith(">")), "")
        if func and m.group(3) and n + 1 < len(lines) and lines[n + 1].startswith("    "):
            src = lines[n + 1].strip()  # the short entry's line of code follows it
        if not path.startswith("/") and "site-packages" not in path:
            frames.append({"file": path, "line": int(lineno), "function": func, "source": src[:200]})
        listing = []
        if exc:
            etype = exc
            break
    if not etype and frames and (short := _EXC_LINE.match(message)):
        etype = short.group(1)  # a short traceback ends at its "E   Type: message" line
    if not etype:
        return None
    etype = etype.rsplit(".", 1)[-1]
    message = message.removeprefix(etype).removeprefix(":").strip() if message.startswith(etype) else message
    return {"type": etype, "message": message[:1000], "frames": frames[-12:],
            "exc_line": f"{etype}: {message}"[:1000]}


def from_log(log: str, repo_root: Path, wanted: list[str] | None = None) -> str:
    """Crash context read from a runner's text output (no locals), from :func:`records_from_log`;
    exceptions other than AssertionError first. "" when there is nothing to read."""
    records = records_from_log(log, repo_root, wanted)
    records.sort(key=lambda r: r["type"] == "AssertionError")
    text = "\n\n".join(_format_log_record(r) for r in records[:MAX_CRASHES])
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 15] + "\n[... cut ...]"


def _parse_block(name: str, text: str, root: str) -> dict[str, Any] | None:
    lines = text.splitlines()
    frames: list[dict[str, Any]] = []
    exc = ""
    i = 0
    while i < len(lines):
        m = _FRAME.match(lines[i])
        if m:
            path, lineno, func = m.groups()
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            src = nxt.strip() if nxt.startswith("    ") and not _FRAME.match(nxt) else ""
            if path.startswith(root) and "site-packages" not in path:
                frames.append({"file": path[len(root):].lstrip("/"), "line": int(lineno), "function": func,
                               "source": src[:200]})
            i += 2 if src else 1
            continue
        if frames and _EXC_LINE.match(lines[i].strip()):
            exc = lines[i].strip()
            break
        i += 1
    if not exc:
        return None
    etype, _, message = exc[:1000].partition(":")
    return {"nodeid": name, "type": etype.rsplit(".", 1)[-1], "message": message.strip(),
            "frames": frames[-12:], "exc_line": exc[:1000]}


def _format_log_record(rec: dict[str, Any]) -> str:
    name, exc = rec["nodeid"], rec["exc_line"]
    out = [f"Test {name} failed: {exc}" if name else f"The tests crashed: {exc}"]
    if rec["frames"]:
        out.append("Repository frames, innermost last:")
        for fr in rec["frames"]:
            out.append(f"  {fr['file']}:{fr['line']} in {fr['function']}" + (f"\n    {fr['source']}" if fr["source"] else ""))
    return "\n".join(out)


def failures_of(records: list[dict[str, Any]], log: str, repo_root: str, wanted: list[str],
                unreported: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The crash records of the tests in ``wanted``, each with ``test`` set to the test id it
    explains: the plugin's records (a collection error explains every test of its module), else
    those read from the log (runners other than pytest). A traceback of no test, where the runner
    reported no failure of its own (sympy's ``bin/test`` dying at ``import sympy``: the patched
    package no longer imports), explains each test of ``unreported``: those the run never reached."""
    out: list[dict[str, Any]] = []
    for test in wanted:
        for rec in records:
            node = str(rec.get("nodeid", ""))
            if node and (node == test or test.startswith(node + "::")):
                out.append({**rec, "test": test})
                break
    if out or records or not repo_root:
        return out
    for rec in records_from_log(log, Path(repo_root), wanted):
        node = rec["nodeid"]
        if not node:
            out += [{**rec, "test": t} for t in unreported]
            continue
        test = next((t for t in wanted if node == t or node.endswith(":" + t)), "") or (
            rec["doc"] if rec.get("doc") in wanted else "")
        if test:
            out.append({**rec, "test": test})
    return out


def assertions_by_status(statuses: dict[str, str], wanted: Iterable[str],
                         known: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records for the tests in ``wanted`` that ``known`` does not explain and that ``statuses``
    says FAILED, for runners that tell a failed assertion from an error as each test ends (sympy's
    ``bin/test`` prints ``F`` only for an AssertionError and ``E`` for any other exception; Django's
    unittest runner FAIL and ERROR): their tracebacks come only at the end of the run, which a run
    killed by its timeout never prints. Not for pytest, whose FAILED is any exception."""
    seen = {str(r.get("test")) for r in known}
    return [{"test": t, "nodeid": t, "type": "AssertionError", "message": "", "frames": [],
             "exc_line": "AssertionError (the runner reported F; no traceback printed)"}
            for t in wanted if t not in seen and statuses.get(t) == "FAILED"]
