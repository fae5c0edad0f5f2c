"""The selection rule on real patches to the calc fixture, judged by its real tests and guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval.fixtures.repos import BUGGY_LINE, FIXED_LINE, OPS_BUGGY, REPRO_PATH, REPRO_TEST, WRONG_LINE, _diff
from fixgraph.config import RegressionSettings
from fixgraph.dataset import Instance
from fixgraph.repo.workspace import PatchError, RepoCache
from scoring.execution import outcomes
from scoring.execution.runner import make_runner
from scoring.static import guard
from scoring.verdict import choose_patch, fix_score, quality
from tests.helpers.testrun_helpers import local_settings

REPRO = outcomes.ReproTest(REPRO_PATH, REPRO_TEST, ("tests/test_mean_issue.py::test_mean_is_sum_over_count",))
CLAMP = "    return max(lo, min(x, hi))\n"


def ops_patch(*replacements: tuple[str, str]) -> str:
    text = OPS_BUGGY
    for old, new in replacements:
        assert old in text
        text = text.replace(old, new)
    return _diff(OPS_BUGGY, text, "calc/ops.py")


FIX = ops_patch((BUGGY_LINE, FIXED_LINE))
# The same fix, with a comment and other spacing: equal after normalization.
FIX_AGAIN = ops_patch((BUGGY_LINE, "    # no offset\n    return  sum(values)/len(values)\n"))
FIX_OTHER = ops_patch((BUGGY_LINE, "    return sum(values) / float(len(values))\n"))
FIX_BREAKS_CLAMP = ops_patch((BUGGY_LINE, FIXED_LINE), (CLAMP, "    return min(lo, max(x, hi))\n"))
WRONG = ops_patch((BUGGY_LINE, WRONG_LINE))
# Passes every test (the call sits in a branch the tests never take), and the guard flags it.
FIX_WITH_NETWORK = ops_patch((BUGGY_LINE, "    if not values:\n        import requests\n"
                                          "        requests.post('https://example.com', verify=False)\n" + FIXED_LINE))


@pytest.fixture
def judged(calc: tuple[Path, Instance], tmp_path: Path):
    """judge(name, patch) -> a Candidate with what the loop knows: apply, guard, the reproduction
    test and the existing tests, run for real."""
    mirrors, inst = calc
    wt = RepoCache(tmp_path / "cache", mirrors=mirrors).worktree(inst.repo, inst.base_commit, "select")
    runner = make_runner(local_settings(), tmp_path / "cache")

    def judge(name: str, patch: str, guard_blocks: bool = True) -> choose_patch.Candidate:
        wt.reset()
        try:
            wt.apply(patch)
        except PatchError:
            return choose_patch.Candidate(name, patch, applies=False)
        try:
            found = guard.check_patch(wt, patch)
            out = outcomes.own_outcome(runner, inst.task(), wt, patch, [REPRO], RegressionSettings())
        finally:
            wt.reset()
        assert out.repro_ran and out.regression_ran, out.reason
        before = out.pass_to_pass_before
        return choose_patch.Candidate(
            name, patch, guard_blocked=guard_blocks and bool(found), static="Safe",
            test_pass_rate=fix_score.test_pass_rate(out), no_regression=fix_score.no_regression(out),
            broke=any(s not in outcomes.PASSING and before.get(t) in outcomes.PASSING
                      for t, s in out.pass_to_pass_after.items()),
            behaviour=out.fail_to_pass | out.pass_to_pass_after)

    return judge


@pytest.mark.slow
def test_of_three_the_one_that_breaks_an_existing_test_loses(judged):
    # It fixes the bug (it contains the others' fix) and comes first; it breaks clamp().
    cands = [judged("breaks", FIX_BREAKS_CLAMP), judged("fix", FIX), judged("other", FIX_OTHER)]
    assert cands[0].broke and cands[0].no_regression == 0.5 and cands[0].test_pass_rate == 1.0
    assert not cands[1].broke and not cands[2].broke
    ranked = choose_patch.rank(cands)
    assert [r.candidate.name for r in ranked][-1] == "breaks"
    picked = choose_patch.pick(cands)
    assert picked is not None and picked.candidate.name != "breaks"


@pytest.mark.slow
def test_of_two_that_pass_everything_the_one_the_others_agree_with_wins(judged):
    cands = [judged("other", FIX_OTHER), judged("fix", FIX), judged("fix-again", FIX_AGAIN), judged("wrong", WRONG)]
    assert cands[0].test_pass_rate == cands[1].test_pass_rate == 1.0 and cands[3].test_pass_rate == 0.0
    assert choose_patch.normalize(FIX) == choose_patch.normalize(FIX_AGAIN) != choose_patch.normalize(FIX_OTHER)
    picked = choose_patch.pick(cands)
    # "other" comes first, so the tie-break alone would take it: agreement decides.
    assert picked is not None and picked.candidate.name == "fix"
    # The duplicate is counted once for the pick, and kept for the vote.
    assert picked.duplicates == ["fix-again"]
    assert [r.candidate.name for r in choose_patch.rank(cands)] == ["fix", "other", "wrong"]
    assert picked.features["soft"] > choose_patch.rank(cands)[1].features["soft"]


@pytest.mark.slow
def test_a_candidate_the_guard_blocks_is_never_delivered(judged):
    blocked = judged("network", FIX_WITH_NETWORK)
    assert blocked.guard_blocked and blocked.test_pass_rate == 1.0 and not blocked.broke
    # It has the best tests by far: still not delivered.
    cands = [blocked, judged("wrong", WRONG), judged("wrong-again", WRONG)]
    picked = choose_patch.pick(cands)
    assert picked is not None and picked.candidate.name == "wrong"
    assert choose_patch.pick([blocked]) is None
    # Under the guard's warn policy it is an ordinary candidate, and the best one.
    warned = judged("network", FIX_WITH_NETWORK, guard_blocks=False)
    picked = choose_patch.pick([warned, judged("wrong", WRONG)])
    assert picked is not None and picked.candidate.name == "network"


def scratch_patch() -> str:
    """A new script at the top of the repository, as agents leave them (reproduce.py)."""
    return _diff("", "from calc.ops import mean\nprint(mean([1, 2, 3]))\n", "reproduce.py").replace(
        "--- a/reproduce.py", "new file mode 100644\n--- /dev/null")


@pytest.mark.slow
def test_empty_and_non_applying_patches_are_never_picked_over_one_that_applies(judged):
    stale = FIX.replace("sum(values) / len(values) - 1", "sum(values) / len(values) - 7")
    cands = [choose_patch.Candidate("empty", ""), judged("stale", stale), judged("wrong", WRONG),
             choose_patch.Candidate("only-a-script", scratch_patch()), choose_patch.Candidate("stale-again", stale, applies=False)]
    assert not cands[1].applies
    # The two stale patches agree with each other, the wrong one with nobody, and it applies.
    picked = choose_patch.pick(cands)
    assert picked is not None and picked.candidate.name == "wrong"
    assert choose_patch.pick([choose_patch.Candidate("empty", ""), cands[1], cands[3]]) is None


def test_ties_are_broken_deterministically():
    a, b = choose_patch.Candidate("a", FIX_OTHER), choose_patch.Candidate("b", FIX)
    # Same signals and the same size: the earlier one, every time.
    assert [choose_patch.pick([a, b]).candidate.name for _ in range(3)] == ["a"] * 3  # type: ignore[union-attr]
    assert choose_patch.pick([b, a]).candidate.name == "b"  # type: ignore[union-attr]
    # The smaller change wins a tie on score, wherever it is.
    big = choose_patch.Candidate("big", ops_patch((BUGGY_LINE, FIXED_LINE), ('"""Sum of two numbers."""', '"""Sum."""')))
    assert choose_patch.pick([big, b], choose_patch.Weights(size=0.0)).candidate.name == "b"  # type: ignore[union-attr]
    c, d = choose_patch.Candidate("c", FIX), choose_patch.Candidate("d", FIX_AGAIN)
    picked = choose_patch.pick([d, c])
    assert picked is not None and picked.candidate.name == "d" and picked.duplicates == ["c"]


def test_normalize_ignores_headers_whitespace_comments_and_scratch_files():
    scratch = scratch_patch()
    assert choose_patch.normalize(FIX) == choose_patch.normalize(FIX_AGAIN.replace("@@ -9,7", "@@ -12,7"))
    assert choose_patch.normalize(FIX + scratch) == choose_patch.normalize(FIX)
    assert choose_patch.changed_lines(scratch) == frozenset()
    assert choose_patch.normalize(FIX) != choose_patch.normalize(WRONG)


def test_copies_of_one_change_do_not_inflate_the_agreement_that_discounts_them():
    once = [choose_patch.Candidate("wrong", WRONG), choose_patch.Candidate("fix", FIX), choose_patch.Candidate("other", FIX_OTHER)]
    thrice = once + [choose_patch.Candidate("wrong-2", WRONG), choose_patch.Candidate("wrong-3", WRONG)]
    f1, f3 = choose_patch.features(once), choose_patch.features(thrice)
    # Soft agreement counts every copy: two more copies of the wrong change raise its share...
    assert (f3[0]["soft"] or 0.0) > (f1[0]["soft"] or 0.0)
    # ...while the medoid counts each distinct change once, and twin only says that a copy exists.
    assert f3[0]["medoid"] == f1[0]["medoid"] and f3[1]["medoid"] == f1[1]["medoid"]
    assert (f1[0]["twin"], f3[0]["twin"], f3[1]["twin"]) == (0.0, 1.0, 0.0)
    # Every change here touches calc/ops.py alone: the file overlap is full.
    assert {f["files"] for f in f3} == {1.0}


def test_agreement_by_behaviour_counts_the_tests_both_ran():
    passed = {"t::a": "PASSED", "t::b": "PASSED"}
    cands = [choose_patch.Candidate("fix", FIX, behaviour=passed),
             choose_patch.Candidate("other", FIX_OTHER, behaviour=passed | {"t::c": "PASSED"}),
             choose_patch.Candidate("wrong", WRONG, behaviour={"t::a": "PASSED", "t::b": "FAILED"}),
             choose_patch.Candidate("untested", FIX_BREAKS_CLAMP)]
    f = choose_patch.features(cands)
    # fix and other agree on a and b (c ran only for other); wrong leaves b failing.
    assert (f[0]["same_tests"], f[1]["same_tests"], f[2]["same_tests"]) == (0.5, 0.5, 0.0)
    # No test ran for it: unknown, so neutral, not a disagreement.
    assert f[3]["same_tests"] is None
    w = choose_patch.Weights(size=0.0, soft=0.0, same_tests=1.0)
    picked = choose_patch.pick(cands[2:3] + cands[:2], w)
    assert picked is not None and picked.candidate.name == "fix"


DOC_ONLY = ops_patch(('"""Arithmetic mean of a non-empty sequence."""',
                      '"""Arithmetic mean of a non-empty sequence.\n\n    TODO: the result is one too small."""'),
                     (BUGGY_LINE, BUGGY_LINE.replace("\n", "  # off by one?\n")))


def test_a_patch_that_changes_only_docstrings_and_comments_is_never_delivered(calc: tuple[Path, Instance],
                                                                                tmp_path: Path):
    # SWE-agent's sympy-18189: a TODO in diophantine's docstring beside a reproduce script. It runs
    # as the base does; the smaller size would otherwise win it the pick.
    mirrors, inst = calc
    wt = RepoCache(tmp_path / "cache", mirrors=mirrors).worktree(inst.repo, inst.base_commit, "doc")
    found = {}
    for name, patch in (("doc", DOC_ONLY + scratch_patch()), ("fix", FIX_OTHER)):
        wt.apply(patch)
        try:
            found[name] = quality.code_quality(wt, patch)[1]["changes_code"]
        finally:
            wt.reset()
    assert found == {"doc": False, "fix": True}
    doc = choose_patch.Candidate("doc", DOC_ONLY + scratch_patch(), changes_code=found["doc"])
    fix = choose_patch.Candidate("fix", FIX_OTHER, changes_code=found["fix"])
    assert choose_patch.changed_lines(doc.patch) and not choose_patch.deliverable(doc)
    picked = choose_patch.pick([doc, fix])
    assert picked is not None and picked.candidate.name == "fix"
    assert choose_patch.pick([doc]) is None
    # From the loop's record: the Critic keeps the figure in the score's quality_detail.
    attempt = {"number": 1, "patch": DOC_ONLY, "verdict": "Safe",
               "score": {"code_quality": 1.0, "quality_detail": {"changes_code": False}}}
    assert choose_patch.best_attempt([attempt], guard_blocks=True) is None  # type: ignore[list-item]


@pytest.mark.parametrize("after,changes", [
    ('def f(x):\n    """Other words."""\n    return x  # a note\n', False),
    ('def f(x):\n    return x\n', False),  # the docstring dropped
    ('def f(x):\n    """Doc."""\n    return x + 0\n', True),
    ('def f(x:\n', True),  # no longer parses
])
def test_changes_code_sets_docstrings_comments_and_spacing_aside(after: str, changes: bool):
    from scoring.static.patchinfo import changes_code

    before = 'def f(x):\n    """Doc."""\n    return x\n'
    patch = _diff(before, after, "pkg/mod.py")
    assert changes_code(patch, {"pkg/mod.py": before}, {"pkg/mod.py": after}) is changes
    # Any file that is not Python, and a new module, count as a change; a scratch script does not.
    assert changes_code(_diff("a\n", "b\n", "pkg/data.cfg"), {}, {}) is True
    assert changes_code(scratch_patch(), {}, {"reproduce.py": "print(1)\n"}) is False


def test_the_change_whose_vocabulary_the_others_share_wins_when_no_line_is_shared():
    # Three distinct changes of the buggy line: each shares only the removed line with the
    # others, so line agreement cannot tell them apart; two of them spell the division as the
    # third does, and "float" shares the most tokens with both.
    capped = choose_patch.Candidate("max", ops_patch((BUGGY_LINE, "    return max(sum(values) / len(values) - 1, 0)\n")))
    fsum = choose_patch.Candidate("fsum", ops_patch((BUGGY_LINE, "    return math.fsum(values) / len(values)\n")))
    floated = choose_patch.Candidate("float", ops_patch((BUGGY_LINE, "    return sum(values) / float(len(values))\n")))
    f = choose_patch.features([capped, fsum, floated])
    assert len({(x["medoid"], x["soft"], x["size"]) for x in f}) == 1
    assert (f[2]["tokens"] or 0.0) > (f[0]["tokens"] or 0.0) == (f[1]["tokens"] or 0.0)
    assert choose_patch.change_tokens(floated.patch) >= {"sum", "values", "/", "float", "len", "-", "1"}
    # Without the token signal the tie-break takes the first; with it, the consensus.
    assert choose_patch.pick([capped, fsum, floated], choose_patch.Weights(tokens=0.0)).candidate.name == "max"  # type: ignore[union-attr]
    assert choose_patch.pick([capped, fsum, floated]).candidate.name == "float"  # type: ignore[union-attr]
    # Each other distinct change counts once: copies of the capped change move nobody's share.
    copies = [capped, fsum, floated, choose_patch.Candidate("max-2", capped.patch), choose_patch.Candidate("max-3", capped.patch)]
    assert [x["tokens"] for x in choose_patch.features(copies)[:3]] == [x["tokens"] for x in f]
