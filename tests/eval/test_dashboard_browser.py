"""The dashboard opened in a real headless Chromium, with the network shut off.

Chromium is driven with the standard library only: ``--dump-dom`` returns the DOM after the
page's scripts ran (the page's script records how many charts drew marks; ``window.onerror``
leaves a marker), ``--enable-logging=stderr`` prints every console message and uncaught error,
and ``--screenshot`` writes a PNG under the test's temp dir.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eval import ingest
from eval.dashboard import page as dashboard
from tests.helpers import dashboard_fixture as fx

CHROMIUM = next((p for p in (shutil.which("chromium"), shutil.which("chromium-browser"),
                              shutil.which("google-chrome")) if p), None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed: apt-get install chromium (Debian, Ubuntu), or put chromium on PATH")]


def chromium(tmp: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    args = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            # Any name lookup fails: a page that reached for the network would show it.
            "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=3000", *extra, url]
    return subprocess.run(args, capture_output=True, text=True, timeout=90)


def console_errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


def test_dashboard_renders_in_chromium(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = fx.build(tmp_path)
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "logs")]) == 0
    out = tmp_path / "site" / "dashboard.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    url = out.resolve().as_uri()

    shot = tmp_path / "shot.png"
    proc = chromium(tmp_path, url, f"--screenshot={shot}", "--window-size=1280,2000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a blank page compresses far smaller

    proc = chromium(tmp_path, url, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs.get("data-ready") == "1"  # the page's script ran to its end
    total, drawn = int(attrs["data-charts-total"]), int(attrs["data-charts-rendered"])
    # resolved, fix, delta, outcomes, repos, dollars, tokens, seconds, attempts, critic
    assert total == 10 and drawn == total
    assert int(attrs["data-chart-marks"]) >= 40
    assert attrs["data-configs"] == "4"
    html_tag = re.search(r"<html([^>]*)>", dom)
    assert html_tag and "data-script-error" not in html_tag.group(1)  # window.onerror never fired
    assert console_errors(proc.stderr) == []


def test_error_detection_has_teeth(tmp_path: Path) -> None:
    """The same checks flag a page whose script throws, so a clean result above means something."""
    out = tmp_path / "bad.html"
    template = (Path(dashboard.__file__).parent / "templates" / "dashboard.html.j2").read_text()
    head = template.split("<style>")[0].split("<script>", 1)[1].split("</script>")[0]
    out.write_text(f"<html><head><script>{head}</script></head><body>"
                   "<script>document.body.setAttribute('data-x', '1'); notDefinedAnywhere();</script></body></html>")
    proc = chromium(tmp_path, out.resolve().as_uri(), "--dump-dom")
    assert 'data-x="1"' in proc.stdout
    html_tag = re.search(r"<html([^>]*)>", proc.stdout)
    assert html_tag and 'data-script-errors="1"' in html_tag.group(1)
    assert any("notDefinedAnywhere" in ln for ln in console_errors(proc.stderr))


def test_locally_graded_comparison_in_chromium(tmp_path: Path) -> None:
    """Two configs whose verdicts come from the local grader (``eval.grade``'s reports carry its
    label): the page says so per config and per delta, and still draws its deltas and statistics."""
    import json

    runs = fx.build(tmp_path, configs=("baseline", "redo"), with_quick=False, stray_report=False)
    label = "local (venv), not the official harness"
    for path in [*(tmp_path / "logs").rglob("report.json"), *runs.glob("*/*.t-baseline.json")]:
        data = json.loads(path.read_text())
        if path.name == "report.json":
            data = {iid: {**entry, "grader": label} for iid, entry in data.items()}
        else:
            data["grader"] = label
        path.write_text(json.dumps(data))
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "logs")]) == 0
    out = tmp_path / "site" / "dashboard.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    url = out.resolve().as_uri()
    shot = tmp_path / "local.png"  # kept under the test's temp dir, as the first test's
    proc = chromium(tmp_path, url, f"--screenshot={shot}", "--window-size=1280,2000")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    proc = chromium(tmp_path, url, "--dump-dom")
    dom = proc.stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', body.group(1)))
    assert attrs.get("data-ready") == "1" and attrs["data-charts-rendered"] == attrs["data-charts-total"]
    graders = re.findall(r'<td data-field="grader">(.*?)</td>', dom, re.S)
    assert len(graders) == 2 and all("local grader" in g and "not the official harness" in g for g in graders)
    delta = re.search(r'<tr data-run="t-redo">.*?</tr>', dom.split('id="delta-table"', 1)[1], re.S)
    assert delta and "+50.0 pp" in delta.group(0)
    assert re.search(r'data-field="delta-grader">local \(not the official harness\)', delta.group(0))
    assert re.search(r'data-field="p">0\.\d{3}<', delta.group(0))  # McNemar's p, shown
    assert set(re.findall(r"\(\d+/8, local\)", dom)) == {"(2/8, local)", "(6/8, local)"}
    html_tag = re.search(r"<html([^>]*)>", dom)
    assert html_tag and "data-script-error" not in html_tag.group(1)
    assert console_errors(proc.stderr) == []
