"""The code of an issue, as something to run: Python snippets from its fenced blocks and prompts.

:func:`issue_snippets` reads an issue's text (Markdown, as GitHub and SWE-bench give it) and
returns the pieces of Python it shows, each one a block that ``ast.parse`` accepts:

- fenced blocks (```` ``` ````) whose language is Python-ish or not given; shell, console, diff,
  output and other languages are skipped, and so is a block that starts with ``Traceback`` (an
  error the issue quotes, not code);
- doctest (``>>> ``/``... ``) and IPython (``In [n]:``/``...:``) sessions, inside fences and
  outside them, turned into plain code: the prompts' lines are kept, the output lines are not;
- Python 2's ``print x`` repaired to ``print(x)``, and up to 8 lines that do not parse (prose, a
  shell command, a stray output line) dropped; a block that still does not parse is left out.

The result is deterministic for a given text, holds at most :data:`MAX_BLOCKS` blocks and
:data:`MAX_CHARS` characters, and any text (non-UTF-8 leftovers, NUL bytes, garbage) gives a list,
never an exception. ``scoring.runtime.issue_run`` runs the blocks at the base commit.
"""

from __future__ import annotations

import ast
import re
import textwrap
import warnings

MAX_BLOCKS = 8
MAX_CHARS = 20_000
MAX_DROPPED_LINES = 8
# What is read of an issue at most: enough for any real one, and a bound on the regex work.
MAX_TEXT_CHARS = 200_000

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.S | re.M)
_PYTHON_LANGS = frozenset(
    {"", "python", "py", "python3", "py3", "python2", "py2", "pycon", "ipython", "ipython3", "ipy", "sage"}
)
# A prompt and the one space after it; what follows is the code, its own indentation kept.
_PROMPT = re.compile(r"^[ \t]*(>>>|\.\.\.|In \[\d*\]:|\.\.\.:)(?: |$)")
_SESSION_START = re.compile(r"^[ \t]*(>>>|In \[\d*\]:)(?: |$)")
_PY2_PRINT = re.compile(r"^(\s*)print\s+(?![\s(=.,;)\]}]|$)(.+?)\s*$")


def issue_snippets(text: str) -> list[str]:
    """The issue's runnable Python blocks, in the order the text shows them (duplicates once)."""
    text = _clean(text)
    found: list[str] = []
    pos = 0
    for m in _FENCE.finditer(text):
        found += _sessions(text[pos : m.start()])
        pos = m.end()
        lang, body = m.group(1).lower(), textwrap.dedent(m.group(2))
        if lang not in _PYTHON_LANGS or body.lstrip().startswith("Traceback"):
            continue
        lines = body.splitlines()
        code = _unprompt(lines) if any(_SESSION_START.match(ln) for ln in lines) else body
        found.append(code)
    found += _sessions(text[pos:])
    out: list[str] = []
    total = 0
    for raw in found:
        code = repair(raw)
        if code is None or code in out or total + len(code) > MAX_CHARS:
            continue
        out.append(code)
        total += len(code)
        if len(out) >= MAX_BLOCKS:
            break
    return out


def repair(code: str) -> str | None:
    """``code`` as a module ``ast.parse`` accepts: Python 2 prints made calls, and at most
    :data:`MAX_DROPPED_LINES` lines that do not parse dropped; None when that is not enough or
    nothing but comments is left."""
    lines = code.splitlines()
    dropped = 0
    for _ in range(len(lines) + MAX_DROPPED_LINES + 1):
        while lines and not lines[-1].strip():
            lines.pop()
        source = "\n".join(lines)
        if not source.strip():
            return None
        error = _syntax_error(source)
        if error is None:
            return source + "\n" if _has_statements(source) else None
        lineno, _ = error
        if lineno is None:
            return None
        index = min(max(lineno, 1), len(lines)) - 1
        fixed = _PY2_PRINT.sub(r"\1print(\2)", lines[index])
        if fixed != lines[index] and _syntax_error(fixed.strip()) is None:
            lines[index] = fixed
            continue
        if dropped >= MAX_DROPPED_LINES:
            return None
        del lines[index]
        dropped += 1
    return None


def _clean(text: object) -> str:
    """Text every later step can handle: a str, UTF-8 encodable, no NULs, newlines as ``\\n``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = "" if text is None else str(text)
    text = text[:MAX_TEXT_CHARS].encode("utf-8", errors="replace").decode("utf-8")
    return text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n")


def _unprompt(lines: list[str]) -> str:
    """A doctest or IPython session's code: its prompt lines without their prompts."""
    out = []
    for ln in lines:
        m = _PROMPT.match(ln)
        if m:
            out.append(ln[m.end() :])
    return "\n".join(out)


def _sessions(text: str) -> list[str]:
    """The doctest and IPython sessions of prose outside fences: from a ``>>>`` (``In [n]:``) line
    up to the next blank line, output lines between the prompts left out."""
    out: list[str] = []
    session: list[str] | None = None
    for ln in text.splitlines():
        if session is None:
            if _SESSION_START.match(ln):
                session = [ln]
            continue
        if not ln.strip():
            out.append(_unprompt(session))
            session = None
        else:
            session.append(ln)
    if session is not None:
        out.append(_unprompt(session))
    return out


def _syntax_error(source: str) -> tuple[int | None, str] | None:
    """None when ``source`` parses; else the line (1-based, None: unknown) and message of why not."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences and the like in quoted code
            ast.parse(source)
    except SyntaxError as exc:
        return exc.lineno, exc.msg
    except (ValueError, MemoryError, RecursionError, OverflowError) as exc:
        return None, str(exc)
    return None


def _has_statements(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return bool(ast.parse(source).body)
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError):
        return False
