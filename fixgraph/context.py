"""The run context every node receives through ``Runtime[TaskContext]``.

It holds what is not state: the typed config, the task's instance and worktree, the LLM boundary
with its budget meter, and where the result goes. It is rebuilt when a task resumes from a
checkpoint; the state is what the checkpoint restores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fixgraph.config import RunConfig
from fixgraph.dataset import Instance
from fixgraph.llm import LLM
from fixgraph.publish import Publisher
from fixgraph.workspace import Worktree

if TYPE_CHECKING:
    from fixgraph.localize import RepoIndex


@dataclass
class TaskContext:
    cfg: RunConfig
    instance: Instance
    worktree: Worktree
    llm: LLM
    publisher: Publisher
    cache_dir: Path
    # Filled lazily by the nodes that need them; not part of the checkpointed state.
    scratch: dict[str, Any] = field(default_factory=dict)

    def index(self) -> RepoIndex:
        """The repository index for this task's worktree, built once per task (cached on disk)."""
        from fixgraph.localize import RepoIndex

        if "index" not in self.scratch:
            self.scratch["index"] = RepoIndex.build(self.worktree, self.cache_dir)
        return self.scratch["index"]
