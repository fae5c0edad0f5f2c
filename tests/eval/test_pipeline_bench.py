"""eval.pipeline_bench on the calc fixture (the oracle model, real git, pyright and tests): each run
prints where the task's seconds went by phase, the phases add up to no more than the run's total,
the nodes, pyright and the worktree are among them, the test runs among them or beside them (run
ahead of the static phase), and the last line is the figure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from eval.fixtures.repos import write_dataset
from eval.pipeline_bench import OUTSIDE, main
from fixgraph.dataset import Instance
from tests.helpers.testrun_helpers import local_config

_PHASES = re.compile(r"^\s+phases \(sum ([\d.]+)s of ([\d.]+)s\): (.*)$")


def _parts(text: str) -> dict[str, float]:
    parts = {}
    for part in text.strip().split(", "):
        name, seconds = re.match(r"^(.*) ([\d.]+)s(?: x\d+)?$", part).groups()  # type: ignore[union-attr]
        parts[name] = float(seconds)
    return parts


def _phases(line: str) -> tuple[float, dict[str, float], dict[str, float]]:
    """The run's total, its phases, and what ran beside them (the tests run ahead of the static phase)."""
    m = _PHASES.match(line)
    assert m, line
    own, _, beside = m.group(3).partition("; beside them:")
    return float(m.group(2)), _parts(own), _parts(beside) if beside else {}


@pytest.mark.slow
def test_each_run_prints_its_phases_within_its_total(
        calc: tuple[Path, Instance], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mirrors, inst = calc
    dataset = write_dataset(tmp_path / "lite.jsonl", [inst.model_dump()])
    assert main(["--dataset", str(dataset), "--repos", str(mirrors), "--instances", inst.instance_id,
                 "--runs", "1", "--config", str(local_config(tmp_path)),
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    runs = [ln for ln in lines if _PHASES.match(ln)]
    assert len(runs) == 2, lines  # the warm-up and the measured run
    for line in runs:
        total, parts, beside = _phases(line)
        # Rounded to the hundredth each: the named phases fit in the total.
        assert sum(s for n, s in parts.items() if n != OUTSIDE) <= total + 0.01 * len(parts), line
        for name in ("node critic", "pyright", "git worktree"):
            assert name in parts, (name, line)
        for name in ("test runner", "copy of the base commit", "sandboxed process"):
            assert name in parts or name in beside, (name, line)
    assert any(ln.startswith("  phases, median of the runs: ") for ln in lines), lines
    assert re.fullmatch(r"overhead_per_task_s=[\d.]+ bare_task_s=[\d.]+ ratio=[\d.]+", lines[-1]), lines[-1]
