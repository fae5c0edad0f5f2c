"""The loop's own test signal: a reproduction test written from the issue, the repository's
existing tests, and nothing from the evaluation's hidden data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.repos import REPRO_PATH, REPRO_TEST, REPRO_TEST_PASSING, calc_script, make_calc_repo
from fixgraph.dataset import Instance
from fixgraph.models.scripted import ScriptedChatModel
from tests.conftest import read_record
from tests.helpers.run_graph import run_tasks


def _run(tmp_path: Path, cfg_factory, script: dict[str, Any], run_id: str = "loop", **overrides: Any):
    mirrors = tmp_path / "mirrors"
    inst = Instance.model_validate(make_calc_repo(mirrors))
    cfg = cfg_factory("redo", **overrides)
    model = ScriptedChatModel(script=script)
    summary = run_tasks([inst], cfg, run_id=run_id, repos=mirrors, model_factory=lambda role: model, progress=False)
    return cfg, inst, model, summary, read_record(cfg, run_id, inst.instance_id)


@pytest.mark.slow
def test_wrong_patch_leaves_the_reproduction_test_failing_and_the_coder_sees_why(tmp_path, cfg_factory):
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, calc_script(first_attempt="wrong"))
    assert (summary.finished, summary.patched) == (1, 1)
    # The Reproducer's test failed at the base and was accepted.
    repro = rec["repro"]
    assert repro["status"] == "accepted" and repro["path"] == REPRO_PATH and repro["tries"] == 1
    assert repro["failing"] == ["tests/test_mean_issue.py::test_mean_is_sum_over_count"]
    assert "assert 1.0 == 2" in repro["base_output"]
    first, second = rec["attempts"]
    # Attempt 1 passes static analysis but the reproduction test still fails: the Critic says so.
    assert first["verdict"] == "Safe" and first["score"]["kind"] == "tests"
    assert first["score"]["test_pass_rate"] == 0.0 and first["score"]["no_regression"] == 1.0
    assert first["score"]["fix_score"] < cfg.critic.fix_score_threshold
    assert any(f["source"] == "tests" and f["rule"] == "reproduction" for f in first["findings"])
    assert "assert 1.5 == 2" in first["crash_context"]
    # The existing tests of calc/ops.py were selected from the patch alone, and kept passing.
    selection = first["score"]["test_run"]["selection"]
    assert selection["files"] == ["tests/test_ops.py"]
    assert set(first["score"]["pass_to_pass"]) == {"tests/test_ops.py::test_add", "tests/test_ops.py::test_clamp"}
    # The Coder's second prompt carried the failing test's output.
    prompts = model.prompts_for("CodeChange")
    assert len(prompts) == 2 and "assert 1.5 == 2" in prompts[1] and "assert 1.5 == 2" not in prompts[0]
    assert REPRO_TEST.strip() in prompts[0]  # the Coder is shown the test it must make pass
    # Attempt 2 makes it pass; it is delivered, and the .diff holds the fix only.
    assert second["score"]["test_pass_rate"] == 1.0 and second["score"]["fix_score"] >= 0.8
    assert rec["published"]["attempt"] == 2 and rec["tests_source"] == "own"
    diff = (cfg.predictions_dir / f"{inst.instance_id}.diff").read_text()
    assert "calc/ops.py" in diff and "test_mean_issue" not in diff and "tests/" not in diff


@pytest.mark.slow
def test_a_test_that_passes_at_the_base_is_refused_with_its_output_and_retried(tmp_path, cfg_factory):
    drafts = [{"path": "tests/test_add_ok.py", "content": REPRO_TEST_PASSING},
              {"path": "calc/ops.py", "content": REPRO_TEST},  # not a test file (and the module itself)
              {"path": "tests/test_bad.py", "content": "def test_x(:\n"},  # not Python
              {"path": REPRO_PATH, "content": REPRO_TEST}]
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, calc_script(False, repro_drafts=drafts),
                                          **{"repro.max_tries": 4})
    repro = rec["repro"]
    assert repro["status"] == "accepted" and repro["tries"] == 4
    verdicts = [h["verdict"] for h in repro["history"]]
    assert verdicts[0] == "it passes on the unfixed code, so it does not reproduce the issue"
    assert "not a test file name" in verdicts[1] and "not valid Python" in verdicts[2] and verdicts[3] == "accepted"
    prompts = model.prompts_for("ReproTestDraft")
    assert "does not reproduce the issue" in prompts[1] and "1 passed" in prompts[1]
    assert rec["attempts"][-1]["score"]["kind"] == "tests"


@pytest.mark.slow
def test_without_a_reproduction_test_the_task_goes_on_and_fix_score_says_so(tmp_path, cfg_factory):
    drafts = [{"path": "tests/test_add_ok.py", "content": REPRO_TEST_PASSING}] * 2
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, calc_script(False, repro_drafts=drafts),
                                          **{"repro.max_tries": 2})
    assert summary.patched == 1
    assert rec["repro"]["status"] == "none" and rec["repro"]["tries"] == 2
    assert "does not reproduce" in rec["repro"]["reason"]
    score = rec["attempts"][0]["score"]
    # The existing tests still ran; the missing rate is the LLM's judgment, and the note says so.
    assert score["kind"] == "partial" and score["test_pass_rate"] is None and score["no_regression"] == 1.0
    assert "test_pass_rate from the LLM's judgment (0.90): no reproduction test" in score["note"]
    assert abs(score["fix_score"] - (0.5 * 0.9 + 0.3 * 1.0 + 0.2 * score["code_quality"])) < 1e-6


@pytest.mark.slow
def test_a_hanging_reproduction_test_is_killed_and_recorded(tmp_path, cfg_factory):
    hang = "import time\n\n\ndef test_waits():\n    time.sleep(600)\n"
    drafts = [{"path": "tests/test_hang.py", "content": hang}]
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, calc_script(False, repro_drafts=drafts),
                                          **{"repro.max_tries": 1, "repro.timeout_s": 3})
    assert rec["repro"]["status"] == "none" and "timed out" in rec["repro"]["reason"]
    assert "killed after the 3s wall-clock limit" in rec["repro"]["history"][0]["output"]
    assert summary.patched == 1


@pytest.mark.slow
def test_an_llm_reply_outside_the_repository_is_refused(tmp_path, cfg_factory):
    drafts = [{"path": "../outside/test_x.py", "content": REPRO_TEST}, {"path": REPRO_PATH, "content": REPRO_TEST}]
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, calc_script(False, repro_drafts=drafts))
    assert "outside the repository" in rec["repro"]["history"][0]["verdict"]
    assert rec["repro"]["status"] == "accepted"
    assert not (tmp_path / "outside").exists()


@pytest.mark.slow
def test_the_test_run_is_the_repositorys_own_not_fixgraphs(tmp_path, cfg_factory):
    """No fixgraph configuration reaches the instance's tests: rootdir is the run's copy, and the
    run leaves nothing in fixgraph's checkout."""
    project = Path(__file__).resolve().parents[2]
    before = set(p.name for p in project.iterdir())
    cfg, inst, model, summary, rec = _run(tmp_path, cfg_factory, calc_script(False))
    output = rec["repro"]["base_output"]
    assert "rootdir: " + str(project) not in output and "rootdir: ." in output
    assert "timeout: 300" not in output  # fixgraph's own pytest settings did not apply
    assert set(p.name for p in project.iterdir()) <= before | {".pytest_cache"}


def _tree_text(root: Path) -> str:
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and ".git" not in path.parts and "envs" not in path.parts:
            out.append(path.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(out)


class _PRRecorder:
    """The bot's delivery without a remote: what the pull request would hold (body, files)."""

    def __init__(self, cfg) -> None:  # noqa: ANN001
        self.cfg = cfg
        self.seen: list[str] = []

    def publish(self, outcome) -> dict[str, Any]:  # noqa: ANN001
        from fixgraph.github.pr import render_body

        self.seen.append(render_body(outcome, self.cfg, 1) + json.dumps(outcome.repro_test) + outcome.patch)
        return {"kind": "pr", "ok": True}


@pytest.mark.slow
@pytest.mark.parametrize("bot", [False, True], ids=["eval-mode", "bot"])
def test_evaluation_data_never_reaches_the_pipeline(tmp_path, bot):
    """The same task twice, once with its evaluation data and once with garbage in its place: every
    prompt, the record (timing aside) and what is delivered (the .diff, or the pull request) are
    identical, and a canary planted in the evaluation fields appears nowhere the run wrote or sent."""
    from tests.conftest import make_config

    canary = "CANARY-7f3a9e-HIDDEN"
    runs = {}
    for name, garbage in (("real", False), ("garbage", True)):
        root = tmp_path / name
        mirrors = root / "mirrors"
        raw = make_calc_repo(mirrors)
        if garbage:
            raw.update(patch=f"diff --git a/{canary} b/{canary}\n", test_patch=canary,
                       FAIL_TO_PASS=json.dumps([canary]), PASS_TO_PASS=json.dumps([canary + "2"]))
        else:
            raw.update(test_patch=raw["test_patch"] + f"\n# {canary}\n",
                       FAIL_TO_PASS=json.dumps(json.loads(raw["FAIL_TO_PASS"]) + [canary]))
        inst = Instance.model_validate(raw)
        cfg = make_config(root, "redo", **({"eval_mode": False} if bot else {}))
        recorder = _PRRecorder(cfg) if bot else None
        model = ScriptedChatModel(script=calc_script(first_attempt="wrong"))
        run_tasks([inst], cfg, run_id="canary", repos=mirrors, model_factory=lambda role, m=model: m,
                  progress=False, publisher=recorder)
        record = read_record(cfg, "canary", inst.instance_id)
        prompts = [_strip_seconds("\n".join(str(m.content) for m in msgs)) for _, msgs in model.seen]
        for key in ("seconds", "started_at", "finished_at", "billed"):
            record.pop(key, None)
        text = _strip_seconds(json.dumps(record).replace(str(root), "<root>"))
        delivered = recorder.seen[0] if recorder else (cfg.predictions_dir / f"{inst.instance_id}.diff").read_text()
        runs[name] = (prompts, text, delivered)
        assert canary not in "\n".join(prompts) + delivered
        assert canary not in _tree_text(root / "runs") + _tree_text(root / "predictions") + _tree_text(root / "cache")
    assert runs["real"] == runs["garbage"]
    if bot:  # the pull request carries the reproduction test that failed before and passes after
        assert "test_mean_is_sum_over_count" in runs["real"][2] and "### Reproduction test" in runs["real"][2]


def _strip_seconds(text: str) -> str:
    import re

    text = re.sub(r'"(\w*seconds|s)": [0-9.]+', '"seconds": 0', text)
    return re.sub(r" in [0-9.]+s ", " in 0s ", text)  # pytest's own timing line


DATA_TEST = '''import json
from pathlib import Path

from calc.ops import mean


def test_mean_of_the_recorded_case():
    case = json.loads((Path(__file__).parent / "data" / "mean_case.json").read_text())
    assert mean(case["values"]) == case["mean"]
'''
DATA_FILE = {"path": "tests/data/mean_case.json", "content": '{"values": [1, 2, 3], "mean": 2}\n'}


@pytest.mark.slow
@pytest.mark.parametrize("bot", [False, True], ids=["eval-mode", "bot"])
def test_a_reproduction_test_brings_the_data_file_it_reads(tmp_path, cfg_factory, bot):
    """A test that reads a data file gives it in ``files``: it is written beside the test at the base
    and after every patch, and the pull request carries both. A data file may not be one the
    repository already has (that would be a patch of the code under test)."""
    drafts = [{"path": "tests/test_mean_case.py", "content": DATA_TEST,
               "files": [{"path": "calc/ops.py", "content": "def mean(v):\n    return 2\n"}]},
              {"path": "tests/test_mean_case.py", "content": DATA_TEST, "files": [DATA_FILE]}]
    overrides: dict[str, Any] = {"eval_mode": False} if bot else {}
    mirrors = tmp_path / "mirrors"
    inst = Instance.model_validate(make_calc_repo(mirrors))
    cfg = cfg_factory("redo", **overrides)
    recorder = _PRRecorder(cfg) if bot else None
    model = ScriptedChatModel(script=calc_script(False, repro_drafts=drafts))
    run_tasks([inst], cfg, run_id="data", repos=mirrors, model_factory=lambda role: model, progress=False,
              publisher=recorder)
    rec = read_record(cfg, "data", inst.instance_id)
    repro = rec["repro"]
    assert "already exists: a data file must be a new file" in repro["history"][0]["verdict"]
    assert repro["status"] == "accepted" and repro["tries"] == 2 and repro["files"] == [DATA_FILE]
    assert repro["failing"] == ["tests/test_mean_case.py::test_mean_of_the_recorded_case"]
    assert "assert 1.0 == 2" in repro["base_output"]  # it read the file and failed on the bug
    # After the fix the Critic's run wrote the data file too: the test passes.
    assert rec["attempts"][-1]["score"]["test_pass_rate"] == 1.0
    if recorder:
        delivered = recorder.seen[0]
        assert "tests/data/mean_case.json" in delivered and '\\"mean\\": 2' in delivered
        assert "It reads `tests/data/mean_case.json`, also new." in delivered
    else:
        diff = (cfg.predictions_dir / f"{inst.instance_id}.diff").read_text()
        assert "mean_case" not in diff


def _run_of(statuses: dict[str, str], log: str = "", records: list[dict[str, Any]] | None = None):
    from scoring.execution.testenv import SuiteRun

    return SuiteRun(statuses=statuses, log=log, seconds=1.0, crash_records=records or [], root="/tmp/run-x")


INTERNAL = """INTERNALERROR> Traceback (most recent call last):
INTERNALERROR>   File "/venv/lib/python3.9/site-packages/pluggy/callers.py", line 187, in _multicall
INTERNALERROR>   File "/tmp/run-x/src/_pytest/_io/saferepr.py", line 23, in _format_repr_exception
INTERNALERROR>   File "testing/io/test_saferepr.py", line 166, in __getattribute__
INTERNALERROR> RuntimeError
"""


def test_a_session_that_crashes_in_the_repositorys_code_reproduces_as_a_whole_file():
    """pytest's own bugs can crash the session before any test is reported (pytest-7168): the
    file as a whole is then the failing test, and it passes when every test of it passes."""
    from agents.reproducer import judge_run
    from scoring.execution.outcomes import ReproTest

    path = "testing/io/test_saferepr.py"
    assert judge_run(_run_of({}, INTERNAL), path) == ("", [path])
    # A crash whose only repository frames are the test file's own is the test's doing.
    only_test = "\n".join(line for line in INTERNAL.splitlines() if "_pytest" not in line)
    assert judge_run(_run_of({}, only_test), path)[0].startswith("it did not run")
    test = ReproTest(path, "", (path,))
    assert test.statuses_after(_run_of({f"{path}::test_a": "PASSED", f"{path}::test_b": "PASSED"})) == {path: "PASSED"}
    assert test.statuses_after(_run_of({f"{path}::test_a": "PASSED", f"{path}::test_b": "FAILED"})) == {path: "FAILED"}
    assert test.statuses_after(_run_of({f"{path}::test_a": "PASSED"}, INTERNAL)) == {path: "FAILED"}
    assert test.statuses_after(_run_of({})) == {path: "FAILED"}


def test_a_test_that_fails_only_for_want_of_the_network_is_refused():
    from agents.reproducer import judge_run

    path = "test_requests.py"
    offline = {"nodeid": f"{path}::test_get", "type": "ConnectionError",
               "message": "('Connection aborted.', gaierror(-3, 'Temporary failure in name resolution'))"}
    real = {"nodeid": f"{path}::test_method", "type": "AssertionError", "message": "assert 'b\\'GET\\'' == 'GET'"}
    why, failing = judge_run(_run_of({f"{path}::test_get": "FAILED"}, records=[offline]), path)
    assert "needs the network" in why and failing == []
    # Beside a test that fails on the bug, the offline one is simply not counted.
    statuses = {f"{path}::test_get": "FAILED", f"{path}::test_method": "FAILED", f"{path}::test_ok": "PASSED"}
    assert judge_run(_run_of(statuses, records=[offline, real]), path) == ("", [f"{path}::test_method"])


NETWORK_TEST = '''import urllib.request

from calc.ops import mean


def test_mean_served_remotely():
    urllib.request.urlopen("http://example.com/mean?values=1,2,3", timeout=5)
    assert mean([1, 2, 3]) == 2
'''


@pytest.mark.slow
def test_a_test_that_wants_the_network_is_refused_also_when_its_base_run_is_cached(tmp_path, cfg_factory):
    """Tests run offline: a test that fails only because it cannot connect does not reproduce the
    issue. The verdict reads the crash records, so a second run of the task, which finds the base run
    in the cache, must refuse it the same way."""
    drafts = [{"path": "tests/test_mean_remote.py", "content": NETWORK_TEST},
              {"path": REPRO_PATH, "content": REPRO_TEST}]
    mirrors = tmp_path / "mirrors"
    inst = Instance.model_validate(make_calc_repo(mirrors))
    cfg = cfg_factory("redo", **{"repro.max_tries": 2})
    for run_id in ("first", "cached"):
        model = ScriptedChatModel(script=calc_script(False, repro_drafts=drafts))
        run_tasks([inst], cfg, run_id=run_id, repos=mirrors, model_factory=lambda role, m=model: m, progress=False)
        repro = read_record(cfg, run_id, inst.instance_id)["repro"]
        assert "needs the network" in repro["history"][0]["verdict"], (run_id, repro["history"][0])
        assert repro["status"] == "accepted" and repro["path"] == REPRO_PATH
        assert "needs the network" in model.prompts_for("ReproTestDraft")[1]


@pytest.mark.parametrize("files,expected", [
    ({"tox.ini": "[tox]\nenvlist = py37\n\n[pytest]\npython_files = test_*.py *_test.py testing/*/*.py\n"},
     ["testing/*/*.py"]),
    ({"setup.cfg": "[tool:pytest]\npython_files =\n    check_*.py\n"}, ["check_*.py"]),
    ({"pyproject.toml": '[tool.pytest.ini_options]\npython_files = ["spec_*.py"]\n'}, ["spec_*.py"]),
    ({"pyproject.toml": "[tool.pytest.ini_options\nbroken", "tox.ini": "[pytest\nbroken"}, []),
    ({}, []),
])
def test_the_repositorys_own_pytest_patterns_name_its_test_files(tmp_path, files, expected):
    """pytest's repository collects ``testing/*/*.py`` (pytest-5221's tests live in
    ``testing/python/fixtures.py``): a reproduction test there is a test file. The patterns are
    read from the base commit."""
    from eval.fixtures.repos import git_commit_all
    from fixgraph.repo.workspace import RepoCache
    from scoring.execution.choose_tests import matches_patterns, python_files_patterns

    repo = tmp_path / "mirrors" / "fixture+patterns"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "__init__.py").write_text("")
    for name, text in files.items():
        (repo / name).write_text(text)
    base = git_commit_all(repo, "base")
    cache = RepoCache(tmp_path / "cache", tmp_path / "mirrors")
    wt = cache.worktree("fixture/patterns", base, "patterns")
    patterns = python_files_patterns(wt)
    assert patterns == expected
    if expected == ["testing/*/*.py"]:
        assert matches_patterns("testing/python/fixtures.py", patterns)
        assert not matches_patterns("src/_pytest/fixtures.py", patterns)
