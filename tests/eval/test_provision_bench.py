"""eval.provision_bench's pieces that need no build: the hidden-pyenv environment, the env records
it reads, its table, and a bad dataset told in one line."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from eval import provision_bench
from eval.fakes.python_mirror import PackError, pack


def test_the_child_sees_no_pyenv_and_the_mirror_s_list(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYENV_VERSION", "3.9.18")
    monkeypatch.setenv("UV_PYTHON_INSTALL_MIRROR", "https://example.invalid")
    env = provision_bench.hidden_pyenv_env(tmp_path / "dl.json")
    assert env["PYENV_ROOT"] == "/nonexistent" and "PYENV_VERSION" not in env
    assert env["UV_PYTHON_DOWNLOADS_JSON_URL"] == str(tmp_path / "dl.json") and "UV_PYTHON_INSTALL_MIRROR" not in env
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]


def test_rows_are_told_with_the_interpreter_their_env_used(tmp_path: Path) -> None:
    env = tmp_path / "envs" / "psf+requests__2.7"
    env.mkdir(parents=True)
    (env / "env.json").write_text(json.dumps({"repo": "psf/requests", "version": "2.7", "python_version": "3.9",
                                              "python_how": "provisioned", "seconds": 57.2,
                                              "python": "/c/pythons/cpython-3.9/bin/python3.9"}))
    (tmp_path / "envs" / "broken").mkdir()
    (tmp_path / "envs" / "broken" / "env.json").write_text("{cut")
    records = provision_bench.env_records(tmp_path)
    assert list(records) == [("psf/requests", "2.7")]
    rows = [{"instance_id": "psf__requests-2674", "repo": "psf/requests", "version": "2.7", "runnable": True,
             "gold_fix_score": 0.958, "empty_test_pass_rate": 0.0, "seconds_gold": 100.0, "seconds_empty": 64.0},
            {"instance_id": "x__y-1", "repo": "x/y", "version": "1.0", "runnable": False,
             "reason": "needs Python 3.6 for y 1.0"}]
    lines = provision_bench.table(rows, {"psf__requests-2674": "3.9", "x__y-1": "3.6"}, records)
    assert "provisioned" in lines[1] and "0.958" in lines[1] and lines[1].endswith("/c/pythons/cpython-3.9/bin/python3.9")
    assert lines[-1] == "    not runnable: needs Python 3.6 for y 1.0"


def test_a_bad_dataset_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = provision_bench.main(["--dataset", str(tmp_path / "none.jsonl"), "--repos", str(tmp_path),
                                 "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err


def test_an_install_without_an_interpreter_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="no bin/python3.X under"):
        pack(tmp_path, tmp_path / "out")


def test_a_machine_without_the_rows_pythons_gets_one_line_and_exit_2(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"instance_id": "psf__requests-2674", "repo": "psf/requests", "version": "2.7",
                                "base_commit": "0" * 40, "problem_statement": "x", "patch": "",
                                "test_patch": "", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]"}) + "\n")
    code = provision_bench.main(["--dataset", str(data), "--repos", str(tmp_path), "--cache-dir",
                                 str(tmp_path / "cache"), "--tasks", "psf__requests-2674",
                                 "--pythons-from", str(tmp_path / "nowhere"), "--archives", str(tmp_path / "a")])
    err = capsys.readouterr().err
    assert code == 2 and "no interpreter to serve" in err and "Traceback" not in err
    assert not (tmp_path / "a" / "downloads.json").exists()
