"""Tests that need the internet are set aside, never graded: the evidence is the run without the
patch (real fixture repo, real pytest, real sandbox), the same for every prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval import grade
from eval.hidden import run_hidden
from scoring.execution.offline_tests import NEEDS_INTERNET, NETWORK_ERROR, needs_internet
from scoring.execution.outcomes import BASE_CRASH_RECORDS, _kept_records
from scoring.execution.runner import make_runner
from scoring.execution.testenv import SuiteRun
from tests.helpers.testrun_helpers import CALC, calc_instance, diff_for, local_settings

ADD = "tests/test_calc.py::test_add"
ONLINE = "tests/test_calc.py::test_fetch_online"
# Fails on a name lookup here whatever the patch: ``.invalid`` never resolves, and the sandbox has no DNS.
ONLINE_TEST = '''

def test_fetch_online():
    import urllib.request
    urllib.request.urlopen("http://example.invalid/", timeout=10)
'''


def _record(nodeid: str, etype: str, message: str) -> dict[str, str]:
    return {"nodeid": nodeid, "type": etype, "message": message}


def test_only_a_failure_at_the_base_with_a_network_error_is_set_aside() -> None:
    f = "test_requests.py::RequestsTestCase"
    base = SuiteRun(
        statuses={f"{f}::test_dns": "FAILED", f"{f}::test_unroutable": "FAILED", f"{f}::test_refused": "FAILED",
                  f"{f}::test_assert": "FAILED", f"{f}::test_passes_online": "PASSED",
                  "t.py::test_p[a b]": "ERROR"},
        log="", seconds=0.0,
        crash_records=[
            _record(f"{f}::test_dns", "ConnectionError", "HTTPSConnectionPool(host='httpbin.org', port=443): Max "
                    "retries exceeded with url: /get (Caused by <class 'socket.gaierror'>: [Errno -2] Name or "
                    "service not known)"),
            _record(f"{f}::test_unroutable", "ConnectionError",
                    "('Connection aborted.', OSError(101, 'Network is unreachable'))"),
            _record(f"{f}::test_refused", "ConnectionError", "[Errno 111] Connection refused"),
            _record(f"{f}::test_assert", "AssertionError", "assert 1 == 2"),
            _record(f"{f}::test_passes_online", "gaierror", "a record of a test that passed says nothing"),
            _record("t.py::test_p[a b]", "gaierror", "[Errno -3] Temporary failure in name resolution"),
            _record("online_at_import.py", "gaierror", "[Errno -3] Temporary failure in name resolution"),
        ])
    ids = [f"{f}::{n}" for n in ("test_dns", "test_unroutable", "test_refused", "test_assert",
                                 "test_passes_online")]
    ids += ["t.py::test_p[a", "online_at_import.py::test_never_collected"]  # listed cut at its space; not reported
    assert needs_internet(base, ids) == {ids[0]: NEEDS_INTERNET, ids[1]: NEEDS_INTERNET, ids[5]: NEEDS_INTERNET,
                                         ids[6]: NEEDS_INTERNET}
    # a cached base run keeps every network failure, past the records it otherwise keeps
    many = [_record(f"t.py::test_{i}", "AssertionError", "") for i in range(BASE_CRASH_RECORDS + 5)]
    kept = _kept_records([*many, base.crash_records[0]])
    assert len(kept) == BASE_CRASH_RECORDS + 1 and kept[-1] == base.crash_records[0]


@pytest.mark.slow
def test_the_hidden_tests_set_aside_what_needs_the_internet(tmp_path: Path) -> None:
    inst, wt, _ = calc_instance(tmp_path, extra_tests=ONLINE_TEST, f2p=[ADD, ONLINE])
    fix = diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a - b", "return a + b"))
    runner = make_runner(local_settings(), tmp_path / "cache")
    out = run_hidden(runner, inst, wt, fix)
    assert out.runnable, out.reason
    assert out.fail_to_pass == {ADD: "PASSED"} and out.not_runnable_here == {ONLINE: NEEDS_INTERNET}
    assert any(n.startswith(f"1 tests not runnable here ({NEEDS_INTERNET})") for n in out.notes)
    only = inst.model_copy(update={"instance_id": "fixture__calc-2", "FAIL_TO_PASS": [ONLINE]})
    out = run_hidden(runner, only, wt, fix)
    assert not out.runnable and out.reason == f"every FAIL_TO_PASS test is not runnable here: {NEEDS_INTERNET}"


@pytest.mark.slow
def test_the_grader_sets_aside_what_fails_offline_at_the_base_for_every_prediction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inst, _, _ = calc_instance(tmp_path, extra_tests=ONLINE_TEST, f2p=[ADD, ONLINE])
    only = inst.model_copy(update={"instance_id": "fixture__calc-2", "FAIL_TO_PASS": [ONLINE]})
    wrong = inst.model_copy(update={"instance_id": "fixture__calc-3"})
    dataset = tmp_path / "data.jsonl"
    dataset.write_text("".join(json.dumps(i.model_dump()) + "\n" for i in (inst, only, wrong)))
    fix = diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a - b", "return a + b"))
    still_wrong = diff_for(tmp_path, "calc.py", CALC, CALC.replace("return a - b", "return a * b"))
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"instance_id": i, "model_name_or_path": "m", "model_patch": p}) + "\n"
                             for i, p in ((inst.instance_id, fix), (only.instance_id, fix),
                                          (wrong.instance_id, still_wrong))))
    assert grade.main(["--predictions", str(preds), "--dataset", str(dataset), "--repos", str(tmp_path / "mirrors"),
                       "--backend", "local", "--cache-dir", str(tmp_path / "gcache"), "--logs", str(tmp_path / "logs"),
                       "--report-dir", str(tmp_path / "reports"), "--run-id", "r", "--timeout", "120",
                       "--no-progress"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "resolved=1 unresolved=1 patch_failed=0 not_runnable=1 empty=0 of=3"
    assert out[0] == (f"not runnable here: {only.instance_id}: "
                      f"every FAIL_TO_PASS test is not runnable here: {NEEDS_INTERNET}")
    logs = tmp_path / "logs" / "r" / "m"

    def graded(iid: str) -> tuple[dict[str, object], dict[str, dict[str, list[str]]]]:
        rec = json.loads((logs / iid / "grade.json").read_text())
        return rec, json.loads((logs / iid / "report.json").read_text())[iid]["tests_status"]

    rec, status = graded(inst.instance_id)
    assert rec["status"] == "resolved" and rec["not_runnable_here"] == {ONLINE: NEEDS_INTERNET}
    assert status["FAIL_TO_PASS"] == {"success": [ADD], "failure": []}  # neither a pass nor a failure
    assert NETWORK_ERROR.search((logs / inst.instance_id / "test_output.txt").read_text())  # it did fail offline
    rec, status = graded(wrong.instance_id)  # the test that runs here is still graded
    assert rec["status"] == "unresolved" and rec["not_runnable_here"] == {ONLINE: NEEDS_INTERNET}
    assert status["FAIL_TO_PASS"] == {"success": [], "failure": [ADD]}
    rec, _ = graded(only.instance_id)
    assert rec["status"] == "not_runnable" and rec["not_runnable_here"] == {ONLINE: NEEDS_INTERNET}
    summary = json.loads((tmp_path / "reports" / "m.r.json").read_text())
    assert list(summary["not_runnable_ids"]) == [only.instance_id]
