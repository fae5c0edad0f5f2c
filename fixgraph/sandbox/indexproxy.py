"""The package index, and nothing else, for build steps in a network namespace of their own.

A build step (pip installing the env's requirements, the repository's own ``pip install -e .``,
its ``setup.py``) runs in its own network namespace: its only interface is its own loopback. It
reaches the index through this proxy: fixgraph serves it on a Unix socket in a folder of its own,
the jail forwards a TCP port on the namespace's loopback to it (``fixgraph/sandbox/jail.py``), and
the step's ``https_proxy`` names that port. The proxy answers ``CONNECT host:port`` for the index's
hosts only (PyPI's, and those the operator's pip settings name) and refuses anything else with 403:
a loopback service, the local network, another host on the internet. It resolves the name itself
(the step has no DNS), and a public index's name that resolves to this machine (loopback,
unspecified, link-local) is refused too; an index the operator named is connected to as named.
Private addresses are not refused: a network may route the index through its own (here PyPI's
names resolve into 203.0.113.0/24). Where fixgraph itself goes out through a proxy (its own
``https_proxy``), the tunnels go through that proxy.
"""

from __future__ import annotations

import configparser
import contextlib
import ipaddress
import os
import selectors
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

PUBLIC_INDEX = frozenset({("pypi.org", 443), ("files.pythonhosted.org", 443)})
# pip's global configuration files (a step's HOME is the env's own, so no user file applies).
_PIP_CONFIGS = ("/etc/pip.conf", "/etc/xdg/pip/pip.conf")
_HEAD_LIMIT = 8192
_TIMEOUT_S = 60.0
# Connections open at once per step (pip uses a handful): each is a thread of fixgraph's own process.
MAX_CONNECTIONS = 64
REFUSED = b"HTTP/1.1 403 Forbidden (fixgraph: build steps reach only the package index)\r\n\r\n"


def _hosts_of(urls: str) -> set[tuple[str, int]]:
    found = set()
    for url in urls.split():
        parts = urlsplit(url)
        if parts.scheme == "https" and parts.hostname:
            with contextlib.suppress(ValueError):
                found.add((parts.hostname.lower(), parts.port or 443))
    return found


def operator_indexes(env: Mapping[str, str] | None = None) -> frozenset[tuple[str, int]]:
    """The https index hosts the operator's pip settings name: ``PIP_INDEX_URL``,
    ``PIP_EXTRA_INDEX_URL`` and the global pip.conf files' ``index-url``/``extra-index-url``."""
    env = os.environ if env is None else env
    found = _hosts_of(env.get("PIP_INDEX_URL", "") + " " + env.get("PIP_EXTRA_INDEX_URL", ""))
    for path in _PIP_CONFIGS:
        cfg = configparser.RawConfigParser(strict=False)
        with contextlib.suppress(OSError, configparser.Error, UnicodeDecodeError):
            cfg.read(path, encoding="utf-8")
        for section in ("global", "install", "download"):
            for key in ("index-url", "extra-index-url"):
                if cfg.has_option(section, key):
                    found |= _hosts_of(cfg.get(section, key))
    return frozenset(found)


def _remote(addr: str) -> bool:
    ip = ipaddress.ip_address(addr.split("%")[0])
    return not (ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast)


class IndexProxy:
    """A CONNECT proxy on ``<folder>/index.sock`` that opens tunnels to ``allowed`` only."""

    def __init__(self, folder: Path, trusted: frozenset[tuple[str, int]] = frozenset()):
        self.trusted = trusted  # the operator's: connected as named, wherever they resolve
        self.allowed = PUBLIC_INDEX | trusted
        self.path = folder / "index.sock"
        self.refused: list[str] = []  # "host:port" asked for and refused, for the step's log
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._srv.listen(64)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._srv.shutdown(socket.SHUT_RDWR)
        self._srv.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                conn.close()  # a step that opens more at once gets no more threads of ours
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self._tunnel(conn)
        finally:
            self._slots.release()

    def _tunnel(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_TIMEOUT_S)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and len(head) < _HEAD_LIMIT:
                    chunk = conn.recv(_HEAD_LIMIT)
                    if not chunk:
                        return
                    head += chunk
            target, upstream = self._open(head.split(b"\r\n", 1)[0])
            if upstream is None:
                self.refused.append(target)
                with contextlib.suppress(OSError):
                    conn.sendall(REFUSED)
                return
            with upstream:
                with contextlib.suppress(OSError):
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    rest = head.split(b"\r\n\r\n", 1)[1]
                    if rest:
                        upstream.sendall(rest)
                    _pump(conn, upstream)

    def _open(self, request_line: bytes) -> tuple[str, socket.socket | None]:
        """The tunnel's target as asked, and a connection to it when it is the index."""
        parts = request_line.decode("latin-1").split()
        if len(parts) != 3 or parts[0] != "CONNECT":
            return request_line.decode("latin-1")[:80], None
        host, _, port_text = parts[1].rpartition(":")
        host = host.strip("[]").lower()
        target = f"{host}:{port_text}"
        if not port_text.isdigit() or (host, int(port_text)) not in self.allowed:
            return target, None
        port = int(port_text)
        upstream = getproxies().get("https", "")
        if upstream.startswith("http://") and not proxy_bypass(host):
            return target, _through(upstream, host, port)
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError:
            return target, None
        for family, kind, proto, _, addr in infos:
            if (host, port) not in self.trusted and not _remote(str(addr[0])):
                continue  # the public index's name led to this machine: not the index
            sock = socket.socket(family, kind, proto)
            sock.settimeout(_TIMEOUT_S)
            try:
                sock.connect(addr)
            except OSError:
                sock.close()
                continue
            return target, sock
        return target, None


def _through(proxy_url: str, host: str, port: int) -> socket.socket | None:
    """A tunnel to ``host:port`` through the operator's own proxy; None when it refuses."""
    parts = urlsplit(proxy_url)
    try:
        sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=_TIMEOUT_S)
    except (OSError, ValueError):
        return None
    try:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer and len(answer) < _HEAD_LIMIT:
            chunk = sock.recv(1)  # byte by byte: nothing after the head may be taken from the tunnel
            if not chunk:
                break
            answer += chunk
        if answer.split(b" ", 2)[1:2] == [b"200"]:
            return sock
    except OSError:
        pass
    sock.close()
    return None


def _pump(a: socket.socket, b: socket.socket) -> None:
    """Bytes both ways until either side closes or stays silent for the timeout."""
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, b)
    sel.register(b, selectors.EVENT_READ, a)
    try:
        while True:
            events = sel.select(_TIMEOUT_S)
            if not events:
                return
            for key, _ in events:
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                data = src.recv(65536)
                if not data:
                    return
                key.data.sendall(data)
    finally:
        sel.close()


@contextlib.contextmanager
def serving(trusted: frozenset[tuple[str, int]] | None = None) -> Iterator[IndexProxy]:
    """An :class:`IndexProxy` in a fresh folder closed to others, for one build step."""
    folder = Path(tempfile.mkdtemp(prefix="fixgraph-index-"))
    proxy = IndexProxy(folder, operator_indexes() if trusted is None else trusted)
    try:
        yield proxy
    finally:
        proxy.close()
        with contextlib.suppress(OSError):
            folder.rmdir()
