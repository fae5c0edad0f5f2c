"""Cython's own cache of generated C, for a compiled repository's install (``scoring.execution.compiled``).

Copied into the env as ``<env>/cyhook/sitecustomize.py``, which the install's steps find first on
``PYTHONPATH``, and run by the env's own Python (3.6 and later: nothing newer than 3.6's syntax). When
the build imports ``Cython.Build.Dependencies``, its ``cythonize()`` is wrapped to pass
``cache=$FIXGRAPH_CYTHON_CACHE`` unless the caller passed one (or ``force``). Cython then looks each
``.pyx`` up by its own fingerprint (``DependencyTree.transitive_fingerprint``: Cython's version, the
bytes of the ``.pyx`` and of every ``.pxd``/``.pxi`` it cimports or includes, transitively, the
module's language and every compilation option, the compiler directives and ``compile_time_env``
among them) and copies the C it generated for the same fingerprint before, instead of generating it
again. A later commit whose ``.pyx`` and dependencies are the same bytes so costs a copy, and one that
changed is generated as always: the output is what Cython would write from those inputs.

Without this, scikit-learn's build regenerates a module whenever its ``.c`` is older than its inputs
(every module of a fresh checkout), and ``compiled.reuse_generated``'s copy of the previous checkout's
output holds only while every ``.pxd`` and the build helpers are unchanged: between two Lite base
commits of one version they rarely all are.
"""

import os
import sys

_ENV = "FIXGRAPH_CYTHON_CACHE"
_STATSLOG = "FIXGRAPH_CYTHON_STATSLOG"
_MODULE = "Cython.Build.Dependencies"


def _count(word):
    """One line, ``hit`` or ``miss``, in the env's stats log (``eval.build_bench`` counts them)."""
    log = os.environ.get(_STATSLOG, "")
    if log:
        try:
            with open(log, "a") as f:
                f.write(word + "\n")
        except OSError:
            pass


def _wrap(module):
    real, one = getattr(module, "cythonize", None), getattr(module, "cythonize_one", None)
    cache = os.environ.get(_ENV, "")
    if real is None or one is None or not cache or getattr(real, "fixgraph_cache", False):
        return

    def cythonize(*args, **kwargs):
        if not kwargs.get("force") and kwargs.get("cache") is None:
            kwargs["cache"] = cache
        return real(*args, **kwargs)

    def cythonize_one(pyx_file, c_file, fingerprint, *args, **kwargs):
        # What Cython looks for (cythonize_one: "<c file's name>-<fingerprint>" and .gz or .zip).
        stem = os.path.join(cache, f"{os.path.basename(c_file)}-{fingerprint}")
        found = bool(fingerprint) and any(os.path.exists(stem + ext) for ext in (".gz", ".zip"))
        _count("hit" if found else "miss")
        return one(pyx_file, c_file, fingerprint, *args, **kwargs)

    cythonize.__doc__ = real.__doc__
    cythonize.fixgraph_cache = True
    module.cythonize = cythonize
    module.cythonize_one = cythonize_one  # looked up by name at each call, in worker processes too


class _Finder:
    """Finds nothing itself: the spec of ``Cython.Build.Dependencies``, whose loading then ends by
    wrapping ``cythonize()``."""

    def find_spec(self, name, path=None, target=None):
        if name != _MODULE:
            return None
        import importlib.util

        sys.meta_path.remove(self)  # once: the module is loaded once per process
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if loader is None or run is None:
            return spec

        def exec_module(module):
            run(module)
            _wrap(module)

        loader.exec_module = exec_module
        return spec


if os.environ.get(_ENV):
    sys.meta_path.insert(0, _Finder())
