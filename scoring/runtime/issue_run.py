"""Execution evidence: an issue's code run at the base commit, and what of the repository it ran.

:func:`trace_issue` takes the issue's Python snippets (``fixgraph.localize.snippets``) and runs them in
the task's test environment, on a fresh copy of the base commit, isolated as the tests are
(``SubprocessRunner.run_python``: scrubbed environment, no network, CPU and memory limits, the
process group killed at the timeout), under the profiler of ``scoring/runtime/issue_tracer.py``. The
:class:`IssueTrace` says which repository files' functions the code called (and from which
statement on), and for each exception it raised its repository frames: a localization signal,
read by whoever ranks the files to fix (nothing here ranks).

Traces are cached under ``<cache_dir>/issue-traces`` per task, backend, snippets and tracer; a
run cut by a time limit (the machine may have been busy) is not, nor one that could not run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fixgraph import redaction
from fixgraph.dataset import Task
from fixgraph.localize.snippets import issue_snippets
from fixgraph.records import atomic_write
from fixgraph.repo.workspace import Worktree, content_key
from scoring.execution.testenv import EnvError, SuiteRunner

TRACER = Path(__file__).with_name("issue_tracer.py")
# Where the tracer and its input and output go in the run's copy of the base commit.
_TRACER_FILE = "_fixgraph_issue_tracer.py"
_INPUT_FILE = "_fixgraph_issue_input.json"
_OUTPUT_FILE = "_fixgraph_issue_trace.json"
NO_BACKEND = "execution evidence needs the venv or local backend"
# Seconds the interpreter, the copy's imports and the final write get beyond the statements.
_STARTUP_S = 5.0

# Code run untraced before an issue's snippets, per repository: the session its users write
# snippets in. sympy's issues are written in isympy's session (``from sympy import *`` and these
# symbols, as isympy's ``-q`` start defines them): ``x``, ``f`` and friends are used undefined.
REPL_PRELUDES = {
    "sympy/sympy": (
        "from sympy import *\n"
        "x, y, z, t = symbols('x y z t')\n"
        "k, m, n = symbols('k m n', integer=True)\n"
        "f, g, h = symbols('f g h', cls=Function)\n"
    ),
}


# django's code needs settings before most of it runs; an issue's snippet usually assumes a project
# (``python manage.py shell``). Unless the snippet configures them itself, they are configured
# first: an in-memory SQLite database and the contrib apps most snippets lean on.
DJANGO_PRELUDE = (
    "import django\n"
    "from django.conf import settings\n"
    "if not settings.configured:\n"
    "    settings.configure(DEBUG=True, SECRET_KEY='fixgraph-replay', USE_TZ=False,\n"
    "        DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}},\n"
    "        INSTALLED_APPS=['django.contrib.contenttypes', 'django.contrib.auth'])\n"
    "    django.setup()\n"
)
_CONFIGURES_DJANGO = re.compile(r"settings\.configure\(|DJANGO_SETTINGS_MODULE|django\.setup\(")
_USES_DJANGO = re.compile(r"^\s*(from|import)\s+django\b", re.M)


def prelude_for(repo: str, blocks: list[str]) -> str:
    """The code run untraced before ``blocks``: the repository's REPL session (sympy), or django's
    settings when the snippets use django and do not configure it themselves."""
    if repo == "django/django":
        code = "\n".join(blocks)
        return DJANGO_PRELUDE if _USES_DJANGO.search(code) and not _CONFIGURES_DJANGO.search(code) else ""
    return REPL_PRELUDES.get(repo, "")


@dataclass
class TracedError:
    """An exception the issue's code raised: its type, message (at most 200 characters), and the
    frames of the repository it passed through, outermost first, as (path, line, function).

    ``type`` "StatementTimeout" is a statement cut by its timer (its frames: where it was);
    "prelude:<type>" an error of the REPL prelude (no frames)."""

    type: str
    message: str
    frames: list[tuple[str, int, str]] = field(default_factory=list)
    statement: int = -1  # index of the statement that raised it

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "message": self.message,
            "frames": [list(f) for f in self.frames],
            "statement": self.statement,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TracedError:
        frames = [(str(f[0]), int(f[1]), str(f[2])) for f in data.get("frames") or () if len(f) == 3]
        return cls(
            str(data.get("type", "")), str(data.get("message", "")), frames, int(data.get("statement", -1))
        )


@dataclass
class IssueTrace:
    """What running an issue's snippets at the base commit did.

    - ``statements``: how many top-level statements ran (each is one step, whatever it raised);
    - ``calls``: repository file -> ``function:firstlineno`` -> calls, for the functions the
      snippets' statements called (imports and module bodies left out);
    - ``first``: repository file -> index of the statement that first called into it;
    - ``errors``: the exceptions, in order;
    - ``timed_out``: the run was killed by its wall-clock limit, or a statement by its timer: what
      is recorded is what ran until then;
    - ``reason``: why nothing could run (no snippet, no environment, no trace written, a backend
      without the means); "" when the snippets ran.
    """

    statements: int = 0
    calls: dict[str, dict[str, int]] = field(default_factory=dict)
    first: dict[str, int] = field(default_factory=dict)
    errors: list[TracedError] = field(default_factory=list)
    seconds: float = 0.0
    timed_out: bool = False
    reason: str = ""
    snippets: int = 0  # how many code blocks the issue gave
    truncated: bool = False  # the tracer's caps (files, functions, errors, statements) were reached
    cached: bool = False  # served from the cache (not stored)

    def to_dict(self) -> dict[str, Any]:
        return {
            "statements": self.statements,
            "calls": self.calls,
            "first": self.first,
            "errors": [e.to_dict() for e in self.errors],
            "seconds": self.seconds,
            "timed_out": self.timed_out,
            "reason": self.reason,
            "snippets": self.snippets,
            "truncated": self.truncated,
        }

    def evidence(self, max_errors: int = 3, max_frames: int = 4) -> str:
        """What the run showed that a reader of the issue should know, for the Planner's prompt:
        the exceptions the issue's code raised inside the repository, innermost frame first.
        Unresolved names, the prelude's failures and errors with no repository frame say nothing
        about the code, and are left out; "" when nothing is left."""
        lines = []
        for err in self.errors:
            if not err.frames or err.type in ("NameError", "SyntaxError") or err.type.startswith("prelude:"):
                continue
            where = ", from ".join(
                f"{path}:{line} in {func}" for path, line, func in reversed(err.frames[-max_frames:])
            )
            lines.append(f"- statement {err.statement + 1}: {err.type}: {err.message}\n  raised at {where}")
            if len(lines) == max_errors:
                break
        return "\n".join(lines)

    def note(self) -> str:
        """One line for the run's record: what ran, or why nothing did."""
        if self.reason:
            return f"execution: not run ({self.reason})"
        errors = sorted({e.type for e in self.errors})
        return (
            f"execution: {self.statements} statements of {self.snippets} snippets called {len(self.calls)} "
            f"repository files"
            + (f"; raised {', '.join(errors[:4])}" if errors else "")
            + ("; timed out" if self.timed_out else "")
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IssueTrace:
        calls = {
            str(f): {str(k): int(v) for k, v in funcs.items()}
            for f, funcs in (data.get("calls") or {}).items()
            if isinstance(funcs, dict)
        }
        return cls(
            statements=int(data.get("statements", 0)),
            calls=calls,
            first={str(f): int(i) for f, i in (data.get("first") or {}).items()},
            errors=[TracedError.from_dict(e) for e in data.get("errors") or () if isinstance(e, dict)],
            seconds=float(data.get("seconds", 0.0)),
            timed_out=bool(data.get("timed_out", False)),
            reason=str(data.get("reason", "")),
            snippets=int(data.get("snippets", 0)),
            truncated=bool(data.get("truncated", False)),
        )


def trace_issue(
    runner: SuiteRunner,
    task: Task,
    wt: Worktree,
    text: str,
    *,
    timeout_s: float = 60,
    statement_timeout_s: float | None = None,
    patch: str | None = None,
) -> IssueTrace:
    """Run the snippets of the issue ``text`` at ``task``'s base commit (``wt`` is only read), or
    with ``patch`` applied to it (the Critic's replay, ``scoring.runtime.replay``), and record what they
    ran. ``timeout_s`` bounds the whole run, ``statement_timeout_s`` each statement (default: a
    quarter of it, at most 10 s). Never raises for the issue's code, the patch, the environment
    or the backend: ``reason`` says why nothing ran."""
    blocks = issue_snippets(text)
    if not blocks:
        return IssueTrace(reason="the issue has no Python code to run")
    run_python = getattr(runner, "run_python", None)
    if run_python is None:
        return IssueTrace(reason=NO_BACKEND, snippets=len(blocks))
    prelude = prelude_for(task.repo, blocks)
    # Keyed by the backend, not the environment's key: that key names the commit the environment
    # was last installed at, and asking for it installs this task's (minutes for a compiled
    # repository whose instances alternate). An environment is built from pinned specs, so a
    # trace of the same snippets at the same commit on the same backend is the same evidence.
    patch = patch if patch and patch.strip() else None
    path = _cache_path(runner.cache_dir, task, str(getattr(runner, "backend", "")), blocks, prelude, patch)
    cached = _cached(path)
    if cached is not None:
        return cached
    per_statement = statement_timeout_s if statement_timeout_s is not None else min(10.0, timeout_s / 4)
    spec = {
        "blocks": blocks,
        "prelude": prelude,
        "statement_timeout_s": max(0.1, per_statement),
        "budget_s": max(1.0, timeout_s - _STARTUP_S),
    }
    try:
        done, outputs = run_python(
            task,
            wt,
            {_TRACER_FILE: TRACER.read_text(encoding="utf-8"), _INPUT_FILE: json.dumps(spec)},
            [_TRACER_FILE, _INPUT_FILE, _OUTPUT_FILE],
            timeout_s,
            outputs=(_OUTPUT_FILE,),
            extra_env={"MPLBACKEND": "Agg", "PYTHONHASHSEED": "0"},
            **({"patch": patch} if patch is not None else {}),
        )
    except (EnvError, OSError) as exc:
        return IssueTrace(reason=str(exc) or "env could not be built", snippets=len(blocks))
    output = outputs.get(_OUTPUT_FILE)
    trace = _load(output.decode("utf-8", errors="replace")) if output else None
    if trace is not None:
        for err in trace.errors:
            err.message = redaction.redact(err.message)
    else:
        tail = redaction.redact(done.output[-500:]).strip()
        trace = IssueTrace(reason="the tracer wrote no trace" + (f": {tail}" if tail else ""))
    trace.snippets = len(blocks)
    trace.seconds = round(done.seconds, 3)
    trace.timed_out = trace.timed_out or done.timed_out
    # A run cut by a time limit may say more on an idle machine: not pinned (nor a failure to run).
    if not trace.timed_out and not trace.reason:
        atomic_write(path, json.dumps(trace.to_dict()))
    return trace


def _load(text: str) -> IssueTrace | None:
    """A trace from its JSON (the tracer's output, or a cached trace); None when unreadable. The
    tracer's ``timeouts`` count is what ``timed_out`` means here."""
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            return None
        trace = IssueTrace.from_dict(raw)
    except (ValueError, TypeError, AttributeError, IndexError):
        return None
    trace.timed_out = trace.timed_out or int(raw.get("timeouts") or 0) > 0
    return trace


def _cached(path: Path) -> IssueTrace | None:
    try:
        trace = _load(path.read_text(encoding="utf-8"))
    except OSError:
        return None
    if trace is not None:
        trace.cached = True
    return trace


def _cache_path(cache_dir: Path, task: Task, backend: str, blocks: list[str], prelude: str,
                patch: str | None = None) -> Path:
    ident = task.instance_id or f"{task.repo}@{task.base_commit}"
    # The tracer's source is part of the key: a changed tracer records differently.
    tracer = TRACER.read_text(encoding="utf-8")
    # A patched run's key has the patch too; the base run's key is as it was before patches had one.
    key = content_key(ident, task.base_commit, backend, "\0".join(blocks), prelude, tracer,
                      *((patch,) if patch is not None else ()))
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", ident)[:120]
    return cache_dir / "issue-traces" / f"{name}-{key}.json"
