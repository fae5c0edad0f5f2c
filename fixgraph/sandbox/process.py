"""Run one test command isolated: scrubbed environment, no network, resource limits, hard timeout.

- Environment: built from nothing but an allow-list (PATH, HOME, LANG, ...) plus what the caller
  passes, so API keys and tokens in the parent's environment never reach the tests.
- Namespaces (``unshare``, probed once; as root directly, otherwise inside a user namespace): a
  new PID namespace whose first process is ``fixgraph/sandbox/jail.py``, a mount namespace and, unless
  ``network_isolation`` is off, a network namespace of its own. Its only interface is its own
  loopback, which the jail brings up: a test may serve and connect on ``127.0.0.1``/``::1`` as in
  the harness's containers (requests' test servers, django's live server), but those addresses
  lead back into this namespace alone. There is no route out, and the host's loopback services
  (another namespace's ``lo``) and every other run's are out of reach. A build step
  (``index_access``) has the same namespace plus one way out: a port on its loopback that leads to
  fixgraph's proxy, which opens tunnels to the package index and nothing else
  (``fixgraph/sandbox/indexproxy.py``).
- Rights: as root the command runs as a dedicated unprivileged uid (``SANDBOX_UID``) with no
  groups and no capabilities; otherwise as a non-root uid of a nested user namespace. Either
  way with no_new_privs, a process-count limit, every mount read-only except the run's writable
  folders (``cwd``, ``HOME``, ``TMPDIR``), ``.env`` files hidden, and a ``/proc`` that shows only
  the sandbox's own processes.
- View: an allow-list. The system's folders (``/usr``, ``/etc``, ...) are seen whole; every other
  top-level folder is empty but for the paths the run needs (its copy, its environment and
  interpreter, its writable folders), so the host's Unix sockets, fixgraph's cache, runs and
  predictions, and other checkouts are out of sight wherever they are.
- Lifetime: the jail is PID 1, so when the command ends or is killed every process it left
  (``setsid`` daemons too) dies; when fixgraph itself dies, the kernel's parent-death signal
  takes the sandbox down, and a watchdog outside it removes the scratch folder given to
  ``prepare_workdir``.
- Limits: CPU time, address space and no core files via ``resource.setrlimit``; a wall-clock
  timeout.
- Output: bytes, decoded as UTF-8 with replacement, so non-UTF-8 output never raises; the run's
  known secrets (``fixgraph.redaction``) are masked in it and in the files it writes for us.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fixgraph import phases, redaction
from fixgraph.sandbox import indexproxy

# Variables a test process may inherit from the parent; everything else is dropped.
_INHERITED = ("TZ", "TERM", "SOURCE_DATE_EPOCH")
SANDBOX_USER = "fixgraph"
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# Lengthy output is cut to its last part: parsers need the summary, which comes last.
MAX_OUTPUT_BYTES = 8_000_000


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    cpu_s: int
    memory_mb: int
    network_isolation: bool = True
    max_procs: int = 256  # processes of the sandbox user at once (RLIMIT_NPROC)
    # With network_isolation: the package index reachable through fixgraph's proxy (build steps).
    index_access: bool = False


@dataclass
class Completed:
    returncode: int
    output: str
    seconds: float
    timed_out: bool
    isolated_network: bool


def scrubbed_env(home: Path, extra: Mapping[str, str] | None = None,
                 path_prefix: Sequence[str] = ()) -> dict[str, str]:
    """A minimal environment: no secrets can leak because nothing is copied by default."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.update(
        PATH=":".join([*path_prefix, _SYSTEM_PATH]),
        HOME=str(home),
        TMPDIR=str(home),
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONIOENCODING="utf-8:backslashreplace",
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        GIT_TERMINAL_PROMPT="0",
        NO_COLOR="1",
        # The sandbox's uid has no account: getpass.getuser() reads these first. Without them
        # django's createsuperuser tests found no default username and re-prompted forever
        # (auth_tests.test_management ran to its 900 s limit; as root, the harness's, it passes).
        USER=SANDBOX_USER,
        LOGNAME=SANDBOX_USER,
    )
    env.update(extra or {})
    return env


# The uid/gid test processes run as when fixgraph runs as root: no account, no files, no groups.
SANDBOX_UID = SANDBOX_GID = 59_999
JAIL = Path(__file__).with_name("jail.py")
# Files a test process writes for fixgraph to read (named by these variables): made writable for
# the sandbox user, and redacted before fixgraph reads them.
OUTPUT_FILE_VARS = ("FIXGRAPH_CRASH_FILE", "FIXGRAPH_STATUS_FILE", "FIXGRAPH_SERVICES_FILE")
WRITABLE_DIR_VARS = ("HOME", "TMPDIR", "FIXGRAPH_TRACE_DIR")

_protected: set[Path] = set()
_covered: set[Path] = set()
_watchdogs: list[subprocess.Popen[bytes]] = []
_registry_lock = threading.Lock()


def protect(path: Path) -> None:
    """Hide ``path`` (a folder: the repository cache) from every later test process."""
    with _registry_lock:
        _protected.add(path.resolve())


def cover(path: Path) -> None:
    """Show ``path`` (fixgraph's cache, runs or predictions folder) to later test processes empty
    but for the paths a run keeps (its environment in the cache). Resolved first: a link into a
    folder the sandbox shows is covered where it leads."""
    with _registry_lock:
        _covered.add(path.resolve())


def prepare_workdir(*paths: Path) -> None:
    """Declare ``paths`` a run's scratch folders: removed by one watchdog process if fixgraph is
    killed before it removes them itself."""
    if not paths:
        return
    with _registry_lock:
        for old in [w for w in _watchdogs if w.poll() is not None]:
            _watchdogs.remove(old)  # reaped
        with contextlib.suppress(OSError):
            _watchdogs.append(subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG, *(str(p.resolve()) for p in paths)],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True))


# Outlives fixgraph on purpose: its stdin is a pipe only fixgraph writes to. EOF while a folder
# still exists means fixgraph died (killed: no ``finally`` ran); the sandbox is going down with it
# (parent-death signals), and the folders go too. Folders fixgraph removed itself end it.
_WATCHDOG = """
import os, select, shutil, sys, time
paths = sys.argv[1:]
while any(os.path.exists(p) for p in paths):
    ready, _, _ = select.select([0], [], [], 0.5)
    if ready and os.read(0, 64) == b"":
        time.sleep(0.5)
        for _ in range(3):
            for p in paths:
                shutil.rmtree(p, ignore_errors=True)
            if not any(os.path.exists(p) for p in paths):
                break
            time.sleep(0.5)
        break
"""


def hidden_files() -> list[str]:
    """Files no test may read: every ``.env`` that python-dotenv could load for fixgraph, that is
    in the current folder, the project's folder, or any folder above them."""
    project = Path(__file__).resolve().parents[2]
    found = set()
    for start in (Path.cwd().resolve(), project):
        for folder in (start, *start.parents):
            candidate = folder / ".env"
            if candidate.is_file():
                found.add(str(candidate))
    return sorted(found)


@functools.cache
def netns_prefix() -> tuple[str, ...] | None:
    """The namespace prefix (``unshare ...``) when this kernel allows it, with a network namespace."""
    return _probe(True)


@functools.cache
def _probe(network: bool) -> tuple[str, ...] | None:
    exe = shutil.which("unshare")
    if exe is None:
        return None
    flags = ["--pid", "--fork", "--kill-child=SIGTERM", "--mount-proc"] + (["--net"] if network else [])
    prefix = (exe, *flags) if os.geteuid() == 0 else (exe, "--map-root-user", *flags)
    # The whole chain once: namespaces, the jail's mounts, the drop of rights (a container may
    # allow the first and refuse the others).
    root = os.geteuid() == 0
    spec = {"mode": "root" if root else "userns", "uid": SANDBOX_UID, "gid": SANDBOX_GID,
            "writable": [], "hide_dirs": [], "hide_files": [], "nproc": 64, "cwd": "/", "loopback": network,
            # the jail's own interpreter, as a run's (pyenv's, in a home folder closed to others)
            "reach": _closed_folders(_needed(["true"], {})) if root else {}}
    try:
        proc = subprocess.run([*prefix, sys.executable, "-I", "-S", str(JAIL), json.dumps(spec), "--", "true"],
                              capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return prefix if proc.returncode == 0 else None


def sandbox_mode() -> str:
    """How test processes run here: "uid" (root drops to SANDBOX_UID), "userns", or "none"."""
    if _probe(False) is None:
        return "none"
    return "uid" if os.geteuid() == 0 else "userns"


def _rlimits(cpu_s: int, memory_mb: int) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for a run: its CPU seconds, its address space, no core file; never
    above the hard limits this process has (the child inherits them and cannot raise them)."""
    mem = int(memory_mb) * 1024 * 1024
    out = []
    for which, soft, hard in ((resource.RLIMIT_CPU, int(cpu_s), int(cpu_s) + 5),
                              (resource.RLIMIT_AS, mem, mem), (resource.RLIMIT_CORE, 0, 0)):
        _, cur_hard = resource.getrlimit(which)
        if cur_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        out.append((which, soft, hard))
    return out


def _limit_child(cpu_s: int, memory_mb: int) -> None:  # pragma: no cover - runs in the child
    for which, soft, hard in _rlimits(cpu_s, memory_mb):
        resource.setrlimit(which, (soft, hard))


_PRLIMIT_FLAGS = {resource.RLIMIT_CPU: "--cpu", resource.RLIMIT_AS: "--as", resource.RLIMIT_CORE: "--core"}


def _behind_prlimit(argv: list[str], env: Mapping[str, str], cpu_s: int, memory_mb: int) -> list[str] | None:
    """``argv`` behind util-linux's ``prlimit``, which sets the run's limits on itself and then
    executes ``argv``; None where there is no ``prlimit`` or ``argv[0]`` is not an executable file
    (Popen then says why not). The limits are not set by a ``preexec_fn``: Python runs that in the
    forked child only after taking its import lock and the ``os.register_at_fork`` hooks' locks
    (logging's) in the parent, and a fixgraph thread importing a module that logs at that moment
    (setuptools through ``importlib.util.find_spec``, in the static phase) waits on logging's lock
    while the fork waits on the import lock: both threads stopped for good, seen in an e2e run
    whose tests start beside the Critic's static phase."""
    exe = shutil.which("prlimit")
    target = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None or not target or not (os.path.isfile(target) and os.access(target, os.X_OK)):
        return None
    flags = [f"{_PRLIMIT_FLAGS[which]}={soft}:{hard}" for which, soft, hard in _rlimits(cpu_s, memory_mb)]
    return [exe, *flags, "--", *argv]


def _user_processes() -> int:
    uid, n = os.getuid(), 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                n += entry.stat().st_uid == uid
    return n


def _closed_folders(paths: Sequence[Path]) -> dict[str, list[str]]:
    """The folders above ``paths`` that refuse others search permission (root's home, a 0700 temp
    dir), each with its children on the way to the paths. The jail covers each such folder with
    an empty one in the run's own mount namespace and brings back only those children: the
    sandbox user reaches pyenv's interpreter in root's home and nothing else of that home, and
    no permission on the machine is changed."""
    found: dict[str, set[str]] = {}
    for path in paths:
        path = normal(path)
        for parent in path.parents:
            with contextlib.suppress(OSError):
                if not parent.stat().st_mode & stat.S_IXOTH:
                    found.setdefault(str(parent), set()).add(path.relative_to(parent).parts[0])
    return {folder: sorted(children) for folder, children in found.items()}


def _needed(cmd: Sequence[str], env: Mapping[str, str]) -> list[Path]:
    """What the sandbox user must reach besides its writable folders: the interpreter (often in a
    home folder: pyenv) and the PATH and PYTHONPATH entries."""
    # Both the path as named and where its links lead: a venv's python is a link into pyenv, and
    # the venv's own folders (a 0700 temp dir, say) must be walkable too.
    found = [normal(sys.executable), Path(sys.executable).resolve(), Path(sys.base_prefix).resolve()]
    exe = shutil.which(cmd[0], path=env.get("PATH")) if cmd else None
    if exe:
        found += [normal(exe), Path(exe).resolve()]
    for var in ("PATH", "PYTHONPATH", "VIRTUAL_ENV"):
        found += [Path(p).resolve() for p in env.get(var, "").split(os.pathsep) if p.startswith("/")]
    return found


def _chown_tree(root: Path, uid: int, gid: int) -> None:
    with contextlib.suppress(OSError):
        os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(dirpath, name), uid, gid)


def _writable(cwd: Path, env: Mapping[str, str], extra: Sequence[Path]) -> list[Path]:
    found = [cwd, *(Path(env[k]) for k in WRITABLE_DIR_VARS if env.get(k)), *extra]
    # Handed to the sandbox user (as root: chowned), so never a folder that holds fixgraph's own
    # files: a HOME=/root from a careless caller must not give the tests root's home.
    keep_out = [Path("/"), Path.home(), Path.cwd(), Path(sys.prefix), Path(sys.base_prefix), *_protected]
    out: list[Path] = []
    for p in found:
        p = p.resolve()
        if not p.is_dir() or p in out or len(p.parts) < 3:
            continue
        if any(k.resolve() == p or k.resolve().is_relative_to(p) for k in keep_out):
            continue
        out.append(p)
    return out


# The port on a build step's own loopback that leads to the index proxy (each step has its own lo).
INDEX_PROXY_PORT = 3128
# Proxy variables a build step gets (and the operator's are not passed on: the step has no other way out).
_PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")
_NO_PROXY_VARS = ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY", "PIP_PROXY")


# What a run sees of the machine whole: the system's programs, libraries and settings. Every other
# top-level folder (homes, /tmp, /run, /var, /srv, /opt, the folders fixgraph's checkout, cache, runs
# and predictions sit in, wherever they are) is covered with an empty one holding only the paths the
# run needs (an allow-list): the host's Unix sockets, fixgraph's cached baselines and other tasks'
# records are not there to reach. The network namespace cuts abstract sockets.
SYSTEM_DIRS = frozenset({"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/dev",
                         "/sys"})


def normal(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute, its folders resolved as the kernel would walk them (``..`` after a
    link included) and its last part kept (a venv's ``python`` link must stay the venv's): every
    path handed to the sandbox goes through here once, so a ``../venv/bin/python`` reaches the
    jail as a path that exists in the run's view."""
    head, name = os.path.split(os.path.join(os.getcwd(), os.fspath(path)))
    if name in ("", ".", ".."):
        return Path(os.path.realpath(os.path.join(head, name)))
    return Path(os.path.realpath(head)) / name


def covered_dirs() -> list[str]:
    """The top-level folders a run sees empty but for what it keeps (links at the top are left: they
    lead into a system folder or into a covered one)."""
    with os.scandir("/") as entries:
        return sorted(e.path for e in entries if e.is_dir(follow_symlinks=False) and e.path not in SYSTEM_DIRS)


def _prefixes(paths: Sequence[Path]) -> list[Path]:
    """An interpreter's installation (``<prefix>/bin/python`` -> ``<prefix>``: its standard library
    and shared libraries), for each path that is one."""
    out = [p.parent.parent for p in paths if p.parent.name == "bin" and p.name.startswith("python")]
    # A venv named by its folder (VIRTUAL_ENV) or its bin (PATH): a build step's ``bash -c "python
    # -m pip install -e ."`` runs its python without naming it.
    out += [p for p in paths if (p / "pyvenv.cfg").is_file()]
    out += [p.parent for p in paths if p.name == "bin" and (p.parent / "pyvenv.cfg").is_file()]
    # A venv's python (a copy, with --copies) loads the base installation's libpython and stdlib.
    return out + [base for p in out if (base := _venv_base(p)) is not None]


def _link_hops(path: Path, limit: int = 16) -> list[Path]:
    """The links the kernel walks from ``path`` to its target, each as it is named: a venv's
    ``python3`` that leads through ``/opt/bin/python3`` (a link in a covered folder) to
    ``/usr/bin/python3.11`` cannot start unless that middle link is there too."""
    hops: list[Path] = []
    current = Path(os.path.abspath(path))
    for _ in range(limit):
        try:
            target = os.readlink(current)
        except OSError:
            break
        current = normal(current.parent / target)
        hops.append(current)
    return hops


def _venv_base(prefix: Path) -> Path | None:
    try:
        cfg = (prefix / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"^home\s*=\s*(/.*?)\s*$", cfg, re.M)
    return Path(m.group(1)).parent if m else None


def _masks(paths: Sequence[Path], env: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The folders of :func:`covered_dirs` and :func:`cover`, and the paths under them a run must keep: ``paths`` and
    every absolute path named in ``env``, as named and resolved, with the installations of the
    interpreters among them; a venv's folder keeps its parent too (a shared env's installed
    checkout sits beside it)."""
    dirs = covered_dirs()
    dirs += sorted((str(p) for p in _covered if p.is_dir() and str(p) not in dirs), key=lambda d: d.count("/"))
    named = [str(p) for p in paths]
    for key, value in env.items():
        named += [v for v in value.split(os.pathsep) if v.startswith("/")]
        if key == "VIRTUAL_ENV" and value.startswith("/"):
            named.append(str(Path(value).parent))
    found = {c for name in named for c in (Path(os.path.abspath(name)), normal(name), Path(name).resolve())}
    found.update(_prefixes(sorted(found)))
    found.update(hop for c in list(found) for hop in _link_hops(c))
    wanted = {str(c) for c in found if c.exists() and any(c.is_relative_to(d) and str(c) != d for d in dirs)}
    keep: list[str] = []
    for path in sorted(wanted):
        if not any(path.startswith(k + "/") for k in keep):
            keep.append(path)
    return dirs, keep


def can_bind(limits: Limits) -> bool:
    """Whether a run with ``limits`` gets a mount namespace of its own, where ``binds`` apply."""
    return _probe(limits.network_isolation) is not None


@phases.timed(phases.SANDBOXED_PROCESS)
def run_isolated(cmd: Sequence[str], cwd: Path, env: Mapping[str, str], limits: Limits,
                 writable: Sequence[Path] = (), binds: Sequence[tuple[Path, Path]] = ()) -> Completed:
    """Run ``cmd``; never raises for the command's own failures, timeouts or bad output.

    The command may write to ``cwd``, ``$HOME``, ``$TMPDIR`` and ``writable``; nothing else. Each
    ``(source, target)`` of ``binds`` shows ``source`` at ``target`` to this command alone (read
    only); a caller asks ``can_bind`` first, since without a sandbox nothing is bound.

    With ``limits.index_access`` (and a network namespace), the command reaches the package index
    through fixgraph's proxy (its ``https_proxy``) and nothing else beyond its own loopback."""
    prefix = _probe(limits.network_isolation)
    if prefix is None:
        return _run(list(cmd), cwd, env, limits, isolated=False)
    if not (limits.index_access and limits.network_isolation):
        return _run_in(prefix, cmd, cwd, env, limits, writable, binds, None)
    with indexproxy.serving() as proxy:
        url = f"http://127.0.0.1:{INDEX_PROXY_PORT}"
        env = {**{k: v for k, v in env.items() if k not in _NO_PROXY_VARS}, **dict.fromkeys(_PROXY_VARS, url)}
        done = _run_in(prefix, cmd, cwd, env, limits, writable, binds, proxy.path)
    if proxy.refused:
        done.output += ("\n[fixgraph] the build step asked for more than the package index; refused: "
                        + ", ".join(sorted(set(proxy.refused))[:10]) + "\n")
    return done


def _run_in(prefix: tuple[str, ...], cmd: Sequence[str], cwd: Path, env: Mapping[str, str], limits: Limits,
            writable: Sequence[Path], binds: Sequence[tuple[Path, Path]], index_socket: Path | None) -> Completed:
    """:func:`run_isolated` in the sandbox ``prefix`` names; ``index_socket``: the index proxy's."""
    root = os.geteuid() == 0
    cwd, writable = normal(cwd), [normal(p) for p in writable]
    if cmd and os.sep in cmd[0]:
        cmd = [str(normal(cmd[0])), *cmd[1:]]
    dirs = _writable(cwd, env, writable)
    outputs = [Path(env[k]) for k in OUTPUT_FILE_VARS if env.get(k)]
    spec = {
        "mode": "root" if root else "userns", "uid": SANDBOX_UID, "gid": SANDBOX_GID,
        "writable": [str(p) for p in dirs] + [str(p) for p in outputs],
        "hide_dirs": sorted(str(p) for p in _protected), "hide_files": hidden_files(),
        "nproc": limits.max_procs if root else _user_processes() + limits.max_procs,
        "cwd": str(cwd), "binds": [[str(a.resolve()), str(b.resolve())] for a, b in binds],
        # the run's own network namespace: its loopback up (the host's is another namespace's)
        "loopback": limits.network_isolation,
        # As root the command is another uid: what it must reach, through folders closed to others.
        "reach": _closed_folders([*_needed(cmd, env), *dirs, *outputs]) if root else {},
    }
    if index_socket is not None:
        spec["forward"] = {"port": INDEX_PROXY_PORT, "socket": str(index_socket)}
    try:
        if root:
            for p in dirs:
                _chown_tree(p, SANDBOX_UID, SANDBOX_GID)
            for f in outputs:
                f.touch()
                os.chown(f, SANDBOX_UID, SANDBOX_GID)
        else:
            for f in outputs:
                f.touch()
        # Once the output files exist: what is kept must be there to be bound back.
        spec["mask_dirs"], spec["keep"] = _masks(
            [*_needed(cmd, env), *dirs, *outputs, cwd, *(p for pair in binds for p in pair),
             *([index_socket.parent] if index_socket else [])], env)
        # setpriv: unshare dies with this thread (fixgraph killed), and the jail then with unshare.
        argv = [*_pdeathsig(), *prefix, sys.executable, "-I", "-S", str(JAIL), json.dumps(spec), "--", *cmd]
        done = _run(argv, cwd, env, limits, isolated=limits.network_isolation)
    finally:
        if root:  # hand back: what fixgraph keeps (a venv) must not stay the sandbox user's
            for p in dirs:
                if p.exists():
                    _chown_tree(p, os.geteuid(), os.getegid())
            for f in outputs:
                with contextlib.suppress(OSError):
                    os.lchown(f, os.geteuid(), os.getegid())
    for f in outputs:
        _redact_file(f)
    return done


@functools.cache
def _pdeathsig() -> tuple[str, ...]:
    exe = shutil.which("setpriv")
    return (exe, "--pdeathsig", "KILL", "--") if exe else ()


def _redact_file(path: Path) -> None:
    with contextlib.suppress(OSError):
        if path.is_file() and not path.is_symlink():
            text = path.read_text(encoding="utf-8", errors="replace")
            clean = redaction.redact(text)
            if clean != text:
                path.write_text(clean, encoding="utf-8")


def _run(argv: list[str], cwd: Path, env: Mapping[str, str], limits: Limits, isolated: bool) -> Completed:
    start = time.monotonic()
    timed_out = False
    with tempfile.TemporaryFile() as sink:
        limited = _behind_prlimit(argv, env, limits.cpu_s, limits.memory_mb)
        try:
            proc = subprocess.Popen(
                limited or argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=sink,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=None if limited else functools.partial(_limit_child, limits.cpu_s, limits.memory_mb),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return Completed(127, f"cannot start {argv[0]}: {exc}", 0.0, False, isolated)
        try:
            rc = proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            rc = proc.wait()
        finally:
            # Tests may leave daemons behind in the group; they go too.
            _kill_group(proc)
        size = sink.seek(0, os.SEEK_END)
        sink.seek(max(0, size - MAX_OUTPUT_BYTES))
        data = sink.read()
    text = redaction.redact(data.decode("utf-8", errors="replace"))
    if timed_out:
        text += f"\n[fixgraph] killed after the {limits.timeout_s:g}s wall-clock limit\n"
    return Completed(rc, text, time.monotonic() - start, timed_out, isolated)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
