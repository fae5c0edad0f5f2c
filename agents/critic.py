"""Critic, REDO-style: differential static analysis, then an LLM check for runtime errors that
static analysis misses, then the pipeline's own tests (the reproduction tests the Reproducer
accepted, and the repository's existing tests for the changed code), and the unsafe-patch guard
throughout. Before the tests, the issue's own code is run again with the patch (``scoring/runtime/replay.py``):
a statement that crashes in the repository where it ran clean at the base, or that still raises the
exception the issue reports, makes the verdict Unsafe; a statement that raised the reported crash at the
base is a reproduction test too (``repro.issue_code``), passing when the patch removes the crash. An existing test that passed at the base and now crashes in the patched code (with
``regression.runtime_scope = "source"``, anywhere in non-test source) is a
runtime error like a static one (``scoring/runtime/findings.py``): the verdict is Unsafe. One that fails an
assertion is a regression, unless it asserts what the issue asks to change
(``scoring/verdict/expected_change.py``: a warning to update the test, left out of ``no_regression``). It
never sees the evaluation's hidden tests, except under the explicitly labelled ``oracle-tests``
ablation (``critic.tests = "oracle"``).

It yields ``fix_score`` (see scoring/verdict/fix_score.py) and, when it rejects a patch, the findings the
Coder must fix on the next attempt.
"""

from __future__ import annotations

import threading
from typing import Any

from langgraph.runtime import Runtime

from agents.coder import rounds_done
from agents.common import messages, stops_cleanly
from agents.context import TaskContext
from fixgraph import phases
from fixgraph.models.llm import BudgetExceeded
from fixgraph.state import AttemptRecord, Finding, PatchJudgment, ScoreParts, TaskState, Usage, merge_usage
from scoring.execution import harness, outcomes
from scoring.execution.runner import make_runner
from scoring.execution.testenv import PASSING
from scoring.runtime import llm_check, replay
from scoring.runtime.findings import evidence, explained, findings_of
from scoring.static import differential as static
from scoring.static import guard
from scoring.static.patchinfo import PatchParseError, parse_patch
from scoring.verdict import choose_patch, expected_change, fix_score, quality, weigh


def _fmt(f: Finding) -> str:
    where = f.get("file", "")
    if f.get("line"):
        where += f":{f.get('line')}"
    if f.get("symbol"):
        where += f" in {f.get('symbol')}"
    rule = f.get("rule", "")
    status = f.get("status", "")
    kind = {"confirmed": "confirmed by the tests", "unconfirmed": "static suspicion, not confirmed by the tests",
            "untested": "static suspicion, the tests could not run"}.get(status, "")
    mark = f" {kind}: {f.get('evidence', '')}" if kind else ""
    line = f"- [{f.get('source', '')}{'/' + rule if rule else ''}{mark}] {where}: {f.get('message', '')}"
    # REDO §G: the Coder gets each error with its location and the code it points at.
    code = f.get("code", "")
    return line + (f"\n    at: {code}" if code else "")


def _key(f: Finding) -> str:
    """Identity of an error across attempts: no line number (the next attempt moves code), the
    message without its volatile parts; an LLM's reasoning is free text, so its errors are known
    by type and place."""
    message = "" if f.get("source") == "llm" else static.normalize(f.get("message", ""))
    return f"{f.get('source')}:{f.get('rule')}:{f.get('file')}:{f.get('symbol', '')}:{message}"


@stops_cleanly("critic")
def critic(state: TaskState, runtime: Runtime[TaskContext]) -> dict[str, Any]:
    ctx = runtime.context
    pending = state.get("candidates") or []
    if ctx.cfg.coder.candidates > 1 and pending:
        return _judge_candidates(ctx, state, pending)
    attempt, usage, feedback = _judge(ctx, state, state.get("patch", ""), state.get("explanation", ""),
                                      len(state.get("attempts", [])) + 1)
    attempt["round"] = attempt.get("number", 0)
    return {"attempts": [attempt], "verdict": attempt.get("verdict", ""), "score": attempt.get("score", {}),
            "feedback": feedback, "usage": usage}


def _judge_candidates(ctx: TaskContext, state: TaskState, pending: list[dict[str, Any]]) -> dict[str, Any]:
    """Judge each of the round's candidates; the state's verdict, score and feedback become the best
    one's by the selection rule (over every attempt so far), so the loop retries while even the best
    is under the threshold. A candidate the budget leaves unjudged is recorded as Unchecked."""
    number = len(state.get("attempts", [])) + 1
    judged: list[AttemptRecord] = []
    feedbacks: dict[int, str] = {}
    usage: Usage = {}
    stop = ""
    for c in pending:
        n = number + len(judged)
        if not stop:
            try:
                attempt, delta, feedbacks[n] = _judge(ctx, state, c["patch"], c.get("explanation", ""), n)
                usage = merge_usage(usage, delta)
            except BudgetExceeded as exc:
                stop = f"budget: {exc}"
        if stop:
            attempt = AttemptRecord(number=n, patch=c["patch"], explanation=c.get("explanation", ""),
                                    verdict="Unchecked", findings=[], score={"kind": "none"})
        attempt["round"] = int(c.get("round") or rounds_done(state))
        attempt["sample"] = c.get("sample", {})
        judged.append(attempt)
    everything = list(state.get("attempts", [])) + judged
    best = choose_patch.best_attempt(everything, ctx.cfg.critic.guard == "block") or judged[0]
    update: dict[str, Any] = {
        "attempts": judged, "candidates": [], "best": best.get("number", 0), "patch": best.get("patch", ""),
        "explanation": best.get("explanation", ""), "verdict": best.get("verdict", ""),
        "score": best.get("score", {}), "feedback": feedbacks.get(best.get("number", 0), ""), "usage": usage}
    if stop:
        update["stop_reason"] = stop
    return update


def _judge(ctx: TaskContext, state: TaskState, patch: str, explanation: str,
           number: int) -> tuple[AttemptRecord, Usage, str]:
    """One patch judged: its attempt record, the LLM usage, and the feedback for the Coder."""
    settings = ctx.cfg.critic
    wt = ctx.worktree
    # Establish the precondition from state, so a resumed task sees the patch it is judging.
    wt.reset()
    wt.apply(patch)

    cannot = harness.harness_apply_error(ctx.task, wt, patch, harness.pre_install_for(ctx.task, ctx.cache_dir),
                                         ctx.cfg.tests) if settings.tests != "off" else ""
    if cannot:
        finding = Finding(source="apply", rule="harness", message=cannot, severity="error")
        none = ScoreParts(fix_score=0.0, kind="none", note=cannot)
        attempt = AttemptRecord(number=number, patch=patch, explanation=explanation,
                                verdict="CannotApply", findings=[finding], score=none)
        return attempt, {}, _fmt(finding)
    ahead = TestsAhead(ctx, state, patch) if runs_ahead(ctx, patch) else None
    try:
        return _judge_applied(ctx, state, patch, explanation, number, ahead)
    finally:
        if ahead is not None:
            ahead.join()  # a run not needed still ends before the worktree is touched again


def _judge_applied(ctx: TaskContext, state: TaskState, patch: str, explanation: str, number: int,
                   ahead: TestsAhead | None) -> tuple[AttemptRecord, Usage, str]:
    """:func:`_judge` once the patch applies as the harness applies it."""
    settings = ctx.cfg.critic
    wt = ctx.worktree
    usage: Usage = {}
    findings: list[Finding] = []
    verdict = "Safe"
    notes: list[str] = []
    guard_findings = guard.check_patch(wt, patch) if settings.guard != "off" else []
    if guard_findings and settings.guard == "block":
        verdict = "Unsafe"
        notes.append("the unsafe-patch guard blocks this patch")
    findings += guard_findings

    # No veto before evidence (scoring/verdict/weigh.py): only a finding sure without running ends
    # the attempt here; the others are suspicions the tests weigh.
    suspicions: list[Finding] = []
    if settings.static:
        result = static.analyze_patch(wt, patch, settings=settings, cache_dir=ctx.cache_dir)
        notes += result.notes
        if result.status == "cannot_analyze":
            verdict = "CannotAnalyze"
            notes.append(f"static analysis could not run: {result.reason}")
        else:
            sure = [f for f in result.new if weigh.certain(f)]
            suspicions += [f for f in result.new if not weigh.certain(f)]
            if sure:
                verdict = "Unsafe"
                findings += sure

    if verdict == "Safe" and not suspicions and settings.llm_check:
        check, delta = llm_check.runtime_check(ctx.llm, ctx.task, wt, patch, calls=settings.llm_check_calls)
        usage = merge_usage(usage, delta)
        if check is None:
            verdict = "NoVerdict"
        elif check.verdict == "Unsafe":
            suspicions += llm_check.to_findings(check, wt)

    replayed = None
    if verdict == "Safe" and settings.replay_issue and settings.tests != "off":
        # The issue's own code, run with the patch and compared with its run at the base (cached
        # by the localization): a crash the patch introduced, or the issue's crash still there.
        replayed = replay.replay_issue(make_runner(ctx.cfg.tests, ctx.cache_dir), ctx.task, wt, patch,
                                       timeout_s=settings.replay_timeout_s, base=ctx.scratch.get("issue_trace"))
        if replayed.summaries:
            verdict = "Unsafe"
            findings += replay.findings_of(replayed.summaries)

    code_quality, quality_detail = quality.code_quality(wt, patch)
    crash = ""
    if verdict == "Unsafe":
        score = ScoreParts(fix_score=0.0, kind="none", code_quality=code_quality,
                           note="rejected by the Critic before running tests")
        findings += weigh.weigh(suspicions, ran=False, lines=None, crashes=[], texts={},
                                why_not="the attempt ended before the tests")
    else:
        score, more, unsafe, crash, delta = _with_tests(ctx, state, patch, replayed, suspicions, code_quality,
                                                            ahead)
        usage = merge_usage(usage, delta)
        findings += more
        if unsafe:
            verdict = "Unsafe"
    score["quality_detail"] = quality_detail
    if replayed is not None:
        score["replay"] = replayed.to_dict()

    previous = state.get("attempts", [])
    before = {_key(f) for f in (previous[-1].get("findings", []) if previous else [])}
    now = {_key(f) for f in findings}
    attempt = AttemptRecord(number=number, patch=patch, explanation=explanation,
                            verdict=verdict, findings=findings, score=score,
                            fixed_from_previous=sorted(before - now), crash_context=crash)
    # A suspicion the tests contradicted stays in the record, not in the Coder's feedback.
    told = [f for f in findings if f.get("status") != "contradicted"]
    return attempt, usage, "\n".join(notes + [_fmt(f) for f in told])


def _with_tests(ctx: TaskContext, state: TaskState, patch: str, replayed: replay.Replay | None,
                suspicions: list[Finding], code_quality: float, ahead: TestsAhead | None = None
                ) -> tuple[ScoreParts, list[Finding], bool, str, Usage]:
    """The patch's tests run and the suspicions weighed by them: the score, the findings they add,
    whether they make the patch Unsafe, the crash context for the Coder, and the LLM usage."""
    settings = ctx.cfg.critic
    wt = ctx.worktree
    usage: Usage = {}
    found: list[Finding] = []
    unsafe = False
    crash = ""
    texts = {f: wt.read(f) or "" for f in sorted({str(s.get("file", "")) for s in suspicions if s.get("file")})}
    issue_code = replayed.reproduced if replayed is not None else []
    trace = weigh.trace_specs(suspicions, texts)
    served = ahead.outcome(issue_code if ctx.cfg.repro.issue_code else [], trace) if ahead is not None else None
    outcome = served if served is not None else _run_tests(ctx, state, patch, issue_code, trace)
    # Tests that assert what the issue asks to change: a warning to update them, not a regression.
    expected = (expected_change.of_outcome(outcome, ctx.task.problem_statement, ctx.task.repo)
                if outcome is not None and outcome.source == "own" and ctx.cfg.regression.expected_changes
                else {})
    llm_score = None
    ran = outcome is not None and outcome.runnable
    # Suspicions the tests cannot weigh decide (score 0 below): no judgment is worth asking for.
    if fix_score.needs_judgment(outcome) and (ran or not suspicions):
        judgment, delta = ctx.llm.structured("critic", "critic", PatchJudgment, messages(
            "the Critic", "judge", repo=ctx.task.repo, problem=ctx.task.issue, patch=patch))
        usage = merge_usage(usage, delta)
        llm_score = judgment.score
    score = fix_score.compute(outcome, code_quality, llm_score, leave_out=expected.keys(),
                              why_left_out=expected_change.WHY)
    weighed = weigh.weigh(suspicions, ran=ran, lines=outcome.lines if outcome is not None else None,
                          crashes=(outcome.regression_crashes + outcome.repro_crashes) if outcome else [],
                          texts=texts,
                          why_not=(outcome.reason if outcome is not None else "tests are off"))
    found += weighed
    unsafe = bool(weigh.confirmed(weighed))
    if weighed:
        score["note"] = "; ".join(n for n in (score.get("note", ""), weigh.summary(weighed)) if n)
    if weighed and not ran:
        # The tests could not run here: the static finding decides, as it did before the tests.
        score = ScoreParts(fix_score=0.0, kind="none", code_quality=code_quality,
                           note=f"rejected on static evidence alone: {weigh.summary(weighed)}")
    if outcome is not None:
        crash = outcome.crash
        score["test_run"] = {
            "backend": outcome.backend, "env": outcome.env, "runnable": outcome.runnable, "reason": outcome.reason,
            "source": outcome.source, "repro_ran": outcome.repro_ran, "regression_ran": outcome.regression_ran,
            "seconds": round(outcome.seconds, 1), "timed_out": outcome.timed_out,
            "network_isolated": outcome.network_isolated, "selection": outcome.selection}
        # A selected test that crashed in the patched code, or a reproduction test still
        # raising in the repository's code, is runtime evidence, as strong as a static
        # finding: the patch is Unsafe, and the Coder gets the place that raised.
        scope = ctx.cfg.regression.runtime_scope
        summaries = evidence(outcome, patch, settings.repro_crashes)
        crashes = findings_of(summaries, scope)
        unsafe = unsafe or bool(crashes)
        found += crashes + expected_change.findings(outcome, expected) + _test_findings(
            outcome, skip=explained(summaries, scope) | set(expected))
    return score, found, unsafe, crash, usage


def _run_tests(ctx: TaskContext, state: TaskState, patch: str, issue_code: list[dict[str, str]],
               trace: list[str]) -> outcomes.TestOutcome | None:
    """The tests' verdict on ``patch``; ``issue_code`` is the replay's reproduction of the issue's
    own code (``scoring.runtime.replay.reproductions``), counted with the reproduction tests when
    ``repro.issue_code`` is on; ``trace``: the files whose executed lines the runs record."""
    mode = ctx.cfg.critic.tests
    if mode == "off":
        return None
    runner = make_runner(ctx.cfg.tests, ctx.cache_dir)
    if mode == "oracle":
        if ctx.oracle is None:
            return outcomes.TestOutcome(runnable=False, reason="oracle-tests ablation run without evaluation data",
                                     source="oracle")
        return outcomes.hidden_outcome(runner, ctx.task, ctx.oracle, ctx.worktree, patch)
    repro = state.get("repro") or {}
    accepted = [outcomes.ReproTest.from_dict(repro)] if repro.get("status") == "accepted" else []
    return outcomes.own_outcome(runner, ctx.task, ctx.worktree, patch, accepted, ctx.cfg.regression,
                             ctx.cfg.repro.timeout_s, issue_code if ctx.cfg.repro.issue_code else [], trace)


def runs_ahead(ctx: TaskContext, patch: str) -> bool:
    """Whether the patch's tests start beside the static phase: they use a copy of their own, and
    only a patch over more than one Python file has the static phase rewrite its files meanwhile
    (each put back to the base for the base side's analysis), which the test selection reads."""
    settings = ctx.cfg.critic
    if not settings.tests_ahead or settings.tests != "own" or not settings.static:
        return False
    try:
        return sum(c.is_python for c in parse_patch(patch)) <= 1
    except PatchParseError:
        return False


class TestsAhead:
    """The patch's tests run in a thread of their own while the static phase, the LLM check and the
    replay judge it (on 2 cores, a task then waits for the longer of the two, not their sum). The
    run is the one the Critic makes when nothing is suspected: no traced file, no issue code. Its
    outcome serves only when the Critic asks for exactly that run; otherwise it is dropped once
    it ends and the Critic runs the tests it asks for, so no verdict depends on the run ahead."""

    __test__ = False  # a class named Test*, not a pytest test class

    def __init__(self, ctx: TaskContext, state: TaskState, patch: str):
        self._result: list[outcomes.TestOutcome | None] = []
        self._error: list[BaseException] = []
        # A daemon: a run stopped by SIGTERM does not wait for it (its sandbox dies with us).
        self._thread = threading.Thread(target=self._run, args=(ctx, state, patch), daemon=True,
                                        name="critic-tests-ahead")
        self._thread.start()

    def _run(self, ctx: TaskContext, state: TaskState, patch: str) -> None:
        with phases.beside():
            try:
                self._result.append(_run_tests(ctx, state, patch, [], []))
            except BaseException as exc:  # raised again where the Critic would have run the tests
                self._error.append(exc)

    def join(self) -> None:
        with phases.phase("waiting on the tests run ahead"):
            self._thread.join()

    def outcome(self, issue_code: list[dict[str, str]], trace: list[str]) -> outcomes.TestOutcome | None:
        """The run ahead's outcome when it is the run asked for; else None (run the tests)."""
        self.join()
        if issue_code or trace:
            return None
        if self._error:
            raise self._error[0]
        return self._result[0] if self._result else None


def _test_findings(outcome: outcomes.TestOutcome, skip: set[str] | frozenset[str] = frozenset()) -> list[Finding]:
    """Failing reproduction tests and regressions (but those in ``skip``, already reported as
    runtime errors), for the Coder (their output is the crash context)."""
    if not outcome.runnable:
        return []
    own = outcome.source == "own"
    failing = [t for t, s in outcome.fail_to_pass.items() if s not in PASSING and t not in skip]
    found = [Finding(source="tests", rule="reproduction" if own else "fail_to_pass", severity="error",
                     message=f"{t}: {outcome.fail_to_pass[t]}" + (" (the reproduction test still fails)" if own else ""))
             for t in failing[:10]]
    broken = [t for t in outcome.broken() if t not in skip]
    found += [Finding(source="tests", rule="regression", message=f"{t} passed before the patch and now fails",
                      severity="error") for t in broken[:10]]
    return found


def should_retry(state: TaskState, max_attempts: int, threshold: float) -> bool:
    """Another round while the best patch so far is under the threshold (max_attempts rounds)."""
    if state.get("stop_reason") or rounds_done(state) >= max_attempts:
        return False
    if state.get("verdict") in ("Unsafe", "CannotApply"):
        return True
    return float(state.get("score", {}).get("fix_score") or 0.0) < threshold
