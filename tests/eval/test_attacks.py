"""Issue 14's attacks, each tried for real (eval/attack_bench.py): a test per attack, and the bench's
command line on a quick subset."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval import attack_bench
from eval.attack_bench import ATTACKS, Attack
from fixgraph.sandbox.process import sandbox_mode


@pytest.mark.slow
@pytest.mark.parametrize("attack", [a for a in ATTACKS if a.quick], ids=lambda a: f"{a.cls}:{a.name}")
def test_attack_is_held(attack: Attack, tmp_path: Path) -> None:
    if attack.sandbox and sandbox_mode() == "none":
        pytest.skip("no namespaces here (a container without unshare): the bench reports these as failed")
    assert attack.run(tmp_path) == ""


@pytest.mark.slow
def test_bench_reports_per_class_and_totals_last(capsys: pytest.CaptureFixture[str]) -> None:
    rc = attack_bench.main(["--quick", "--only", "signatures,allowlist"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    assert lines[0].startswith("running as ")
    assert any(ln.startswith("signatures ") and "tried=1 held=1 failed=0" in ln for ln in lines)
    assert lines[-1] == "tried=2 held=2 failed=0"


def test_a_failed_attack_is_counted(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake = Attack("fake", "always gets through", lambda tmp: "got through")
    monkeypatch.setattr(attack_bench, "ATTACKS", [fake])
    assert attack_bench.main([]) == 1
    out = capsys.readouterr().out
    assert "FAILED always gets through" in out and out.strip().splitlines()[-1] == "tried=1 held=0 failed=1"
