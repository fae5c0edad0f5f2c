"""Hostile code and hostile clients against the real sandbox, git, guard, CLI and webhook server.

    python -m eval.attack_bench            # every attack, about a minute
    python -m eval.attack_bench --quick    # the fast subset the test suite runs
    python -m eval.attack_bench --only sandbox-limits,webhook

Each attack does what an attacker would (a test process that writes a git hook into the
repository cache, reads ``/proc/<parent>/environ``, leaves a ``setsid`` daemon; a patch that
hides ``os.system`` behind ``getattr``; a client that sends a negative ``Content-Length``...) and
reports whether the defence held. Everything runs on this machine: loopback sockets, temporary
folders, bounded in count and in time. Runs as root (the sandbox drops to an unprivileged uid)
and as an unprivileged user (the sandbox uses a user namespace); the first line says which.
Last line: ``tried=<n> held=<n> failed=<n>``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRET = "sk-attackbench-SECRET-7f3a9c"


@dataclass
class Attack:
    cls: str
    name: str
    run: Callable[[Path], str]  # "" when the defence held, else what got through
    quick: bool = True
    sandbox: bool = False  # only a sandbox with namespaces can hold it (see sandbox_mode())


ATTACKS: list[Attack] = []


def attack(cls: str, name: str, quick: bool = True,
           sandbox: bool = False) -> Callable[[Callable[[Path], str]], Callable[[Path], str]]:
    def register(fn: Callable[[Path], str]) -> Callable[[Path], str]:
        ATTACKS.append(Attack(cls, name, fn, quick, sandbox))
        return fn
    return register


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


def _listener() -> tuple[socket.socket, int, list[int]]:
    """A loopback server on the host that counts connections."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    hits: list[int] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            hits.append(1)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return srv, srv.getsockname()[1], hits


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
    srv, port, hits = _listener()
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


@attack("network", "test connects to a loopback listener on the host", sandbox=True)
def _network(tmp: Path) -> str:
    srv, port, hits = _listener()
    try:
        _, out = _sandboxed(tmp, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
                print("CONNECTED")
            except OSError as exc:
                print("refused", exc)
        """)
    finally:
        srv.close()
    return "reached the host" if "CONNECTED" in out or hits else ""


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


# ---- unsafe-patch guard ----------------------------------------------------------------------


def _guard_attack(name: str, rel: str, old: str, new: str, rule: str) -> Callable[[Path], str]:
    def run(tmp: Path) -> str:
        from eval.fixtures.critic_repo import edit, make_repo
        from scoring.static.guard import check_patch

        wt = make_repo(tmp / "repo")
        found = {f.get("rule") for f in check_patch(wt, edit(wt, rel, old, new))}
        return "" if rule in found else f"not flagged as {rule} (found {sorted(r for r in found if r)})"
    return run


def _register_guard_attacks() -> None:
    from eval.fixtures.guard_cases import BYPASSES

    for name, (rel, old, new, rule) in sorted(BYPASSES.items()):
        ATTACKS.append(Attack("guard", f"patch: {name} ({rel})", _guard_attack(name, rel, old, new, rule)))


_register_guard_attacks()


@attack("guard", "a guard-blocked patch in the bot is never pushed")
def _guard_blocks_push(tmp: Path) -> str:
    from eval.fakes.github_api import FakeGitHub, fix_patch, make_fixture_repo
    from fixgraph.config import load_config
    from fixgraph.dataset import Task
    from fixgraph.github.client import GitHubAccess
    from fixgraph.github.pr import GitHubPublisher
    from fixgraph.publish import Outcome
    from fixgraph.repo.workspace import RepoCache

    token = "ghp_benchTOKEN0123456789"
    fake = FakeGitHub(tmp / "served", tokens={token}).start()
    try:
        bare, sha = make_fixture_repo(tmp / "fixture")
        fake.add_repo("acme/calc", bare)
        fake.add_issue("acme/calc", 7, "add() subtracts", "2+3 gives -1")
        (tmp / "mirrors").mkdir()
        (tmp / "mirrors" / "acme+calc").symlink_to(bare)
        wt = RepoCache(tmp / "cache", tmp / "mirrors").worktree("acme/calc", sha, "acme__calc-7")
        cfg = load_config("redo", env={"GITHUB_TOKEN": token, "GITHUB_BASE_URL": fake.base_url, "EVAL_MODE": "false"},
                          overrides={"github.request_pause_s": 0, "github.write_pause_s": 0, "critic.guard": "block"})
        session = GitHubAccess(cfg).session()
        pub = GitHubPublisher(cfg, session.gh.get_repo("acme/calc"), 7, "add() subtracts", session.token)
        inst = Task(instance_id="acme__calc-7", repo="acme/calc", base_commit=sha, problem_statement="p")
        flagged = [{"source": "guard", "rule": "process-exec", "message": "added code calls os.system()"}]
        result = pub.publish(Outcome(task=inst, patch=fix_patch(), explanation="", verdict="Unsafe",
                                     score={"fix_score": 0.9, "kind": "semantic"},  # type: ignore[arg-type]
                                     attempts=[], plan={}, files_read=[], usage={}, stop_reason="done",
                                     guard_warnings=flagged, worktree=wt))
        pushed = _git(bare, "branch", "--list", "fixgraph/*")
        if result.get("ok") or pushed or fake.open_pulls("acme/calc"):
            return f"pushed or opened: {result}"
        return ""
    finally:
        fake.stop()


# ---- path traversal in edits (held before issue 14) --------------------------------------------


@attack("edit-traversal", "a patch or an edit that writes outside the repository")
def _edit_traversal(tmp: Path) -> str:
    from fixgraph.repo.workspace import PatchError, RepoCache

    mirrors, sha = _mirror(tmp)
    wt = RepoCache(tmp / "cache", mirrors).worktree("acme/calc", sha, "task-1")
    escaped = []
    for rel in ("../../escape.txt", "/tmp/escape.txt", ".git/hooks/pre-commit", "calc/../../escape.txt"):
        patch = f"--- /dev/null\n+++ b/{rel}\n@@ -0,0 +1 @@\n+x\n"
        try:
            wt.apply(patch)
            escaped.append(rel)
        except PatchError:
            pass
    return f"applied: {escaped}" if escaped else ""


# ---- webhook ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _webhook(tmp: Path, deadline_s: float = 3.0, log_path: Path | None = None,
             clock: Callable[[], float] = time.time) -> Iterator[tuple[int, list[object], str]]:
    from bot.server import DeliveryLog, make_server
    from fixgraph.config import load_config

    secret = "whsec-bench"
    cfg = load_config("redo", env={"GITHUB_WEBHOOK_SECRET": secret, "FIXGRAPH_ALLOWLIST": "acme/*",
                                   "EVAL_MODE": "false"})
    queued: list[object] = []

    def submit(trigger: object) -> bool:
        queued.append(trigger)
        return True

    log = DeliveryLog(log_path, clock=clock)
    server = make_server(cfg.github, submit, "127.0.0.1", 0, deliveries=log, deadline_s=deadline_s)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], queued, secret
    finally:
        server.shutdown()
        server.server_close()
        log.close()


def _raw(port: int, data: bytes, read_s: float = 5.0, then: Callable[[socket.socket], None] | None = None) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=read_s) as s:
        s.sendall(data)
        if then is not None:
            then(s)
        chunks = []
        with contextlib.suppress(OSError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks)


def _post(port: int, secret: str | None, payload: object, event: str = "issues",
          delivery: str | None = None, timeout: float = 10) -> int:
    from bot.events import sign

    body = json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or uuid.uuid4().hex,
               "Content-Type": "application/json"}
    if secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    req = urllib.request.Request(f"http://127.0.0.1:{port}/webhook", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _labeled(repo: str = "acme/calc") -> dict[str, object]:
    return {"action": "labeled", "label": {"name": "fixgraph"},
            "issue": {"number": 7, "title": "t", "body": "", "labels": [{"name": "fixgraph"}],
                      "user": {"login": "alice", "type": "User"}},
            "repository": {"full_name": repo, "name": repo.split("/")[1], "owner": {"login": repo.split("/")[0]}},
            "sender": {"login": "alice", "type": "User"}}


@attack("webhook", "negative Content-Length with an endless unsigned body")
def _negative_length(tmp: Path) -> str:
    with _webhook(tmp) as (port, queued, _):
        start = time.monotonic()

        def flood(s: socket.socket) -> None:
            with contextlib.suppress(OSError):
                for _ in range(64):
                    s.sendall(b"x" * 65536)

        reply = _raw(port, b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\n"
                           b"Content-Length: -1\r\n\r\n", then=flood)
        took = time.monotonic() - start
    if not reply.startswith(b"HTTP/1.1 400"):
        return f"answered {reply[:40]!r}"
    return "" if took < 5 and not queued else f"took {took:.1f}s"


@attack("webhook", "huge Content-Length is refused before reading")
def _huge_length(tmp: Path) -> str:
    with _webhook(tmp) as (port, _, _):
        reply = _raw(port, b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n")
    return "" if reply.startswith(b"HTTP/1.1 413") else f"answered {reply[:40]!r}"


@attack("webhook", "a slow client trickles its headers a byte at a time")
def _slowloris(tmp: Path) -> str:
    with _webhook(tmp, deadline_s=2.0) as (port, _, _):
        start = time.monotonic()
        closed_after = None
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            for byte in b"POST /webhook HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                try:
                    s.sendall(bytes([byte]))
                    time.sleep(0.2)
                    s.setblocking(False)
                    with contextlib.suppress(BlockingIOError):
                        if s.recv(1) == b"":
                            raise ConnectionResetError
                    s.setblocking(True)
                except OSError:
                    closed_after = time.monotonic() - start
                    break
    if closed_after is None:
        return "the connection stayed open for 20 s"
    return "" if closed_after < 5 else f"closed after {closed_after:.1f}s"


@attack("webhook", "a burst of 200 deliveries from 20 clients", quick=False)
def _burst(tmp: Path) -> str:
    with _webhook(tmp) as (port, _, secret):
        codes: list[int] = []
        lock = threading.Lock()

        def client() -> None:
            for _ in range(10):
                try:
                    code = _post(port, secret, {"zen": "x"}, event="ping")
                except OSError as exc:
                    code = -1
                    del exc
                with lock:
                    codes.append(code)

        threads = [threading.Thread(target=client) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    bad = [c for c in codes if c != 200]
    return f"{len(bad)} of {len(codes)} deliveries failed ({sorted(set(bad))})" if bad or len(codes) != 200 else ""


@attack("webhook", "a delivery replayed after a restart and a day")
def _replay(tmp: Path) -> str:
    path = tmp / "state" / "deliveries.sqlite"
    delivery = uuid.uuid4().hex
    with _webhook(tmp, log_path=path) as (port, queued, secret):
        first = _post(port, secret, _labeled(), delivery=delivery)
    later = time.time() + 24 * 3600
    with _webhook(tmp, log_path=path, clock=lambda: later) as (port, queued2, secret):
        again = _post(port, secret, _labeled(), delivery=delivery)
    if first != 202 or len(queued) != 1:
        return f"the first delivery was not queued ({first})"
    return f"the replay ran another job ({again})" if queued2 else ""


@attack("signatures", "unsigned and wrongly signed deliveries")
def _signatures(tmp: Path) -> str:
    with _webhook(tmp) as (port, queued, _):
        codes = [_post(port, None, _labeled()), _post(port, "wrong-secret", _labeled())]
    return "" if codes == [401, 401] and not queued else f"answered {codes}, queued {len(queued)}"


@attack("allowlist", "a delivery for a repository outside the allowlist")
def _allowlist(tmp: Path) -> str:
    with _webhook(tmp) as (port, queued, secret):
        code = _post(port, secret, _labeled("evil/repo"))
    return "" if code == 204 and not queued else f"answered {code}, queued {len(queued)}"


# ---- the command line ------------------------------------------------------------------------


def _graph(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI", "FIXGRAPH", "EVAL_MODE", "GITHUB"))}
    base.update({"OPENAI_API_KEY": "sk-bench", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "EVAL_MODE": "true",
                 "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}:{base.get('PATH', '/usr/bin:/bin')}"},
                **(env or {}))
    return subprocess.run([sys.executable, str(ROOT / "graph.py"), "--no-progress", *args], cwd=tmp, env=base,
                          capture_output=True, text=True, timeout=120)


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *, expect: str = "") -> str:
    lines = proc.stderr.strip().splitlines()
    if proc.returncode != 2 or len(lines) != 1 or "Traceback" in proc.stderr:
        return f"exit {proc.returncode}, stderr {proc.stderr.strip()[-300:]!r}"
    return "" if expect in lines[0] else f"said {lines[0]!r}"


def _dataset(tmp: Path, mirrors: Path, sha: str, instance_id: str = "acme__calc-1") -> Path:
    path = tmp / "ds.jsonl"
    path.write_text(json.dumps({"instance_id": instance_id, "repo": "acme/calc", "base_commit": sha,
                                "problem_statement": "add subtracts", "version": "0.1",
                                "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}) + "\n")
    return path


def _nothing_written(tmp: Path) -> str:
    made = [p.name for p in (tmp / "predictions", tmp / "runs", tmp / ".cache") if p.exists()]
    made += [p.name for p in tmp.glob("x*")]
    return f"; created {made}" if made else ""


@attack("cli-input", "instance_id with ../ in the dataset")
def _bad_instance_id(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha, instance_id="../../xescape")
    proc = _graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors))
    return (_one_line_exit_2(proc, expect="instance_id") + _nothing_written(tmp)
            + ("; wrote outside" if list(tmp.parent.glob("xescape*")) else ""))


@attack("cli-input", "--run-id ../../x")
def _bad_run_id(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    proc = _graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--run-id", "../../xrun")
    return _one_line_exit_2(proc, expect="--run-id") + _nothing_written(tmp)


@attack("cli-input", "a config file with non-UTF-8 bytes")
def _non_utf8_config(tmp: Path) -> str:
    cfg = tmp / "bad.toml"
    cfg.write_bytes(b'name = "caf\xe9"\n')
    return _one_line_exit_2(_graph(tmp, "--config", str(cfg)), expect="UTF-8") + _nothing_written(tmp)


@attack("cli-input", "output folders under a regular file")
def _dirs_under_file(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    (tmp / "afile").write_text("not a folder")
    cfg = tmp / "c.toml"
    cfg.write_text(f'predictions_dir = "{tmp / "afile" / "preds"}"\n' + (ROOT / "configs" / "redo.toml").read_text())
    proc = _graph(tmp, "--config", str(cfg), "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors))
    return _one_line_exit_2(proc, expect="not a folder") + _nothing_written(tmp)


@attack("cli-input", "a repository with no mirror, a corrupt mirror, a missing base commit")
def _bad_mirrors(tmp: Path) -> str:
    mirrors, sha = _mirror(tmp)
    problems = []
    empty = tmp / "empty-mirrors"
    empty.mkdir()
    cases = {"no mirror": (empty, sha, "no mirror"), "missing commit": (mirrors, "1" * 40, "no commit")}
    for label, (where, commit, expect) in cases.items():
        ds = _dataset(tmp, where, commit)
        problem = _one_line_exit_2(_graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(where)),
                                   expect=expect) + _nothing_written(tmp)
        if problem:
            problems.append(f"{label}: {problem}")
    corrupt = tmp / "corrupt-mirrors" / "acme+calc"
    corrupt.mkdir(parents=True)
    (corrupt / "HEAD").write_text("garbage\n")
    ds = _dataset(tmp, corrupt.parent, sha)
    problem = _one_line_exit_2(_graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(corrupt.parent)),
                               expect="not a usable git repository") + _nothing_written(tmp)
    if problem:
        problems.append(f"corrupt: {problem}")
    return "; ".join(problems)


@attack("run-lock", "a second graph.py with the same run id")
def _same_run_id(tmp: Path) -> str:
    from fixgraph.records import RunLock

    mirrors, sha = _mirror(tmp)
    ds = _dataset(tmp, mirrors, sha)
    lock = RunLock(tmp / "runs" / "shared")  # the first run, in progress
    try:
        proc = _graph(tmp, "--tasks", "all", "--dataset", str(ds), "--repos", str(mirrors), "--run-id", "shared")
    finally:
        lock.release()
    records = list((tmp / "runs" / "shared").rglob("*.json"))
    return _one_line_exit_2(proc, expect="in progress") + (f"; wrote {records}" if records else "")


# ---- running ---------------------------------------------------------------------------------


def who() -> str:
    from fixgraph.sandbox.process import sandbox_mode

    uid = os.geteuid()
    name = "root" if uid == 0 else f"uid {uid}"
    how = {"uid": "tests drop to an unprivileged uid", "userns": "tests run in a user namespace",
           "none": "no namespaces here: the sandbox is off"}[sandbox_mode()]
    return f"running as {name}: {how}"


def run(selected: list[Attack], time_limit_s: float = 600.0) -> list[tuple[Attack, str, float]]:
    results = []
    start = time.monotonic()
    for a in selected:
        if time.monotonic() - start > time_limit_s:
            results.append((a, "not run: the bench's time limit was reached", 0.0))
            continue
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="fixgraph-attack-") as tmp:
            try:
                problem = a.run(Path(tmp))
            except Exception as exc:  # an attack that crashes the code under attack is a failure
                problem = f"crashed: {type(exc).__name__}: {str(exc)[:200]}"
        results.append((a, problem, time.monotonic() - t0))
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m eval.attack_bench", description=(__doc__ or "").split("\n")[0])
    p.add_argument("--quick", action="store_true", help="only the fast attacks (the test suite's subset)")
    p.add_argument("--only", help="comma-separated attack classes")
    p.add_argument("--time-limit", type=float, default=600.0, help="seconds for the whole bench")
    args = p.parse_args(argv)
    selected = [a for a in ATTACKS if (a.quick or not args.quick)
                and (not args.only or a.cls in args.only.split(","))]
    print(who())
    results = run(selected, args.time_limit)
    classes: dict[str, list[tuple[Attack, str, float]]] = {}
    for r in results:
        classes.setdefault(r[0].cls, []).append(r)
    for cls, rows in classes.items():
        held = sum(not problem for _, problem, _ in rows)
        print(f"{cls:16} tried={len(rows)} held={held} failed={len(rows) - held}")
        for a, problem, secs in rows:
            print(f"    {'held  ' if not problem else 'FAILED'} {a.name} ({secs:.1f}s)" + (f": {problem}" if problem else ""))
    held = sum(not problem for _, problem, _ in results)
    print(f"tried={len(results)} held={held} failed={len(results) - held}")
    return 0 if held == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
