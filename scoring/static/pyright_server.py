"""pyright's language server kept running between the Critic's checks.

A pyright process costs about 2 s of CPU before it reads the first checked line (node starting,
pyright's code loaded, typeshed's ``builtins`` and ``typing`` parsed and bound), whatever the
patch. ``pyright-langserver --stdio`` (shipped with the pyright package) pays that once: the
checked copies are sent to it with ``didOpen`` (or ``didChange`` when the last check had the same
copy open), their diagnostics asked for with a pull request (``textDocument/diagnostic``), and the
copies of the last check not checked again closed after this one (so the modules they imported,
which the next check mostly imports again, are not dropped).

What makes its answers the command line's (tests/scoring/test_pyright_server.py compares them):

- **The configuration is fixgraph's only.** The server's workspace is a folder of fixgraph's own
  (under the cache) holding a ``pyrightconfig.json`` with the settings the command line passes with
  ``-p``, and a link, ``root``, to the worktree checked; its extra paths are the worktree's through
  the link. The worktree is not a workspace, so its ``pyrightconfig.json`` or
  ``pyproject.toml [tool.pyright]`` is never read, and the client answers the server's requests for
  settings with nothing. The link is an ``include`` root only so that the server listens to file
  events under it, and ``exclude``d so that none of its files is tracked (as on the command line,
  where only the named files are). Every path the server sees is under the link, the checked
  copies too, so a module has one path whether it is imported relatively or not.
- **No stale file.** The server reads the files the checked copies import and keeps them. Before
  each check the worktree's Python files and folders are listed (``Snapshot``: relative path,
  inode, size, mtime) and compared with the list taken before the server's previous check: a
  file whose entry changed, or that was written within two seconds of that list (an edit in the
  same mtime tick keeps the entry), is sent as changed (``workspace/didChangeWatchedFiles``), on
  which the server compares the file's text with what it read and re-reads it and everything that
  imports it. A server serves only a worktree with the same files and folders as its last one (a
  file or folder added or removed changes what an import resolves to): the same worktree after a
  patch or a reset, or another worktree of the repository at the same commit, the link then
  pointed at it (every file's inode differs, so every file is compared). Otherwise a new server
  starts (at most ``MAX_SERVERS`` a process, the least recently used closed).
- **Hostile input.** The listing follows no symbolic link (it does not enter linked folders; a
  link is one entry with its target's stat), the config file and the link are fixgraph's, an
  extra path outside the worktree is refused, and the only paths sent are under the link.

Anything unexpected (the server dies, answers an error, garbage or no report, or takes longer than
the timeout for the whole check) raises ``ServerUnavailable``; the caller then runs the command line
for that check and says so in the record.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixgraph.records import atomic_write

RACY_NS = 2_000_000_000  # an entry written this close to a listing may change again unseen
_SUFFIXES = (".py", ".pyi", ".so", ".pyd")  # a native module changes what an import resolves to


class ServerUnavailable(Exception):
    """The server could not answer this check; one line for the record."""


@dataclass(frozen=True)
class Snapshot:
    """The worktree's Python files and folders, as pyright's import resolution and reads see them."""

    entries: dict[str, tuple[int, int, int, int]]  # relative path -> (is_dir, inode, size, mtime_ns)
    taken_ns: int

    @classmethod
    def take(cls, root: Path, skip_prefix: str = "") -> Snapshot:
        taken = time.time_ns()
        entries: dict[str, tuple[int, int, int, int]] = {}
        stack = [""]
        while stack:
            rel = stack.pop()
            try:
                it = os.scandir(root / rel if rel else root)
            except OSError:
                continue
            with it:
                for e in it:
                    name = e.name
                    if name == ".git" or name == "__pycache__" or (skip_prefix and name.startswith(skip_prefix)):
                        continue
                    path = f"{rel}/{name}" if rel else name
                    try:
                        if e.is_dir(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            entries[path] = (1, st.st_ino, 0, 0)
                            stack.append(path)
                        elif e.is_symlink():
                            # Not followed further: its target's own stat stands for it.
                            with contextlib.suppress(OSError):
                                st = e.stat(follow_symlinks=True)
                                entries[path] = (2, st.st_ino, st.st_size, st.st_mtime_ns)
                        elif name.endswith(_SUFFIXES) or name == "py.typed":
                            st = e.stat(follow_symlinks=False)
                            entries[path] = (0, st.st_ino, st.st_size, st.st_mtime_ns)
                    except OSError:
                        continue
        return cls(entries, taken)

    def changes_since(self, old: Snapshot) -> tuple[bool, list[str]]:
        """(whether a path was added or removed, the files that may have changed since ``old``)."""
        if self.entries.keys() != old.entries.keys():
            return True, []
        changed = []
        for path, now in self.entries.items():
            if now[0] == 1:
                continue
            if now != old.entries[path] or now[3] >= old.taken_ns - RACY_NS:
                changed.append(path)
        return False, changed


def langserver_command(cli: list[str]) -> list[str] | None:
    """``pyright-langserver --stdio`` beside the pyright command the Critic runs (the same package)."""
    exe = Path(cli[0])
    found = shutil.which("pyright-langserver", path=str(exe.parent)) if exe.is_absolute() else None
    return [found, "--stdio"] if found else None


class PyrightServer:
    """One language server for one worktree and one configuration."""

    def __init__(self, cmd: list[str], config: dict[str, Any], workspace: Path, timeout: float):
        """``config`` as the server reads it: its paths relative to ``workspace``, where ``root``
        is the link to the worktree checked."""
        self.timeout = timeout
        self._next_id = 0
        self._buf = b""
        self.snapshot: Snapshot | None = None
        self.checks = 0
        self.open: set[str] = set()
        workspace.mkdir(parents=True, exist_ok=True)
        self.workspace = workspace.resolve()
        self.link = self.workspace / LINK
        atomic_write(self.workspace / "pyrightconfig.json", json.dumps(config))
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, cwd=self.workspace, start_new_session=True)
        except OSError as exc:
            raise ServerUnavailable(f"pyright's language server did not start: {exc}") from None
        try:
            self._request("initialize", {
                "processId": os.getpid(),
                "rootUri": self.workspace.as_uri(),
                "workspaceFolders": [{"uri": self.workspace.as_uri(), "name": "fixgraph"}],
                "capabilities": {
                    "workspace": {"configuration": True, "workspaceFolders": True,
                                  "didChangeWatchedFiles": {"dynamicRegistration": False}},
                    "textDocument": {"diagnostic": {"dynamicRegistration": False},
                                     "publishDiagnostics": {}},
                },
                "initializationOptions": {},
            })
            self._notify("initialized", {})
        except ServerUnavailable:
            self.close()
            raise

    def point(self, root: Path) -> None:
        """The link the server reads the worktree through, pointed at ``root`` (replaced at once)."""
        tmp = self.workspace / f"{LINK}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(root.resolve(), target_is_directory=True)
        os.replace(tmp, self.link)

    # ---- the protocol ------------------------------------------------------------------------

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(dict(message, jsonrpc="2.0")).encode()
        stdin = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            stdin.flush()
        except (OSError, ValueError):
            raise ServerUnavailable("pyright's language server closed its input") from None

    def _notify(self, method: str, params: Any) -> None:
        self._send({"method": method, "params": params})

    def _read_message(self, deadline: float) -> dict[str, Any]:
        stdout = self.proc.stdout
        assert stdout is not None
        fd = stdout.fileno()
        while True:
            head, sep, rest = self._buf.partition(b"\r\n\r\n")
            if sep:
                length = None
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        with contextlib.suppress(ValueError):
                            length = int(value.strip())
                if length is None or length < 0:
                    raise ServerUnavailable("pyright's language server sent a message without a length")
                if len(rest) >= length:
                    self._buf = rest[length:]
                    try:
                        message = json.loads(rest[:length])
                    except (json.JSONDecodeError, UnicodeDecodeError):
                        raise ServerUnavailable("pyright's language server sent something that is not JSON") from None
                    if not isinstance(message, dict):
                        raise ServerUnavailable("pyright's language server sent something that is not a message")
                    return message
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnavailable(f"pyright's language server took longer than {self.timeout:.0f}s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise ServerUnavailable(f"pyright's language server exited ({self.proc.poll()})")
            self._buf += chunk

    def _request(self, method: str, params: Any, deadline: float | None = None) -> Any:
        self._next_id += 1
        mine = self._next_id
        self._send({"id": mine, "method": method, "params": params})
        deadline = deadline if deadline is not None else time.monotonic() + self.timeout
        while True:
            message = self._read_message(deadline)
            if "method" in message:
                if "id" in message:
                    self._answer(message)
                continue
            if message.get("id") != mine:
                continue
            if "error" in message:
                error = message["error"] if isinstance(message["error"], dict) else {}
                raise ServerUnavailable(f"pyright's language server answered {method} with an error: "
                                        f"{str(error.get('message', ''))[:200]}")
            return message.get("result")

    def _answer(self, message: dict[str, Any]) -> None:
        """The server's own requests: no settings (the config file is the only source), and plain
        acknowledgements of its registrations and progress."""
        result: Any = None
        if message["method"] == "workspace/configuration":
            items = (message.get("params") or {}).get("items") or []
            result = [None for _ in items]
        self._send({"id": message["id"], "result": result})

    # ---- a check -----------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.proc.poll() is None

    def sync(self, snapshot: Snapshot) -> bool:
        """Tell the server what changed in the worktree since the last check; False when files were
        added or removed, which only a new server sees for sure."""
        if self.snapshot is not None:
            structural, changed = snapshot.changes_since(self.snapshot)
            if structural:
                return False
            if changed:
                self._notify("workspace/didChangeWatchedFiles", {
                    "changes": [{"uri": (self.link / p).as_uri(), "type": 2} for p in changed]})
        self.snapshot = snapshot
        return True

    def diagnostics(self, files: dict[Path, str]) -> dict[Path, list[dict[str, Any]]]:
        """The LSP diagnostics of each file (a path under the link), checked with the given text.

        A file checked last time stays open and gets the new text with ``didChange``; the files
        of the last check not checked now are closed after this one, so that the modules they
        imported, which this check mostly imports again, are not dropped and parsed anew."""
        deadline = time.monotonic() + self.timeout  # for the whole check, as the command line's
        out: dict[Path, list[dict[str, Any]]] = {}
        uris = {path: path.as_uri() for path in files}
        self.checks += 1
        for path, text in files.items():
            uri = uris[path]
            if uri in self.open:
                self._notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": self.checks},
                                                        "contentChanges": [{"text": text}]})
            else:
                self._notify("textDocument/didOpen", {"textDocument": {
                    "uri": uri, "languageId": "python", "version": self.checks, "text": text}})
                self.open.add(uri)
        for path, uri in uris.items():
            report = self._request("textDocument/diagnostic", {"textDocument": {"uri": uri}}, deadline)
            if (not isinstance(report, dict) or report.get("kind") != "full"
                    or not isinstance(report.get("items"), list)):
                raise ServerUnavailable("pyright's language server gave no full diagnostic report")
            out[path] = report["items"]
        for uri in sorted(self.open - set(uris.values())):
            self._notify("textDocument/didClose", {"textDocument": {"uri": uri}})
            self.open.discard(uri)
        return out

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        # Its folder (the config and the link, which rmtree unlinks, never follows): one a server, so
        # a cache kept between runs would gather them.
        shutil.rmtree(self.workspace, ignore_errors=True)


# The servers of this process, the last used last; each reads one worktree at a time through its link.
MAX_SERVERS = 2
LINK = "root"
_servers: list[tuple[tuple[str, ...], PyrightServer]] = []
_lock = threading.Lock()
_made = itertools.count()


def server_config(config: dict[str, Any], root: Path) -> dict[str, Any]:
    """``config`` (the command line's, its extra paths in ``root``) as a server reads it from its
    workspace: the worktree through the link, an ``include`` root only for the file events
    (``exclude``d: no file of it tracked, as on the command line)."""
    root = root.resolve()
    # The files excluded, not the folders: a folder excluded would be one of the server's library
    # folders, whose file events it acts on 5 s later, whatever the worktree holds by then.
    out = dict(config, include=[LINK], exclude=[f"{LINK}/**/*.py", f"{LINK}/**/*.pyi"])
    extra = []
    for p in config.get("extraPaths", []):
        rel = Path(p).resolve().relative_to(root) if Path(p).resolve().is_relative_to(root) else None
        if rel is None:
            raise ServerUnavailable(f"an extra path outside the worktree: {p}")
        extra.append(LINK if rel == Path() else f"{LINK}/{rel.as_posix()}")
    if "extraPaths" in config:
        out["extraPaths"] = extra
    return out


def _key(cmd: list[str], config: dict[str, Any]) -> tuple[str, ...]:
    # What decides the interpreter pyright asks for its search paths, as the command line finds it.
    env = tuple(os.environ.get(v, "") for v in ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME"))
    return (*cmd, json.dumps(config, sort_keys=True), *env)


def check(cmd: list[str], root: Path, config: dict[str, Any], workspaces: Path, files: dict[Path, str],
          timeout: float, skip_prefix: str) -> dict[Path, list[dict[str, Any]]]:
    """The LSP diagnostics of ``files`` (paths in ``root``, with the text to check), from a server of
    this configuration whose last worktree had the same files and folders (any worktree of the same
    repository at the same commit: the link is pointed at ``root`` and the files that differ are
    sent as changed), else from a new one in a folder under ``workspaces``. Raises ServerUnavailable.

    A server in use is out of the list, so no other thread closes it or checks with it meanwhile
    (a second thread starts its own)."""
    root = root.resolve()
    wanted = server_config(config, root)
    key = _key(cmd, wanted)
    snapshot = Snapshot.take(root, skip_prefix)
    with _lock:
        server = next((srv for k, srv in reversed(_servers)
                       if k == key and srv.snapshot is not None and srv.snapshot.entries.keys() == snapshot.entries.keys()),
                      None)
        if server is not None:
            _servers.remove((key, server))
    try:
        if server is not None:
            server.point(root)
            if not (server.alive() and server.sync(snapshot)):
                server.close()
                server = None
        if server is None:
            server = PyrightServer(cmd, wanted, workspaces / f"server-{os.getpid()}-{next(_made)}", timeout)
            server.point(root)
            server.sync(snapshot)
        server.timeout = timeout
        found = server.diagnostics({server.link / f.resolve().relative_to(root): text for f, text in files.items()})
    except BaseException:
        if server is not None:
            server.close()
        raise
    with _lock:
        _servers.append((key, server))
        evicted = [_servers.pop(0)[1] for _ in range(len(_servers) - MAX_SERVERS)]
    for other in evicted:
        other.close()
    return {f: found[server.link / f.resolve().relative_to(root)] for f in files}


def shutdown() -> None:
    """Stop every server this process started."""
    with _lock:
        servers = [srv for _, srv in _servers]
        _servers.clear()
    for server in servers:
        server.close()


atexit.register(shutdown)
