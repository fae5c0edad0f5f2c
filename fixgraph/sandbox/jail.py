"""The first process inside a test sandbox's namespaces (run as ``python -I -S jail.py SPEC -- CMD``).

``unshare`` has already given it new mount, PID (it is PID 1) and usually network namespaces, as
real root or as root of a new user namespace. Before the test command runs it:

- brings up the loopback interface of its own network namespace (``loopback``): a test may serve
  and connect on ``127.0.0.1``/``::1`` there, as in the harness's containers, and still reaches
  nothing else, the host's loopback included (another namespace's); when that fails the run goes
  on with loopback down and a note says so;
- for a build step (``forward``), listens on a port of that loopback and forwards each connection to
  fixgraph's index proxy, a Unix socket outside (``fixgraph/sandbox/indexproxy.py``): the step's
  ``https_proxy`` names the port, and the proxy opens tunnels to the package index only;
- shows the machine through an allow-list: every top-level folder but the system's (``/usr``,
  ``/etc``, ...), and fixgraph's own cache, runs and predictions, is covered with an empty one
  holding only the paths the command needs (``mask_dirs``, ``keep``), so no host Unix socket and
  none of fixgraph's files are there to reach;
- reaches what the command needs through folders closed to others (root's home) without opening
  them: each is covered by an empty folder holding only the needed children (``reach``);
- binds the run's working copy over the shared environment's installed source (``binds``), so
  the package the environment imports is the run's, for this run only;
- hides what tests must not read (the repository cache, ``.env`` files) under empty mounts, makes
  every mount read-only except the run's own writable folders, and gives ``/dev/shm`` a private
  tmpfs, so a test can write only to its copy and its temp folder;
- forks the command with fewer rights: as real root, a dedicated unprivileged uid with no groups
  and no capabilities; in a user namespace, a nested one where the command is not root (the
  mounts above are then locked: it cannot unmount them); both with no_new_privs and a process
  count limit;
- stays as PID 1: it reaps orphans, and when the command ends (or unshare dies: a timeout, or
  fixgraph killed) it ends, which takes every remaining process of the namespace (a ``setsid``
  daemon included) with it.

Only the standard library: it runs before any site-packages, with ``-I -S``.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Callable

_libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_BIND, MS_REC = 1, 2, 4, 4096, 16384
CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
_SYS_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}.get(os.uname().machine)
AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 1
INNER_ID = 1000  # the command's uid/gid inside the nested user namespace
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ_FLAGS = "16sH22x"  # struct ifreq: the name, then ifr_flags at the start of a 24-byte union


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    rc = _libc.mount(src.encode(), target.encode(), fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                     data.encode() if data else None)
    _check(rc, f"mount {target}")


def _set_read_only(path: str, read_only: bool, recursive: bool) -> bool:
    if _SYS_MOUNT_SETATTR is None:
        return False
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0) if read_only else _MountAttr(0, MOUNT_ATTR_RDONLY, 0, 0)
    rc = _libc.syscall(_SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), AT_RECURSIVE if recursive else 0,
                       ctypes.byref(attr), ctypes.sizeof(attr))
    return rc == 0


def _reach(folders: dict) -> None:
    """Cover each folder closed to others with an empty one (root's, search-only) holding just the
    children the command needs, bound back from the real ones: shallow folders first, so a closed
    folder inside a closed folder is reached through the first one's bind."""
    for folder in sorted(folders, key=lambda f: f.count("/")):
        fds = {}
        for child in folders[folder]:
            try:
                fds[child] = os.open(os.path.join(folder, child), os.O_PATH)
            except OSError:
                continue
        _mount("none", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0711")
        for child, fd in fds.items():
            target = os.path.join(folder, child)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            os.close(fd)


def _mask(dirs: list, keep: list) -> None:
    """Cover each of ``dirs`` (every top-level folder but the system's, and fixgraph's own cache,
    runs and predictions) with an empty tmpfs, then bind back only the paths of ``keep`` under it
    (the run's own folders, its environment and interpreter), each at its place: the host's
    sockets there (a database's, Ray's, a desktop bus) cannot be reached. Folders made on the way
    let others pass but not list (0711). Shallow folders first."""
    for folder in dirs:
        if not os.path.isdir(folder):
            continue  # inside a folder covered before it, and kept by nothing: already out of sight
        mine = [k for k in keep if k.startswith(folder.rstrip("/") + "/")]
        fds = {}
        for path in mine:
            try:
                fds[path] = os.open(path, os.O_PATH)
            except OSError:
                continue
        _mount("none", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        for path, fd in fds.items():
            rel = path[len(folder.rstrip("/")) + 1:].split("/")
            at = folder.rstrip("/")
            for part in rel[:-1]:
                at = f"{at}/{part}"
                if not os.path.isdir(at):
                    os.mkdir(at, 0o711)
            target = f"{at}/{rel[-1]}"
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target, 0o711)
            else:
                os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            os.close(fd)


def prepare_mounts(spec: dict) -> list[str]:
    notes = []
    _mask(spec.get("mask_dirs", []), spec.get("keep", []))
    _reach(spec.get("reach", {}))
    for source, target in spec.get("binds", []):
        # This run's view only: a shared environment's installed source shows the run's own copy.
        if os.path.isdir(source) and os.path.isdir(target):
            _mount(source, target, None, MS_BIND | MS_REC)
    for path in spec["hide_files"]:
        if os.path.isfile(path):
            _mount("/dev/null", path, None, MS_BIND)
    for path in spec["hide_dirs"]:
        if os.path.isdir(path):
            _mount("none", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    if _set_read_only("/", True, recursive=True):
        # /proc stays as it was: the command's user namespace is set up through it.
        _set_read_only("/proc", False, recursive=False)
        for path in spec["writable"]:
            if os.path.exists(path):  # a bind mount of its own, made writable again
                _mount(path, path, None, MS_BIND)
                if not _set_read_only(path, False, recursive=False):
                    raise OSError(ctypes.get_errno(), f"cannot make {path} writable")
    else:
        notes.append("read-only remount unavailable")
    if os.path.isdir("/dev/shm"):
        _mount("none", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777")
    return notes


def loopback_up() -> str:
    """Bring up ``lo`` in the network namespace this process is in (the sandbox's own: unshare made
    it, and its 127.0.0.1/::1 lead nowhere but back into it); "" or why not. Needs CAP_NET_ADMIN
    over that namespace, which the jail has as its root (real, or of the user namespace)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            got = fcntl.ioctl(sock, SIOCGIFFLAGS, struct.pack(_IFREQ_FLAGS, b"lo", 0))
            flags = struct.unpack(_IFREQ_FLAGS, got)[1]
            if not flags & IFF_UP:
                fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack(_IFREQ_FLAGS, b"lo", flags | IFF_UP))
    except OSError as exc:
        return f"loopback left down: {exc}"
    return ""


def listen_forward(port: int) -> socket.socket:
    """The loopback port a build step's ``https_proxy`` names, bound before the step starts."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(64)
    return srv


def _splice(a: socket.socket, b: socket.socket) -> None:
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    for sock in (a, b):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _forward_one(conn: socket.socket, target: str) -> None:
    out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        out.connect(target)
    except OSError:
        conn.close()
        out.close()
        return
    threading.Thread(target=_splice, args=(out, conn), daemon=True).start()
    _splice(conn, out)


def accept_each(srv: socket.socket, handle: Callable[[socket.socket], object]) -> None:
    """``handle(conn)`` for each connection to the listening ``srv``, on a thread, until it closes."""
    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            handle(conn)

    threading.Thread(target=accept, daemon=True).start()


def forward(srv: socket.socket, target: str) -> None:
    """Each connection to ``srv`` joined to the Unix socket ``target``, on threads of PID 1 (the
    step reaches only what the proxy behind ``target`` allows; the socket's folder is fixgraph's)."""
    accept_each(srv, lambda conn: threading.Thread(target=_forward_one, args=(conn, target), daemon=True).start())


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def drop_privileges(spec: dict) -> None:  # runs in the command's process, before exec
    nproc = int(spec["nproc"])
    resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    if spec["mode"] == "root":
        os.setgroups([])
        os.setresgid(spec["gid"], spec["gid"], spec["gid"])
        os.setresuid(spec["uid"], spec["uid"], spec["uid"])  # no SECBIT_KEEP_CAPS: every capability goes
    else:
        # A nested user namespace where the command is not root: it has no capability over the
        # mount namespace (it cannot unmount what hides the cache and .env) nor anywhere else.
        _check(_libc.unshare(CLONE_NEWUSER), "unshare(CLONE_NEWUSER)")
        _write("/proc/self/uid_map", f"{INNER_ID} 0 1\n")
        _write("/proc/self/setgroups", "deny\n")
        _write("/proc/self/gid_map", f"{INNER_ID} 0 1\n")
        os.setresgid(INNER_ID, INNER_ID, INNER_ID)
        os.setresuid(INNER_ID, INNER_ID, INNER_ID)
    # A change of credentials clears the parent-death signal; PID 1 dying must still end us.
    _check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")


def _end(code: int) -> None:
    # PID 1 may signal every process in its namespace: none outlives the run.
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os._exit(code)


def main(argv: list[str]) -> None:
    if os.getpid() != 1:  # kill(-1) below is only safe inside our own PID namespace
        print("[fixgraph] sandbox: not PID 1 of a new PID namespace", file=sys.stderr, flush=True)
        os._exit(125)
    spec = json.loads(argv[1])
    cmd = argv[3:]
    try:
        notes = prepare_mounts(spec)
    except OSError as exc:
        print(f"[fixgraph] sandbox setup failed: {exc}", file=sys.stderr, flush=True)
        os._exit(125)
    if spec.get("loopback"):  # only in a network namespace of its own: never the host's lo
        notes += [note] if (note := loopback_up()) else []
    for note in notes:
        print(f"[fixgraph] sandbox: {note}", file=sys.stderr, flush=True)
    relay = None
    if spec.get("forward") and spec.get("loopback"):
        try:
            relay = listen_forward(int(spec["forward"]["port"]))
        except OSError as exc:
            print(f"[fixgraph] sandbox: the package index is unreachable: {exc}", file=sys.stderr, flush=True)
    child = os.fork()
    if child == 0:
        try:
            drop_privileges(spec)
            os.chdir(spec["cwd"])
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            print(f"[fixgraph] cannot start {cmd[0]}: {exc}", file=sys.stderr, flush=True)
        os._exit(127)
    if relay is not None:
        forward(relay, spec["forward"]["socket"])
    # unshare died (a timeout, or fixgraph itself died): everything goes.
    signal.signal(signal.SIGTERM, lambda signum, _frame: _end(128 + signum))
    signal.signal(signal.SIGHUP, lambda signum, _frame: _end(128 + signum))
    while True:
        try:
            pid, status = os.waitpid(-1, 0)  # reaps orphans too: PID 1's duty
        except ChildProcessError:
            _end(0)
            return
        if pid == child:
            _end(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


if __name__ == "__main__":
    main(sys.argv)
