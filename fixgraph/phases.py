"""Where a task's own seconds go: wall-clock time by phase, kept only while a benchmark records.

A phase's seconds are its own: the time of a phase entered inside it is the inner phase's, so the
phases of one thread never add up to more than that thread's time. Work started beside the caller
in a thread of its own (:func:`beside`) is kept apart, as overlapping. With no recorder on (every
run but a benchmark's), :func:`phase` costs one global read.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# The phases whose seconds are a sandboxed process's own (the repository's tests, the code),
# named where they are timed and where a benchmark takes them out of the Critic's own seconds.
SANDBOXED_PROCESS = "sandboxed process"
WAITING_ON_PATCHED_RUN = "waiting on the patched run beside"


class Recorder:
    """Seconds and counts per phase name; ``overlapped``: what ran beside the caller meanwhile."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.overlapped: dict[str, float] = defaultdict(float)
        self._lock = threading.Lock()

    def add(self, name: str, seconds: float, *, overlapped: bool, entered: bool) -> None:
        with self._lock:
            (self.overlapped if overlapped else self.seconds)[name] += seconds
            if entered and not overlapped:
                self.counts[name] += 1

    def total(self) -> float:
        return sum(self.seconds.values())


_recorder: Recorder | None = None
_local = threading.local()


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record phases (every thread's) until the block ends; one recording at a time."""
    global _recorder
    rec = Recorder()
    _recorder = rec
    try:
        yield rec
    finally:
        _recorder = None


def _stack() -> list[list[float | str]]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as ``name``, pausing the phase it is entered from."""
    rec = _recorder
    if rec is None:
        yield
        return
    stack, now = _stack(), time.monotonic()
    side = bool(getattr(_local, "beside", False))
    if stack:  # the outer phase's own time stops here and resumes when this one ends
        rec.add(str(stack[-1][0]), now - float(stack[-1][1]), overlapped=side, entered=False)
    stack.append([name, now])
    try:
        yield
    finally:
        now = time.monotonic()
        rec.add(name, now - float(stack.pop()[1]), overlapped=side, entered=True)
        if stack:
            stack[-1][1] = now


def timed(name: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """:func:`phase` around every call of the decorated function."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        def inner(*args: P.args, **kwargs: P.kwargs) -> R:
            with phase(name):
                return fn(*args, **kwargs)

        inner.__name__, inner.__qualname__, inner.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
        inner.__wrapped__ = fn  # type: ignore[attr-defined]
        return inner

    return wrap


@contextlib.contextmanager
def beside() -> Iterator[None]:
    """Mark this thread's phases as overlapping the caller's (a run started in a thread beside it)."""
    _local.beside = True
    try:
        yield
    finally:
        _local.beside = False
