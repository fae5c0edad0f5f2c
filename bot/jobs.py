"""The job queue: bounded concurrency, one job per issue or pull request at a time.

A trigger for an issue whose job is queued or running, or that was queued less than
``dedupe_window_s`` ago, is dropped: a label added twice quickly, or a webhook redelivered,
gives one job. A revision is never dropped that way (each review is a new request; redeliveries
are caught by delivery id): one that arrives while its PR's job is queued or running is held, and
however many arrive, they make exactly one more round, run when that job ends.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from collections.abc import Callable

from bot.events import Job, Revision

log = logging.getLogger("fixgraph.bot")


class JobQueue:
    def __init__(self, handler: Callable[[Job], None], workers: int = 2, dedupe_window_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        self.handler = handler
        self.dedupe_window_s = dedupe_window_s
        self.clock = clock
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._active: set[str] = set()
        self._last_submit: dict[str, float] = {}
        self._held: dict[str, list[Revision]] = {}
        self.accepted: list[Job] = []
        self._threads = [threading.Thread(target=self._work, name=f"fixgraph-job-{i}", daemon=True)
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def submit(self, trigger: Job) -> bool:
        """Queue ``trigger``; False when a job for the same issue is in flight or was just queued.
        A revision for a PR whose job is in flight is held for the round after it (True)."""
        if isinstance(trigger, Revision):
            return self._submit_revision(trigger)
        now = self.clock()
        with self._lock:
            last = self._last_submit.get(trigger.key)
            if trigger.key in self._active or (last is not None and now - last < self.dedupe_window_s):
                log.info("job for %s already queued or just done; %s trigger dropped", trigger.key, trigger.reason)
                return False
            self._active.add(trigger.key)
            self._last_submit[trigger.key] = now
            # Forget issues whose window has passed, so a long-running bot does not grow this forever.
            for key in [k for k, t in self._last_submit.items() if now - t >= self.dedupe_window_s]:
                del self._last_submit[key]
            self.accepted.append(trigger)
        self._queue.put(trigger)
        log.info("queued %s (%s by %s)", trigger.key, trigger.reason, trigger.sender)
        return True

    def _submit_revision(self, revision: Revision) -> bool:
        with self._lock:
            self.accepted.append(revision)
            if revision.key in self._active:
                self._held.setdefault(revision.key, []).append(revision)
                log.info("%s: a revision is running; this %s is held for one more round", revision.key,
                         revision.reason)
                return True
            self._active.add(revision.key)
        self._queue.put(revision)
        log.info("queued a revision of %s (%s by %s)", revision.key, revision.reason, revision.sender)
        return True

    def _work(self) -> None:
        while True:
            trigger = self._queue.get()
            if trigger is None:
                return
            try:
                self.handler(trigger)
            except Exception as exc:  # one bad job must not kill the worker thread
                log.error("job %s crashed: %s", trigger.key, type(exc).__name__)
            finally:
                with self._changed:
                    held = self._held.pop(trigger.key, [])
                    if held:  # the key stays active: the next round is already queued
                        self._queue.put(dataclasses.replace(held[0], more=tuple(held[1:])))
                    else:
                        self._active.discard(trigger.key)
                    self._changed.notify_all()

    def pending(self) -> int:
        with self._lock:
            return len(self._active)

    def wait_idle(self, timeout: float | None = 60.0) -> bool:
        """Block until no job is queued or running; False on timeout (None: no timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._active:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def close(self, wait: bool = True) -> None:
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for t in self._threads:
                t.join()
