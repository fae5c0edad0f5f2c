"""Differential static analysis (REDO §3.1), done more carefully than comparing message strings.

pyright and pyflakes run on the files a patch touches, before and after the patch, in the task's
worktree (so the repository's own imports resolve). A diagnostic counts only when the patch
introduced it. Each diagnostic is keyed by (file, rule, message with volatile parts normalized,
enclosing function or class) and the keys are compared as multisets, so that:

- code the patch only moved (to another line, or a function moved within the file) keeps its key
  and does not look new;
- the same message appearing in another function, or a second time in the same one, does look
  new, where REDO's set of message strings swallows it;
- only rules that mean a runtime error count (below), where REDO counts any new message.

Speed: one pyright process per patch. It checks, for each touched file, a copy of the patched
version and a copy of the base version written next to the real file (so relative imports resolve
as they do for it; the copies are removed afterwards), and in both copies the bodies of functions
the patch does not concern are reduced to ``return <Any>`` with line numbers unchanged
(``patchinfo.focus``): pyright then spends its time on the changed functions and the callers of a
changed function (in any touched file) instead of on the whole file. When the patch touches
several Python files, the base copies are checked in a second process with every touched file put
back to the base for its duration, so that an old call to a function another file changed is
seen as broken by the patch. The base side's diagnostics are cached under ``cache_dir`` per
(commit, file, focused content, analyzer version), so a retry on the same functions checks only
the patched side. ``critic.infer_unannotated = false`` stops pyright from inferring what
unannotated functions outside the touched files return (the median patch 1.3x faster; the touched
files stay fully analyzed through a per-file ``# pyright:`` comment).

Which diagnostics count as runtime-error evidence (``RUNTIME_RULES``): the ones whose dynamic
counterpart is an exception Python raises when the line runs: a name that is not defined
(NameError), an attribute or import symbol that does not exist (AttributeError, ImportError), a
call with the wrong arguments (TypeError), a variable that may be unbound (UnboundLocalError),
calling or indexing or iterating a value that may be None (TypeError, AttributeError), an
operator the operands do not support (TypeError), instantiating an abstract class (TypeError),
and syntax errors. Type-annotation disagreements (return types, assignments, overrides) are not
evidence: Python does not enforce annotations, and in untyped repositories pyright's inferred
declared types make them mostly noise. They are still returned in ``all_new`` for code quality.
Three refinements, measured with ``eval.critic_bench``: an unsupported operator counts only when
it fails for the whole type (not for one member of a union); an unknown attribute that pyright
already reports on the base code of the same file is its misjudgement of a class that gets
attributes at run time, and not evidence; and an import of a module that the repository's own
package lacks is an ImportError whether the import is relative or absolute. A third analyzer,
``scoring/static/names.py``, adds the attributes the patch reads that exist nowhere. Two more, found on
the candidates of eval/select_bench.py (README, Choosing among candidates): a diagnostic the base
had in the same function with only the composed types it quotes changed (pyright's inference
drifting) is not new; and what a test file or a new top-level scratch script would raise is not
evidence against the fix (``patchinfo.is_scaffold``).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fixgraph import astlock, phases
from fixgraph.config import CriticSettings
from fixgraph.records import atomic_write
from fixgraph.repo.workspace import Worktree
from fixgraph.state import Finding
from scoring.static import names, pyright_server
from scoring.static.patchinfo import (
    FileChange,
    PatchParseError,
    SymbolMap,
    base_content,
    check_applied,
    focus,
    parse_patch,
)

ANALYZER_VERSION = "4"  # bump when keys or rules change, to invalidate the base-side cache

# pyright rules that are runtime-error evidence (see the module docstring for why).
RUNTIME_RULES: frozenset[str] = frozenset({
    "reportUndefinedVariable",
    "reportAttributeAccessIssue",
    "reportCallIssue",
    "reportArgumentType",
    "reportPossiblyUnboundVariable",
    "reportFunctionMemberAccess",
    "reportUnboundVariable",
    "reportOptionalMemberAccess",
    "reportOptionalSubscript",
    "reportOptionalCall",
    "reportOptionalIterable",
    "reportOptionalContextManager",
    "reportOptionalOperand",
    "reportIndexIssue",
    "reportOperatorIssue",
    "reportAbstractUsage",
    "reportUnhashable",
    "reportNoOverloadImplementation",
    "reportRelativeImport",  # our own name: an import of a module the repository lacks (ImportError)
    "syntax",
})

# pyflakes message classes that are runtime-error evidence.
PYFLAKES_RUNTIME: frozenset[str] = frozenset({
    "UndefinedName", "UndefinedLocal", "UndefinedExport", "DuplicateArgument", "ReturnOutsideFunction",
    "YieldOutsideFunction", "ContinueOutsideLoop", "BreakOutsideLoop", "DefaultExceptNotLast",
    "TwoStarredExpressions", "TooManyExpressionsInStarredAssignment", "PercentFormatInvalidFormat",
    "PercentFormatMixedPositionalAndNamed", "PercentFormatPositionalCountMismatch",
    "PercentFormatExpectedMapping", "PercentFormatExpectedSequence", "PercentFormatStarRequiresSequence",
    "PercentFormatUnsupportedFormatCharacter", "StringDotFormatInvalidFormat",
    "StringDotFormatMissingArgument", "StringDotFormatMixingAutomatic", "syntax",
})

# Settings that make pyright's output independent of whatever config the repository carries.
PYRIGHT_CONFIG: dict[str, Any] = {
    "typeCheckingMode": "standard",
    # Third-party packages without stubs stay Unknown instead of being inferred from their source:
    # it halves the time on repositories that import pandas or matplotlib, and inferred library
    # types are where pyright's guesses, hence false alarms, come from.
    "useLibraryCodeForTypes": False,
    "reportMissingModuleSource": "none",
    "reportMissingTypeStubs": "none",
    "enableTypeIgnoreComments": True,
}

# A per-file override (pyright reads `# pyright:` comments anywhere in a file): the copies of the
# touched files analyze their unannotated functions while the rest of the repository does not.
OWN_FILE_RULES = "# pyright: analyzeUnannotatedFunctions=true"

SIDE_PREFIX = "_fixgraph_"


class StaticAnalysisUnavailable(Exception):
    """pyright is missing or did not run; one line for the user."""


@dataclass
class StaticResult:
    status: Literal["ok", "cannot_analyze"]
    new: list[Finding]  # introduced by the patch and runtime-error evidence
    reason: str = ""
    seconds: float = 0.0
    all_new: list[Finding] = field(default_factory=list)  # every new diagnostic, evidence or not
    notes: list[str] = field(default_factory=list)  # how it ran, where that is worth a record's line


@dataclass(frozen=True)
class Diag:
    source: str  # pyright | pyflakes
    rule: str
    message: str
    line: int  # 1-based
    severity: str

    def to_json(self) -> list[Any]:
        return [self.source, self.rule, self.message, self.line, self.severity]


# ---- pyright -------------------------------------------------------------------------------


def pyright_command(settings: CriticSettings) -> list[str]:
    """pyright on PATH, or beside the Python running fixgraph (a venv's bin/, which is not on PATH
    when graph.py is run as ``venv/bin/python graph.py``)."""
    beside = str(Path(sys.executable).parent)
    exe = shutil.which(settings.pyright) or shutil.which(settings.pyright, path=beside)
    if exe is None:
        raise StaticAnalysisUnavailable(
            f"pyright not found (looked for {settings.pyright!r} on PATH and in {beside}); "
            "install it with `pip install pyright`")
    return [exe]


_version_cache: dict[str, str] = {}


def check_available(settings: CriticSettings) -> str:
    """pyright's version, or StaticAnalysisUnavailable: for CLIs to fail before any work."""
    return pyright_version(pyright_command(settings))


@phases.timed("pyright")
def pyright_version(cmd: list[str]) -> str:
    key = cmd[0]
    if key not in _version_cache:
        try:
            proc = subprocess.run(cmd + ["--version"], capture_output=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise StaticAnalysisUnavailable(f"pyright did not start: {exc}") from None
        out = proc.stdout.decode(errors="replace").strip()
        if proc.returncode != 0 or not out:
            raise StaticAnalysisUnavailable(f"pyright did not start (exit {proc.returncode})")
        _version_cache[key] = out.splitlines()[-1]
    return _version_cache[key]


def pyright_config(settings: CriticSettings) -> dict[str, Any]:
    return dict(PYRIGHT_CONFIG, analyzeUnannotatedFunctions=settings.infer_unannotated)


_LSP_SEVERITY = {1: "error", 2: "warning", 3: "information", 4: "hint"}


def _diag(sev: str, rule: str | None, message: str, line0: int) -> Diag | None:
    """A pyright diagnostic as the Critic keeps it (the command line's report or the server's);
    None for information and hints."""
    if sev not in ("error", "warning"):
        return None
    return Diag("pyright", rule or ("syntax" if sev == "error" else "other"), message, line0 + 1, sev)


@phases.timed("pyright")
def run_pyright(cmd: list[str], root: Path, files: list[Path], config_dir: Path,
                timeout: float, base_config: dict[str, Any], *, server: bool = False,
                texts: dict[Path, str] | None = None, notes: list[str] | None = None) -> dict[Path, list[Diag]]:
    """pyright over ``files``; diagnostics per file. Raises when pyright did not run.

    With ``server``, the language server kept for ``root`` (scoring/static/pyright_server.py)
    checks them, with ``texts`` where given; when it cannot, one process does, and ``notes`` says
    so."""
    config_dir.mkdir(parents=True, exist_ok=True)
    config = dict(base_config, extraPaths=[str(root)] + ([str(root / "src")] if (root / "src").is_dir() else []))
    if server:
        found = _from_server(cmd, root, files, config_dir, timeout, config, texts or {})
        if isinstance(found, dict):
            return found
        if notes is not None:
            notes.append(f"{found}; this check ran as one pyright process")
    cfg_path = config_dir / f"pyrightconfig-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}.json"
    if not cfg_path.is_file() or cfg_path.read_text() != json.dumps(config):
        atomic_write(cfg_path, json.dumps(config))
    try:
        proc = subprocess.run(cmd + ["--outputjson", "-p", str(cfg_path)] + [str(f) for f in files],
                              cwd=root, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise StaticAnalysisUnavailable(f"pyright took longer than {timeout:.0f}s") from None
    except OSError as exc:
        raise StaticAnalysisUnavailable(f"pyright did not start: {exc}") from None
    # Exit 0: no errors, 1: errors found; anything else means it did not analyze.
    if proc.returncode not in (0, 1):
        tail = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        raise StaticAnalysisUnavailable(
            f"pyright failed (exit {proc.returncode}): {tail[-1] if tail else 'no output'}")
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise StaticAnalysisUnavailable("pyright printed something that is not its JSON report") from None
    out: dict[Path, list[Diag]] = {Path(f).resolve(): [] for f in files}
    for d in data.get("generalDiagnostics", []):
        path = Path(d.get("file", "")).resolve()
        if path not in out:
            continue
        diag = _diag(d.get("severity", "error"), d.get("rule"), d.get("message", ""),
                     int(d.get("range", {}).get("start", {}).get("line", 0)))
        if diag is not None:
            out[path].append(diag)
    return out


def _from_server(cmd: list[str], root: Path, files: list[Path], config_dir: Path, timeout: float,
                 config: dict[str, Any], texts: dict[Path, str]) -> dict[Path, list[Diag]] | str:
    """The server's diagnostics in the command line's form, or why there are none."""
    lsp = pyright_server.langserver_command(cmd)
    if lsp is None:
        return f"no pyright-langserver beside {cmd[0]}"
    try:
        wanted = {f: texts[f] if f in texts else f.read_text(encoding="utf-8") for f in files}
        found = pyright_server.check(lsp, root, config, config_dir, wanted, timeout, SIDE_PREFIX)
    except (pyright_server.ServerUnavailable, OSError, UnicodeDecodeError) as exc:
        return str(exc)
    out: dict[Path, list[Diag]] = {}
    for f in files:
        diags = out.setdefault(f.resolve(), [])
        for d in found.get(f, []):
            try:
                code = d.get("code")
                diag = _diag(_LSP_SEVERITY.get(int(d.get("severity", 1)), "unknown"),
                             code if isinstance(code, str) else None, str(d.get("message", "")),
                             int(d["range"]["start"]["line"]))
                if diag is not None:
                    diags.append(diag)
            except (KeyError, TypeError, ValueError, AttributeError):
                return "pyright's language server sent a diagnostic without a line or severity"
    return out


# ---- pyflakes ------------------------------------------------------------------------------


def _syntax_error(source: str, filename: str) -> Diag:
    try:
        with astlock.LOCK:  # not thread-safe on CPython 3.11: see fixgraph/astlock.py
            compile(source, filename, "exec", 0x400)  # ast.PyCF_ONLY_AST
    except (SyntaxError, ValueError) as exc:
        return Diag("python", "syntax", f"SyntaxError: {getattr(exc, 'msg', exc)}",
                    getattr(exc, "lineno", 1) or 1, "error")
    return Diag("python", "syntax", "SyntaxError", 1, "error")


@phases.timed("pyflakes")
def run_pyflakes(source: str, filename: str) -> list[Diag]:
    from pyflakes import checker

    try:
        with astlock.LOCK:
            tree = compile(source, filename, "exec", 0x400)  # ast.PyCF_ONLY_AST
    except (SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", 1) or 1
        return [Diag("pyflakes", "syntax", f"syntax error: {getattr(exc, 'msg', exc)}", line, "error")]
    w = checker.Checker(tree, filename=filename)
    out: list[Diag] = []
    for m in w.messages:
        rule = type(m).__name__
        text = m.message % m.message_args
        sev = "error" if rule in PYFLAKES_RUNTIME else "warning"
        out.append(Diag("pyflakes", rule, text, m.lineno, sev))
    return out


# ---- differential --------------------------------------------------------------------------

_SIDE_NAME = re.compile(SIDE_PREFIX + r"(before|after)_")
_LINE_REF = re.compile(r"\b(line|lines)\s+\d+(\s*-\s*\d+)?")
_COLUMN = re.compile(r"\bcolumn\s+\d+")
_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_WS = re.compile(r"\s+")


def normalize(message: str, module_name: str = "") -> str:
    """The message without the parts that change when code moves: line and column numbers,
    object addresses, the name of the base-side copy; and only its first line (pyright's detail
    lines repeat inferred types that drift with unrelated edits)."""
    first = message.split("\n", 1)[0]
    first = _SIDE_NAME.sub("", first)
    first = _LINE_REF.sub(r"\1 N", first)
    first = _COLUMN.sub("column N", first)
    first = _ADDR.sub("0xADDR", first)
    return _WS.sub(" ", first).strip()


def key_of(d: Diag, symbols: SymbolMap) -> tuple[str, str, str, str]:
    return (d.source, d.rule, normalize(d.message), symbols.symbol_at(d.line))


def introduced(before: list[Diag], after: list[Diag], sym_before: SymbolMap,
               sym_after: SymbolMap, added: frozenset[int] = frozenset()) -> list[Diag]:
    """Diagnostics of ``after`` beyond those ``before`` had, compared as keyed multisets.

    When a key occurs more often after than before, the extra occurrences are attributed to the
    ones on lines the patch added, if any, so the location shown is the new code.
    """
    left = Counter(key_of(d, sym_before) for d in before)
    out: list[Diag] = []
    for d in sorted(after, key=lambda d: d.line in added):
        k = key_of(d, sym_after)
        if left[k] > 0:
            left[k] -= 1
        else:
            out.append(d)
    # The same complaint in another form: the types pyright quotes are mostly its inference, which
    # a patch changes far from where it edits (requests' Response.content joins what iter_content
    # yields: a new generator there changes the type quoted in content's old complaint). The base
    # runs, so the complaint was pyright's, not the code's; a second one of the shape is new.
    shapes: Counter[tuple[str, str, str, str]] = Counter()
    for k, n in left.items():
        shapes[_shape(k)] += n
    fresh: list[Diag] = []
    for d in out:
        s = _shape(key_of(d, sym_after))
        if shapes[s] > 0:
            shapes[s] -= 1
        else:
            fresh.append(d)
    return fresh


# A quoted type that pyright composed (a union, a generic, a tuple, a callable), not a name.
_COMPOSED_TYPE = re.compile(r'"[^"]*[\[\]|(), ][^"]*"')


def _shape(key: tuple[str, str, str, str]) -> tuple[str, str, str, str]:
    source, rule, message, symbol = key
    return source, rule, _COMPOSED_TYPE.sub('"T"', message), symbol


def _finding(d: Diag, file: str, symbols: SymbolMap, text: str = "") -> Finding:
    f = Finding(source=d.source, rule=d.rule, message=d.message.split("\n", 1)[0] if d.source == "pyflakes"
                else d.message, file=file, line=d.line, symbol=symbols.symbol_at(d.line), severity=d.severity)
    lines = text.splitlines()
    if 0 < d.line <= len(lines) and lines[d.line - 1].strip():
        f["code"] = lines[d.line - 1].strip()[:200]
    return f


def is_evidence(d: Diag) -> bool:
    if d.rule == "syntax" or "Tuple size mismatch" in d.message:
        # Unpacking a tuple of the wrong size is a ValueError whatever rule pyright files it under.
        return True
    if d.source == "pyflakes":
        return d.rule in PYFLAKES_RUNTIME
    if d.source == "names":
        return True
    if d.rule == "reportOperatorIssue" and " | " in d.message.split("\n", 1)[0]:
        # pyright reports an operator on a union when any member would fail; in untyped code the
        # union is mostly its inference (``Unknown | Order``), and the value is one member.
        return False
    return d.rule in RUNTIME_RULES


_IMPORT = re.compile(r'Import "([\w.]+)" could not be resolved')


def _repo_import_diags(after: list[Diag], root: Path, local_tops: set[str]) -> list[Diag]:
    """pyright's missing-import diagnostics that are ImportErrors for sure: a relative import, or
    an absolute one into the repository's own packages, of a module that has no file of any kind
    (source, Cython, C, built extension) where it would be. An absolute import of anything else
    may just be a package missing on this machine."""
    out = []
    for d in after:
        m = _IMPORT.search(d.message) if d.rule == "reportMissingImports" else None
        if m and (m.group(1).startswith(".") or _missing_in_repo(m.group(1), root, local_tops)):
            out.append(Diag(d.source, "reportRelativeImport", d.message, d.line, "error"))
        else:
            out.append(d)
    return out


def _missing_in_repo(module: str, root: Path, local_tops: set[str]) -> bool:
    parts = module.split(".")
    if parts[0] not in local_tops:
        return False
    for base in (root, root / "src"):
        parent = base.joinpath(*parts[:-1])
        if parent.is_dir():
            return not any(parent.glob(parts[-1] + ".*")) and not (parent / parts[-1]).exists()
    return False


# ---- the phase -----------------------------------------------------------------------------


def _cache_path(cache_dir: Path, wt: Worktree, path: str, version: str, content: str,
                config: dict[str, Any]) -> Path:
    # The base side is analyzed with every touched file at the base, so the key needs no patch.
    key = hashlib.sha256("\x00".join([ANALYZER_VERSION, version, wt.base, path, content,
                                      json.dumps(config, sort_keys=True)]).encode()).hexdigest()[:24]
    return cache_dir / "static-before" / wt.base[:12] / f"{key}.json"


def _sidecar(path: Path, side: str) -> Path:
    return path.with_name(f"{SIDE_PREFIX}{side}_{path.name}")


def _check_copies(wt: Worktree, copies: dict[tuple[str, str], str], *, cmd: list[str], cache_dir: Path,
                  timeout: float, config: dict[str, Any], server: bool,
                  notes: list[str]) -> dict[tuple[str, str], list[Diag]]:
    """pyright's diagnostics for each (path, side) copy, written beside the real file for one run."""
    if not copies:
        return {}
    sidecars: dict[tuple[str, str], Path] = {}
    try:
        for (path, side), text in copies.items():
            target = _sidecar(wt.path / path, side)
            target.write_text(text, encoding="utf-8")
            sidecars[(path, side)] = target
        results = run_pyright(cmd, wt.path, list(sidecars.values()), cache_dir / "pyright", timeout, config,
                              server=server, texts={sidecars[k]: copies[k] for k in sidecars}, notes=notes)
    finally:
        for target in sidecars.values():
            target.unlink(missing_ok=True)
    return {k: results.get(target.resolve(), []) for k, target in sidecars.items()}


@contextlib.contextmanager
def _at_base(wt: Worktree, changes: list[FileChange]) -> Iterator[None]:
    """The touched files as the base commit has them (a new file absent), restored byte for byte."""
    saved: dict[Path, bytes | None] = {}
    made: list[Path] = []
    try:
        for c in changes:
            path = wt.path / c.path
            saved[path] = path.read_bytes() if path.is_file() else None
            text = None if c.is_new else base_content(wt, c.path)
            if text is None:
                path.unlink(missing_ok=True)
                continue
            for parent in reversed(path.relative_to(wt.path).parents):
                if not (wt.path / parent).exists():
                    (wt.path / parent).mkdir()
                    made.append(wt.path / parent)
            path.write_text(text, encoding="utf-8")
        yield
    finally:
        for path, data in saved.items():
            if data is None:
                path.unlink(missing_ok=True)
            else:
                path.write_bytes(data)
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _functions(symbols: SymbolMap) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {s.qualname: s.node for s in symbols.scopes if isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef)}


def _touched(change: FileChange, before: SymbolMap, after: SymbolMap) -> set[str]:
    return ({s.qualname for s in after.functions_touching(change.added)}
            | {s.qualname for s in before.functions_touching(change.removed | change.anchors)})


def changed_names(change: FileChange, before: SymbolMap, after: SymbolMap) -> set[str]:
    """The names of the functions the patch changes, removes or renames in one file."""
    old, new = _functions(before), _functions(after)
    names_ = {q.rsplit(".", 1)[-1] for q in _touched(change, before, after) if q in old or q in new}
    names_ |= {q.rsplit(".", 1)[-1] for q in old.keys() - new.keys()}  # removed or renamed
    names_.discard("__init__")  # called as the class, and every method reads what it sets
    return names_


def keep_set(change: FileChange, before: SymbolMap, after: SymbolMap, changed: set[str]) -> set[str]:
    """The functions whose bodies pyright must check on both sides: those the patch changes, and
    those in the file that call a function the patch changed in any touched file (``changed``,
    from ``changed_names``): a changed signature or return value breaks callers, which unpack a
    tuple of another size, or call what is now None."""
    keep = _touched(change, before, after)
    old, new = _functions(before), _functions(after)
    if changed:
        for funcs in (old, new):
            for q, node in funcs.items():
                if changed & _references(node):
                    keep.add(q)
    # The functions the kept ones call keep their bodies too: a stub returns Any, and pyright
    # would no longer see what a call in the changed code really returns.
    called: set[str] = set()
    for funcs in (old, new):
        for q in keep & funcs.keys():
            called |= _references(funcs[q])
    for funcs in (old, new):
        keep |= {q for q in funcs if q.rsplit(".", 1)[-1] in called}
    return keep


def _references(node: ast.AST) -> set[str]:
    return {sub.id if isinstance(sub, ast.Name) else sub.attr for sub in ast.walk(node)
            if isinstance(sub, ast.Name | ast.Attribute)}


def _sides(wt: Worktree, py: list[FileChange]) -> tuple[dict[str, str | None], dict[str, str]] | str:
    """Each changed file's text at the base (None for a new file) and after the patch, or why not."""
    befores: dict[str, str | None] = {}
    afters: dict[str, str] = {}
    for c in py:
        before = None if c.is_new else base_content(wt, c.path)
        if not c.is_new and before is None:
            return f"{c.path} is not in the base commit {wt.base[:12]}"
        if before is not None and SymbolMap(before).tree is None:
            return f"{c.path} does not parse before the patch"
        after = wt.read(c.path)
        if after is None:
            return f"{c.path} is missing or unreadable after the patch"
        befores[c.path] = before
        afters[c.path] = after
    return befores, afters


def _checked_copies(py: list[FileChange], befores: dict[str, str | None], afters: dict[str, str], own_rules: str
                    ) -> tuple[dict[tuple[str, str], str], dict[tuple[str, str], SymbolMap], dict[str, Diag]]:
    """What pyright checks: copies of both sides beside the real file (so relative imports resolve
    as they do for it), with the bodies of functions the patch does not concern stubbed out; each
    side's symbols; and the files the patch leaves unparsable, with their syntax error."""
    checked: dict[tuple[str, str], str] = {}
    syms: dict[tuple[str, str], SymbolMap] = {}
    broken: dict[str, Diag] = {}
    for c in py:
        syms[(c.path, "before")], syms[(c.path, "after")] = SymbolMap(befores[c.path]), SymbolMap(afters[c.path])
    changed = set().union(*(changed_names(c, syms[(c.path, "before")], syms[(c.path, "after")]) for c in py))
    for c in py:
        sym_b, sym_a = syms[(c.path, "before")], syms[(c.path, "after")]
        if sym_a.tree is None:
            # The patch breaks the syntax: that is the finding, and whatever else a type checker
            # says about a file it cannot parse is noise from its error recovery.
            broken[c.path] = _syntax_error(afters[c.path], c.path)
            continue
        keep = keep_set(c, sym_b, sym_a, changed)
        checked[(c.path, "after")] = (focus(afters[c.path], keep) or afters[c.path]) + own_rules
        if befores[c.path] is not None:
            checked[(c.path, "before")] = (focus(befores[c.path] or "", keep) or "") + own_rules
    return checked, syms, broken


@phases.timed("static: unknown attributes")
def _unknown_attributes(wt: Worktree, py: list[FileChange], syms: dict[tuple[str, str], SymbolMap],
                        broken: dict[str, Diag]) -> dict[str, list[Diag]]:
    """Attributes the patch uses that nothing in the repository or the standard library has."""
    unknown: dict[str, list[Diag]] = {}
    trees = [(c, syms[(c.path, "after")].tree) for c in py if c.path not in broken]
    try:
        for c, attr, line in names.unknown_attributes(wt.path, wt.base, [(c, t) for c, t in trees if t]):
            unknown.setdefault(c.path, []).append(Diag(
                "names", names.RULE, f'"{attr}" is not an attribute of anything: no file of the repository '
                "mentions it and the standard library does not have it", line, "error"))
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        pass  # the search is an extra; pyright and pyflakes still count
    return unknown


def _cached_base_diags(cache_dir: Path, wt: Worktree, py: list[FileChange], checked: dict[tuple[str, str], str],
                       broken: dict[str, Diag], version: str, config: dict[str, Any]) -> dict[str, list[Diag]]:
    """pyright's diagnostics of each file's base side where an earlier analysis cached them (none
    for a new or broken file): only the files missing here are checked at the base again."""
    pyright_before: dict[str, list[Diag]] = {}
    for c in py:
        if (c.path, "before") not in checked or c.path in broken:
            pyright_before[c.path] = []
            continue
        cp = _cache_path(cache_dir, wt, c.path, version, checked[(c.path, "before")], config)
        if cp.is_file():
            try:
                pyright_before[c.path] = [Diag(*row) for row in json.loads(cp.read_text())]
            except (json.JSONDecodeError, TypeError):
                pass
    return pyright_before


def analyze_patch(wt: Worktree, patch: str, *, settings: CriticSettings, cache_dir: Path) -> StaticResult:
    """The runtime-error evidence a patch introduces, by differential pyright and pyflakes.

    The worktree holds the patch applied on top of ``wt.base``; it is left exactly as found.
    """
    start = time.monotonic()
    notes: list[str] = []

    def done(status: Literal["ok", "cannot_analyze"], new: list[Finding], reason: str = "",
             all_new: list[Finding] | None = None) -> StaticResult:
        return StaticResult(status, new, reason, round(time.monotonic() - start, 3), all_new or [], notes)

    if not settings.static:
        return done("ok", [], "static analysis is off in this config")
    try:
        changes = parse_patch(patch)
    except PatchParseError as exc:
        return done("cannot_analyze", [], str(exc))
    py = [c for c in changes if c.is_python and not c.is_deleted]
    if not py:
        return done("ok", [], "the patch touches no Python file")
    problem = check_applied(wt, patch)
    if problem:
        return done("cannot_analyze", [], problem)
    cmd = pyright_command(settings)
    version = pyright_version(cmd)
    config = pyright_config(settings)
    # The checked copies themselves are always analyzed in full, whatever other modules get.
    own_rules = "" if settings.infer_unannotated else f"\n{OWN_FILE_RULES}\n"

    sides = _sides(wt, py)
    if isinstance(sides, str):
        return done("cannot_analyze", [], sides)
    befores, afters = sides
    checked, syms, broken = _checked_copies(py, befores, afters, own_rules)

    pyright_before = _cached_base_diags(cache_dir, wt, py, checked, broken, version, config)

    todo = {k: text for k, text in checked.items() if not (k[1] == "before" and k[0] in pyright_before)}
    clash = next((k for k in todo if _sidecar(wt.path / k[0], k[1]).exists()), None)
    if clash:
        return done("cannot_analyze", [], f"{_sidecar(wt.path / clash[0], clash[1]).name} already exists in the worktree")
    run = functools.partial(_check_copies, wt, cmd=cmd, cache_dir=cache_dir, timeout=settings.static_timeout_s,
                            config=config, server=settings.pyright_server, notes=notes)
    touched_py = [c for c in changes if c.is_python]
    if len(touched_py) > 1:
        # The base side of one file imports the others, which must then be at the base too: else a
        # call the patch broke (b.f's new signature against a.py's old call) looks old.
        results = run({k: t for k, t in todo.items() if k[1] == "after"})
        base_todo = {k: t for k, t in todo.items() if k[1] == "before"}
        if base_todo:
            with _at_base(wt, touched_py):
                results |= run(base_todo)
    else:
        results = run(todo)

    local_tops = names.local_packages(wt.path)

    def diags_of(path: str, side: str, text: str | None) -> list[Diag]:
        last = len((text or "").splitlines())
        return _repo_import_diags([d for d in results.get((path, side), []) if d.line <= last], wt.path, local_tops)

    unknown = _unknown_attributes(wt, py, syms, broken) if settings.names else {}

    all_new: list[Finding] = []
    new: list[Finding] = []
    for c in py:
        if c.path in broken:
            f = _finding(broken[c.path], c.path, syms[(c.path, "after")], afters[c.path])
            new.append(f)
            all_new.append(f)
            continue
        if c.path not in pyright_before:
            pyright_before[c.path] = diags_of(c.path, "before", befores[c.path])
            atomic_write(_cache_path(cache_dir, wt, c.path, version, checked[(c.path, "before")], config),
                         json.dumps([d.to_json() for d in pyright_before[c.path]]))
        before_diags = list(pyright_before[c.path])
        after_diags = diags_of(c.path, "after", afters[c.path])
        if settings.pyflakes:
            if befores[c.path] is not None:
                before_diags += run_pyflakes(befores[c.path] or "", c.path)
            after_diags += run_pyflakes(afters[c.path], c.path)
        fresh = introduced(before_diags, after_diags, syms[(c.path, "before")], syms[(c.path, "after")], c.added)
        fresh += unknown.get(c.path, [])  # new by construction: nothing at the base commit mentions them
        fresh.sort(key=lambda d: (d.line, d.source))
        # An unknown attribute pyright already reports on the base code, which works, is its
        # misjudgement of a class that gets attributes at run time; saying it again is no evidence.
        misjudged = {normalize(d.message) for d in before_diags if d.rule == "reportAttributeAccessIssue"}
        for d in _dedupe(fresh):
            f = _finding(d, c.path, syms[(c.path, "after")], afters[c.path])
            all_new.append(f)
            # A test file or a scratch script is not the fix: what it would raise says nothing of
            # the fix's safety (the tests that run say what it says).
            if (is_evidence(d) and not c.is_scaffold
                    and not (d.rule == "reportAttributeAccessIssue" and normalize(d.message) in misjudged)):
                new.append(f)
    return done("ok", new, "", all_new)


def _dedupe(diags: list[Diag]) -> list[Diag]:
    """pyright and pyflakes both report undefined names; keep pyright's when both do."""
    seen_undefined = {(d.line, _name_in(d.message)) for d in diags
                      if d.source == "pyright" and d.rule == "reportUndefinedVariable"}
    out = []
    for d in diags:
        if d.source == "pyflakes" and d.rule == "UndefinedName" and (d.line, _name_in(d.message)) in seen_undefined:
            continue
        out.append(d)
    return out


def _name_in(message: str) -> str:
    m = re.search(r"""["']([^"']+)["']""", message)
    return m.group(1) if m else message
