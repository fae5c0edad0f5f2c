"""Shared fixtures: a fixture repo with a real bug, a config pointed at temp dirs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures.repos import make_calc_repo
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Instance

TEST_KEY = "sk-test-0123456789abcdef"


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test costs are measured as on an idle machine: the load of whatever else runs beside the
    suite must not change which files a selection prices out."""
    monkeypatch.setattr("scoring.execution.testenv.slowdown", lambda: 1.0)


@pytest.fixture
def calc(tmp_path: Path) -> tuple[Path, Instance]:
    """(mirrors dir, instance) for the calc fixture: mean() is off by one."""
    mirrors = tmp_path / "mirrors"
    raw = make_calc_repo(mirrors)
    return mirrors, Instance.model_validate(raw)


def make_config(tmp_path: Path, name: str = "redo", **overrides: Any) -> RunConfig:
    base = {
        "cache_dir": str(tmp_path / "cache"),
        "predictions_dir": str(tmp_path / "predictions"),
        "runs_dir": str(tmp_path / "runs"),
        "tests.backend": "local",
    }
    base.update(overrides)
    return load_config(name, env={"OPENAI_API_KEY": TEST_KEY}, overrides=base)


@pytest.fixture
def cfg_factory(tmp_path: Path):
    def make(name: str = "redo", **overrides: Any) -> RunConfig:
        return make_config(tmp_path, name, **overrides)

    return make


def read_record(cfg: RunConfig, run_id: str, instance_id: str) -> dict[str, Any]:
    return json.loads((cfg.runs_dir / run_id / "records" / f"{instance_id}.json").read_text())


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, str]]]:
    """Every subprocess started during the test: (argv, environment it got)."""
    seen: list[tuple[Any, dict[str, str]]] = []
    real_init = subprocess.Popen.__init__

    def spy(self: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
        seen.append((args, dict(kw.get("env") or os.environ)))
        real_init(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    return seen
