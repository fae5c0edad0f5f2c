"""Attacks from code under test: the sandbox, the repository cache, git."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

from eval.attacks import ROOT, SECRET, attack
from fixgraph.sandbox.jail import accept_each

# ---- helpers -------------------------------------------------------------------------------


def _sandboxed(tmp: Path, script: str, timeout_s: float = 20.0, memory_mb: int = 1024, network: bool = True,
               env_extra: dict[str, str] | None = None) -> tuple[int, str]:
    """Run ``script`` (Python) the way a test process runs: in the sandbox, cwd its own copy."""
    from fixgraph.sandbox.process import Limits, prepare_workdir, run_isolated, scrubbed_env

    run_dir = tmp / f"run-{uuid.uuid4().hex[:8]}"
    (run_dir / "repo").mkdir(parents=True)
    (run_dir / "home").mkdir()
    prepare_workdir(run_dir)
    (run_dir / "repo" / "attack.py").write_text(textwrap.dedent(script))
    env = scrubbed_env(run_dir / "home", env_extra)
    done = run_isolated([sys.executable, "-I", "attack.py"], run_dir / "repo", env,
                        Limits(timeout_s, int(timeout_s) + 5, memory_mb, network))
    return done.returncode, done.output


def listener(host: str = "127.0.0.1") -> tuple[socket.socket, int, list[int]]:
    """A server on the host (on its loopback unless ``host`` says) that counts connections."""
    srv = socket.socket()
    srv.bind((host, 0))
    srv.listen(16)
    return srv, srv.getsockname()[1], count_connections(srv)


def count_connections(srv: socket.socket) -> list[int]:
    """Accept (and close) every connection to the listening ``srv`` on a thread; one item each."""
    hits: list[int] = []

    def count(conn: socket.socket) -> None:
        hits.append(1)
        conn.close()

    accept_each(srv, count)
    return hits


def _pids_with(marker: str) -> list[int]:
    """Live ``sleep <marker>`` processes (the sleeps attacks start; not a script that names them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                data = (entry / "cmdline").read_bytes()
                if marker.encode() in data and data.split(b"\0")[0].endswith(b"sleep"):
                    state = (entry / "stat").read_text().split(") ", 1)[1][:1]
                    if state != "Z":
                        found.append(int(entry.name))
    return found


def _wait_gone(marker: str, wait_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        alive = _pids_with(marker)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd)}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def _mirror(tmp: Path, files: dict[str, str] | None = None) -> tuple[Path, str]:
    """A mirrors folder with one repo, acme/calc; returns (mirrors, base commit)."""
    src = tmp / "mirrors" / "acme+calc"
    src.mkdir(parents=True)
    _git(src, "init", "-q", "-b", "main")
    for rel, text in (files or {"calc.py": "def add(a, b):\n    return a - b\n"}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "base")
    return tmp / "mirrors", _git(src, "rev-parse", "HEAD")


# ---- sandbox escape through git -------------------------------------------------------------


@attack("git-escape", "test writes a hook and config into the repository cache", sandbox=True)
def _hook_into_cache(tmp: Path) -> str:
    from fixgraph.repo.workspace import RepoCache

    mirrors, sha = _mirror(tmp)
    cache = RepoCache(tmp / "cache", mirrors)
    cache.worktree("acme/calc", sha, "task-1")
    bare = cache.bare_path("acme/calc")
    marker = tmp / "pwned"
    script = f"""
        import os, glob
        bare = {str(bare)!r}
        for target, text in ((bare + "/hooks/post-checkout", "#!/bin/sh\\ntouch {marker}\\n"),
                             (bare + "/config", "[core]\\n\\tfsmonitor = touch {marker}\\n")):
            try:
                with open(target, "a") as fh:
                    fh.write(text)
                os.chmod(target, 0o755)
                print("wrote", target)
            except OSError as exc:
                print("refused", target, exc.strerror)
        for wt in glob.glob({str(tmp / 'cache' / 'worktrees' / '*')!r}):
            try:
                open(wt + "/.git", "a").write("x")
                print("wrote", wt)
            except OSError as exc:
                print("refused", wt, exc.strerror)
    """
    _, out = _sandboxed(tmp, script)
    if "wrote" in out:
        return f"the test wrote into the cache: {out.strip()[:200]}"
    cache.worktree("acme/calc", sha, "task-2")
    return "fixgraph's git ran what the test planted" if marker.exists() else ""


@attack("git-escape", "fixgraph's git ignores hooks, fsmonitor and filters planted in the cache")
def _planted_config(tmp: Path) -> str:
    from fixgraph.repo.workspace import RepoCache

    mirrors, sha = _mirror(tmp, {"calc.py": "x = 1\n", ".gitattributes": "*.py filter=evil diff=evil\n"})
    cache = RepoCache(tmp / "cache", mirrors)
    cache.ensure_clone("acme/calc")
    bare = cache.bare_path("acme/calc")
    marker = tmp / "pwned"
    hook = bare / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}-hook\n")
    hook.chmod(0o755)
    with open(bare / "config", "a") as fh:
        fh.write(f"[core]\n\tfsmonitor = touch {marker}-fsmonitor\n\thooksPath = {bare / 'hooks'}\n"
                 f"[filter \"evil\"]\n\tsmudge = sh -c 'touch {marker}-filter; cat'\n"
                 f"\tclean = sh -c 'touch {marker}-filter; cat'\n"
                 f"[diff \"evil\"]\n\ttextconv = sh -c 'touch {marker}-textconv; cat'\n")
    wt = cache.worktree("acme/calc", sha, "task-1")
    (wt.path / "calc.py").write_text("x = 2\n")
    wt.diff()
    wt.reset()
    ran = sorted(p.name for p in tmp.glob("pwned*"))
    return f"git ran planted commands: {ran}" if ran else ""


@attack("git-escape", "a planted remote URL with the ext:: transport")
def _ext_transport(tmp: Path) -> str:
    from fixgraph.repo.workspace import RepoCache, WorkspaceError

    mirrors, _ = _mirror(tmp)
    cache = RepoCache(tmp / "cache", mirrors)
    cache.ensure_clone("acme/calc")
    marker = tmp / "pwned-ext"
    _git(cache.bare_path("acme/calc"), "remote", "set-url", "origin", f"ext::sh -c touch% {marker}")
    with contextlib.suppress(WorkspaceError):
        cache.ensure_clone("acme/calc", "0" * 40)  # a missing commit: fixgraph fetches
    return "git ran the ext:: command" if marker.exists() else ""


# ---- secrets visible to tests ----------------------------------------------------------------


@attack("secrets", "test reads every /proc/<pid>/environ, the parent's included", sandbox=True)
def _proc_environ(tmp: Path) -> str:
    os.environ["FIXGRAPH_BENCH_SECRET"] = SECRET
    try:
        script = f"""
            import os
            found = []
            for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [{os.getpid()!r}, "1"]:
                try:
                    if {SECRET!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read():
                        found.append(pid)
                except OSError:
                    pass
            print("FOUND" if found else "nothing", found)
        """
        _, out = _sandboxed(tmp, script)
    finally:
        del os.environ["FIXGRAPH_BENCH_SECRET"]
    return f"the test read the secret: {out.strip()[:200]}" if "FOUND" in out or "nothing" not in out else ""


@attack("secrets", "test reads the project's .env through a relative path", sandbox=True)
def _dotenv(tmp: Path) -> str:
    project = tmp / "project"
    project.mkdir()
    (project / ".env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    old = Path.cwd()
    os.chdir(project)  # fixgraph runs from the project folder, where its .env is
    try:
        script = f"""
            import os
            hits = []
            for cand in [{str(project / '.env')!r}] + ["../" * n + ".env" for n in range(1, 12)]:
                try:
                    if {SECRET!r} in open(cand).read():
                        hits.append(cand)
                except OSError:
                    pass
            print("FOUND" if hits else "nothing", hits)
        """
        _, out = _sandboxed(tmp, script)
    finally:
        os.chdir(old)
    return f"the test read .env: {out.strip()[:200]}" if "nothing" not in out else ""


@attack("secrets", "test lists and reads the repository cache", sandbox=True)
def _read_cache(tmp: Path) -> str:
    from fixgraph.repo.workspace import RepoCache

    mirrors, sha = _mirror(tmp)
    cache = RepoCache(tmp / "cache", mirrors)
    cache.worktree("acme/calc", sha, "task-1")
    script = f"""
        import os
        seen = []
        for d in ({str(tmp / 'cache' / 'repos')!r}, {str(tmp / 'cache' / 'worktrees')!r}):
            try:
                seen += os.listdir(d)
            except OSError:
                pass
        print("SAW", seen)
    """
    _, out = _sandboxed(tmp, script)
    return f"the test saw the cache: {out.strip()[:200]}" if "SAW []" not in out else ""


@attack("secrets", "test reads a world-readable file in a folder closed to others (root's home)", sandbox=True)
def _closed_folder(tmp: Path) -> str:
    """The interpreter often lives in pyenv's folder in root's home: the sandbox user must reach
    it, and nothing else of that home (a ``.gitconfig``, ``.config/gh/hosts.yml``), and the home
    must stay closed. A stand-in home under the attack's temp folder plays it."""
    home = tmp / "roothome"
    (home / ".pyenv").mkdir(parents=True)
    (home / ".pyenv" / "reached.py").write_text("X = 42\n")
    (home / ".gitconfig").write_text(f"[credential]\n  token = {SECRET}\n")
    (home / ".gitconfig").chmod(0o644)
    home.chmod(0o700)
    script = f"""
        import os, sys
        sys.path.insert(0, os.environ["PYTHONPATH"])  # the script runs with -I
        import reached
        print("IMPORTED", reached.X)
        try:
            print("LISTED", os.listdir({str(home)!r}))
        except OSError as exc:
            print("no listing", type(exc).__name__)
        try:
            print("READ", open({str(home / '.gitconfig')!r}).read())
        except OSError as exc:
            print("no read", type(exc).__name__)
    """
    _, out = _sandboxed(tmp, script, env_extra={"PYTHONPATH": str(home / ".pyenv")})
    mode = stat.S_IMODE(home.stat().st_mode)
    if "IMPORTED 42" not in out:
        return f"the needed folder was not reached: {out.strip()[-200:]}"
    if mode != 0o700:
        return f"the closed folder was opened on the machine: mode {mode:o}"
    if os.geteuid() == 0 and ("READ" in out or "LISTED" in out):  # unprivileged, the files are the user's own
        return f"the test saw the closed folder: {out.strip()[-200:]}"
    return ""


@attack("secrets", "a secret the test prints is masked in its output and in its crash file")
def _printed_secret(tmp: Path) -> str:
    from fixgraph import redaction

    redaction.register([SECRET])
    crash = tmp / "crash.jsonl"
    script = f"""
        import os
        print("leak:", {SECRET!r})
        open(os.environ["FIXGRAPH_CRASH_FILE"], "a").write('{{"message": "{SECRET}"}}\\n')
    """
    _, out = _sandboxed(tmp, script, env_extra={"FIXGRAPH_CRASH_FILE": str(crash)})
    if SECRET in out:
        return "the output kept the secret"
    if not crash.is_file() or SECRET in crash.read_text():
        return "the crash file kept the secret (or was not written)"
    return "" if "leak: ***" in out else f"unexpected output: {out.strip()[:200]}"


# ---- sandbox limits --------------------------------------------------------------------------


@attack("sandbox-limits", "a setsid daemon outlives the timeout", sandbox=True)
def _setsid_daemon(tmp: Path) -> str:
    marker = f"{uuid.uuid4().int % 10**6 + 1000}.25"
    script = f"""
        import subprocess, time
        subprocess.Popen(["setsid", "sleep", {marker!r}], start_new_session=True)
        subprocess.Popen(["sh", "-c", "trap '' HUP TERM; exec sleep {marker}"])
        time.sleep(60)
    """
    _sandboxed(tmp, script, timeout_s=3)
    alive = _wait_gone(marker)
    return f"daemons alive after the run: {alive}" if alive else ""


@attack("sandbox-limits", "a fork bomb", sandbox=True)
def _fork_bomb(tmp: Path) -> str:
    from fixgraph.sandbox.process import Limits

    script = """
        import os, time
        n = 0
        try:
            while n < 5000:
                if os.fork() == 0:
                    time.sleep(600)
                    os._exit(0)
                n += 1
        except OSError:
            pass
        print("forked", n)
    """
    # The children outlive the parent by minutes unless the sandbox ends them with it; the margin
    # below the timeout is for forking under load (a 25 s bound with 20 s children failed once).
    start = time.monotonic()
    _, out = _sandboxed(tmp, script, timeout_s=60)
    forked = next((int(w.split()[1]) for w in out.splitlines() if w.startswith("forked")), None)
    if forked is None:
        return f"no report: {out.strip()[-200:]}"
    # The limit counts the sandbox user's processes; unprivileged, that user's others count too.
    if forked >= 2 * Limits(1, 1, 1).max_procs:
        return f"{forked} processes forked"
    return "" if time.monotonic() - start < 55 else "the bomb held the run until its timeout"


@attack("sandbox-limits", "setns into the host's network namespace, then reach a loopback listener", sandbox=True)
def _setns(tmp: Path) -> str:
    srv, port, hits = listener()
    try:
        script = f"""
            import ctypes, os, socket
            libc = ctypes.CDLL(None, use_errno=True)
            joined = []
            for pid in [p for p in os.listdir("/proc") if p.isdigit()] + ["1", {str(os.getpid())!r}]:
                try:
                    fd = os.open(f"/proc/{{pid}}/ns/net", os.O_RDONLY)
                except OSError:
                    continue
                if libc.setns(fd, 0x40000000) == 0:
                    joined.append(pid)
                os.close(fd)
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
                print("CONNECTED", joined)
            except OSError as exc:
                print("refused", joined, exc)
        """
        _, out = _sandboxed(tmp, script)
    finally:
        srv.close()
    return f"reached the host: {out.strip()[:200]}" if "CONNECTED" in out or hits else ""


@attack("sandbox-limits", "fixgraph killed mid-run leaves no test process and no temp folder", sandbox=True)
def _kill_run(tmp: Path) -> str:
    marker = f"{uuid.uuid4().int % 10**6 + 1000}.75"
    run_dir = tmp / "killed-run"
    driver = f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from fixgraph.sandbox.process import Limits, prepare_workdir, run_isolated, scrubbed_env
        run = Path({str(run_dir)!r})
        (run / "repo").mkdir(parents=True)
        (run / "home").mkdir()
        prepare_workdir(run)
        print("started", flush=True)
        run_isolated(["sh", "-c", "setsid sleep {marker} & sleep {marker}"], run / "repo",
                     scrubbed_env(run / "home"), Limits(60, 60, 512))
    """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(driver)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        deadline = time.monotonic() + 10
        while not _pids_with(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not _pids_with(marker):
            return "the test process never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    alive = _wait_gone(marker)
    deadline = time.monotonic() + 5
    while run_dir.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    problems = ([f"processes alive: {alive}"] if alive else []) + (["temp folder left"] if run_dir.exists() else [])
    return "; ".join(problems)


@attack("sandbox-limits", "test writes outside its copy (the project, /tmp, the interpreter)", sandbox=True)
def _write_outside(tmp: Path) -> str:
    targets = [str(ROOT / "pwned.txt"), "/tmp/fixgraph-bench-pwned", str(Path(sys.executable).parent / "pwned"),
               str(tmp / "pwned")]
    script = f"""
        import os
        for t in {targets!r}:
            try:
                open(t, "w").write("x")
                print("WROTE", t)
            except OSError:
                pass
        open("inside.txt", "w").write("ok")
        open(os.environ["HOME"] + "/inside.txt", "w").write("ok")
        print("inside ok")
    """
    _, out = _sandboxed(tmp, script)
    for t in targets:
        with contextlib.suppress(OSError):
            Path(t).unlink()
    if "WROTE" in out:
        return out.strip()[:200]
    return "" if "inside ok" in out else f"could not write its own copy: {out.strip()[-200:]}"


def _connects(tmp: Path, addr: str, port: int) -> str:
    """The output of a sandboxed test that connects to ``addr:port``: CONNECTED, or refused and why."""
    return _sandboxed(tmp, f"""
        import socket
        try:
            socket.create_connection(({addr!r}, {port}), timeout=3).close()
            print("CONNECTED")
        except OSError as exc:
            print("refused", exc)
    """)[1]


def outside_address() -> str | None:
    """This machine's address on its route out (found without sending a packet); None if none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))
        except OSError:
            return None
        addr = sock.getsockname()[0]
    return None if addr.startswith("127.") else addr


@attack("network", "test connects to a loopback listener on the host", sandbox=True)
def _network(tmp: Path) -> str:
    srv, port, hits = listener()
    try:
        out = _connects(tmp, "127.0.0.1", port)
    finally:
        srv.close()
    return "reached the host" if "CONNECTED" in out or hits else ""


@attack("network", "test connects to a listener on the machine's own address beyond loopback", sandbox=True)
def _outside(tmp: Path) -> str:
    addr = outside_address()
    if addr is None:
        return ""  # only loopback here: nothing beyond it to reach
    srv, port, hits = listener(addr)
    try:
        out = _connects(tmp, addr, port)
    finally:
        srv.close()
    return f"reached {addr}" if "CONNECTED" in out or hits else ""


@attack("network", "test connects to a server another run serves on its own loopback", sandbox=True)
def _other_run(tmp: Path) -> str:
    # Loopback is up in each run's namespace: the same port on 127.0.0.1 is another socket in each,
    # and on the host (a listener there on that port too: neither may be reached).
    host, port, hits = listener()
    served: list[str] = []
    server = threading.Thread(target=lambda: served.append(_sandboxed(tmp, f"""
        import os, socket, time
        srv = socket.socket()
        srv.bind(("127.0.0.1", {port}))
        srv.listen(8)
        srv.settimeout(0.2)
        home = os.environ["HOME"]
        open(home + "/ready", "w").close()
        n, deadline = 0, time.monotonic() + 40
        while time.monotonic() < deadline and not os.path.exists(home + "/stop"):
            try:
                srv.accept()[0].close()
                n += 1
            except socket.timeout:
                pass
        print("ACCEPTED", n)
    """, timeout_s=60)[1]), daemon=True)
    server.start()
    try:
        deadline = time.monotonic() + 40
        while not list(tmp.glob("run-*/home/ready")) and server.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        ready = list(tmp.glob("run-*/home/ready"))
        if not ready:
            server.join(30)
            return f"the serving run never listened on its loopback: {''.join(served).strip()[-200:]}"
        out = _connects(tmp, "127.0.0.1", port)
        (ready[0].parent / "stop").touch()
        server.join(60)
    finally:
        host.close()
    accepted = next((ln for ln in "".join(served).splitlines() if ln.startswith("ACCEPTED")), "ACCEPTED ?")
    if "CONNECTED" in out or hits or accepted != "ACCEPTED 0":
        return f"one run reached another's loopback or the host's: {out.strip()[:100]}; {accepted}; host {len(hits)}"
    return ""


@attack("memory", "test allocates past the memory limit")
def _memory(tmp: Path) -> str:
    _, out = _sandboxed(tmp, """
        try:
            block = bytearray(3 * 1024 ** 3)
            print("ALLOCATED", len(block))
        except MemoryError:
            print("MemoryError")
    """, memory_mb=1024)
    return "" if "MemoryError" in out else f"allocated: {out.strip()[-200:]}"




def _reads(tmp: Path, files: list[Path]) -> str:
    """What a test process read of ``files`` (each holds a marker line)."""
    script = f"""
        got = []
        for path in {[str(f) for f in files]!r}:
            try:
                got.append(open(path).read().strip())
            except OSError:
                pass
        print("GOT", got)
    """
    _, out = _sandboxed(tmp, script)
    return "" if "GOT []" in out else f"the test read fixgraph's files: {out.strip()[:200]}"


@attack("secrets", "test reads fixgraph's cached test baselines and another task's record", sandbox=True)
def _cache_and_runs(tmp: Path) -> str:
    from fixgraph.sandbox.process import cover

    baseline = tmp / "fixgraph-cache" / "test-baselines" / "base.json"
    record = tmp / "fixgraph-runs" / "other-run" / "records" / "other__task-1.json"
    for f in (baseline, record):
        f.parent.mkdir(parents=True)
        f.write_text(f"marker {f.name}\n")
    cover(tmp / "fixgraph-cache")  # as the runner does for its cache, runs and predictions folders
    cover(tmp / "fixgraph-runs")
    return _reads(tmp, [baseline, record])


@attack("secrets", "fixgraph's cache is a link into a folder the sandbox shows (the interpreter's)", sandbox=True)
def _linked_cache(tmp: Path) -> str:
    from fixgraph.sandbox.process import cover

    real = Path(sys.prefix) / "share" / f"fixgraph-bench-cache-{uuid.uuid4().hex[:6]}"
    try:
        (real / "test-baselines").mkdir(parents=True)
    except OSError:
        return ""  # the interpreter's folder is not ours to write: nothing to place there
    try:
        (real / "test-baselines" / "base.json").write_text("marker base.json\n")
        (tmp / "linked-cache").symlink_to(real)
        cover(tmp / "linked-cache")
        return _reads(tmp, [real / "test-baselines" / "base.json", tmp / "linked-cache" / "test-baselines" / "base.json"])
    finally:
        shutil.rmtree(real, ignore_errors=True)
