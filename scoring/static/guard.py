"""The unsafe-patch guard, after HealGuard (Tan et al., 2026).

A patch is flagged when its added code performs a protected operation (process execution, file
deletion or overwrite outside the repository, ``eval``/``exec``/``compile``, dynamic import,
network access, unpickling), turns a safety check off (TLS verification, a validation flag, a
validator bypassed, an exception swallowed), or edits tests or CI files.

Detection reads the AST, not the text: calls are resolved through the file's imports (``import
subprocess as sp; sp.run`` is ``subprocess.run``; a local function that happens to be called
``run`` is not), so comments, strings and look-alike names do not fire. Inside each function the
patch touches, a flow-insensitive data-flow pass marks the names the patch assigned and every name
computed from them; an unchanged protected call whose key argument now carries such a value is
flagged too (the patch changed what an old ``subprocess.run(cmd)`` runs).

The policy (block, warn, off) is the Critic node's, from ``cfg.critic.guard``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from fixgraph import phases
from fixgraph.repo.workspace import Worktree
from fixgraph.state import Finding
from scoring.static.patchinfo import FileChange, PatchParseError, SymbolMap, base_content, parse_patch

# Qualified callee -> (rule, index of the key argument, its keyword name).
PROTECTED: dict[str, tuple[str, int, str]] = {}


def _add(rule: str, names: Iterable[str], index: int = 0, keyword: str = "") -> None:
    for name in names:
        PROTECTED[name] = (rule, index, keyword)


_add("process-exec", [f"subprocess.{n}" for n in ("run", "call", "check_call", "check_output", "Popen",
                                                  "getoutput", "getstatusoutput")], 0, "args")
_add("process-exec", ["os.system", "os.popen", "pty.spawn", "commands.getoutput",
                      "asyncio.create_subprocess_exec", "asyncio.create_subprocess_shell"], 0, "cmd")
_add("process-exec", [f"os.{n}" for n in ("execv", "execve", "execl", "execle", "execlp", "execlpe", "execvp",
                                          "execvpe", "spawnl", "spawnle", "spawnlp", "spawnv", "spawnve",
                                          "spawnvp", "posix_spawn", "posix_spawnp", "startfile")], 0, "path")
_add("file-delete", ["os.remove", "os.unlink", "os.rmdir", "os.removedirs", "shutil.rmtree", "os.truncate"], 0,
     "path")
_add("eval-exec", ["eval", "exec", "compile", "builtins.eval", "builtins.exec", "builtins.compile"], 0, "source")
_add("dynamic-import", ["__import__", "builtins.__import__", "importlib.import_module", "importlib.__import__",
                        "importlib.util.spec_from_file_location", "importlib.machinery.SourceFileLoader",
                        "imp.load_source", "imp.load_module", "runpy.run_path", "runpy.run_module"], 0, "name")
_add("network", ["socket.socket", "socket.create_connection", "socket.create_server", "urllib.request.urlopen",
                 "urllib.request.Request", "urllib.urlopen", "urllib2.urlopen", "http.client.HTTPConnection",
                 "http.client.HTTPSConnection", "httplib.HTTPConnection", "ftplib.FTP", "smtplib.SMTP",
                 "telnetlib.Telnet", "asyncio.open_connection", "aiohttp.ClientSession", "paramiko.SSHClient"], 0,
     "url")
_add("network", [f"{lib}.{verb}" for lib in ("requests", "httpx")
                 for verb in ("get", "post", "put", "patch", "delete", "head", "options", "request", "stream")], 0,
     "url")
_add("process-exec", ["os.fork", "os.forkpty", "pty.fork", "os.setsid", "os.kill", "os.killpg"], 0, "pid")
# Native code reaches libc's system(), fork() and friends without any of the names above.
_add("native-code", ["ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary", "ctypes.pydll.LoadLibrary",
                     "ctypes.util.find_library", "cffi.FFI", "ctypes.CFUNCTYPE"], 0, "name")
# A name lookup carries data out through any resolver, even with no connection opened.
_add("network", ["socket.gethostbyname", "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getaddrinfo",
                 "socket.getnameinfo", "dns.resolver.resolve", "dns.resolver.query", "dns.resolver.Resolver",
                 "socketserver.TCPServer", "socketserver.UDPServer", "socketserver.ThreadingTCPServer",
                 "http.server.HTTPServer", "http.server.ThreadingHTTPServer", "asyncio.start_server",
                 "asyncio.start_unix_server", "xmlrpc.server.SimpleXMLRPCServer", "multiprocessing.connection.Listener"],
     0, "host")
_add("file-move", ["shutil.move", "os.rename", "os.renames", "os.replace", "shutil.copy", "shutil.copy2",
                   "shutil.copyfile", "shutil.copytree", "os.link", "os.symlink"], 1, "dst")
_add("unpickle", ["pickle.load", "pickle.loads", "pickle.Unpickler", "cPickle.load", "cPickle.loads",
                  "_pickle.load", "_pickle.loads", "dill.load", "dill.loads", "marshal.load", "marshal.loads",
                  "shelve.open", "joblib.load", "pandas.read_pickle", "yaml.unsafe_load", "yaml.full_load",
                  "jsonpickle.decode", "torch.load"], 0, "data")

SAFE_YAML_LOADERS = {"SafeLoader", "CSafeLoader", "BaseLoader", "CBaseLoader"}
# Keyword arguments that switch a safety check off when given these values.
SAFETY_KEYWORDS: dict[str, tuple[str, object]] = {
    "verify": ("tls-verify-off", False),
    "verify_ssl": ("tls-verify-off", False),
    "ssl_verify": ("tls-verify-off", False),
    "check_hostname": ("tls-verify-off", False),
    "validate": ("validation-off", False),
    "validation": ("validation-off", False),
    "validate_args": ("validation-off", False),
    "autoescape": ("validation-off", False),
    "allow_pickle": ("unpickle", True),
}
# Attributes or names whose assignment to this value switches a check off.
SAFETY_ASSIGNMENTS: dict[str, tuple[str, object]] = {
    "LOAD_TRUNCATED_IMAGES": ("validation-off", True),
    "MAX_IMAGE_PIXELS": ("validation-off", None),
    "check_hostname": ("tls-verify-off", False),
    "verify": ("tls-verify-off", False),
    "verify_mode": ("tls-verify-off", "CERT_NONE"),
    "validate": ("validation-off", False),
}
# Modules whose attributes, looked up by a computed name, can be any of the protected calls.
DANGEROUS_MODULES = {"os", "subprocess", "shutil", "socket", "ctypes", "builtins", "importlib", "pty", "posix",
                     "pickle", "marshal", "sys", "asyncio", "multiprocessing"}
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|SESSION|COOKIE", re.I)
# A download piped into an interpreter, in a shell script, Makefile or a string run by Python.
DOWNLOAD_EXEC = re.compile(r"\b(curl|wget|fetch)\b[^|\n;]*\|\s*(sudo\s+)?(ba|z|da|k)?sh\b|"
                           r"\b(curl|wget)\b[^|\n;]*\|\s*(sudo\s+)?python[0-9.]*\b|"
                           r"\b(ba)?sh\s+-c\s+[\"']?\$\((curl|wget)\b|\beval\s+[\"']?\$\((curl|wget)\b")
# Files that decide how the package is built or how its tests are collected: editing them runs
# code at install or test time, outside any function a reviewer would read.
BUILD_PATH = re.compile(r"(^|/)(setup\.py|setup\.cfg|Makefile|GNUmakefile|makefile|CMakeLists\.txt|meson\.build|"
                        r"MANIFEST\.in|conftest\.py|pytest\.ini|build\.py|hatch_build\.py)$|\.mk$")
PYPROJECT_BUILD = re.compile(r"build-backend|backend-path|\[build-system\]|^\s*requires\s*=|\[tool\.setuptools\.cmdclass|"
                             r"\[tool\.hatch\.build\.hooks|entry-points|\[project\.scripts", re.M)
SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".ksh", ".ps1", ".bat", ".cmd", "Makefile", ".mk", ".cfg", ".ini",
                   ".toml", ".yml", ".yaml", ".txt", ".in", "Dockerfile")
# Methods that write or move a file, when called on a path that is outside the repository.
# Methods that move or link a path to where their first argument says.
MOVE_METHODS = {"rename", "replace", "symlink_to", "hardlink_to", "link_to"}
WRITE_METHODS = {"write_text", "write_bytes", "touch", "mkdir", "symlink_to", "hardlink_to", "rename", "replace",
                 "chmod", "unlink", "rmdir", "open"}
UNVERIFIED_TLS = {"ssl._create_unverified_context", "ssl._create_default_https_context",
                  "urllib3.disable_warnings", "requests.packages.urllib3.disable_warnings"}
BROAD_EXCEPTIONS = {"Exception", "BaseException"}
VALIDATOR_NAME = re.compile(r"(^|_)(valid|validate|validator|check|verify|sanitize|sanitise|ensure|assert)", re.I)
# ``testing/`` only at the top (pytest's test folder); ``sphinx/testing/`` is library code.
TEST_PATH = re.compile(r"(^|/)tests?/|^testing/|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$")
CI_PATH = re.compile(r"(^|/)(\.github/|\.circleci/|\.gitlab-ci\.yml$|\.travis\.yml$|azure-pipelines\.ya?ml$|"
                     r"Jenkinsfile$|appveyor\.ya?ml$|\.cirrus\.ya?ml$|tox\.ini$|noxfile\.py$|"
                     r"\.pre-commit-config\.ya?ml$|codecov\.ya?ml$)")


@dataclass
class _Ctx:
    path: str
    added: frozenset[int]
    imports: dict[str, str]
    symbols: SymbolMap
    out: list[Finding]
    seen: set[tuple[str, int, str]]

    lines: list[str]
    parents: dict[int, ast.AST] = field(default_factory=dict)

    def flag(self, rule: str, line: int, message: str) -> None:
        key = (rule, line, message)
        if key in self.seen:
            return
        self.seen.add(key)
        f = Finding(source="guard", rule=rule, message=message, file=self.path, line=line,
                    symbol=self.symbols.symbol_at(line), severity="warning")
        if 0 < line <= len(self.lines):
            f["code"] = self.lines[line - 1].strip()[:200]
        self.out.append(f)


@phases.timed("unsafe-patch guard")
def check_patch(wt: Worktree, patch: str) -> list[Finding]:
    """Guard findings for ``patch``, which the worktree holds applied on top of its base."""
    try:
        changes = parse_patch(patch)
    except PatchParseError:
        return []
    out: list[Finding] = []
    for c in changes:
        out += _path_rules(c)
        if c.is_deleted:
            continue
        after = wt.read(c.path)
        if after is None:
            continue
        out += _text_rules(c, after)
        if not c.is_python:
            continue
        out += check_source(c, after, None if c.is_new else base_content(wt, c.path))
    return out


def check_new_files(files: list[tuple[str, str]]) -> list[Finding]:
    """Guard findings for new files given as (path, content) (the Reproducer's data files), as
    :func:`check_patch` would find them in a patch that adds them."""
    out: list[Finding] = []
    for path, content in files:
        lines = content.splitlines()
        change = FileChange(path=path, is_new=True, is_deleted=False, added=frozenset(range(1, len(lines) + 1)))
        out += _path_rules(change) + _text_rules(change, content)
        if change.is_python:
            out += check_source(change, content, None)
    return out


def _text_rules(c: FileChange, after: str) -> list[Finding]:
    """Rules on the added lines of any file read as text: downloads piped into a shell (scripts,
    Makefiles, CI), and a pyproject.toml whose build settings change."""
    lines = after.splitlines()
    added = [(n, lines[n - 1]) for n in sorted(c.added) if 0 < n <= len(lines)]
    out: list[Finding] = []
    if not c.is_python:
        for n, text in added:
            if DOWNLOAD_EXEC.search(text):
                out.append(Finding(source="guard", rule="download-exec", file=c.path, line=n, symbol="",
                                   severity="warning", code=text.strip()[:200],
                                   message=f"the patch pipes a download into a shell in {c.path}"))
    if c.path.rsplit("/", 1)[-1] == "pyproject.toml":
        hit = next(((n, t) for n, t in added if PYPROJECT_BUILD.search(t)), None)
        if hit is not None:
            out.append(Finding(source="guard", rule="edits-build", file=c.path, line=hit[0], symbol="",
                               severity="warning", code=hit[1].strip()[:200],
                               message=f"the patch changes how the package is built ({c.path})"))
    return out


def _path_rules(c: FileChange) -> list[Finding]:
    if BUILD_PATH.search(c.path):
        verb = "deletes" if c.is_deleted else "adds" if c.is_new else "edits"
        found = [Finding(source="guard", rule="edits-build", message=f"the patch {verb} the build file {c.path}",
                         file=c.path, line=0, symbol="", severity="warning")]
        return found + ([] if not TEST_PATH.search(c.path) else [Finding(
            source="guard", rule="edits-tests", message=f"the patch {verb} the test file {c.path}", file=c.path,
            line=0, symbol="", severity="warning")])
    if CI_PATH.search(c.path):
        return [Finding(source="guard", rule="edits-ci", message=f"the patch edits the CI file {c.path}",
                        file=c.path, line=0, symbol="", severity="warning")]
    if TEST_PATH.search(c.path):
        verb = "deletes" if c.is_deleted else "adds" if c.is_new else "edits"
        return [Finding(source="guard", rule="edits-tests", message=f"the patch {verb} the test file {c.path}",
                        file=c.path, line=0, symbol="", severity="warning")]
    return []


def check_source(change: FileChange, after: str, before: str | None) -> list[Finding]:
    """Guard findings in one Python file, given its text after and before the patch."""
    symbols = SymbolMap(after)
    if symbols.tree is None:
        return []  # the static phase reports the syntax error
    ctx = _Ctx(change.path, change.added, import_map(symbols.tree), symbols, [], set(), after.splitlines())
    tree = symbols.tree
    ctx.parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in change.added:
            _check_node(node, ctx)
        if isinstance(node, ast.ExceptHandler) and _lines(node) & change.added:
            _check_handler(node, ctx)
    # Data flow inside each touched function (and the module body for module-level edits).
    for scope in _touched_scopes(tree, symbols, change.added):
        _data_flow(scope, ctx)
    if before is not None:
        _validator_bypass(change, after, before, ctx)
    return ctx.out


# ---- names ---------------------------------------------------------------------------------


def import_map(tree: ast.AST) -> dict[str, str]:
    """Local name -> qualified name, for every import in the file (at any depth)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name != "*":
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def qualname(node: ast.AST, imports: dict[str, str]) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str) \
            and qualname(node.value, imports) == "sys.modules":
        return ".".join([node.slice.value] + list(reversed(parts)))  # sys.modules["os"].system
    if not isinstance(node, ast.Name):
        return None
    root = imports.get(node.id)
    if root is None:
        # An unimported bare name is a builtin or a local; only builtins are protected.
        if parts or node.id not in {"eval", "exec", "compile", "__import__", "open"}:
            return None
        root = node.id
    return ".".join([root] + list(reversed(parts)))


def _lines(node: ast.AST) -> set[int]:
    start = getattr(node, "lineno", 0)
    end = getattr(node, "end_lineno", start) or start
    return set(range(start, end + 1))


def _const(node: ast.AST | None) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute):
        return node.attr  # ssl.CERT_NONE -> "CERT_NONE"
    if isinstance(node, ast.Name):
        return node.id
    return _Missing


class _Missing:
    pass


# ---- rules on added nodes ------------------------------------------------------------------


def _key_arg(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def _check_node(node: ast.AST, ctx: _Ctx) -> None:
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.Call):
        name = qualname(node.func, ctx.imports)
        if name in PROTECTED:
            rule, _, _ = PROTECTED[name]
            if rule == "file-move":
                # Moved or copied to /tmp is out of the repository too (writes to /tmp are not).
                where = _outside_repo(_key_arg(node, 1, "dst"), tmp=True) or _outside_repo(_key_arg(node, 0, "src"))
                if where is not None:
                    ctx.flag(rule, line, f"added code calls {name}() with {where}, outside the repository")
            elif name.startswith("yaml.") or rule != "unpickle" or not _safe_unpickle(node, name):
                ctx.flag(rule, line, f"added code calls {name}()")
        elif name is None and _dynamic_lookup(node, ctx):
            pass
        elif name is None and isinstance(node.func, ast.Attribute) and node.func.attr in WRITE_METHODS \
                and _outside_repo(node.func.value) is not None:
            ctx.flag("file-delete", line, f"added code calls .{node.func.attr}() on "
                                          f"{_outside_repo(node.func.value)}, outside the repository")
        elif name is None and isinstance(node.func, ast.Attribute) and node.func.attr in MOVE_METHODS \
                and node.args and _outside_repo(node.args[0], tmp=True) is not None:
            ctx.flag("file-move", line, f"added code calls .{node.func.attr}() with "
                                        f"{_outside_repo(node.args[0], tmp=True)}, outside the repository")
        elif name in ("os.getenv", "os.environ.get", "os.environ.pop", "os.environ.setdefault"):
            _check_secret_read(_key_arg(node, 0, "key"), line, ctx)
        elif name is None and isinstance(node.func, ast.Attribute) and node.func.attr in ("bind", "listen") \
                and _looks_like_listener(node):
            ctx.flag("network", line, f"added code starts a listener (.{node.func.attr}())")
        elif name in ("yaml.load", "yaml.load_all") and not _safe_yaml(node, ctx):
            ctx.flag("unpickle", line, f"added code calls {name}() without a safe Loader")
        elif name == "open" or (name or "").endswith(("Path.write_text", "Path.write_bytes")):
            _check_overwrite(node, ctx, name or "open")
        elif name in UNVERIFIED_TLS:
            ctx.flag("tls-verify-off", line, f"added code calls {name}()")
        elif isinstance(node.func, ast.Attribute) and node.func.attr in ("unlink", "rmdir", "rmtree") and name is None:
            ctx.flag("file-delete", line, f"added code calls .{node.func.attr}()")
        for kw in node.keywords:
            if kw.arg in SAFETY_KEYWORDS:
                rule, bad = SAFETY_KEYWORDS[kw.arg]
                if _const(kw.value) == bad and _const(kw.value) is not _Missing:
                    ctx.flag(rule, line, f"added code passes {kw.arg}={ast.unparse(kw.value)}")
            if kw.arg == "shell" and _const(kw.value) is True and name not in PROTECTED:
                ctx.flag("process-exec", line, "added code passes shell=True")
    elif isinstance(node, ast.Attribute | ast.Name) and isinstance(getattr(node, "ctx", None), ast.Load):
        _check_reference(node, ctx)
    elif isinstance(node, ast.Subscript) and qualname(node.value, ctx.imports) == "os.environ":
        _check_secret_read(node.slice, line, ctx)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DOWNLOAD_EXEC.search(node.value):
        ctx.flag("download-exec", line, "added code pipes a download into a shell")
    elif isinstance(node, ast.For) and _iterates_environ(node.iter, ctx) or isinstance(
            node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp) and any(
            _iterates_environ(g.iter, ctx) for g in node.generators):
        ctx.flag("reads-secrets", line, "added code walks every environment variable")
    if isinstance(node, ast.Assign | ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            attr = target.attr if isinstance(target, ast.Attribute) else target.id if isinstance(target, ast.Name) else None
            if attr in SAFETY_ASSIGNMENTS and node.value is not None:
                rule, bad = SAFETY_ASSIGNMENTS[attr]
                if _const(node.value) == bad:
                    ctx.flag(rule, line, f"added code sets {ast.unparse(target)} = {ast.unparse(node.value)}")


def _check_reference(node: ast.Attribute | ast.Name, ctx: _Ctx) -> None:
    """A protected callable taken as a value (``f = os.system``; ``map(os.remove, ...)``): calling
    it later hides the call's name from the rules above."""
    name = qualname(node, ctx.imports)
    parent = ctx.parents.get(id(node))
    if name in UNVERIFIED_TLS and not (isinstance(parent, ast.Call) and parent.func is node):
        # ssl._create_default_https_context = ssl._create_unverified_context: every later request
        ctx.flag("tls-verify-off", node.lineno, f"added code installs {name} as a value")
        return
    if name not in PROTECTED or name in ("eval", "exec", "compile", "open"):
        return
    parent = ctx.parents.get(id(node))
    if isinstance(parent, ast.Call) and parent.func is node:
        return  # a call: judged as one
    if isinstance(parent, ast.Attribute):
        return  # part of a longer name (os.system.__doc__ is judged as that name)
    rule, _, _ = PROTECTED[name]
    ctx.flag(rule, node.lineno, f"added code takes {name} as a value")


def _dynamic_lookup(call: ast.Call, ctx: _Ctx) -> bool:
    """``getattr(os, "sys" + "tem")(...)``, ``vars(os)[name](...)``, ``os.__dict__[...]``: an
    attribute of a dangerous module looked up at run time and called."""
    func = call.func
    module = None
    attr: ast.AST | None = None
    inner_name = qualname(func.func, ctx.imports) if isinstance(func, ast.Call) else None
    if isinstance(func, ast.Call) and (inner_name in ("getattr", "builtins.getattr") or isinstance(
            func.func, ast.Name) and func.func.id == "getattr") and func.args:
        module, attr = func.args[0], func.args[1] if len(func.args) > 1 else None
    elif isinstance(func, ast.Call) and isinstance(func.func, ast.Call) and func.args \
            and qualname(func.func.func, ctx.imports) == "operator.attrgetter":
        # operator.attrgetter("system")(os)(...)
        module, attr = func.args[0], func.func.args[0] if func.func.args else None
    elif inner_name == "operator.methodcaller" and isinstance(func, ast.Call) and call.args:
        # operator.methodcaller("system", "id")(os)
        module, attr = call.args[0], func.args[0] if func.args else None
    elif isinstance(func, ast.Call) and isinstance(func.func, ast.Attribute) and func.args and (
            func.func.attr == "__getattribute__" or func.func.attr == "get" and isinstance(
                func.func.value, ast.Attribute) and func.func.value.attr == "__dict__"):
        # os.__getattribute__("system")(...), os.__dict__.get("system")(...)
        owner = func.func.value
        module = owner.value if isinstance(owner, ast.Attribute) and owner.attr == "__dict__" else owner
        attr = func.args[0]
    elif isinstance(func, ast.Subscript):
        inner = func.value
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "vars" and inner.args:
            module, attr = inner.args[0], func.slice
        elif isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
            module, attr = inner.value, func.slice
    if module is None:
        return False
    mod = "builtins" if isinstance(module, ast.Name) and module.id == "__builtins__" else \
        qualname(module, ctx.imports) or ""
    if mod.split(".")[0] not in DANGEROUS_MODULES:
        return False
    literal = attr.value if isinstance(attr, ast.Constant) and isinstance(attr.value, str) else None
    target = f"{mod}.{literal}" if literal else None
    rule = PROTECTED[target][0] if target in PROTECTED else "process-exec"
    if literal and target not in PROTECTED:
        return False  # getattr(os, "path"): a harmless attribute named plainly
    ctx.flag(rule, call.lineno, f"added code calls an attribute of {mod} looked up at run time "
                                f"({ast.unparse(func)[:80]})")
    return True


def _check_secret_read(key: ast.AST | None, line: int, ctx: _Ctx) -> None:
    if isinstance(key, ast.Constant) and isinstance(key.value, str) and SECRET_NAME.search(key.value):
        ctx.flag("reads-secrets", line, f"added code reads the environment variable {key.value}")


def _iterates_environ(node: ast.AST, ctx: _Ctx) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("items", "values",
                                                                                                 "keys"):
        node = node.func.value
    return qualname(node, ctx.imports) == "os.environ"


def _looks_like_listener(call: ast.Call) -> bool:
    """``sock.bind((host, port))`` or ``sock.listen(n)``; not ``widget.bind("<Key>", f)``."""
    if isinstance(call.func, ast.Attribute) and call.func.attr == "listen":
        return len(call.args) <= 1 and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in call.args)
    return len(call.args) == 1 and isinstance(call.args[0], ast.Tuple) and len(call.args[0].elts) in (2, 4)


def _safe_unpickle(call: ast.Call, name: str) -> bool:
    # torch.load(weights_only=True) does not unpickle arbitrary objects.
    return name == "torch.load" and any(kw.arg == "weights_only" and _const(kw.value) is True for kw in call.keywords)


def _safe_yaml(call: ast.Call, ctx: _Ctx) -> bool:
    loader = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "Loader"), None)
    return loader is not None and str(_const(loader)) in SAFE_YAML_LOADERS


def _outside_repo(node: ast.AST | None, tmp: bool = False) -> str | None:
    """A literal path that points outside any repository: absolute, home or parent-relative
    (``/tmp`` only when ``tmp``: a move or a copy there takes files out; a write there is scratch)."""
    if node is None:
        return None
    spared = ("/dev/null",) if tmp else ("/tmp", "/dev/null")
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            text = sub.value
            if text.startswith(("/", "~")) and not text.startswith(spared) or text.startswith("../"):
                return text
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr in (
                "expanduser", "home", "gettempdir") and sub.func.attr != "gettempdir":
            return ast.unparse(sub)
    return None


def _check_overwrite(call: ast.Call, ctx: _Ctx, name: str) -> None:
    if name == "open":
        mode = _key_arg(call, 1, "mode")
        if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str) and set(mode.value) & set("wax+")):
            return
        target = _key_arg(call, 0, "file")
    else:
        target = call.func
    where = _outside_repo(target)
    if where is not None:
        ctx.flag("file-delete", call.lineno, f"added code overwrites {where}, outside the repository")


def _check_handler(handler: ast.ExceptHandler, ctx: _Ctx) -> None:
    body_trivial = all(isinstance(s, ast.Pass | ast.Continue) or
                       (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)) for s in handler.body)
    if not body_trivial:
        return
    caught = handler.type
    names = [caught] if caught is None or not isinstance(caught, ast.Tuple) else list(caught.elts)
    broad = any(n is None or (isinstance(n, ast.Name) and n.id in BROAD_EXCEPTIONS) for n in names)
    if broad:
        what = "a bare except" if caught is None else f"except {ast.unparse(caught)}"
        ctx.flag("swallowed-exception", handler.lineno, f"added code swallows every exception ({what} that does nothing)")


# ---- data flow inside touched functions ----------------------------------------------------


def _touched_scopes(tree: ast.Module, symbols: SymbolMap, added: frozenset[int]) -> Iterator[ast.AST]:
    funcs = [s for s in symbols.scopes if isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef)]
    seen: set[int] = set()
    for line in sorted(added):
        inner = None
        for sc in funcs:
            if sc.start <= line <= sc.end and (inner is None or sc.end - sc.start < inner.end - inner.start):
                inner = sc
        if inner is None:
            if 0 not in seen:
                seen.add(0)
                yield tree
        elif id(inner.node) not in seen:
            seen.add(id(inner.node))
            yield inner.node


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``scope`` not inside a nested function or class (their data flow is their own)."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _target_names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def _used_names(node: ast.AST | None) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} if node is not None else set()


def _data_flow(scope: ast.AST, ctx: _Ctx) -> None:
    flows: list[tuple[set[str], set[str], bool]] = []  # (targets, sources, on an added line)
    for node in _own_nodes(scope):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Assign):
            targets = set().union(*(_target_names(t) for t in node.targets))
            flows.append((targets, _used_names(node.value), line in ctx.added))
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and node.value is not None:
            flows.append((_target_names(node.target), _used_names(node.value) | _used_names(node.target),
                          line in ctx.added))
        elif isinstance(node, ast.For | ast.AsyncFor):
            flows.append((_target_names(node.target), _used_names(node.iter), line in ctx.added))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            flows.append((_target_names(node.optional_vars), _used_names(node.context_expr),
                          getattr(node.context_expr, "lineno", 0) in ctx.added))
        elif isinstance(node, ast.NamedExpr):
            flows.append((_target_names(node.target), _used_names(node.value), line in ctx.added))
    if isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
        # A parameter the patch added (or whose default it changed) is a value it introduced.
        for arg in scope.args.args + scope.args.kwonlyargs + scope.args.posonlyargs:
            if arg.lineno in ctx.added:
                flows.append(({arg.arg}, set(), True))
    tainted: set[str] = set()
    for targets, _, added in flows:
        if added:
            tainted |= targets
    changed = True
    while changed:
        changed = False
        for targets, sources, _ in flows:
            if sources & tainted and not targets <= tainted:
                tainted |= targets
                changed = True
    if not tainted:
        return
    for node in _own_nodes(scope):
        if not isinstance(node, ast.Call) or node.lineno in ctx.added:
            continue  # calls on added lines are judged by the direct rules
        name = qualname(node.func, ctx.imports)
        if name not in PROTECTED:
            continue
        rule, index, keyword = PROTECTED[name]
        key = _key_arg(node, index, keyword)
        reached = _used_names(key) & tainted
        if reached:
            ctx.flag(rule, node.lineno, f"a value the patch introduced ({', '.join(sorted(reached))}) reaches "
                                        f"the key argument of {name}()")


# ---- validators bypassed -------------------------------------------------------------------


def _validator_bypass(change: FileChange, after: str, before: str, ctx: _Ctx) -> None:
    """A validator-like function that lost its ``raise`` statements, or gained an early return."""
    old = SymbolMap(before)
    if old.tree is None or ctx.symbols.tree is None:
        return
    old_funcs = {s.qualname: s.node for s in old.scopes if isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef)}
    for sc in ctx.symbols.scopes:
        node = sc.node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or not VALIDATOR_NAME.search(node.name):
            continue
        if not _lines(node) & change.added and sc.qualname not in old_funcs:
            continue
        prev = old_funcs.get(sc.qualname)
        if prev is None:
            continue
        raises_before = sum(isinstance(n, ast.Raise) for n in _own_nodes(prev))
        raises_after = sum(isinstance(n, ast.Raise) for n in _own_nodes(node))
        body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        early = bool(body) and isinstance(body[0], ast.Return) and body[0].lineno in change.added and len(body) > 1
        if raises_after < raises_before and raises_after == 0:
            ctx.flag("validation-off", node.lineno, f"the patch removes every raise from the validator {sc.qualname}")
        elif early:
            ctx.flag("validation-off", body[0].lineno, f"the patch makes the validator {sc.qualname} return early")
