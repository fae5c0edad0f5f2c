"""A cache of linked extension modules, run in place of the compiler for each link of a build.

A later base commit's install compiles most translation units from ccache, but every extension is
linked again, and matplotlib links with ``-flto``: the link is where gcc generates the code, the
largest part of a warm install. This program stands in for ``gcc``/``g++``/``cc``/``c++`` (a
shell wrapper of the same name, first on the build's PATH, sends every compile, preprocess and
dependency run straight to ccache, and only a link here). A link of a shared object is reused when
it would read the same bytes as one linked before:

- the key: the link arguments in order, each input file given by path (objects, archives, linker
  scripts) replaced by the sha256 of its bytes, the output by its file name alone (setuptools
  builds in a temporary folder of another name at every install); the working folder; the
  compiler driver and linker (path, size, mtime: ccache's own check); the variables gcc's link reads;
- the manifest, kept with the linked file: every other file the linker opened (``-Wl,--trace``:
  the libraries ``-l`` found, libstdc++, libc, crt objects) and the sha256 of its bytes at that
  link. A hit needs each of them to be the same bytes now.

Anything else (a changed object, library, argument, toolchain; a link that is not ``-shared``; a
cache that cannot be read) links for real and stores the result. A hit copies the stored file to
the output (a new file, renamed into place). Entries live in ``FIXGRAPH_LINK_CACHE`` (the env's
folder), oldest dropped beyond :data:`MAX_BYTES`; each link appends ``link_hit`` or ``link_miss``
to ``FIXGRAPH_LINK_STATSLOG`` when set.

Stdlib only, and Python 3.6 syntax: it runs with the env's own interpreter (scikit-learn 0.20's is
3.6), ``-I -S``.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

VERSION = "1"
MAX_BYTES = 2 * 1024 ** 3
# gcc's link reads these besides its arguments
_LINK_VARS = ("LIBRARY_PATH", "COMPILER_PATH", "GCC_EXEC_PREFIX", "LD_RUN_PATH", "SOURCE_DATE_EPOCH")
# arguments that make the call something else than a link
_NOT_A_LINK = {"-c", "-S", "-E", "-M", "-MM", "-v", "--version", "-###", "-dumpversion", "-dumpfullversion",
               "-dumpmachine"}
_CCACHE_COMPILERS = "/usr/lib/ccache"


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _stat_id(path):
    real = os.path.realpath(path)
    st = os.stat(real)
    return [real, st.st_size, st.st_mtime_ns]


def _real_compiler(name):
    """The compiler ``name`` as the build would find it without this wrapper and ccache."""
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    skip = {os.path.realpath(here), os.path.realpath(_CCACHE_COMPILERS)}
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and os.path.realpath(d) not in skip]
    return shutil.which(name, path=os.pathsep.join(dirs))


def link_key(name, args, cwd, env):
    """The key of a link, or None when it is not one this cache takes (not ``-shared``, no ``-o``, a
    response file ``@file``, whose arguments it would not see)."""
    if ("-shared" not in args or "-o" not in args or any(a in _NOT_A_LINK for a in args)
            or any(a.startswith("@") for a in args)):
        return None
    real = _real_compiler(name)
    ld = shutil.which("ld")
    if real is None or ld is None:
        return None
    parts = [VERSION, name, cwd, _stat_id(real), _stat_id(ld), [[v, env.get(v)] for v in _LINK_VARS]]
    it = iter(args)
    for arg in it:
        if arg == "-o":
            parts.append(["-o", os.path.basename(next(it, ""))])
        elif not arg.startswith("-") and os.path.isfile(arg):
            parts.append(["file", _sha256(arg)])
        elif arg.startswith("-Wl,") or (arg.startswith("-") and "=" in arg):
            # an option may name a file (a version script, -specs=): its bytes as well as its path
            parts.append([arg, [["file", _sha256(p)] for p in re.split(r"[,=]", arg) if os.path.isfile(p)]])
        else:
            parts.append(arg)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _traced_files(stdout, inputs):
    """Files ``ld --trace`` says it opened that still exist (not gcc's temporaries), less ``inputs``."""
    found = set()
    for line in stdout.splitlines():
        line = line.strip()
        for cand in re.findall(r"\(([^()]+)\)", line) or [line]:
            cand = cand.strip()
            if cand.startswith("/") or os.sep in cand:
                path = os.path.realpath(cand)
                if os.path.isfile(path) and path not in inputs:
                    found.add(path)
    return sorted(found)


def _manifest_holds(manifest):
    try:
        return all(_sha256(path) == digest for path, digest in manifest.items())
    except OSError:
        return False


def _log(result):
    statslog = os.environ.get("FIXGRAPH_LINK_STATSLOG")
    if statslog:
        with open(statslog, "a") as fh:
            fh.write(result + "\n")


def _place(src, out):
    """``src`` copied to ``out`` as a new file renamed into place (the mode of a linked file)."""
    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".linkcache-")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o755 & ~_umask())
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _trim(cache):
    entries = []
    for entry in os.scandir(cache):
        if entry.name.endswith(".so"):
            st = entry.stat()
            entries.append((st.st_mtime, st.st_size, entry.path))
    total = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if total <= MAX_BYTES:
            break
        for p in (path, path[:-3] + ".json"):
            if os.path.exists(p):
                os.unlink(p)
        total -= size


def main(argv):
    name, args = argv[0], argv[1:]
    cache = os.environ.get("FIXGRAPH_LINK_CACHE", "")
    real = _real_compiler(name)
    if real is None:
        sys.stderr.write(f"fixgraph link cache: no {name} on PATH\n")
        return 127
    try:
        key = link_key(name, args, os.getcwd(), os.environ) if cache else None
    except OSError:
        key = None
    if key is None:
        return subprocess.call([real] + args)
    out = args[args.index("-o") + 1]
    stored, manifest_path = os.path.join(cache, key + ".so"), os.path.join(cache, key + ".json")
    try:
        with open(manifest_path) as fh:
            manifest = json.load(fh)
        if os.path.isfile(stored) and _manifest_holds(manifest):
            _place(stored, out)
            os.utime(stored)  # recently used: kept longest
            _log("link_hit")
            return 0
    except (OSError, ValueError):
        pass
    inputs = {os.path.realpath(a) for a in args if not a.startswith("-") and os.path.isfile(a)}
    done = subprocess.run([real] + args + ["-Wl,--trace"], stdout=subprocess.PIPE)
    if done.returncode != 0 or not os.path.isfile(out):
        sys.stdout.buffer.write(done.stdout)
        return done.returncode or 1
    _log("link_miss")
    try:
        manifest = {p: _sha256(p) for p in _traced_files(done.stdout.decode(errors="replace"), inputs)}
        os.makedirs(cache, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".new-")
        os.close(fd)
        shutil.copyfile(out, tmp)
        os.replace(tmp, stored)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=".new-")
        with os.fdopen(fd, "w") as fh:
            json.dump(manifest, fh)
        os.replace(tmp, manifest_path)
        _trim(cache)
    except OSError as exc:  # the cache is an optimisation: the link itself succeeded
        sys.stderr.write(f"fixgraph link cache: not stored ({exc})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
