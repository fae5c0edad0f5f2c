"""eval.ingest and eval.dashboard.page on records of four configs over eight fixture tasks.

The harness's report files are written in its own format (see tests/helpers/dashboard_fixture.py); the
numbers on the page are checked against hand computations: wins/losses/ties, McNemar's exact
p-value, the bootstrap interval against the exact bootstrap distribution, per-repo rows.
"""

from __future__ import annotations

import json
import os
import re
from html.parser import HTMLParser
from math import comb
from pathlib import Path

import pytest

from eval import ingest
from eval.dashboard import page as dashboard
from eval.dashboard.stats import bootstrap_delta_ci, mcnemar_exact, pair
from tests.helpers import dashboard_fixture as fx


class Cells(HTMLParser):
    """Text of every <td data-field> keyed by (table id, row key, field, cell run id)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = ""
        self.row = ""
        self.cell: tuple[str, str, str, str] | None = None
        self.cells: dict[tuple[str, str, str, str], str] = {}
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "table":
            self.table = a.get("id", "")
        elif tag == "tr":
            self.row = a.get("data-run") or a.get("data-repo") or a.get("data-task") or ""
        elif tag == "td" and "data-field" in a:
            self.cell = (self.table, self.row, a["data-field"], a.get("data-run", ""))
            self.cells[self.cell] = ""
        elif tag == "a" and a.get("href"):
            self.links.append(a["href"])

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self.cell = None

    def handle_data(self, data: str) -> None:
        if self.cell is not None:
            self.cells[self.cell] += data

    def get(self, table: str, row: str, field: str, run: str = "") -> str:
        return " ".join(self.cells[(table, row, field, run)].split())


@pytest.fixture()
def page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Cells, str, str]:
    runs = fx.build(tmp_path)
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "logs")]) == 0
    warnings = capsys.readouterr().err
    out = tmp_path / "site" / "dashboard.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    html = out.read_text()
    parser = Cells()
    parser.feed(html)
    return out, parser, html, warnings


# ---- ingest ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_ingest_puts_harness_verdicts_in_records(page: tuple[Path, Cells, str, str], tmp_path: Path) -> None:
    _, _, _, warnings = page
    runs = tmp_path / "runs"
    for config in ("baseline", "static", "redo"):
        for iid in fx.TASKS:
            rec = json.loads((runs / f"t-{config}" / "records" / f"{iid}.json").read_text())
            expected = fx.RESOLVED[config][iid]
            assert rec["harness"]["resolved"] is bool(expected), (config, iid)
            if expected is None:
                # the harness never runs an empty patch; the baseline's comes from its run summary
                assert rec["harness"]["source"] == ("summary" if config == "baseline" else "empty patch")
            else:
                assert rec["harness"]["source"] == "report.json"
                assert rec["harness"]["report"]["tests_status"]["FAIL_TO_PASS"]["success" if expected else "failure"]
    quick = json.loads((runs / "t-quick" / "records" / "pallets__flask-4045.json").read_text())
    assert "harness" not in quick
    # The report for a task the run does not have is named in a warning and lands nowhere.
    assert "pallets__flask-9999" in warnings and "not in run t-redo" in warnings
    assert not list(runs.glob("*/records/pallets__flask-9999.json"))
    assert json.loads((runs / "t-baseline" / "harness_summary.json").read_text())["resolved_instances"] == 2


@pytest.mark.slow
def test_ingest_twice_changes_nothing(page: tuple[Path, Cells, str, str], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    before = {p: p.read_text() for p in runs.glob("*/records/*.json")}
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "logs" / "run_evaluation")]) == 0
    assert {p: p.read_text() for p in runs.glob("*/records/*.json")} == before


def test_ingest_without_any_report_fails_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = fx.build(tmp_path, configs=(), stray_report=False)
    (tmp_path / "nologs").mkdir()
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "nologs"), "--summaries", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no harness results")


@pytest.mark.parametrize("module", [ingest, dashboard])
def test_empty_runs_folder_is_one_line_exit_1(module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "runs").mkdir()
    args = [str(tmp_path / "runs")] + (["-o", str(tmp_path / "d.html")] if module is dashboard else [])
    assert module.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no runs in" in err[0]
    assert not (tmp_path / "d.html").exists()


# ---- statistics -----------------------------------------------------------------------------


def test_mcnemar_exact_against_hand_computation() -> None:
    # 5 wins, 1 loss: two-sided binomial on 6 discordant pairs, P(X <= 1) = (1 + 6) / 64.
    assert mcnemar_exact(5, 1) == pytest.approx(2 * 7 / 64)
    assert mcnemar_exact(1, 5) == mcnemar_exact(5, 1)
    assert mcnemar_exact(2, 0) == pytest.approx(0.5)
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    # Against the binomial sum written out for a larger case.
    assert mcnemar_exact(14, 4) == pytest.approx(2 * sum(comb(18, i) for i in range(5)) / 2**18)


def test_bootstrap_interval_degenerate_and_seeded() -> None:
    assert bootstrap_delta_ci([True, False] * 5, [True, False] * 5) == (0.0, 0.0)
    assert bootstrap_delta_ci([False] * 6, [True] * 6) == (1.0, 1.0)
    a, b = [False, True, False, False, True], [True, True, True, False, False]
    assert bootstrap_delta_ci(a, b, seed=3) == bootstrap_delta_ci(a, b, seed=3)
    p = pair(a, b)
    assert (p.wins, p.losses, p.both, p.neither, p.delta) == (2, 1, 1, 1, pytest.approx(0.2))


def exact_bootstrap_quantiles(diffs: list[int], q: float) -> tuple[float, float]:
    """The range a 10,000-resample percentile may fall in, from the exact bootstrap distribution.

    S = sum of n draws with replacement from ``diffs``; its distribution is a convolution. The
    sample quantile sits at the exact quantile unless the CDF passes within sampling error of q.
    """
    n = len(diffs)
    probs = {v: diffs.count(v) / n for v in set(diffs)}
    dist = {0: 1.0}
    for _ in range(n):
        nxt: dict[int, float] = {}
        for s, ps in dist.items():
            for v, pv in probs.items():
                nxt[s + v] = nxt.get(s + v, 0.0) + ps * pv
        dist = nxt
    tol = 0.006  # about four standard errors of an empirical CDF at 2.5% with 10,000 draws
    ok, cdf = [], 0.0
    for s in sorted(dist):
        before, cdf = cdf, cdf + dist[s]
        if before <= q + tol and cdf >= q - tol:
            ok.append(s / n)
    return min(ok), max(ok)


def numbers_pp(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d", text)]


# ---- the page -------------------------------------------------------------------------------


@pytest.mark.slow
def test_page_per_config_figures(page: tuple[Path, Cells, str, str]) -> None:
    _, cells, html, _ = page
    assert cells.get("config-table", "t-baseline", "resolved") == "25.0% (2/8)"
    assert cells.get("config-table", "t-static", "resolved") == "50.0% (4/8)"
    assert cells.get("config-table", "t-redo", "resolved") == "75.0% (6/8)"
    # quick has no harness results: its resolved rate is absent and it is marked internal only
    assert cells.get("config-table", "t-quick", "resolved") == "n/a"
    assert "internal only" in cells.get("config-table", "t-quick", "harness")
    assert cells.get("config-table", "t-quick", "fix").startswith("0.80 (8 scored")
    # redo's mean fix_score: (0.3 + 1 + 1 + 1 + 1 + 0.9 + 0.2 + 1) / 8 = 0.80, one of them semantic
    assert cells.get("config-table", "t-redo", "fix") == "0.80 (8 scored, 1 semantic)"
    assert cells.get("config-table", "t-baseline", "fix") == "not scored"
    assert "internal" in html.split('id="config-table"')[1].split("</thead>")[0]
    assert cells.get("config-table", "t-static", "status") == "7 / 0 / 1"
    assert cells.get("config-table", "t-redo", "tokens") == "4.8k"
    assert cells.get("config-table", "t-redo", "dollars") == "$0.0500"
    assert cells.get("config-table", "t-redo", "total-dollars") == "$0.4000"
    assert cells.get("config-table", "t-redo", "seconds") == "120s"
    # redo: five tasks with one attempt, two with two, one with three -> 12 / 8
    assert cells.get("config-table", "t-redo", "attempts") == "1.50"
    assert cells.get("config-table", "t-static", "attempts") == "1.12"  # 9 / 8 = 1.125


@pytest.mark.slow
def test_page_deltas_pvalues_and_intervals(page: tuple[Path, Cells, str, str]) -> None:
    _, cells, html, _ = page
    # redo vs baseline: wins flask-4992, flask-5063, requests-1963, sympy-13971, sympy-20590; loss flask-4045
    assert [cells.get("delta-table", "t-redo", f) for f in ("n", "wins", "losses", "ties", "delta", "p")] == \
        ["8", "5", "1", "2", "+50.0 pp", f"{2 * 7 / 64:.3f}"]
    # static vs baseline: wins flask-4992, sympy-20590, no loss: p = 2 * (1/2)^2 = 0.5
    assert [cells.get("delta-table", "t-static", f) for f in ("wins", "losses", "ties", "delta", "p")] == \
        ["2", "0", "6", "+25.0 pp", "0.500"]
    assert "no harness results" in cells.get("delta-table", "t-quick", "delta")

    data = json.loads(re.search(r'id="dashboard-data">(.*?)</script>', html, re.S).group(1))
    comps = {c["run_id"]: c for c in data["comparisons"]}
    for run_id, config in (("t-redo", "redo"), ("t-static", "static")):
        base = [bool(fx.RESOLVED["baseline"][t]) for t in sorted(fx.TASKS)]
        other = [bool(fx.RESOLVED[config][t]) for t in sorted(fx.TASKS)]
        lo, hi = comps[run_id]["ci"]
        assert (lo, hi) == pytest.approx(bootstrap_delta_ci(base, other, seed=0))
        diffs = [int(y) - int(x) for x, y in zip(base, other, strict=True)]
        lo_ok, hi_ok = exact_bootstrap_quantiles(diffs, 0.025), exact_bootstrap_quantiles(diffs, 0.975)
        assert lo_ok[0] - 1e-9 <= lo <= lo_ok[1] + 1e-9, (run_id, lo, lo_ok)
        assert hi_ok[0] - 1e-9 <= hi <= hi_ok[1] + 1e-9, (run_id, hi, hi_ok)
        assert lo <= comps[run_id]["delta"] <= hi
        shown = numbers_pp(cells.get("delta-table", run_id, "ci"))
        assert shown == [round(100 * lo, 1), round(100 * hi, 1)]
    assert comps["t-redo"]["p_value"] == pytest.approx(0.21875)


@pytest.mark.slow
def test_page_per_repo_rows(page: tuple[Path, Cells, str, str]) -> None:
    _, cells, _, _ = page
    expected = {  # repo: (tasks, baseline, static, redo, redo W/L/T, static W/L/T)
        "pallets/flask": ("3", "1/3 (33.3%)", "2/3 (66.7%)", "2/3 (66.7%)", "2 / 1 / 0", "1 / 0 / 2"),
        "psf/requests": ("2", "1/2 (50.0%)", "1/2 (50.0%)", "2/2 (100.0%)", "1 / 0 / 1", "0 / 0 / 2"),
        "sympy/sympy": ("3", "0/3 (0.0%)", "1/3 (33.3%)", "2/3 (66.7%)", "2 / 0 / 1", "1 / 0 / 2"),
    }
    for repo, (n, base, static, redo, redo_wlt, static_wlt) in expected.items():
        assert cells.get("repo-table", repo, "n") == n
        assert cells.get("repo-table", repo, "resolved", "t-baseline") == base
        assert cells.get("repo-table", repo, "resolved", "t-static") == static
        assert cells.get("repo-table", repo, "resolved", "t-redo") == redo
        assert cells.get("repo-table", repo, "wlt", "t-redo") == redo_wlt
        assert cells.get("repo-table", repo, "wlt", "t-static") == static_wlt
        assert "internal" in cells.get("repo-table", repo, "resolved", "t-quick")


@pytest.mark.slow
def test_page_critic_flags_and_links(page: tuple[Path, Cells, str, str]) -> None:
    out, cells, html, _ = page
    # redo: flagged flask-5063, sympy-13971 (retried, then Safe and resolved), sympy-18057 (three Unsafe)
    assert cells.get("critic-table", "t-redo", "flagged").startswith("3 of 8")
    assert cells.get("critic-table", "t-redo", "retried") == "3"
    assert cells.get("critic-table", "t-redo", "retry-resolved") == "2 of 3"
    assert cells.get("critic-table", "t-redo", "retry-safe") == "2"
    assert cells.get("critic-table", "t-redo", "final-unsafe") == "1"
    # static: sympy-20590 retried and resolved; sympy-13971 flagged with no retry
    assert cells.get("critic-table", "t-static", "retried") == "1"
    assert cells.get("critic-table", "t-static", "retry-resolved") == "1 of 1"
    # Every retry counts, with its cause; the baseline never retried.
    assert cells.get("critic-table", "t-redo", "tasks-retried") == "3 of 8"
    assert cells.get("critic-table", "t-redo", "retry-causes") == "4 judged Unsafe"
    assert cells.get("critic-table", "t-baseline", "tasks-retried") == "0 of 8"
    # every task has a diff and a record link per config, relative, and each opens a real file
    links = [h for h in cells.links if h.endswith((".diff", ".json"))]
    assert len(links) == 2 * 4 * len(fx.TASKS)
    for href in links:
        assert not href.startswith(("/", "file:", "http")), href
        assert (out.parent / href).resolve().is_file(), href
    # self-contained: no external script, style or image
    assert not re.search(r'(src|href)="(https?:)?//', html) and "<link" not in html


def test_configs_without_harness_show_internal_figures(tmp_path: Path) -> None:
    runs = fx.build(tmp_path, configs=(), stray_report=False)
    fx.write_run(runs, "baseline", "t-baseline")
    out = tmp_path / "d.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    cells = Cells()
    cells.feed(out.read_text())
    assert "no harness results" in cells.get("config-table", "t-quick", "harness")
    assert cells.get("config-table", "t-quick", "fix").startswith("0.80")
    assert "no harness results" in cells.get("delta-table", "t-quick", "delta")
    assert 'data-chart="delta"' not in out.read_text()  # nothing to draw, so no empty chart


def test_baseline_choice_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = fx.build(tmp_path, configs=("baseline",), with_quick=False, stray_report=False)
    fx.write_run(runs, "baseline", "u-baseline")
    # Two runs of the baseline config: the latest is the reference, and the page says which.
    os.utime(runs / "t-baseline" / "records", (1, 1))
    assert dashboard.main([str(runs), "-o", str(tmp_path / "d.html")]) == 0
    assert ("dashboard: --baseline 'baseline' matches runs t-baseline, u-baseline (the same config); using the "
            "latest, u-baseline (pass --baseline RUN_ID to choose another)") in capsys.readouterr().err
    assert dashboard.main([str(runs), "-o", str(tmp_path / "d.html"), "--baseline", "u-baseline"]) == 0
    assert dashboard.main([str(runs), "-o", str(tmp_path / "d.html"), "--baseline", "nope"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0]


def test_ingest_refuses_reports_of_another_model_under_the_same_run_id(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = fx.build(tmp_path, configs=("redo",), with_quick=False, stray_report=False)
    # The harness run id t-redo reused for some other model's predictions, and a run id no run has.
    other = tmp_path / "logs" / "run_evaluation" / "t-redo" / "someone__else" / "pallets__flask-4045"
    other.mkdir(parents=True)
    (other / "report.json").write_text(json.dumps(fx.harness_report("pallets__flask-4045", True), indent=4))
    ghost = tmp_path / "logs" / "run_evaluation" / "t-ghost" / "fixgraph__redo" / "pallets__flask-4045"
    ghost.mkdir(parents=True)
    (ghost / "report.json").write_text(json.dumps(fx.harness_report("pallets__flask-4045", True), indent=4))
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "logs")]) == 0
    err = capsys.readouterr().err
    assert "also holds predictions of model 'someone__else'" in err
    assert "run id 't-ghost'" in err
    rec = json.loads((runs / "t-redo" / "records" / "pallets__flask-4045.json").read_text())
    assert rec["harness"]["resolved"] is False  # its own report, not the other model's
    assert rec["harness"]["source"] == "report.json"


def test_single_config_page_and_default_baseline(tmp_path: Path) -> None:
    runs = fx.build(tmp_path, configs=(), stray_report=False)  # only "quick", no harness
    out = tmp_path / "d.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    html = out.read_text()
    assert "Only one config: nothing to compare." in html
    assert "Baseline: <strong>quick</strong>" in html
    cells = Cells()
    cells.feed(html)
    assert cells.get("config-table", "t-quick", "resolved") == "n/a"


def test_ingest_from_a_run_summary_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Scored elsewhere (sb-cli's report, or only the harness's summary kept): the summary is enough."""
    runs = fx.build(tmp_path, configs=(), with_quick=False, stray_report=False)
    fx.write_run(runs, "redo", "t-redo")
    resolved = sorted(i for i, r in fx.RESOLVED["redo"].items() if r)
    summary = {"resolved_ids": resolved, "unresolved_ids": ["sympy__sympy-18057"],
               "error_ids": ["pallets__flask-4045"], "completed_ids": [], "empty_patch_ids": [],
               "submitted_ids": fx.TASKS + ["django__django-11099"]}
    (runs / "t-redo" / "swe-bench_lite__test__t-redo.json").write_text(json.dumps(summary))
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "none"), "--summaries", str(tmp_path)]) == 0
    for iid in fx.TASKS:
        rec = json.loads((runs / "t-redo" / "records" / f"{iid}.json").read_text())
        assert rec["harness"]["source"] == "summary"
        assert rec["harness"]["resolved"] is bool(fx.RESOLVED["redo"][iid])
    out = tmp_path / "d.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    cells = Cells()
    cells.feed(out.read_text())
    assert cells.get("config-table", "t-redo", "resolved") == "75.0% (6/8)"
    assert cells.get("config-table", "t-redo", "harness") == "complete (1 harness error, counted unresolved)"


def test_retries_from_test_results_count_with_their_cause(tmp_path: Path) -> None:
    from eval.dashboard.page import config_view, retry_causes
    from eval.dashboard.rundata import Run

    tests_low = {"fix_score": 0.4, "kind": "tests"}
    rec = {"instance_id": "a__b-1", "final": True, "verdict": "Safe", "critic_flagged": False,
           "attempts": [{"verdict": "CannotApply"}, {"verdict": "Safe", "score": tests_low},
                        {"verdict": "Safe", "score": {"fix_score": 0.5, "kind": "semantic"}},
                        {"verdict": "Safe", "score": {"fix_score": 1.0, "kind": "tests"}}]}
    assert retry_causes(rec) == ["patch did not apply", "tests: fix_score under threshold",
                                 "fix_score under threshold"]
    view = config_view(0, Run("r", tmp_path, "redo", {"a__b-1": rec}, {}))
    assert (view.flagged, view.tasks_retried, sum(view.retries.values())) == (0, 1, 3)


def test_an_oracle_tests_run_is_labelled_an_upper_bound(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    fx.write_run(runs, "baseline", "cmp-baseline")
    fx.write_run(runs, "oracle-tests", "cmp-oracle-tests")
    out = tmp_path / "dashboard.html"
    assert dashboard.main([str(runs), "-o", str(out)]) == 0
    html = out.read_text()
    parser = Cells()
    parser.feed(html)
    assert html.count("oracle-tests: upper bound, not a SWE-bench result") == 1
    assert "never a SWE-bench result" in html
    row = html.split('data-run="cmp-oracle-tests"', 1)[1].split("</tr>", 1)[0]
    assert "upper bound, not a SWE-bench result" in row


def test_a_verified_run_reads_like_a_lite_one(tmp_path: Path) -> None:
    """Verified's own repositories and versions, the official harness's per-instance reports for one
    config and sb-cli's swe-bench_verified report for the other: the page is built as for Lite."""
    tasks = ["astropy__astropy-14995", "django__django-17029", "sphinx-doc__sphinx-9711", "pydata__xarray-4629"]
    runs = tmp_path / "runs"
    base = fx.write_run(runs, "baseline", "v-baseline", tasks)
    fx.write_harness(tmp_path, "v-baseline", "baseline", base,
                     verdicts={"astropy__astropy-14995": False, "django__django-17029": True,
                               "sphinx-doc__sphinx-9711": False, "pydata__xarray-4629": False})
    fx.write_run(runs, "redo", "v-redo", tasks)
    summary = {"resolved_ids": ["astropy__astropy-14995", "django__django-17029", "sphinx-doc__sphinx-9711"],
               "unresolved_ids": ["pydata__xarray-4629"], "error_ids": [], "completed_ids": [],
               "empty_patch_ids": [], "submitted_ids": tasks}
    (runs / "v-redo" / "swe-bench_verified__test__v-redo.json").write_text(json.dumps(summary))
    assert ingest.main([str(runs), "--harness-logs", str(tmp_path / "logs"), "--summaries", str(tmp_path)]) == 0
    out = tmp_path / "d.html"
    assert dashboard.main([str(runs), "-o", str(out), "--baseline", "v-baseline"]) == 0
    cells = Cells()
    cells.feed(out.read_text())
    assert cells.get("config-table", "v-baseline", "resolved") == "25.0% (1/4)"
    assert cells.get("config-table", "v-redo", "resolved") == "75.0% (3/4)"
    for repo, base_cell, redo_cell in [("astropy/astropy", "0/1 (0.0%)", "1/1 (100.0%)"),
                                       ("sphinx-doc/sphinx", "0/1 (0.0%)", "1/1 (100.0%)"),
                                       ("pydata/xarray", "0/1 (0.0%)", "0/1 (0.0%)")]:
        assert cells.get("repo-table", repo, "n") == "1"
        assert cells.get("repo-table", repo, "resolved", "v-baseline") == base_cell
        assert cells.get("repo-table", repo, "resolved", "v-redo") == redo_cell
    assert cells.get("repo-table", "sphinx-doc/sphinx", "wlt", "v-redo") == "1 / 0 / 0"
