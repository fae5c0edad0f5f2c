"""The run context every node receives through ``Runtime[TaskContext]``.

It holds what is not state: the typed config, the task (never its evaluation data) and worktree,
the LLM boundary with its budget meter, and where the result goes. It is rebuilt when a task resumes from a
checkpoint; the state is what the checkpoint restores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fixgraph.config import RunConfig
from fixgraph.dataset import EvaluationData, Task
from fixgraph.models.llm import LLM
from fixgraph.publish import Publisher
from fixgraph.repo.workspace import Worktree

if TYPE_CHECKING:
    from fixgraph.localize import RepoIndex


@dataclass
class TaskContext:
    cfg: RunConfig
    task: Task
    worktree: Worktree
    llm: LLM
    publisher: Publisher
    cache_dir: Path
    # Set only by the ``oracle-tests`` ablation (critic.tests = "oracle"): the hidden tests in the
    # loop, an upper bound for studying the Critic, never a SWE-bench result.
    oracle: EvaluationData | None = None
    # Filled lazily by the nodes that need them; not part of the checkpointed state.
    scratch: dict[str, Any] = field(default_factory=dict)

    def index(self) -> RepoIndex:
        """The repository index for this task's worktree, built once per task (cached on disk)."""
        from fixgraph.localize import RepoIndex

        if "index" not in self.scratch:
            index = RepoIndex.build(self.worktree, self.cache_dir)
            if self.cfg.explorer.execute_issue:
                self._attach_execution(index)
            self.scratch["index"] = index
        return self.scratch["index"]

    def _attach_execution(self, index: RepoIndex) -> None:
        """Run the issue's code at the base commit (sandboxed, cached) and hand the index what it
        called late (``fixgraph.localize.execution_signal``); the trace stays in ``scratch``."""
        from fixgraph.localize import execution_signal
        from scoring.execution.runner import make_runner
        from scoring.runtime.issue_run import trace_issue

        runner = make_runner(self.cfg.tests, self.cache_dir)
        trace = trace_issue(runner, self.task, self.worktree, self.task.issue,
                            timeout_s=self.cfg.explorer.execute_timeout_s)
        self.scratch["issue_trace"] = trace
        index.attach_execution(execution_signal(trace.first), trace.note())
