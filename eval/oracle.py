"""Scripted replies that replay an instance's gold patch: an "oracle" LLM.

It drives the real pipeline on real repositories without an LLM, so what a benchmark measures
is the pipeline itself (clones, worktrees, analysis, tests, records), not a model.
"""

from __future__ import annotations

from typing import Any

from unidiff.patch import PatchSet

from fixgraph.dataset import Instance


def gold_edits(patch: str) -> list[dict[str, str]]:
    """The gold patch as search/replace edits (one per hunk: context + removed -> context + added)."""
    edits = []
    for pf in PatchSet(patch):
        path = pf.path
        for hunk in pf:
            src = "".join(ln.value for ln in hunk if ln.is_context or ln.is_removed)
            dst = "".join(ln.value for ln in hunk if ln.is_context or ln.is_added)
            edits.append({"path": path, "search": src if not pf.is_added_file else "", "replace": dst})
    return edits


def oracle_script(inst: Instance, repro: dict[str, Any] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Replies that replay the gold patch; ``repro`` ({"path", "content"}) is the Reproducer's test
    (the benchmarks pass the instance's own test file from ``test_patch``: eval side only)."""
    files = [pf.path for pf in PatchSet(inst.patch)]
    suspects = [{"file": pf.path, "symbol": "", "start_line": h.source_start,
                 "end_line": h.source_start + h.source_length} for pf in PatchSet(inst.patch) for h in pf]
    return {
        "Plan": [{"files": files, "reasoning": "oracle: the gold patch's files"}],
        "ExploreStep": [{"next_files": [], "suspects": suspects, "learned": "oracle", "confidence": "high"}],
        # The same test for every try: a refused one is refused again, and the record says why.
        "ReproTestDraft": [{"path": (repro or {}).get("path", "tests/test_oracle_missing.py"),
                            "content": (repro or {}).get("content", "def test_missing():\n    pass\n"),
                            "files": (repro or {}).get("files", []),
                            "explanation": "oracle: the instance's own test file"}] * 10,
        "CodeChange": [{"edits": gold_edits(inst.patch), "explanation": "oracle: the gold patch"}],
        "RuntimeCheck": [{"verdict": "Safe", "errors": []}],
        "PatchJudgment": [{"score": 0.8, "reasoning": "oracle"}],
    }
