"""eval.critic_bench --repro-standin (the oracle-tests ablation) on the django-layout fixture: the
instance's own test, accepted by the Reproducer, runs in the Critic's test phase on each candidate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.critic_bench import main
from eval.fixtures.django_repo import FILES, REPRO_PATH, REPRO_TEST, TEXT, TEXT_FIXED
from tests.helpers.testrun_helpers import diff_for, local_config, make_repo

pytestmark = pytest.mark.slow

FAILING = "test_zero_width (utils_tests.test_wrap_zero.WrapZeroWidthTests)"
# wrap("ab", 0) raises ValueError at the base (range's step 0); this candidate a TypeError.
TEXT_TYPEERROR = TEXT.replace("range(0, len(text), width)", "range(0, len(text), width or None)")


def test_the_standin_runs_as_the_reproduction_test_and_every_line_and_row_says_oracle_tests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, commit = make_repo(tmp_path, FILES, repo="django/django")
    gold = diff_for(tmp_path, "django/utils/text.py", TEXT, TEXT_FIXED)
    dataset, preds = tmp_path / "lite.jsonl", tmp_path / "preds.jsonl"
    dataset.write_text(json.dumps({
        "instance_id": "django__django-1", "repo": "django/django", "base_commit": commit, "version": "4.0",
        "problem_statement": "wrap(text, 0) raises instead of one character a line", "patch": gold,
        "test_patch": diff_for(tmp_path, REPRO_PATH, None, REPRO_TEST),
        "FAIL_TO_PASS": json.dumps([FAILING]), "PASS_TO_PASS": "[]"}) + "\n")
    candidates = [("raises", "runtime_error", diff_for(tmp_path, "django/utils/text.py", TEXT, TEXT_TYPEERROR)),
                  ("gold", "resolved", gold)]
    preds.write_text("".join(json.dumps({"instance_id": "django__django-1", "system": system, "model_patch": patch,
                                         "failure_kind": kind}) + "\n" for system, kind, patch in candidates))
    rows = tmp_path / "rows.jsonl"
    common = ["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(mirrors), "--runtime",
              "--config", str(local_config(tmp_path, cache="envs")), "--cache-dir", str(tmp_path / "cache"),
              "-o", str(rows)]

    assert main([*common, "--repro-standin"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines() + captured.err.strip().splitlines()
    assert lines and all(line.startswith("[oracle-tests] ") for line in lines), lines
    table = {line.split()[1]: line.split()[2:7] for line in captured.out.splitlines() if " ours_static" in line
             or " repro_raises" in line}
    # The candidate's TypeError is in no existing test and the issue has no code to replay: the
    # reproduction test raising it in django/utils/text.py (read from the runner's ERROR block)
    # flags the runtime column, as it makes the Critic's verdict Unsafe (critic.repro_crashes).
    assert table["ours_static+runtime"] == ["2", "1", "0", "0", "1"]
    assert table["repro_raises"] == ["2", "1", "0", "0", "1"]
    assert table["ours_static+runtime|repro_raises"] == ["2", "1", "0", "0", "1"]
    assert "F1_repro_raises=1.000 P_repro_raises=1.000" in captured.out.strip().splitlines()[-1]
    recs = {r["system"]: r for r in map(json.loads, rows.read_text().splitlines())}
    assert {r["ablation"] for r in recs.values()} == {"oracle-tests"}
    for system, status in (("raises", "ERROR"), ("gold", "PASSED")):
        repro = recs[system]["runtime"]["repro"]
        assert (repro["status"], repro["path"], repro["ran"]) == ("accepted", REPRO_PATH, True)
        [(test, after)] = repro["after"].items()
        assert test.startswith(FAILING.removesuffix(")")) and after == status
    [crash] = recs["raises"]["runtime"]["repro"]["crashes"]
    assert crash["type"] == "TypeError" and crash["frame"]["file"] == "django/utils/text.py" and crash["repro"]
    assert recs["gold"]["runtime"]["repro"]["crashes"] == []

    # Rows of the ablation are never counted as the Critic's own, nor the other way round.
    assert main([*common, "--resume"]) == 2
    assert "judged with --repro-standin (oracle-tests)" in capsys.readouterr().err
    assert main([*common[:6], *common[7:], "--repro-standin"]) == 2  # no --runtime
    assert "needs --runtime" in capsys.readouterr().err
