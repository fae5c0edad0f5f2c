"""Choosing one patch among several candidates, from what the loop may know.

Signals per candidate (none comes from the evaluation's hidden tests):

- **deliverable**: a patch that applies at the base commit, that the guard does not block, and
  that changes the code (not only tests, a new scratch script at the top level, docstrings or
  comments). Anything else
  is never picked (:func:`pick` returns None when no candidate is deliverable).
- **tests**: the reproduction tests' pass rate after the patch, the existing tests' no_regression
  rate, and whether any test that passed at the base now fails (``broke``).
- **static**: the Critic's verdict; ``Unsafe`` (a runtime error the patch introduces) costs.
- **quality**: scoring/verdict/quality.py's code_quality, and the patch's size (changed source lines).
- **agreement**: candidates that make the same change agree. Counting every copy: ``exact``, the
  share of the other candidates whose patch is equal after :func:`normalize`, or, when tests ran
  for both, that left every test in the same state; ``soft``, the mean Jaccard similarity of the
  changed source lines with every other candidate. Discounting copies (samples of one model
  repeat their mistakes together): ``medoid``, soft agreement with each other distinct change
  counted once; ``twin``, whether any other candidate makes the same change; ``files``, the
  overlap of the touched source files; ``tokens``, the mean Jaccard overlap of the tokens (names,
  numbers, operators and brackets) of the changed source lines with each other distinct change: two
  changes that spell one fix differently share its vocabulary where they share no line. By
  behaviour: ``same_tests``, the share of the other distinct changes that left every test both ran
  in the same state.

The score is a weighted sum (:class:`Weights`); a signal no candidate has contributes nothing, and a
candidate missing a signal others have gets the neutral 0.5. Duplicates (equal after
normalization) are counted once for the pick and every time for the copy-counting agreement of
the others. Ties go to the smaller patch, then to the earlier candidate. The weights were chosen
on nine agents' patches by eval/select_bench.py (README, Choosing among candidates, with the
in-sample and the leave-one-repository-out counts); those of the reproduction tests and of the
LLM's judgment were not tuned there (that benchmark has neither).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, astuple, dataclass, field

from fixgraph.state import AttemptRecord
from scoring.execution.specs import patch_files
from scoring.static.patchinfo import is_scaffold

NEUTRAL = 0.5
# A token of a changed line: a name, a number, or any other single character (as BLEU-style
# similarities tokenize code: operators and brackets count).
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+|\S")
# A patch this many changed source lines long has size 1.0 (longer ones too).
SIZE_REF_LINES = 40


@dataclass(frozen=True)
class Weights:
    """The defaults are the benchmark's choice (eval/select_bench.py; README, Choosing among
    candidates): the grid family with the best leave-one-repository-out count, tuned on all rows.
    tests and judged were not tuned (the benchmark has no reproduction test and no LLM)."""

    tests: float = 2.0
    regression: float = 2.0
    broke: float = 1.0
    unsafe: float = 0.5
    quality: float = 0.0
    size: float = 0.25
    exact: float = 0.0
    soft: float = 0.0
    # The LLM's judgment of the patch against the issue, when no test could run.
    judged: float = 1.0
    # Agreement that copies cannot inflate (samples of one model repeat themselves): soft
    # agreement with each other distinct change counted once, whether any other candidate makes
    # the same change at all, and the overlap of the touched source files with the other changes.
    medoid: float = 0.0
    twin: float = 0.25
    files: float = 0.5
    # Agreement by behaviour: the share of the other distinct changes that left every test both
    # ran in the same state.
    same_tests: float = 0.0
    # Agreement on the vocabulary of the change, each other distinct change counted once: the
    # consensus (minimum Bayes risk) pick with a token similarity, which sees a shared fix written
    # in different lines.
    tokens: float = 0.25

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


DEFAULT_WEIGHTS = Weights()


@dataclass
class Candidate:
    """One patch and what the Critic found about it. ``None`` means the signal is unknown."""

    name: str
    patch: str
    applies: bool = True
    guard_blocked: bool = False
    static: str = ""  # Safe | Unsafe | CannotAnalyze | NoVerdict | "" (not judged)
    code_quality: float | None = None
    test_pass_rate: float | None = None
    no_regression: float | None = None
    broke: bool | None = None
    # Every test's status after the patch, for agreement by behaviour.
    behaviour: dict[str, str] | None = None
    judged: float | None = None
    # False when the patch changes only docstrings or comments (scoring/verdict/quality.py); None: unknown.
    changes_code: bool | None = None


@dataclass
class Ranked:
    candidate: Candidate
    index: int  # position in the input
    score: float
    deliverable: bool
    features: dict[str, float] = field(default_factory=dict)
    duplicates: list[str] = field(default_factory=list)  # names of the candidates equal to this one

    def to_dict(self) -> dict[str, object]:
        return {"name": self.candidate.name, "score": round(self.score, 6), "deliverable": self.deliverable,
                "features": {k: round(v, 4) for k, v in self.features.items()}, "duplicates": self.duplicates}


_HEADER = re.compile(r"^(diff --git |index |@@|new file mode|deleted file mode|similarity index|rename |old mode|new mode)")


def _sections(patch: str) -> list[str]:
    return [s for s in re.split(r"(?=^diff --git )", patch, flags=re.M) if s.strip()]


def source_part(patch: str) -> str:
    """The patch without test files and without new files outside any package (scratch scripts such
    as reproduce.py): the change to the code itself ("" when there is none)."""
    keep = []
    for sec in _sections(patch):
        files = patch_files(sec)
        if not is_scaffold(files[0] if files else "", "new file mode" in sec.split("@@", 1)[0]):
            keep.append(sec)
    return "".join(keep)


def _changed(patch: str) -> list[str]:
    out = []
    for line in patch.splitlines():
        if line.startswith(("+++", "---")):
            out.append(line.split("\t")[0].strip())
            continue
        if _HEADER.match(line) or line[:1] not in "+-" or not line:
            continue
        # Spacing is style: none around punctuation and operators, one space elsewhere.
        body = re.sub(r"\s*([^\w\s])\s*", r"\1", re.sub(r"\s+", " ", line[1:].strip()))
        if body and not body.startswith("#"):
            out.append(line[0] + body)
    return out


def normalize(patch: str) -> str:
    """Equal for two patches that make the same change to the code: diff headers, hunk positions,
    whitespace, blank and comment-only lines, test files and scratch scripts do not count."""
    return "\n".join(_changed(source_part(patch) or patch))


def changed_lines(patch: str) -> frozenset[str]:
    return frozenset(line for line in _changed(source_part(patch)) if not line.startswith(("+++", "---")))


def change_tokens(patch: str) -> frozenset[str]:
    """The tokens of the changed source lines (the +/- sign dropped: what a change removes and what
    it adds are both its vocabulary)."""
    return frozenset(t for line in changed_lines(patch) for t in _TOKEN.findall(line[1:]))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def _same_behaviour(a: Candidate, b: Candidate) -> bool:
    return bool(a.behaviour) and bool(b.behaviour) and a.behaviour == b.behaviour


def deliverable(c: Candidate) -> bool:
    """A patch that applies, that the guard lets through, and that changes the code (a patch that
    only adds tests or a scratch script, or only edits docstrings, fixes nothing: the tests that
    judge it are the base's, and it runs as the base does)."""
    return c.applies and not c.guard_blocked and bool(changed_lines(c.patch)) and c.changes_code is not False


def _tests_agree(a: Candidate, b: Candidate) -> bool | None:
    """Whether every test both ran is in the same state after each (None: no test in common)."""
    if not a.behaviour or not b.behaviour:
        return None
    common = a.behaviour.keys() & b.behaviour.keys()
    return all(a.behaviour[t] == b.behaviour[t] for t in common) if common else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def features(candidates: Sequence[Candidate]) -> list[dict[str, float | None]]:
    """Each candidate's signals in [0, 1] (None: unknown), before weighting."""
    norms = [normalize(c.patch) for c in candidates]
    lines = [changed_lines(c.patch) for c in candidates]
    files = [frozenset(patch_files(source_part(c.patch))) for c in candidates]
    tokens = [change_tokens(c.patch) for c in candidates]
    # Every candidate that changes the code votes, duplicates included.
    voters = [i for i in range(len(candidates)) if lines[i]]
    # ...and for the agreement copies cannot inflate, each distinct change once (its first).
    distinct = list({norms[i]: i for i in reversed(voters)}.values())
    out: list[dict[str, float | None]] = []
    for i, c in enumerate(candidates):
        others = [j for j in voters if j != i]
        exact = sum(norms[j] == norms[i] or _same_behaviour(c, candidates[j]) for j in others)
        soft = sum(_jaccard(lines[i], lines[j]) for j in others)
        apart = [j for j in distinct if norms[j] != norms[i]]
        agree = [float(a) for a in (_tests_agree(c, candidates[j]) for j in apart) if a is not None]
        out.append({
            "tests": c.test_pass_rate,
            "regression": c.no_regression,
            "broke": None if c.broke is None else float(c.broke),
            "unsafe": None if not c.static else float(c.static == "Unsafe"),
            "quality": c.code_quality,
            "size": min(1.0, len(lines[i]) / SIZE_REF_LINES),
            "exact": exact / len(others) if others else 0.0,
            "soft": soft / len(others) if others else 0.0,
            "judged": c.judged,
            "medoid": _mean([_jaccard(lines[i], lines[j]) for j in apart]) or 0.0,
            "twin": float(any(norms[j] == norms[i] for j in others)),
            "files": _mean([_jaccard(files[i], files[j]) for j in apart]) or 0.0,
            "same_tests": _mean(agree),
            "tokens": _mean([_jaccard(tokens[i], tokens[j]) for j in apart]) or 0.0,
        })
    return out


# Signals that lower the score as they grow.
_COSTS = {"broke", "unsafe", "size"}

def signed(feats: Sequence[dict[str, float | None]]) -> list[tuple[float, ...]]:
    """Each candidate's signals in the order of Weights' fields: a cost negated, a signal no
    candidate has 0, a signal only others have NEUTRAL. The score is their dot product with the weights."""
    names = list(Weights.__dataclass_fields__)
    known = {name for f in feats for name, v in f.items() if v is not None}
    out = []
    for f in feats:
        row = []
        for name in names:
            v = f.get(name)
            if v is None:
                v = 0.0 if name not in known else NEUTRAL
            row.append(-v if name in _COSTS else v)
        out.append(tuple(row))
    return out


def scores(feats: Sequence[dict[str, float | None]], weights: Weights = DEFAULT_WEIGHTS) -> list[float]:
    w = astuple(weights)
    return [sum(a * b for a, b in zip(row, w, strict=True)) for row in signed(feats)]


def rank(candidates: Sequence[Candidate], weights: Weights = DEFAULT_WEIGHTS) -> list[Ranked]:
    """One entry per group of equal candidates (the first of each), best first."""
    feats = features(candidates)
    values = scores(feats, weights)
    groups: dict[str, Ranked] = {}
    for i, c in enumerate(candidates):
        key = normalize(c.patch) if c.patch.strip() else f"\0empty{i}"
        ok = deliverable(c)
        if key in groups and (groups[key].deliverable or not ok):
            groups[key].duplicates.append(c.name)
            continue
        # A duplicate that applies replaces an equal one that does not (e.g. a harness quirk).
        prev = groups.get(key)
        groups[key] = Ranked(c, i, values[i], ok, {k: v for k, v in feats[i].items() if v is not None},
                             ([prev.candidate.name] + prev.duplicates) if prev else [])
    return sorted(groups.values(), key=lambda r: (not r.deliverable, -r.score, r.features.get("size", 0.0), r.index))


def pick(candidates: Sequence[Candidate], weights: Weights = DEFAULT_WEIGHTS) -> Ranked | None:
    """The candidate to deliver, or None when none is deliverable."""
    ranked = rank(candidates, weights)
    return ranked[0] if ranked and ranked[0].deliverable else None


# ---- the graph's attempts ---------------------------------------------------------------


def from_attempt(attempt: AttemptRecord, guard_blocks: bool) -> Candidate:
    """What the Critic recorded about an attempt, as a candidate."""
    score = attempt.get("score") or {}
    findings = attempt.get("findings") or []
    verdict = attempt.get("verdict", "")
    patch = attempt.get("patch", "")
    behaviour = {**(score.get("fail_to_pass") or {}), **(score.get("pass_to_pass") or {})}
    return Candidate(
        name=str(attempt.get("number", "")), patch=patch, applies=bool(patch) and verdict != "CannotApply",
        guard_blocked=guard_blocks and any(f.get("source") == "guard" for f in findings),
        static=verdict if verdict in ("Safe", "Unsafe") else "",
        code_quality=score.get("code_quality"), test_pass_rate=score.get("test_pass_rate"),
        no_regression=score.get("no_regression"),
        broke=any(f.get("rule") == "regression" for f in findings) if score.get("no_regression") is not None else None,
        behaviour=behaviour or None, judged=score.get("llm_score"),
        changes_code=(score.get("quality_detail") or {}).get("changes_code"))


def rank_attempts(attempts: Sequence[AttemptRecord], guard_blocks: bool,
                  weights: Weights = DEFAULT_WEIGHTS) -> list[Ranked]:
    return rank([from_attempt(a, guard_blocks) for a in attempts], weights)


def best_attempt(attempts: Sequence[AttemptRecord], guard_blocks: bool,
                 weights: Weights = DEFAULT_WEIGHTS) -> AttemptRecord | None:
    """The attempt to deliver by the rule, or None when none is deliverable."""
    ranked = rank_attempts(attempts, guard_blocks, weights)
    return attempts[ranked[0].index] if ranked and ranked[0].deliverable else None
