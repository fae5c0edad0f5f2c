"""``ast.parse`` serialized across threads.

CPython 3.11 keeps the AST constructor's recursion depth per interpreter, not per thread. When a
garbage collection during the conversion runs a finalizer and the thread switches, another
thread's ``ast.parse`` moves the shared counter and one of them fails with ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905). fault_bench hit it at 8 workers:
one task of 150 failed in the Critic. Workers are threads, and the index, the Critic and pyflakes
all parse in-process, so every ``ast.parse`` goes through one lock. Parsing holds the GIL anyway,
so the lock costs next to nothing. Code that calls ``compile(..., ast.PyCF_ONLY_AST)`` directly
should take :data:`LOCK` itself.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

# Re-entrant: a finalizer run by a collection inside a parse may itself parse.
LOCK = threading.RLock()
_original = ast.parse


def _parse(*args: Any, **kwargs: Any) -> Any:
    with LOCK:
        return _original(*args, **kwargs)


def install() -> None:
    """Route ``ast.parse`` (for every module, pyflakes included) through :data:`LOCK`; idempotent."""
    if ast.parse is _original:
        ast.parse = _parse  # type: ignore[assignment]
