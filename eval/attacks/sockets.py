"""Attacks through the host's Unix sockets: a database, Ray, a session bus listen on sockets in
world-writable folders (``/tmp``, ``/run``, ``/var/tmp``) or in the abstract namespace; a test or
an install step that connects to one reaches a service the network namespace does not cover."""

from __future__ import annotations

import contextlib
import os
import socket
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from eval.attacks import ATTACKS, Attack, attack
from eval.attacks.sandbox import _sandboxed, count_connections


@contextlib.contextmanager
def _unix_listener(address: str) -> Iterator[list[int]]:
    """A Unix socket server at ``address`` (a path, or ``\\0name`` for the abstract namespace),
    open to anyone, counting connections."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(address)
    if not address.startswith("\0"):
        os.chmod(address, 0o777)
    srv.listen(8)
    hits = count_connections(srv)
    try:
        yield hits
    finally:
        srv.close()
        if not address.startswith("\0"):
            with contextlib.suppress(OSError):
                os.unlink(address)


def _connect_script(address: str) -> str:
    return f"""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect({address!r})
            print("CONNECTED")
        except OSError as exc:
            print("refused", exc)
    """


def _reach(folder: str, network: bool) -> Callable[[Path], str]:
    def run(tmp: Path) -> str:
        if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            return ""  # no such folder here: nothing to reach
        address = os.path.join(os.path.realpath(folder), f"fixgraph-bench-{uuid.uuid4().hex[:8]}.sock")
        with _unix_listener(address) as hits:
            _, out = _sandboxed(tmp, _connect_script(address), network=network)
        return f"reached the host's socket {address}" if "CONNECTED" in out or hits else ""
    return run


for _folder in ("/tmp", "/run", "/var/tmp"):
    ATTACKS.append(Attack("unix-socket", f"test connects to a host Unix socket in {_folder}",
                          _reach(_folder, network=True), sandbox=True))
    ATTACKS.append(Attack("unix-socket", f"a build step (host network) connects to a host Unix socket in {_folder}",
                          _reach(_folder, network=False), sandbox=True))


@attack("unix-socket", "test connects to an abstract Unix socket (no path to hide)", sandbox=True)
def _abstract(tmp: Path) -> str:
    address = f"\0fixgraph-bench-{uuid.uuid4().hex[:8]}"
    with _unix_listener(address) as hits:
        _, out = _sandboxed(tmp, _connect_script(address))
    return "reached the host's abstract socket" if "CONNECTED" in out or hits else ""


@attack("unix-socket", "test lists /tmp to find sockets, then a sibling of its own run folder", sandbox=True)
def _sibling(tmp: Path) -> str:
    address = str(tmp / f"sibling-{uuid.uuid4().hex[:6]}.sock")
    with _unix_listener(address) as hits:
        listing = """
        import os
        try:
            seen = [n for n in os.listdir("/tmp") if n.endswith(".sock")]
        except OSError:
            seen = []
        print("SEEN", seen)
"""
        _, out = _sandboxed(tmp, listing + _connect_script(address))
    if "CONNECTED" in out or hits:
        return "reached a socket beside its run folder"
    return "" if "SEEN []" in out else f"listed sockets: {out.strip()[:200]}"


@attack("unix-socket", "the run still works with /tmp hidden: its copy, home and interpreter are there", sandbox=True)
def _still_works(tmp: Path) -> str:
    _, out = _sandboxed(tmp, """
        import os, sys, tempfile
        open("inside.txt", "w").write("ok")
        with tempfile.NamedTemporaryFile(dir=os.environ["TMPDIR"]) as fh:
            fh.write(b"x")
        print("FINE", sys.executable)
    """)
    return "" if "FINE" in out else f"the run broke: {out.strip()[-200:]}"


@attack("unix-socket", "test connects to a host Unix socket in a world-writable folder outside /tmp, /var/tmp and /run",
        sandbox=True)
def _world_writable_elsewhere(tmp: Path) -> str:
    # Beside the bench's own folder, which --placement outside puts outside /tmp.
    folder = tmp.parent / f"fixgraph-bench-ww-{uuid.uuid4().hex[:6]}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o1777)
    try:
        address = str(folder / "service.sock")
        with _unix_listener(address) as hits:
            _, out = _sandboxed(tmp, _connect_script(address))
        return f"reached the host's socket {address}" if "CONNECTED" in out or hits else ""
    finally:
        with contextlib.suppress(OSError):
            os.rmdir(folder)


@attack("unix-socket", "a socket another process creates while the test runs", sandbox=True)
def _created_during_the_run(tmp: Path) -> str:
    address = str(tmp.parent / f"fixgraph-bench-late-{uuid.uuid4().hex[:6]}.sock")
    script = "import time\ntime.sleep(1.5)\n" + textwrap.dedent(_connect_script(address))
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(_sandboxed(tmp, script)[1]))
    worker.start()
    time.sleep(0.5)  # the sandbox is set up by now; the socket appears after it
    with _unix_listener(address) as hits:
        worker.join(30)
    out = result[0] if result else ""
    return f"reached a socket made during the run: {address}" if "CONNECTED" in out or hits else ""
