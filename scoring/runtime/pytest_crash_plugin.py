"""A pytest plugin (``-p fixgraph_crash``) that records why failing tests crashed, after HealBench.

Each test's outcome, as it is reported, goes to ``$FIXGRAPH_STATUS_FILE`` (one ``STATUS nodeid``
line, flushed at once): a run killed by its timeout never prints pytest's summary, and what it
finished is still known. For each failing test it writes one JSON line to ``$FIXGRAPH_CRASH_FILE``: the exception type and
message, the traceback frames inside the repository (file, line, function, source line), and the
local variables of the innermost repository frame with reprs truncated to
``$FIXGRAPH_LOCALS_CHARS`` characters; where it cannot, one line saying why goes to
``$FIXGRAPH_CRASH_FILE.err``. It runs inside the instance's own environment, so it is
written for every Python and pytest a SWE-bench repo uses (3.6 and pytest 3 upward): no imports
beyond the standard library, no newer syntax.
"""

import json
import linecache
import os
import sys

_OUT = os.environ.get("FIXGRAPH_CRASH_FILE", "")
_STATUS_OUT = os.environ.get("FIXGRAPH_STATUS_FILE", "")
_CHARS = int(os.environ.get("FIXGRAPH_LOCALS_CHARS", "200") or 200)
_ROOT = os.path.realpath(os.environ.get("FIXGRAPH_REPO_ROOT", os.getcwd()))
_MAX_LOCALS = 20
_MAX_FRAMES = 12


def _short(value):
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ is itself a clue
        text = f"<repr failed: {type(exc).__name__}>"
    if len(text) > _CHARS:
        text = text[: _CHARS - 3] + "..."
    return text


def _in_repo(path):
    real = os.path.realpath(path)
    if not real.startswith(_ROOT + os.sep):
        return False
    rel = real[len(_ROOT) + 1:]
    parts = rel.split(os.sep)
    return not any(p in ("site-packages", "dist-packages", ".tox", "venv", ".venv") for p in parts)


def _frames(tb):
    out = []
    while tb is not None:
        frame = tb.tb_frame
        path = frame.f_code.co_filename
        if _in_repo(path):
            out.append((tb, os.path.relpath(os.path.realpath(path), _ROOT)))
        tb = tb.tb_next
    return out


def pytest_runtest_logstart(nodeid, location):
    # A test whose start is logged and whose outcome never is: the one running when the process died
    # (a segfault in compiled code kills pytest before any report).
    if not _STATUS_OUT:
        return
    try:
        with open(_STATUS_OUT, "a") as fh:
            fh.write("STARTED " + nodeid + "\n")
    except Exception:
        pass


def pytest_runtest_logreport(report):
    if not _STATUS_OUT:
        return
    when = getattr(report, "when", "call")
    if report.passed and when != "call":
        return  # setup and teardown pass for every test that runs
    if report.skipped:
        status = "SKIPPED"
    elif report.failed:
        status = "FAILED" if when == "call" else "ERROR"
    else:
        status = "PASSED"
    try:
        with open(_STATUS_OUT, "a") as fh:
            fh.write(status + " " + report.nodeid + "\n")
    except Exception:
        pass


def pytest_exception_interact(node, call, report):
    if not _OUT or call.excinfo is None or report.skipped:
        return
    try:
        etype = call.excinfo.type
        value = call.excinfo.value
        frames = _frames(call.excinfo.tb)
        # A test module that fails to import is reported as pytest's CollectError, raised while
        # handling the real exception (an ImportError, a NameError at module level): report that.
        inner = value
        for _ in range(5):
            if frames:
                break
            inner = getattr(inner, "__cause__", None) or getattr(inner, "__context__", None)
            if inner is None:
                break
            etype, value, frames = type(inner), inner, _frames(inner.__traceback__)
        listed = []
        for tb, rel in frames[-_MAX_FRAMES:]:
            line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
            listed.append({"file": rel, "line": tb.tb_lineno, "function": tb.tb_frame.f_code.co_name,
                           "source": line[:200]})
        local_vars = {}
        if frames:
            crash_frame = frames[-1][0].tb_frame
            for name, val in list(crash_frame.f_locals.items())[:_MAX_LOCALS]:
                if name.startswith("@"):  # pytest's assertion-rewrite temporaries
                    continue
                local_vars[name] = _short(val)
        locals_note = ""
        if frames and not local_vars:
            # Seen late in long parallel runs, cause unknown: say what the frame looked like.
            code = crash_frame.f_code
            locals_note = "no locals: {} holds {} names, f_locals {} of {}, trace {}".format(
                code.co_name, len(code.co_varnames), type(crash_frame.f_locals).__name__,
                len(crash_frame.f_locals), "on" if sys.gettrace() else "off")
        record = {
            "locals_note": locals_note,
            "nodeid": node.nodeid,
            "when": getattr(report, "when", "collect"),
            "type": getattr(etype, "__name__", str(etype)),
            "message": _short_message(value),
            "frames": listed,
            "locals": local_vars,
        }
        with open(_OUT, "a") as fh:
            fh.write(json.dumps(record) + "\n")
    except Exception as exc:  # the plugin must never change a test's outcome; it says why it wrote nothing
        try:
            with open(_OUT + ".err", "a") as fh:
                fh.write(f"{node.nodeid}: {type(exc).__name__}: {_short_message(exc)[:300]}\n")
        except Exception:
            pass


def _short_message(value):
    try:
        text = str(value)
    except Exception:
        text = "<str failed>"
    return text if len(text) <= 1000 else text[:997] + "..."
