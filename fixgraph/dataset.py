"""SWE-bench-format instances: load, validate, select."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

EVAL_DIR = Path(__file__).resolve().parent.parent / "eval"
# Fixed task lists by name: stratified50 draws from Lite, verified50 from Verified (eval/<name>.md says how).
MANIFESTS = {"stratified50": EVAL_DIR / "stratified50.txt", "verified50": EVAL_DIR / "verified50.txt"}
# Task sets by name: the dataset hub's SWE-bench datasets; any other --dataset is a JSONL path.
HUB_DATASETS = {"lite": "SWE-bench/SWE-bench_Lite", "verified": "SWE-bench/SWE-bench_Verified",
                "full": "SWE-bench/SWE-bench"}
# The commit of the hub's dataset repository each set is read at, so an upstream edit of the data
# (Verified's changed on 2026-08-10, dropping a PASS_TO_PASS test of astropy-7606) cannot move scores
# unnoticed. None: no commit known here to be the current one (see docs/verified.md); the set is
# read at the hub's main branch and the run names the commit it read. ``--dataset NAME@COMMIT`` pins
# one run.
HUB_REVISIONS: dict[str, str | None] = {"lite": None, "verified": None, "full": None}
DEFAULT_DATASET = "lite"
HUB_DATASET = HUB_DATASETS[DEFAULT_DATASET]
DATASET_HELP = (f"{' | '.join(HUB_DATASETS)} (from the dataset hub, cached; NAME@COMMIT reads that revision) "
                f"or a SWE-bench JSONL path (default: {DEFAULT_DATASET})")


class DatasetError(Exception):
    """Bad dataset input; the message is one line meant for the user."""


class _TaskFields(BaseModel):
    """The fields of a dataset row the pipeline may know: a :class:`Task`'s, and an :class:`Instance`'s
    beside its ground truth."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    version: str = ""
    hints_text: str = ""
    created_at: str = ""
    environment_setup_commit: str = ""

    @property
    def repo_slug(self) -> str:
        return self.repo.replace("/", "+")


class Task(_TaskFields):
    """What the pipeline may know of an issue: the task side of the information boundary.

    A SWE-bench row also carries the evaluation's ground truth (:class:`EvaluationData`); this type
    has no field for it, so code typed against ``Task`` (the graph, its state and context, the
    Critic, the test runner, records, prompts) cannot read it, and pyright says so if it tries.
    ``hints_text`` is empty unless the run's config allows it (``task.hints``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def issue(self) -> str:
        """The issue as the prompts show it: the problem statement, and the hints when allowed."""
        if not self.hints_text.strip():
            return self.problem_statement
        return f"{self.problem_statement}\n\n## Comments on the issue before the fix\n{self.hints_text}"


class EvaluationData(BaseModel):
    """The ground truth the SWE-bench harness grades with. Only ``eval/`` benchmarks, the harness
    step and the explicitly labelled ``oracle-tests`` ablation may hold one."""

    model_config = ConfigDict(frozen=True)

    patch: str = ""
    test_patch: str = ""
    FAIL_TO_PASS: list[str] = []
    PASS_TO_PASS: list[str] = []

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _decode(cls, value: object) -> object:
        # Upstream stores these as JSON-encoded strings.
        if isinstance(value, str):
            return json.loads(value) if value.strip() else []
        return value


class Instance(_TaskFields, EvaluationData):
    """A dataset row as published: the task and the evaluation data together. The pipeline never
    receives one (it is no :class:`Task`): :meth:`task` is what crosses into it,
    :meth:`evaluation_data` is the visible act of reading the ground truth."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    # Which data the row was read from, for the run's records (never the graph's): the hub set and the
    # commit read (``SWE-bench/SWE-bench_Verified@<commit>``), or the file's name and the start of its
    # SHA-256. The data has been edited upstream, and an edit moves scores.
    dataset: str = ""

    def task(self, *, hints: bool = False) -> Task:
        """The task side only; ``hints_text`` only when ``hints`` (off in the usual SWE-bench setting)."""
        fields = self.model_dump(include=set(_TaskFields.model_fields))
        return Task(**{**fields, "hints_text": self.hints_text if hints else ""})

    def evaluation_data(self) -> EvaluationData:
        """The ground truth. Reading it inside the pipeline makes a run not a SWE-bench result."""
        return EvaluationData(**self.model_dump(include=set(EvaluationData.model_fields)))


def load_jsonl(path: Path) -> list[Instance]:
    if not path.is_file():
        raise DatasetError(f"dataset not found: {path}")
    out: list[Instance] = []
    seen: set[str] = set()
    with path.open(encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                inst = Instance.model_validate(json.loads(line))
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{lineno}: malformed JSON line ({exc.msg})") from None
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or "row"
                raise DatasetError(f"{path}:{lineno}: {field}: {err['msg']}") from None
            if inst.instance_id in seen:
                raise DatasetError(f"{path}:{lineno}: duplicate instance_id {inst.instance_id}")
            seen.add(inst.instance_id)
            out.append(inst)
    if not out:
        raise DatasetError(f"{path}: no instances")
    with path.open("rb") as fh:
        source = f"{path.name}@sha256:{hashlib.file_digest(fh, 'sha256').hexdigest()[:16]}"
    return [inst.model_copy(update={"dataset": source}) for inst in out]


def hub_spec(spec: str | Path | None) -> tuple[str, str | None, str | None] | None:
    """What ``--dataset`` names on the hub: (dataset, revision to read, pinned revision), or None
    when it is a path. None is the default set at its pinned revision."""
    text = DEFAULT_DATASET if spec is None else str(spec)
    name, _, revision = text.partition("@")
    if name not in HUB_DATASETS:
        return None
    if "@" in text and not revision.strip():
        raise DatasetError(f"--dataset {text}: no revision after '@'")
    pinned = HUB_REVISIONS[name]
    return HUB_DATASETS[name], revision.strip() or pinned, pinned


def hub_name(spec: str | Path | None) -> str | None:
    """The hub dataset ``--dataset`` names (None: the default), or None when it is a path."""
    hub = hub_spec(spec)
    return hub[0] if hub else None


def load_dataset_any(spec: str | Path | None, cache_dir: Path) -> list[Instance]:
    """``--dataset``: a hub dataset's name (None: the default one), optionally ``@revision``, or a
    SWE-bench JSONL path."""
    hub = hub_spec(spec)
    if hub is None:
        return load_jsonl(Path(str(spec)))
    from fixgraph.hub import HubError, load_hub

    try:
        commit, rows = load_hub(cache_dir, *hub)
    except HubError as exc:
        raise DatasetError(str(exc)) from None
    try:
        return [Instance.model_validate({**row, "dataset": f"{hub[0]}@{commit}"}) for row in rows]
    except ValidationError as exc:
        err = exc.errors()[0]
        raise DatasetError(f"{hub[0]}: a row's {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None


def read_manifest(name: str) -> list[str]:
    path = MANIFESTS[name]
    return [ln.split("#")[0].strip() for ln in path.read_text().splitlines() if ln.split("#")[0].strip()]


def select(instances: Iterable[Instance], spec: str) -> list[Instance]:
    """``spec`` is a manifest name (stratified50, verified50), ``all``, or comma-separated instance ids."""
    by_id = {inst.instance_id: inst for inst in instances}
    if spec == "all":
        return list(by_id.values())
    ids = read_manifest(spec) if spec in MANIFESTS else [s.strip() for s in spec.split(",") if s.strip()]
    if not ids:
        raise DatasetError("--tasks is empty")
    missing = [i for i in ids if i not in by_id]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise DatasetError(f"unknown task id {missing[0]!r}{more}: not in the dataset")
    return [by_id[i] for i in dict.fromkeys(ids)]
