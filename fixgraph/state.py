"""Typed graph state and the structured outputs the LLM returns.

The graph state holds only JSON-able values (dicts of the pydantic models below, dumped), so
that the SQLite checkpointer can store and restore it without custom serializers.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Literal, TypedDict

from pydantic import BaseModel, Field, StringConstraints

# ---- structured LLM outputs -------------------------------------------------------------
#
# Every list and string is bounded, so that a server which turns the schema into a grammar
# (llama.cpp, vLLM's guided decoding) cannot loop inside an array or a string until the output cap.
# The bounds are far above what a good reply needs; a reply over one is invalid and re-asked.
# ``minItems`` (schema only, not validated) asks a grammar for at least one item where an empty list
# is no answer; ``empty()`` names that case.
#
# A string's bound goes into the JSON schema (``maxLength``) only up to GRAMMAR_MAX_CHARS: llama.cpp's
# grammar parser (llama-cpp-python 0.3.36) refuses a schema with a longer ``maxLength`` ("number of
# rules that are going to be repeated ... exceeds sane defaults"; 1000 passes, 1001 fails, measured),
# and the server then generates with no grammar at all, so one long bound on code unbound every
# field of the reply. Longer bounds (code, whole files) are validated here only; ``max_tokens``
# caps them on the server.

GRAMMAR_MAX_CHARS = 1000
PATH_CHARS = 300
SHORT_CHARS = 1000
CODE_CHARS = 12_000
FILE_CHARS = 20_000
MAX_PATHS = 20
MAX_EDITS = 20
Path_ = Annotated[str, StringConstraints(max_length=PATH_CHARS)]
_AT_LEAST_ONE: dict[str, Any] = {"minItems": 1}


def _validated_only(schema: dict[str, Any]) -> None:
    """For a string bound above GRAMMAR_MAX_CHARS: keep it out of the JSON schema (see above)."""
    schema.pop("maxLength", None)


class Plan(BaseModel):
    """The Planner's choice of files to read."""

    files: list[Path_] = Field(max_length=MAX_PATHS, json_schema_extra=_AT_LEAST_ONE,
                               description="Repository-relative paths of the files to read first, most likely first.")
    reasoning: str = Field(max_length=SHORT_CHARS, description="Two sentences at most: why these files.")

    def empty(self) -> str:
        return "" if any(f.strip() for f in self.files) else "it named no files"


class Suspect(BaseModel):
    file: Path_
    symbol: str = Field("", max_length=200, description="Function, method or class name, empty for module level.")
    start_line: int = 0
    end_line: int = 0


class ExploreStep(BaseModel):
    """The Explorer's decision after reading: what else to read, and how sure it is."""

    next_files: list[Path_] = Field(default_factory=list, max_length=MAX_PATHS,
                                    description="Paths to read next, chosen from the options given; empty when done.")
    suspects: list[Suspect] = Field(default_factory=list, max_length=MAX_PATHS)
    learned: str = Field("", max_length=SHORT_CHARS, description="What the code read so far says about the bug.")
    confidence: Literal["high", "medium", "low"] = "medium"

    def empty(self) -> str:
        # No suspect, nothing more to read, and not saying it is unsure: the reply says nothing.
        if self.suspects or self.next_files or self.confidence == "low":
            return ""
        return "it named no suspects and no files to read next, yet its confidence is not low"


class Edit(BaseModel):
    """Replace ``search`` (copied exactly from the file, unique in it) with ``replace``.

    An empty ``search`` creates ``path`` as a new file with ``replace`` as its content.
    """

    path: Path_
    search: str = Field(max_length=CODE_CHARS, json_schema_extra=_validated_only)
    replace: str = Field(max_length=CODE_CHARS, json_schema_extra=_validated_only)


class CodeChange(BaseModel):
    edits: list[Edit] = Field(max_length=MAX_EDITS, json_schema_extra=_AT_LEAST_ONE)
    explanation: str = Field("", max_length=SHORT_CHARS, description="One or two sentences on what the change does.")

    def empty(self) -> str:
        return "" if self.edits else "it had no edits"


class SuspectedError(BaseModel):
    type: str = Field(max_length=200, description="Exception class, e.g. AttributeError, TypeError, NameError.")
    location: str = Field(max_length=PATH_CHARS, description="file:line or file:function.")
    reasoning: str = Field(max_length=SHORT_CHARS)


class RuntimeCheck(BaseModel):
    """The LLM's runtime-error verdict on a patch (REDO §3.2)."""

    verdict: Literal["Safe", "Unsafe"]
    errors: list[SuspectedError] = Field(default_factory=list, max_length=10)


class SupportFile(BaseModel):
    """A data file a reproduction test reads (a sample input, an expected output)."""

    path: Path_ = Field(description="Repository-relative path of a NEW file (not one the repository has).")
    content: str = Field(max_length=CODE_CHARS, json_schema_extra=_validated_only,
                         description="The whole file, as text.")


class ReproTestDraft(BaseModel):
    """A test that reproduces the issue: it must fail before the fix and pass after it."""

    path: Path_ = Field(description="Repository-relative path of the test file, where the repository keeps "
                                    "its tests and named as its tests are (a new file is best).")
    content: str = Field(max_length=FILE_CHARS, json_schema_extra=_validated_only,
                         description="The whole file: imports and one or a few test functions that fail "
                                     "while the issue is present.")
    explanation: str = Field("", max_length=SHORT_CHARS, description="One sentence: what the test checks.")
    files: list[SupportFile] = Field(default_factory=list, max_length=5,
                                     description="Data files the test reads, if it needs any (usually none).")

    def empty(self) -> str:
        return "" if self.content.strip() else "the test file had no content"


class PatchJudgment(BaseModel):
    """Semantic judgment of a patch against the issue, used only when no test can run."""

    score: float = Field(ge=0.0, le=1.0, description="How likely the patch resolves the issue, 0 to 1.")
    reasoning: str = Field(max_length=SHORT_CHARS)


# ---- records kept in state --------------------------------------------------------------


class Finding(TypedDict, total=False):
    source: str  # pyright | pyflakes | llm | guard | tests | apply
    rule: str
    message: str
    file: str
    line: int
    symbol: str
    severity: str  # error | warning
    code: str  # the offending line as the patched file has it, shown to the Coder
    # A static or LLM suspicion weighed against the tests (scoring/verdict/weigh.py):
    # confirmed | contradicted | unconfirmed | untested (the tests could not run: it decided)
    status: str
    evidence: str  # what the tests showed about it


class ScoreParts(TypedDict, total=False):
    fix_score: float
    kind: Literal["tests", "partial", "semantic", "none"]
    test_pass_rate: float | None
    no_regression: float | None
    code_quality: float | None
    llm_score: float | None
    tests_run: int
    tests_source: str  # own (the pipeline's tests) | oracle (the hidden tests: an ablation)
    # Tests that must go from failing to passing (the reproduction tests) and tests that must keep
    # passing (the selected existing tests), with their status after the patch.
    fail_to_pass: dict[str, str]
    pass_to_pass: dict[str, str]
    note: str
    test_run: dict[str, Any]  # backend, runnable, reason, seconds, timed_out, network_isolated
    quality_detail: dict[str, Any]  # how code_quality was reached (scoring/verdict/quality.py)
    replay: dict[str, Any]  # the code run with the patch against the base (scoring/runtime/replay.py)


class AttemptRecord(TypedDict, total=False):
    number: int
    patch: str
    explanation: str
    verdict: str  # Safe | Unsafe | NoVerdict | CannotAnalyze | Skipped
    findings: list[Finding]
    score: ScoreParts
    fixed_from_previous: list[str]
    crash_context: str
    round: int  # the Coder's round that wrote it (several candidates share a round)
    sample: dict[str, Any]  # how a candidate was sampled: temperature, the order of the files shown


class Usage(TypedDict, total=False):
    input_tokens: int
    output_tokens: int
    dollars: float
    calls: int  # replies received and charged
    # Requests sent for them: a call's retries and its one unstreamed fallback are requests too,
    # so a server billing per request bills this many.
    requests: int
    # What went wrong on the way (fixgraph/models/llm.py): calls that timed out, retries of any
    # kind, replies cut off, empty or otherwise invalid, and re-asks.
    timeouts: int
    retries: int
    truncated: int
    empty: int
    invalid: int
    reasks: int
    by_node: dict[str, dict[str, float]]


USAGE_COUNTS = ("timeouts", "retries", "truncated", "empty", "invalid", "reasks")


def merge_usage(left: Usage | None, right: Usage | None) -> Usage:
    """Reducer: usage deltas returned by nodes add up."""
    left = left or {}
    right = right or {}
    by_node: dict[str, dict[str, float]] = {k: dict(v) for k, v in (left.get("by_node") or {}).items()}
    for node, counts in (right.get("by_node") or {}).items():
        mine = by_node.setdefault(node, {})
        for key, val in counts.items():
            mine[key] = mine.get(key, 0) + val
    merged = Usage(
        input_tokens=left.get("input_tokens", 0) + right.get("input_tokens", 0),
        output_tokens=left.get("output_tokens", 0) + right.get("output_tokens", 0),
        dollars=round(left.get("dollars", 0.0) + right.get("dollars", 0.0), 6),
        calls=left.get("calls", 0) + right.get("calls", 0),
        requests=left.get("requests", 0) + right.get("requests", 0),
        by_node=by_node,
    )
    for key in USAGE_COUNTS:  # present only when something went wrong, so clean records stay as they were
        n = left.get(key, 0) + right.get(key, 0)  # type: ignore[misc]
        if n:
            merged[key] = n  # type: ignore[literal-required]
    return merged


class TaskState(TypedDict, total=False):
    """The graph's state for one task (one issue)."""

    instance_id: str
    problem: str
    # Planner
    plan: dict[str, Any]
    plan_feedback: str
    planner_runs: int
    # Explorer
    files_read: list[str]
    exploration: dict[str, Any]
    explorer_runs: int
    reruns: Annotated[list[dict[str, Any]], operator.add]
    # Reproducer: the accepted reproduction tests (path, content, failing test ids, base output)
    repro: dict[str, Any]
    # Coder / Critic loop
    attempts: Annotated[list[AttemptRecord], operator.add]
    # The round's patches not judged yet (coder.candidates > 1): patch, explanation, sample.
    candidates: list[dict[str, Any]]
    # The number of the best attempt so far by the selection rule (coder.candidates > 1).
    best: int
    patch: str
    explanation: str
    feedback: str
    verdict: str
    score: ScoreParts
    # Outcome
    usage: Annotated[Usage, merge_usage]
    stop_reason: str
    failed: str
    published: dict[str, Any]
