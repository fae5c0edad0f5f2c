"""Where a finished task's patch goes: a ``.diff`` writer (EVAL_MODE) or a GitHub PR (the bot).

The PR agent node builds a :class:`Outcome` and hands it to the run's publisher.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from fixgraph.dataset import Task
from fixgraph.records import RunStore
from fixgraph.repo.workspace import Worktree
from fixgraph.state import AttemptRecord, ScoreParts, Usage


@dataclass
class Outcome:
    """What the pipeline concluded for one task, as the publisher needs it."""

    task: Task
    patch: str
    explanation: str
    verdict: str
    score: ScoreParts
    attempts: list[AttemptRecord]
    plan: dict[str, Any]
    files_read: list[str]
    usage: Usage
    stop_reason: str
    guard_warnings: list[dict[str, Any]] = field(default_factory=list)
    worktree: Worktree | None = None
    # The reproduction test, {"path", "content", "tests"}, when it failed before the fix and passes
    # with it: a pull request adds it as a regression test. A ``.diff`` prediction never holds it.
    repro_test: dict[str, Any] | None = None


class Publisher(Protocol):
    def publish(self, outcome: Outcome) -> dict[str, Any]:
        """Deliver the patch; return what to keep in the task record (paths, PR URL, ...)."""
        ...


class DiffPublisher:
    """EVAL_MODE: the run's ``.diff`` (``runs/<run-id>/patches/``), the latest one
    (``predictions/{instance_id}.diff``) and the official predictions JSONL; no remote."""

    def __init__(self, store: RunStore):
        self.store = store

    def publish(self, outcome: Outcome) -> dict[str, Any]:
        iid = outcome.task.instance_id
        # The PR agent calls this only with a non-empty patch; a task without one has a record
        # that says why, and no prediction (the harness counts a missing id as unresolved).
        self.store.write_prediction(iid, outcome.patch)
        return {"kind": "diff", "diff_path": str(self.store.run_diff_path(iid)),
                "latest_diff_path": str(self.store.diff_path(iid)),
                "predictions_jsonl": str(self.store.jsonl_path)}
