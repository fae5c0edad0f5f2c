"""Does a patch apply to the tree as the SWE-bench harness prepares it?

The harness runs swebench's ``pre_install`` steps for some repositories before it applies a
prediction (for sphinx they edit ``setup.py`` and ``tox.ini``), and does not commit them. A patch
that edits the same lines applies to the clean base commit and fails in the harness. This check
replays those steps on a fresh copy of the base and applies the patch the way the harness does
(``git apply``, then GNU ``patch`` with fuzz), only when the patch touches a file they name.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from fixgraph import phases
from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from fixgraph.repo.workspace import Worktree
from fixgraph.sandbox.process import Limits, prepare_workdir, run_isolated, scrubbed_env
from scoring.execution.specs import SpecsError, patch_files, repo_specs
from scoring.execution.testenv import git_apply, materialize, run_root


def pre_install_for(task: Task, cache_dir: Path) -> list[str]:
    """swebench's pre-install steps for the task's repository and version ([] when none)."""
    if not task.version:
        return []
    try:
        spec = repo_specs(cache_dir, task.repo, task.version)
    except SpecsError:
        return []
    return list((spec or {}).get("pre_install") or [])


@phases.timed("harness apply check")
def harness_apply_error(task: Task, wt: Worktree, patch: str, pre_install: list[str],
                        settings: TestSettings) -> str:
    """"" when the patch applies after the harness's preparation, else the reason."""
    steps = " ".join(pre_install)
    touched = [f for f in patch_files(patch) if f in steps]
    if not touched:
        return ""
    run_dir = run_root(settings.run_root) / f"harness-{uuid.uuid4().hex[:12]}"
    work, home = run_dir / "repo", run_dir / "home"
    home.mkdir(parents=True)
    prepare_workdir(run_dir)
    try:
        err = materialize(wt, task.base_commit, work)
        if err:
            return ""  # nothing to say about the patch: the copy failed, not the patch
        env = scrubbed_env(home)
        for cmd in pre_install:
            run_isolated(["bash", "-c", cmd], work, env, Limits(60, 60, settings.memory_mb, True))
        err = git_apply(work, patch, check_only=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    if not err:
        return ""
    return (f"the patch does not apply to the tree as the SWE-bench harness prepares it: its install "
            f"step edits {', '.join(touched)} before applying predictions ({err}); leave those lines alone")
