"""Which lines of a few files a test process executed, and where exceptions passed: installed as
``sitecustomize.py`` in a folder put first on the test process's ``PYTHONPATH`` (any runner:
pytest, sympy's ``bin/test``, Django's ``runtests.py``, and the subprocesses they start).

``$FIXGRAPH_TRACE_FILES`` lists the repository-relative files to watch (``os.pathsep``-separated),
each with the lines that matter after a ``#`` (``pkg/m.py#12,40``; none: the whole file);
``$FIXGRAPH_TRACE_DIR`` is where each process writes ``lines-<pid>.json`` at exit:
``{"imported": [file, ...], "executed": {file: [line, ...]}, "raised": {file: {line: [exception
type, ...]}}}``. Only code objects of a watched file that hold one of its lines get a local tracer
(decided once per code object), so the cost elsewhere is one dictionary look-up per call. A process killed by
its timeout writes nothing: the run then says nothing either way. Runs inside the instance's own
environment: standard library only, Python 3.6 syntax. A ``sitecustomize`` this one shadows is run
after it. It is no plant of the kind ``scoring.execution.envcheck`` refuses: it lies in the run's own
folder, outside the shared env, while that guard lists the env's site-packages, where a planted
``sitecustomize`` is caught whatever comes first on ``PYTHONPATH``.
"""

import atexit
import json
import os
import sys
import threading

_WANTED = {}
for _entry in os.environ.get("FIXGRAPH_TRACE_FILES", "").split(os.pathsep):
    _path, _, _nums = _entry.partition("#")
    if _path:
        _WANTED[_path] = set(int(n) for n in _nums.split(",") if n.strip().isdigit())
_FILES = list(_WANTED)
_DIR = os.environ.get("FIXGRAPH_TRACE_DIR", "")
_IMPORTED = set()
_EXECUTED = {}
_RAISED = {}
_MATCH = {}
_CODES = {}


def _rel(filename):
    """The watched file ``filename`` is, or None (cached per code file name)."""
    try:
        return _MATCH[filename]
    except KeyError:
        pass
    norm = filename.replace("\\", "/")
    found = None
    for rel in _FILES:
        if norm == rel or norm.endswith("/" + rel):
            found = rel
            break
    _MATCH[filename] = found
    return found


def _local(rel):
    lines = _EXECUTED.setdefault(rel, set())
    raised = _RAISED.setdefault(rel, {})

    def trace(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        elif event == "exception":
            try:
                name = arg[0].__name__
            except Exception:
                name = "?"
            raised.setdefault(frame.f_lineno, set()).add(name)
        return trace
    return trace


_LOCALS = {}


def _holds(code, rel):
    """Whether ``code`` (not its nested functions) has one of ``rel``'s wanted lines."""
    wanted = _WANTED.get(rel)
    if not wanted:
        return True
    import dis
    lines = [n for _, n in dis.findlinestarts(code) if n is not None]
    return bool(lines) and any(min(lines) <= n <= max(lines) for n in wanted)


def _global(frame, event, arg):
    if event != "call":
        return None
    code = frame.f_code
    try:
        tracer = _CODES[code]
    except KeyError:
        rel = _rel(code.co_filename)
        tracer = None
        if rel is not None:
            _IMPORTED.add(rel)
            if _holds(code, rel):
                tracer = _LOCALS.get(rel)
                if tracer is None:
                    tracer = _LOCALS[rel] = _local(rel)
        _CODES[code] = tracer
    return tracer(frame, event, arg) if tracer is not None else None


def _write():
    sys.settrace(None)
    try:
        out = {"imported": sorted(_IMPORTED), "executed": {f: sorted(v) for f, v in _EXECUTED.items()},
               "raised": {f: {str(n): sorted(t) for n, t in v.items()} for f, v in _RAISED.items()}}
        path = os.path.join(_DIR, f"lines-{os.getpid()}.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(out, fh)
        os.replace(path + ".tmp", path)
    except Exception:
        pass  # tracing must never change a test's outcome


def _chain():
    """Run the ``sitecustomize`` this file shadows, if the environment has one."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        import importlib.machinery
        rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
        if spec is not None and spec.loader is not None and spec.origin:
            with open(spec.origin) as fh:
                code = compile(fh.read(), spec.origin, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": spec.origin})
    except Exception:
        pass


if _FILES and _DIR:
    # A forked child (multiprocessing) inherits the tracer and writes its own file at exit.
    atexit.register(_write)
    threading.settrace(_global)
    sys.settrace(_global)
_chain()
