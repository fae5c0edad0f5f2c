"""Serve a WSGI application with gunicorn on the sandbox's own loopback, then become the test command.

Run inside a test's sandbox, by the interpreter of a tool virtualenv that holds the application
and gunicorn (``scoring.execution.services``), as
``python -I -c <this file's text> VAR module:app PATH -- CMD...``:

1. it listens on a free port of ``127.0.0.1`` and hands the socket to gunicorn (``fd://``): no
   other run's port can be taken, with or without a network namespace of its own;
2. it waits until ``PATH`` answers 200 there, sets ``VAR`` to the server's URL and execs ``CMD``:
   the tests are this process, and gunicorn their child, killed when they end
   (``PR_SET_PDEATHSIG``; the run's jail, PID 1, or its process group's kill ends it anyway).

When the server does not answer in time, a ``[fixgraph]`` line says why and ``CMD`` runs without
``VAR``, as it would have without the service.

gunicorn is httpbin.org's server: httpbin de-chunks a chunked request body on gunicorn alone
(501 on any other server; requests 0.14's ``test_file_post_data`` sends one), and the ``gthread``
worker keeps a connection alive (0.14's ``test_connection_keepalive_and_close`` reads the
``Connection`` header; the ``sync`` worker closes every one). Nor does gunicorn invent a
``text/plain`` content type for a request that has none, as the standard library's server does.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

READY_TIMEOUT_S = 60.0  # importing flask on a loaded machine takes seconds
PR_SET_PDEATHSIG = 1
# What the server is given of the run's environment: nothing the tests were given for themselves,
# and none of gunicorn's own variables (GUNICORN_CMD_ARGS, WEB_CONCURRENCY, PORT).
_SERVER_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL")


def _server(target: str, sock: socket.socket, log: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", "-m", "gunicorn", "--bind", f"fd://{sock.fileno()}", "--worker-class", "gthread",
         "--threads", "32",  # a test may hold a response open (/drip, /delay) while others run
         "--keep-alive", "120",  # an idle connection is kept as long as a slow test may leave it idle
         "--no-control-socket", target],
        # Started from the venv's folder: the copy under test holds no gunicorn.conf.py gunicorn
        # would read, and no module that the app could import instead of its own.
        cwd=sys.prefix, env={k: os.environ[k] for k in _SERVER_ENV if k in os.environ},
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=[sock.fileno()],
        # gunicorn's workers leave when their master does
        preexec_fn=lambda: ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))


def _answers(url: str, server: subprocess.Popen[bytes]) -> str:
    """"" once ``url`` answers 200, else why not (the last error by the deadline)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never a proxy
    deadline = time.monotonic() + READY_TIMEOUT_S
    why = "no answer"
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with opener.open(url, timeout=10) as resp:
                if resp.status == 200:
                    return ""
                why = f"HTTP {resp.status}"
        except OSError as exc:
            why = str(exc)
        time.sleep(0.2)
    return f"gunicorn exited with {server.returncode}" if server.poll() is not None else why


def main(argv: list[str]) -> None:
    if len(argv) < 5 or argv[3] != "--":
        print("[fixgraph] usage: VAR module:app PATH -- CMD...", file=sys.stderr, flush=True)
        os._exit(2)
    var, target, ready, _, *cmd = argv
    env = dict(os.environ)
    # The server's log (its access log is off) is no test output: kept aside for a failure's reason.
    with tempfile.TemporaryFile() as log, socket.create_server(("127.0.0.1", 0)) as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
        server = _server(target, sock, log.fileno())
        sock.close()
        why = _answers(url + ready.lstrip("/"), server)
        if why:
            server.kill()
            log.seek(0)
            last = [ln for ln in log.read().decode(errors="replace").splitlines() if ln.strip()][-1:]
            print(f"[fixgraph] {target} not served, {var} left unset: {why}{': ' + last[0] if last else ''}",
                  file=sys.stderr, flush=True)
        else:
            env[var] = url
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        print(f"[fixgraph] cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
    os._exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
