"""A loopback mirror of real interpreters for uv, made from the CPython installs of this machine.

uv installs python-build-standalone's ``install_only`` archives: ``python/bin/pythonX.Y`` with
libpython linked into it, ``python/lib/pythonX.Y``, and a ``_sysconfigdata_`` whose paths start
with the ``/install`` placeholder uv rewrites to where it unpacked. A pyenv build is not that: its
``bin/pythonX.Y`` loads ``libpythonX.Y.so`` through an absolute RUNPATH into pyenv's folder, so a
moved copy still runs only while pyenv's folder is there (and a ``venv --copies`` of it the same).
:func:`pack` therefore relinks ``bin/pythonX.Y`` from the build's own ``python.o`` and static
``libpythonX.Y.a`` (both in ``lib/pythonX.Y/config-*``), as python-build-standalone links it on
Linux, and writes the placeholder into the sysconfig data; the archive then runs wherever uv puts
it, with pyenv's folder gone.

:class:`PythonMirror` serves the archives on 127.0.0.1 and writes the downloads list uv reads
(``UV_PYTHON_DOWNLOADS_JSON_URL``), each entry with its archive's sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

# Left out of the archive: the test suite (a third of an install) and bytecode, which the
# interpreter writes again; scripts whose shebang names pyenv's folder; the static library the
# relinked binary already holds.
_SKIP_DIRS = {"__pycache__"}
_SKIP_BIN = re.compile(r"-config$|-gdb\.py$|^(2to3|idle|pip|pydoc|easy_install)")


@dataclass(frozen=True)
class Archive:
    path: Path
    version: tuple[int, int, int]
    sha256: str

    @property
    def xy(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    @property
    def key(self) -> str:
        return f"cpython-{'.'.join(map(str, self.version))}-linux-x86_64-gnu"


class PackError(Exception):
    """The install cannot be packed (no static libpython, no compiler): one line."""


def installs(root: Path) -> dict[str, Path]:
    """X.Y -> install prefix, for a pyenv-style folder of installs (``<root>/versions/X.Y.Z``)."""
    found: dict[str, Path] = {}
    for prefix in sorted((root / "versions").glob("[0-9]*.*.*"), key=lambda p: _numbers(p.name)):
        m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)", prefix.name)
        if m and (prefix / "bin" / f"python{m.group(1)}.{m.group(2)}").is_file():
            found[f"{m.group(1)}.{m.group(2)}"] = prefix  # the newest patch of a minor wins
    return found


def _numbers(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def _config(python: Path) -> dict[str, str]:
    code = ("import json, sys, sysconfig; v = sysconfig.get_config_vars(); print(json.dumps({"
            "'prefix': sys.prefix, 'version': '.'.join(map(str, sys.version_info[:3])), "
            "'shared': str(v.get('Py_ENABLE_SHARED') or 0), 'libpl': v.get('LIBPL') or '', "
            "'library': v.get('LIBRARY') or '', 'libs': ' '.join(str(v.get(k) or '') for k in "
            "('LIBS', 'SYSLIBS', 'LINKFORSHARED')), 'cc': v.get('LINKCC') or 'cc'}))")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise PackError(f"{python} does not run: {proc.stderr.strip()[-200:]}")
    return json.loads(proc.stdout)


def _relink(cfg: dict[str, str], out: Path) -> None:
    """``out``: the interpreter with libpython linked in, so it needs no RUNPATH."""
    libpl = Path(cfg["libpl"])
    obj, lib = libpl / "python.o", libpl / cfg["library"]
    if not (obj.is_file() and lib.is_file()):
        raise PackError(f"{cfg['prefix']} has no static libpython to relink ({lib})")
    # the build's -L/-rpath into its own folder are what must not survive the move
    flags = [f for f in shlex.split(cfg["libs"]) if not f.startswith(("-L", "-Wl,-rpath"))]
    cc = shlex.split(cfg["cc"])[:1] or ["cc"]
    if shutil.which(cc[0]) is None:
        raise PackError(f"relinking {cfg['prefix']}'s python needs a C compiler ({cc[0]}): apt-get install build-essential")
    proc = subprocess.run([*cc, "-o", str(out), str(obj), str(lib), *flags, "-lpthread", "-lutil"],
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise PackError(f"relinking {cfg['prefix']}'s python failed: {proc.stderr.strip()[-300:]}")


def pack(prefix: Path, out_dir: Path) -> Archive:
    """An ``install_only`` archive of the CPython installed at ``prefix``, in ``out_dir`` (reused
    when already there: the name carries the version)."""
    python = next(iter(sorted(prefix.glob("bin/python3.*[0-9]"))), None)
    if python is None:
        raise PackError(f"no bin/python3.X under {prefix}")
    cfg = _config(python)
    version = tuple(int(x) for x in cfg["version"].split("."))
    major, minor, patch = version
    out = out_dir / f"cpython-{major}.{minor}.{patch}-install_only.tar.gz"
    if not out.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            binary = Path(tmp) / "python"
            if cfg["shared"] == "1":
                _relink(cfg, binary)
            else:
                shutil.copy2(python, binary)
            part = Path(tmp) / out.name
            with tarfile.open(part, "w:gz", compresslevel=1) as tar:
                for src, arc in _members(prefix, f"{major}.{minor}"):
                    _add(tar, src, arc, prefix, binary, cfg["prefix"])
            os.replace(part, out)  # a cut pack leaves no archive that looks whole
    digest = hashlib.sha256()
    with out.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return Archive(out, (major, minor, patch), digest.hexdigest())


def _members(prefix: Path, xy: str) -> Iterator[tuple[Path, str]]:
    skip = {prefix / "lib" / f"python{xy}" / "test"}
    for root, dirs, files in os.walk(prefix):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and here / d not in skip)
        for name in [*dirs, *files]:
            path = here / name
            rel = path.relative_to(prefix)
            if rel.parts[0] == "bin" and _SKIP_BIN.search(name):
                continue
            if name.endswith(".a") and name.startswith("libpython"):
                continue
            if path.is_dir() and not path.is_symlink():
                continue  # tar makes the folders of the files it holds
            yield path, f"python/{rel.as_posix()}"


def _add(tar: tarfile.TarFile, src: Path, arc: str, prefix: Path, binary: Path, built_prefix: str) -> None:
    info = tar.gettarinfo(str(src), arc)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if info.isfile() and src.parent == prefix / "bin" and re.fullmatch(r"python\d\.\d+m?", src.name):
        data = binary.read_bytes()
    elif info.isfile() and (src.name.startswith("_sysconfigdata_") or src.suffix == ".pc"):
        # uv rewrites the /install placeholder to the folder it unpacked into
        data = src.read_bytes().replace(built_prefix.encode(), b"/install")
    elif info.isfile() and ".so" in src.name and src.is_relative_to(prefix / "lib"):
        data = _runpath_relative(src.read_bytes(), f"{built_prefix}/lib",
                                 os.path.relpath(prefix / "lib", src.parent))
    else:
        if info.isfile():
            with src.open("rb") as fh:
                tar.addfile(info, fh)
        else:
            tar.addfile(info)
        return
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _runpath_relative(data: bytes, lib_dir: str, rel: str) -> bytes:
    """Before 3.8 every extension module of a shared build links libpython, found through the
    build's absolute RUNPATH: that path becomes ``$ORIGIN/<rel>``, the same folder in the moved
    install. The string is rewritten in place (padded with NULs), so no offset in the file moves."""
    old = b"\0" + lib_dir.encode() + b"\0"
    new = b"\0" + ("$ORIGIN" if rel == "." else f"$ORIGIN/{rel}").encode() + b"\0"
    if not data.startswith(b"\x7fELF") or data.count(old) != 1 or len(new) > len(old):
        return data
    return data.replace(old, new + b"\0" * (len(old) - len(new)))


class PythonMirror:
    """Serves archives on 127.0.0.1 (whole, cut halfway, or not at all); logs the paths asked."""

    def __init__(self, archives: list[Archive]) -> None:
        self.archives = {a.path.name: a for a in archives}
        self.mode = "whole"
        self.asked: list[str] = []
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                mirror.asked.append(self.path)
                archive = mirror.archives.get(self.path.lstrip("/"))
                if archive is None or mirror.mode == "absent":
                    self.send_error(404)
                    return
                size = archive.path.stat().st_size
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                todo = size if mirror.mode == "whole" else size // 2
                with archive.path.open("rb") as fh:
                    while todo > 0:
                        block = fh.read(min(todo, 1 << 20))
                        if not block:
                            break
                        self.wfile.write(block)
                        todo -= len(block)
                if mirror.mode == "cut":
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def downloads_json(self, path: Path, sha256: str | None = None) -> Path:
        """The list uv reads instead of its own: one entry per archive, with its sha256 (or
        ``sha256``, to see a corrupted archive refused)."""
        entries = {}
        for name, a in sorted(self.archives.items()):
            major, minor, patch = a.version
            entries[a.key] = {
                "name": "cpython", "arch": {"family": "x86_64", "variant": None}, "os": "linux", "libc": "gnu",
                "major": major, "minor": minor, "patch": patch, "prerelease": "", "variant": None,
                "build": "20990101", "url": f"{self.url}/{name}", "sha256": sha256 or a.sha256}
        path.write_text(json.dumps(entries, indent=1))
        return path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
