"""What the screen says while a run works: a bar over tasks and, under it, one line per task in
flight with its node, the LLM call in flight, its seconds, the retries and their cause, and the
setting to change when calls time out. With ``--no-progress``: one line per event instead.

Events come from the LLM boundary (``fixgraph.models.llm.CallEvent``) on the workers' threads.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from fixgraph.models.llm import CallEvent


@dataclass
class _InFlight:
    node: str = ""
    call: int = 0
    tries: int = 1
    since: float = field(default_factory=time.monotonic)
    waiting: bool = False  # between calls (tests, analysis)
    retries: dict[str, int] = field(default_factory=dict)
    hint: str = ""


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


def event_line(task: str, ev: CallEvent) -> str:
    """One event, as ``--no-progress`` prints it."""
    head = f"{task} {ev.node} call {ev.call}"
    hint = f" (a slow server needs a longer {ev.hint})" if ev.hint else ""
    if ev.kind == "start":
        return f"{head}: started ({ev.detail})" if ev.detail and ev.detail != "try 1" else f"{head}: started"
    if ev.kind == "done":
        return f"{head}: answered in {ev.seconds:.1f} s"
    if ev.kind == "retry":
        return f"{head}: {ev.cause} after {ev.seconds:.1f} s; {ev.detail}{hint}"
    if ev.kind == "reask":
        return f"{head}: reply {ev.cause} ({ev.detail}); asking again"
    return f"{head}: failed ({ev.cause}) after {ev.seconds:.1f} s{hint}"


class Activity:
    """Tasks in flight and what each is doing; prints event lines when ``lines`` is set."""

    def __init__(self, lines: bool = False, out: TextIO | None = None):
        self.lines = lines
        self.out = out
        self._tasks: dict[str, _InFlight] = {}
        self._lock = threading.Lock()

    def _print(self, text: str) -> None:
        print(f"[{_stamp()}] {text}", file=self.out or sys.stderr, flush=True)

    def hook(self, task: str) -> Callable[[CallEvent], None]:
        return lambda ev: self.event(task, ev)

    def started(self, task: str) -> None:
        with self._lock:
            self._tasks[task] = _InFlight(waiting=True)
        if self.lines:
            self._print(f"{task}: started")

    def event(self, task: str, ev: CallEvent) -> None:
        with self._lock:
            st = self._tasks.setdefault(task, _InFlight())
            if ev.kind == "start":
                if ev.node != st.node or ev.call != st.call:
                    st.node, st.call, st.tries = ev.node, ev.call, 1
                else:
                    st.tries += 1
                st.since, st.waiting = time.monotonic(), False
            elif ev.kind == "retry":
                st.retries[ev.cause] = st.retries.get(ev.cause, 0) + 1
                st.hint = ev.hint or st.hint
            elif ev.kind == "reask":
                st.retries[f"{ev.cause} reply"] = st.retries.get(f"{ev.cause} reply", 0) + 1
            else:  # done, failed
                st.waiting, st.since = True, time.monotonic()
                if ev.hint:
                    st.hint = ev.hint
        if self.lines:
            self._print(event_line(task, ev))

    def finished(self, task: str, record: dict[str, Any]) -> None:
        with self._lock:
            self._tasks.pop(task, None)
        if self.lines:
            self._print(f"{task}: {record.get('status', '?')} in {float(record.get('seconds', 0)):.0f} s "
                        f"({record.get('stop_reason', '')})")

    def rows(self) -> list[str]:
        """One line per task in flight, for the live screen."""
        now = time.monotonic()
        out = []
        with self._lock:
            items = sorted(self._tasks.items())
        for task, st in items:
            if not st.node:
                out.append(f"  {task}: preparing (worktree, index)")
                continue
            secs = now - st.since
            if st.waiting:
                text = f"  {task}: after {st.node} call {st.call}, working {secs:.0f} s (no LLM call in flight)"
            else:
                tries = f", try {st.tries}" if st.tries > 1 else ""
                text = f"  {task}: {st.node} call {st.call}{tries}, {secs:.0f} s"
            if st.retries:
                text += "; retried: " + ", ".join(f"{n}x {c}" for c, n in st.retries.items())
            if st.hint and st.retries.get("timeout"):
                text += f"; calls time out: raise {st.hint}"
            out.append(text)
        return out


class Screen:
    """A progress bar over tasks (done/total, mean fix_score so far, tokens and cost) with the
    tasks in flight under it."""

    def __init__(self, total: int, skipped: int, enabled: bool, activity: Activity):
        self.enabled = enabled and total > 0
        self.total = total
        self.skipped = skipped
        self.activity = activity
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
            from rich.text import Text

            class _WithActivity(Progress):
                def get_renderables(self) -> Iterable[Any]:
                    yield self.make_tasks_table(self.tasks)
                    for row in activity.rows():
                        yield Text(row, overflow="ellipsis", no_wrap=True)

            self.progress = _WithActivity(
                TextColumn("[bold]fixgraph"), BarColumn(), MofNCompleteColumn(),
                TextColumn("fix_score {task.fields[score]}"), TextColumn("{task.fields[tokens]} tok"),
                TextColumn("${task.fields[cost]}"), TimeElapsedColumn(),
                console=Console(stderr=True), refresh_per_second=2,
            )
            self.task = self.progress.add_task("tasks", total=total, completed=skipped,
                                               score="n/a", tokens=0, cost="0.00")

    def __enter__(self) -> Screen:
        if self.enabled:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.progress.stop()

    def update(self, finished: int, mean: float | None, tokens: int, dollars: float) -> None:
        if not self.enabled:
            return
        self.progress.update(self.task, completed=self.skipped + finished,
                             score=f"{mean:.2f}" if mean is not None else "n/a",
                             tokens=tokens, cost=f"{dollars:.2f}")
