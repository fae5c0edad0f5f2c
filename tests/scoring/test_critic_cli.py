"""``python -m scoring.verdict.judge`` end to end: a mirror folder, a dataset, predictions, verdicts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.critic_repo import edit, make_repo
from fixgraph.config import Budget, CriticSettings
from fixgraph.dataset import Instance
from fixgraph.models.llm import LLM, Meter
from fixgraph.models.scripted import ScriptedChatModel
from fixgraph.repo.workspace import Worktree
from scoring.verdict.judge import judge, main

REPO = "demo/shapes"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("cli")
    src = make_repo(root / "src")
    patches = {
        "undefined": edit(src, "pkg/shapes.py", "for s in shapes)", "for s in shapez)"),
        "fine": edit(src, "pkg/shapes.py", "return Circle(self.r * k)", "return Circle(r=self.r * k)"),
        "docs": edit(src, "README.md", "# demo\n", "# demo\n\nMore.\n"),
        "exec": edit(src, "pkg/util.py", "    return None\n", "    subprocess.run(['rm', path])\n    return None\n"),
        "broken-before": edit(src, "pkg/legacy.py", "def old(:\n", "def old():\n"),
        "empty": "",
    }
    # A patch made against other content does not apply at the base commit.
    edit(src, "pkg/shapes.py", "import math\n", "import math\nimport cmath\n")
    subprocess.run(["git", "commit", "-qam", "elsewhere"], cwd=src.path, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src.path, capture_output=True, text=True).stdout.strip()
    patches["stale"] = edit(Worktree(src.path, head), "pkg/shapes.py", "import cmath\n", "import cmath, os\n")
    mirrors = root / "mirrors"
    subprocess.run(["git", "clone", "-q", "--bare", str(src.path), str(mirrors / "demo+shapes" / "repo")], check=True)

    dataset = root / "lite.jsonl"
    preds = root / "preds.jsonl"
    with dataset.open("w") as ds, preds.open("w") as pr:
        for name, patch in patches.items():
            iid = f"demo__shapes-{name}"
            ds.write(json.dumps({"instance_id": iid, "repo": REPO, "base_commit": src.base,
                                 "problem_statement": "shapes misbehave"}) + "\n")
            pr.write(json.dumps({"instance_id": iid, "model_name_or_path": "agent", "model_patch": patch}) + "\n")
    return {"root": root, "mirrors": mirrors, "dataset": dataset, "preds": preds, "src": src}


def cli(setup: dict[str, Any], out: Path, *extra: str) -> int:
    return main(["--predictions", str(setup["preds"]), "--dataset", str(setup["dataset"]),
                 "--repos", str(setup["mirrors"]), "--cache-dir", str(setup["root"] / "cache"),
                 "-o", str(out), *extra])


def read(out: Path) -> dict[str, dict[str, Any]]:
    return {row["instance_id"].split("-", 1)[1]: row for row in map(json.loads, out.read_text().splitlines())}


@pytest.mark.slow
def test_one_verdict_per_instance(setup: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "verdicts.jsonl"
    assert cli(setup, out) == 0
    rows = read(out)
    assert {k: v["verdict"] for k, v in rows.items()} == {
        "undefined": "Unsafe", "fine": "Safe", "docs": "Safe", "exec": "Safe",
        "broken-before": "CannotAnalyze", "empty": "CannotAnalyze", "stale": "CannotAnalyze",
    }
    [error] = rows["undefined"]["errors"]
    assert (error["rule"], error["file"], error["line"]) == ("reportUndefinedVariable", "pkg/shapes.py", 16)
    assert [g["rule"] for g in rows["exec"]["guard"]] == ["process-exec"]  # policy warn: recorded, not blocking
    assert rows["docs"]["reason"] == "the patch touches no Python file"
    assert rows["broken-before"]["reason"] == "pkg/legacy.py does not parse before the patch"
    assert rows["empty"]["reason"] == "empty patch"
    assert "does not apply" in rows["stale"]["reason"]
    assert all(v["seconds"] >= 0 for v in rows.values())
    assert "Unsafe 1" in capsys.readouterr().out

    # A second run skips what is done.
    assert cli(setup, out) == 0
    assert len(out.read_text().splitlines()) == 7
    assert "nothing new to judge" in capsys.readouterr().out


def test_missing_pyright_is_a_one_line_error(setup: dict[str, Any], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "nopyright.toml"
    config.write_text('[critic]\npyright = "no-such-pyright"\n')
    assert cli(setup, tmp_path / "out.jsonl", "--config", str(config)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: pyright not found") and "\n" not in err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.slow
def test_missing_pyright_exits_non_zero_as_a_process(setup: dict[str, Any], tmp_path: Path) -> None:
    git = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(git)
    import sys

    proc = subprocess.run([sys.executable, "-m", "scoring.verdict.judge", "--predictions", str(setup["preds"]),
                           "--dataset", str(setup["dataset"]), "--repos", str(setup["mirrors"]),
                           "-o", str(tmp_path / "o.jsonl")],
                          capture_output=True, text=True, env={"PATH": str(bin_dir)},
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2
    # pyright is looked for beside the interpreter too, where it is found but cannot start
    # without node on PATH: either way one clear line, exit 2.
    assert proc.stderr.startswith(("error: pyright not found", "error: pyright did not start"))
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_bad_predictions_file(setup: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "x", "model_patch": ""}\n{not json\n')
    code = main(["--predictions", str(bad), "--dataset", str(setup["dataset"]), "--repos", str(setup["mirrors"]),
                 "-o", str(tmp_path / "o.jsonl")])
    assert code == 2
    assert capsys.readouterr().err.strip() == f"error: {bad}:2: malformed JSON line (Expecting property name " \
                                              "enclosed in double quotes)"


def _instance(setup: dict[str, Any]) -> Instance:
    return Instance(instance_id="demo__shapes-x", repo=REPO, base_commit=setup["src"].base, problem_statement="p")


@pytest.mark.slow
def test_judge_llm_without_verdict_is_no_verdict(setup: dict[str, Any], tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "repo")
    patch = edit(wt, "pkg/shapes.py", 'return "circle of radius %s" % c.r', 'return "circle of radius %s" % c.radius')
    model = ScriptedChatModel(script={"RuntimeCheck": [{"errors": []}, {"errors": []}]})
    llm = LLM(lambda role: model, Meter(Budget(), {}), 1)
    v = judge(wt, Instance(instance_id="i", repo=REPO, base_commit=wt.base, problem_statement="p"), patch,
              settings=CriticSettings(), cache_dir=tmp_path / "c", llm=llm)
    assert v.verdict == "NoVerdict" and v.llm is not None and v.llm["verdict"] is None
    assert isinstance(wt, Worktree)


@pytest.mark.slow
def test_guard_block_policy_makes_it_unsafe(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "repo")
    patch = edit(wt, "pkg/util.py", "    return None\n", "    subprocess.run(['rm', path])\n    return None\n")
    inst = Instance(instance_id="i", repo=REPO, base_commit=wt.base, problem_statement="p")
    warn = judge(wt, inst, patch, settings=CriticSettings(guard="warn"), cache_dir=tmp_path / "c")
    block = judge(wt, inst, patch, settings=CriticSettings(guard="block"), cache_dir=tmp_path / "c")
    assert warn.verdict == "Safe" and warn.guard
    assert block.verdict == "Unsafe" and "guard" in block.reason


@pytest.mark.slow
def test_a_verdict_says_when_pyright_ran_as_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The language server exits at once: the command line checks the patch, and the verdict's row
    # says so, as the Critic's record does.
    import sys

    from scoring.static import pyright_server

    wt = make_repo(tmp_path / "repo")
    monkeypatch.setattr(pyright_server, "langserver_command", lambda cmd: [sys.executable, "-c", "raise SystemExit(3)"])
    patch = edit(wt, "pkg/shapes.py", "for s in shapes)", "for s in shapez)")
    inst = Instance(instance_id="i", repo=REPO, base_commit=wt.base, problem_statement="p")
    try:
        v = judge(wt, inst, patch, settings=CriticSettings(static_timeout_s=20), cache_dir=tmp_path / "c")
    finally:
        pyright_server.shutdown()
    assert v.verdict == "Unsafe" and v.notes
    assert v.to_json()["notes"][0].endswith("this check ran as one pyright process")

def test_pipeline_cli_fails_fast_without_pyright(setup: dict[str, Any], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import graph

    config = tmp_path / "nopyright.toml"
    config.write_text('[critic]\npyright = "no-such-pyright"\n')
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    code = graph.main(["--config", str(config), "--dataset", str(setup["dataset"]), "--tasks", "all",
                       "--repos", str(setup["mirrors"])])
    assert code == 2
    assert capsys.readouterr().err.strip().startswith("fixgraph: error: pyright not found")
