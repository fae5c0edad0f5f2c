"""Fixture tasks, config files and a loopback LLM for the eval.run tests."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from eval.fakes.llm_server import FakeLLMServer, ScriptResponder
from eval.fixtures.repos import calc_script, make_calc_repo, write_dataset
from fixgraph.config import CONFIGS_DIR

OWNERS = ["alpha", "beta", "gamma", "delta"]


def make_tasks(tmp: Path, n: int) -> tuple[Path, Path, list[str]]:
    """``n`` fixture repos with the same real bug under ``tmp/mirrors``; returns (mirrors, dataset, ids)."""
    mirrors = tmp / "mirrors"
    rows = [make_calc_repo(mirrors, owner=OWNERS[i], name="calc") for i in range(n)]
    dataset = write_dataset(tmp / "dataset.jsonl", rows)
    return mirrors, dataset, [r["instance_id"] for r in rows]


def config_files(tmp: Path, names: list[str]) -> list[str]:
    """Copies of the committed configs that keep their caches in ``tmp`` and run tests in-process."""
    paths = []
    for name in names:
        text = (CONFIGS_DIR / f"{name}.toml").read_text()
        path = tmp / "configs" / f"{name}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'cache_dir = "{tmp / "cache"}"\n' + text + '\n[tests]\nbackend = "local"\n')
        paths.append(str(path))
    return paths


class SlowServer(FakeLLMServer):
    """Every reply waits ``delay`` seconds, so a run can be killed while a task is in flight."""

    def __init__(self, responder: ScriptResponder, delay: float):
        super().__init__(responder)
        self.delay = delay

    def handle(self, handler: Any, body: dict[str, Any]) -> None:
        time.sleep(self.delay)
        super().handle(handler, body)


def responder() -> ScriptResponder:
    return ScriptResponder(calc_script(first_attempt_broken=False))


def llm_env(base_url: str) -> dict[str, str]:
    return {"OPENAI_API_KEY": "sk-test-0123456789abcdef", "OPENAI_BASE_URL": base_url}


def jsonl_lines(path: Path) -> dict[str, str]:
    """instance_id -> the raw JSONL line, failing on a duplicate id."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        if raw.strip():
            iid = json.loads(raw)["instance_id"]
            assert iid not in out, f"two predictions for {iid} in {path}"
            out[iid] = raw
    return out
