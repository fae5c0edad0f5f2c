"""eval.substitutes: a substitute is safe for a (repo, version) only when every row measured under
it gives the spec's verdicts."""
from __future__ import annotations

import json
from pathlib import Path

from eval.substitutes import main

GOOD = {"runnable": True, "gold_fix_score": 1.0, "gold_test_pass_rate": 1.0, "gold_no_regression": 1.0,
        "empty_test_pass_rate": 0.0}


def _rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut by a kill\n')
    return path


def _row(iid: str, repo: str, version: str, **figures: object) -> dict:
    return {"instance_id": iid, "repo": repo, "version": version, **GOOD, **figures}


def test_only_pairs_whose_every_row_agrees_are_safe(tmp_path: Path, capsys) -> None:
    spec = _rows(tmp_path / "spec.jsonl", [
        _row("django__django-1", "django/django", "4.2"), _row("sympy__sympy-1", "sympy/sympy", "1.8"),
        _row("sympy__sympy-2", "sympy/sympy", "1.8"), _row("psf__requests-1", "psf/requests", "2.7")])
    sub = _rows(tmp_path / "py311.jsonl", [
        # 3.11 names unittest's tests otherwise: the gold patch's failing test read as missing
        _row("django__django-1", "django/django", "4.2", gold_fix_score=0.0, gold_test_pass_rate=0.0),
        _row("sympy__sympy-1", "sympy/sympy", "1.8"), _row("sympy__sympy-2", "sympy/sympy", "1.8"),
        _row("psf__requests-1", "psf/requests", "2.7", runnable=False, reason="collections.Mapping")])
    assert main(["--spec", str(spec), "--python", f"3.11={sub}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "    ('sympy/sympy', '1.8'): {'3.9': ('3.11',)}," in out
    assert not any(line.startswith(("    ('django", "    ('psf")) for line in out)
    assert out[-1] == "safe=1 of=3"
    assert any("django__django-1" in line and "NOT safe: gold fix_score 0.0 < 0.95" in line for line in out)


def test_a_differing_verdict_on_the_empty_patch_is_not_safe(tmp_path: Path, capsys) -> None:
    spec = _rows(tmp_path / "spec.jsonl", [_row("sympy__sympy-1", "sympy/sympy", "1.8")])
    sub = _rows(tmp_path / "sub.jsonl", [_row("sympy__sympy-1", "sympy/sympy", "1.8", empty_test_pass_rate=1.0)])
    assert main(["--spec", str(spec), "--python", f"3.10={sub}"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "safe=0 of=1"


def test_bad_arguments_are_one_line(tmp_path: Path, capsys) -> None:
    assert main(["--spec", str(tmp_path / "none.jsonl")]) == 2
    assert main(["--spec", str(_rows(tmp_path / "s.jsonl", [])), "--python", "3.11"]) == 2
    assert all(line.startswith("error: ") for line in capsys.readouterr().err.splitlines())
