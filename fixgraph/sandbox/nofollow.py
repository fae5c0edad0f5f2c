"""File operations fixgraph does with its own rights on folders that code under test shaped.

A run's fresh copy holds whatever the repository tracks (symlinks included), and an environment's
installed checkout holds whatever its sandboxed install step left. fixgraph then copies, reads
and writes there as itself (as root, often) and outside the sandbox: a path that went through a
symlink would land on, or read from, any file on the machine (a ``.pth`` in fixgraph's own
site-packages, ``/root/.env``). Every function here walks a repository-relative path one
component at a time from a folder fixgraph made, with ``O_NOFOLLOW`` at every step: a symlink
anywhere on the way (or a ``..``) is refused, never followed, and the refusal is reported.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path, PurePosixPath
from typing import BinaryIO

MAX_COPY_BYTES = 200_000_000
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(OSError):
    """A path fixgraph will not follow: one line saying why."""


def parts_of(rel: str) -> list[str]:
    """The components of a repository-relative path; :class:`Refused` for an absolute path, ``..``,
    an empty component or a NUL byte."""
    if not rel or "\0" in rel or rel.startswith("/"):
        raise Refused(f"{rel!r} is not a relative path")
    parts = list(PurePosixPath(rel).parts)
    if any(p in ("..", ".", "") for p in parts) or "/../" in f"/{rel}/":
        raise Refused(f"{rel!r} leaves its folder")
    return parts


def _open_parent(root: Path, parts: list[str], create: bool) -> int:
    """A descriptor of the folder holding ``parts[-1]``, reached from ``root`` without following a
    link (``create``: missing folders are made on the way)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for i, name in enumerate(parts[:-1]):
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                where = "/".join(parts[:i + 1])
                if _is_link(fd, name):
                    raise Refused(f"{where} is a symlink: not followed") from None
                raise Refused(f"{where}: {exc.strerror}") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _open_leaf(dir_fd: int, name: str, flags: int, rel: str, mode: int = 0o644) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError:
        if _is_link(dir_fd, name):
            raise Refused(f"{rel} is a symlink: not followed") from None
        raise


def read_bytes(root: Path, rel: str, limit: int = MAX_COPY_BYTES) -> bytes:
    """The bytes of the regular file at ``rel`` under ``root`` (at most ``limit``); :class:`Refused`
    when a link is on the way or it is no regular file, ``OSError`` when it is missing."""
    with _open_regular(root, rel) as fh:
        return fh.read(limit)


def _open_regular(root: Path, rel: str) -> BinaryIO:
    """The regular file ``rel`` under ``root`` open for reading, reached through no link."""
    parts = parts_of(rel)
    dfd = _open_parent(root, parts, create=False)
    try:
        fd = _open_leaf(dfd, parts[-1], os.O_RDONLY | os.O_NONBLOCK, rel)
    finally:
        os.close(dfd)
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise Refused(f"{rel} is not a regular file")
    return fh


def write_bytes(root: Path, rel: str, data: bytes, *, replace: bool = True, mode: int = 0o644) -> bool:
    """Write ``data`` at ``rel`` under ``root``, making missing folders; never through a link.
    ``replace=False`` leaves an existing regular file as it is (returns False). A link at ``rel``
    or on the way is :class:`Refused`."""
    parts = parts_of(rel)
    dfd = _open_parent(root, parts, create=True)
    try:
        name = parts[-1]
        try:
            fd = _open_leaf(dfd, name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, rel, mode)
        except FileExistsError:
            if _is_link(dfd, name):
                raise Refused(f"{rel} is a symlink: not followed") from None
            if not replace:
                return False
            fd = _open_leaf(dfd, name, os.O_WRONLY | os.O_TRUNC | os.O_NONBLOCK, rel)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise Refused(f"{rel} is not a regular file") from None
    finally:
        os.close(dfd)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    return True


def copy_file(src_root: Path, rel: str, dst_root: Path) -> bool:
    """Copy the regular file ``rel`` of ``src_root`` to the same place under ``dst_root`` (its mode
    and times too), unless something is there already (False). :class:`Refused` when either side
    has a link on the way."""
    parts = parts_of(rel)
    with _open_regular(src_root, rel) as src:
        st = os.fstat(src.fileno())
        ddir = _open_parent(dst_root, parts, create=True)
        try:
            try:
                dfd = _open_leaf(ddir, parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL, rel, stat.S_IMODE(st.st_mode))
            except FileExistsError:
                if _is_link(ddir, parts[-1]):
                    raise Refused(f"{rel} is a symlink in the copy: not followed") from None
                return False
        finally:
            os.close(ddir)
        with os.fdopen(dfd, "wb") as dst:
            left = MAX_COPY_BYTES
            while left > 0 and (chunk := src.read(min(1 << 20, left))):
                dst.write(chunk)
                left -= len(chunk)
            os.fchmod(dst.fileno(), stat.S_IMODE(st.st_mode) & 0o777)
            os.utime(dst.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
    return True


def unlink(root: Path, rel: str) -> None:
    """Remove ``rel`` under ``root`` if it is there (a link itself, never what it leads to)."""
    parts = parts_of(rel)
    try:
        dfd = _open_parent(root, parts, create=False)
    except Refused:
        return
    try:
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            os.unlink(parts[-1], dir_fd=dfd)
    finally:
        os.close(dfd)


def regular_files(root: Path, skip_dirs: frozenset[str] = frozenset(), max_bytes: int = MAX_COPY_BYTES) -> set[str]:
    """Repository-relative paths of the regular files under ``root``: links (to files or folders)
    are neither listed nor entered."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk enters no linked folder
        dirnames[:] = [d for d in dirnames if d not in skip_dirs]
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size <= max_bytes:
                out.add(os.path.relpath(full, root))
    return out
