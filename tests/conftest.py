"""Shared fixtures: a fixture repo with a real bug, a config pointed at temp dirs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eval.fixtures import make_calc_repo
from fixgraph.config import RunConfig, load_config
from fixgraph.dataset import Instance

TEST_KEY = "sk-test-0123456789abcdef"


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
