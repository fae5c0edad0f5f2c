"""Runs an issue's code blocks statement by statement under a profiler, and writes what ran.

Run inside a test sandbox with the repository's own interpreter, from the root of the run's copy
of the base commit (``scoring.runtime.issue_run`` copies it there)::

    python issue_tracer.py INPUT.json OUTPUT.json

INPUT holds ``blocks`` (the code, see ``fixgraph.localize.snippets``), ``prelude`` (code run first,
untraced: a REPL's session setup), ``statement_timeout_s`` and ``budget_s`` (the whole run's
seconds; the tracer stops starting statements past it). The repository is the current folder.

- A prelude runs first, untraced; then each top-level statement of each block, in one shared
  namespace, under ``sys.setprofile``. Import statements run untraced: what a module does while
  it is imported says nothing of the issue.
- A ``NameError`` the issue's own code raises is resolved, when it can be, by importing what
  the author took for granted and running the statement again (3 times at most): a conventional
  alias (``np``, ``xr``, ``so``), a name one of the repository's top-level packages exports, or
  a module of that name (``os``, ``pytest``): issues often leave out the import.
- Each statement has a timer (``SIGALRM``): past it a ``StatementTimeout`` (a BaseException, so
  ``except Exception`` in the code does not swallow it) is raised, and again every second until
  the statement gives up; it is recorded as an error where it struck.
- OUTPUT, rewritten after each statement (to a temporary file, then renamed: a run killed from
  outside leaves the last complete one): ``statements`` run, ``calls`` (repository file ->
  ``name:firstlineno`` -> calls), ``first`` (file -> index of the statement that first called
  it), ``errors`` (type, message cut to 200 characters, the repository frames as (path, line,
  function) from outermost to innermost, and the statement's index), ``timeouts`` (statements
  cut by the timer). Paths are relative to the repository; the tracer's own code and module
  bodies (``<module>``) are left out, and everything is capped so hostile code cannot make the
  output huge. Nothing on stdout is read.

It runs under every Python a SWE-bench repository uses (3.6 to 3.13): the standard library only,
no newer syntax or APIs.
"""

import ast
import importlib
import json
import os
import re
import signal
import sys
import time
import traceback

MAX_FILES = 2000
MAX_FUNCTIONS = 200  # per file
MAX_ERRORS = 50
MAX_FRAMES = 40  # per error: the innermost are kept
MAX_STATEMENTS = 500
MAX_PACKAGES = 50
MESSAGE_CHARS = 200
RETRIES = 3
# Output rewritten after every statement while it is this small; a bigger one once a second.
SMALL_OUTPUT = 256 * 1024
_SKIP_PARTS = ("site-packages", "dist-packages", ".tox", "venv", ".venv")
_NOT_PACKAGES = ("doc", "docs", "examples", "benchmarks", "build", "dist")
_NAME_ERROR = re.compile(r"name '(\w+)' is not defined")

# Kept before any issue code runs: the code may rebind what it can reach (json.dumps, open).
_open = open
_dumps = json.dumps
_replace = os.replace
_realpath = os.path.realpath
_relpath = os.path.relpath
_monotonic = time.monotonic
_setprofile = sys.setprofile
_extract_tb = traceback.extract_tb


class StatementTimeout(BaseException):
    """A statement ran past its timer."""


class Tracer:
    def __init__(self, root, me):
        self.root = root
        self.prefix = root + os.sep
        self.me = me
        self.calls = {}
        self.first = {}
        self.errors = []
        self.timeouts = 0
        self.statement = 0
        self.truncated = False
        self._codes = {}  # code object -> (file, key), or None: not the repository's

    def _where(self, co):
        path = co.co_filename
        if co.co_name == "<module>" or not path or path[0] == "<":
            return None
        real = _realpath(path)
        if real == self.me or not real.startswith(self.prefix):
            return None
        rel = real[len(self.prefix) :]
        if any(part in _SKIP_PARTS for part in rel.split(os.sep)):
            return None
        return rel, co.co_name + ":" + str(co.co_firstlineno)

    def profile(self, frame, event, arg):
        if event != "call":
            return
        co = frame.f_code
        try:
            where = self._codes[co]
        except KeyError:
            where = self._where(co)
            if len(self._codes) < 100000:
                self._codes[co] = where
        except Exception:  # an unhashable code object: never expected
            return
        if where is None:
            return
        rel, key = where
        funcs = self.calls.get(rel)
        if funcs is None:
            if len(self.calls) >= MAX_FILES:
                self.truncated = True
                return
            funcs = self.calls[rel] = {}
            self.first[rel] = self.statement
        if key in funcs:
            funcs[key] += 1
        elif len(funcs) < MAX_FUNCTIONS:
            funcs[key] = 1
        else:
            self.truncated = True

    def frames(self, tb):
        out = []
        try:
            for fs in _extract_tb(tb):
                real = _realpath(fs.filename) if fs.filename and fs.filename[0] != "<" else ""
                if real and real != self.me and real.startswith(self.prefix):
                    out.append([real[len(self.prefix) :], int(fs.lineno or 0), str(fs.name)])
        except Exception:
            pass
        return out[-MAX_FRAMES:]

    def record(self, exc, kind=None):
        if len(self.errors) >= MAX_ERRORS:
            self.truncated = True
            return
        self.errors.append(
            {
                "type": kind or _type_name(exc),
                "message": _message(exc),
                "frames": [] if kind else self.frames(exc.__traceback__),
                "statement": self.statement,
            }
        )

    def result(self, ran):
        return {
            "statements": ran,
            "calls": self.calls,
            "first": self.first,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "truncated": self.truncated,
        }


def _type_name(exc):
    try:
        return str(type(exc).__name__)[:100]
    except Exception:
        return "?"


def _message(exc):
    try:
        text = str(exc)
    except BaseException:
        text = "<str() failed>"
    return text[:MESSAGE_CHARS]


def _packages(root):
    """The repository's top-level packages (in the root and in ``src/``), its tests left out."""
    out = []
    for base in (root, os.path.join(root, "src")):
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        for name in names:
            if (
                name.startswith(("test", "_", "."))
                or name in _NOT_PACKAGES
                or not name.isidentifier()
                or not os.path.isfile(os.path.join(base, name, "__init__.py"))
            ):
                continue
            out.append(name)
    return out[:MAX_PACKAGES]


# The import aliases snippets take for granted (the names every tutorial of these libraries uses).
ALIASES = {
    "np": "numpy",
    "pd": "pandas",
    "xr": "xarray",
    "plt": "matplotlib.pyplot",
    "mpl": "matplotlib",
    "sns": "seaborn",
    "so": "seaborn.objects",
    "sp": "scipy",
    "nx": "networkx",
}


def _import(name, ns, target):
    try:
        ns[name] = importlib.import_module(target)
    except BaseException as exc:
        if isinstance(exc, StatementTimeout):
            raise
        return False
    return True


def _resolve(name, ns, packages):
    """Bind ``name`` in ``ns`` to what the snippet's author took for granted: a conventional
    alias (``np``, ``xr``), then what one of ``packages`` exports under it, then a module of that
    name (``os``, ``pytest``); whether it could."""
    if name in ALIASES:
        return _import(name, ns, ALIASES[name])
    for pkg in packages:
        try:
            mod = importlib.import_module(pkg)
            value = getattr(mod, name)
        except BaseException as exc:
            if isinstance(exc, StatementTimeout):
                raise
            continue
        ns[name] = value
        return True
    return name[:1].islower() and _import(name, ns, name)


def _own_name_error(exc):
    """The undefined name when the issue's code itself (not the repository's) raised ``exc``."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code.co_filename != "<issue>":
        return None
    m = _NAME_ERROR.search(_message(exc))
    return m.group(1) if m else None


def _on_alarm(signum, frame):
    raise StatementTimeout("statement timed out")


def _arm(seconds):
    signal.setitimer(signal.ITIMER_REAL, max(0.01, seconds), 1.0)


def _disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def _write(path, data):
    text = _dumps(data)
    tmp = path + ".tmp"
    with _open(tmp, "w") as fh:
        fh.write(text)
    _replace(tmp, path)
    return len(text)


def _statements(blocks):
    for code in blocks:
        try:
            tree = ast.parse(code, "<issue>")
        except Exception:  # SyntaxError, ValueError (NULs), TypeError (not a str)
            continue
        for stmt in tree.body:
            # 3.8+ requires type_ignores; 3.6 and 3.7 accept it (any keyword becomes an attribute).
            mod = ast.Module(body=[stmt], type_ignores=[])
            try:
                compiled = compile(mod, "<issue>", "exec")
            except Exception:
                continue
            yield compiled, isinstance(stmt, (ast.Import, ast.ImportFrom))


def _run_one(tracer, compiled, is_import, ns, packages):
    for attempt in range(RETRIES + 1):
        try:
            if not is_import:
                _setprofile(tracer.profile)
            exec(compiled, ns)
            return
        except NameError as exc:
            _setprofile(None)
            name = _own_name_error(exc)
            if attempt == RETRIES or name is None or not _resolve(name, ns, packages):
                raise
        finally:
            _setprofile(None)


def _statement(tracer, compiled, is_import, ns, packages, seconds):
    try:
        try:
            _arm(seconds)
            _run_one(tracer, compiled, is_import, ns, packages)
        finally:
            _disarm()
            _setprofile(None)
    except StatementTimeout as exc:
        tracer.timeouts += 1
        tracer.record(exc)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are the code's too
        tracer.record(exc)


def main(argv):
    with _open(argv[1]) as fh:
        spec = json.load(fh)
    out_path = os.path.abspath(argv[2])
    root = _realpath(os.getcwd())
    tracer = Tracer(root, _realpath(os.path.abspath(__file__)))
    per_statement = float(spec.get("statement_timeout_s") or 10)
    deadline = _monotonic() + float(spec.get("budget_s") or 60)
    packages = _packages(root)
    sys.path.insert(0, root)
    signal.signal(signal.SIGALRM, _on_alarm)
    ns = {"__name__": "__main__", "__builtins__": __builtins__}
    ran = 0
    last_size = _write(out_path, tracer.result(ran))
    last_write = _monotonic()
    prelude = spec.get("prelude") or ""
    if prelude:
        try:
            _arm(per_statement)
            try:
                exec(compile(prelude, "<prelude>", "exec"), ns)
            finally:
                _disarm()
        except BaseException as exc:
            tracer.record(exc, "prelude:" + _type_name(exc))
    for compiled, is_import in _statements(spec.get("blocks") or []):
        remaining = deadline - _monotonic()
        if ran >= MAX_STATEMENTS or remaining <= 0:
            tracer.truncated = True
            break
        tracer.statement = ran
        try:
            _statement(tracer, compiled, is_import, ns, packages, min(per_statement, remaining))
        except StatementTimeout:  # the repeating timer struck once more, between two steps above
            _disarm()
        ran += 1
        now = _monotonic()
        if last_size < SMALL_OUTPUT or now - last_write >= 1.0:
            last_size = _write(out_path, tracer.result(ran))
            last_write = now
    _write(out_path, tracer.result(ran))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
