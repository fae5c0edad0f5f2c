"""The loop's test signal: the pipeline's own tests, run before and after a candidate patch.

Two sets of tests judge a patch, and neither comes from the evaluation:

- **reproduction tests**, written by the pipeline from the issue (``agents/reproducer.py``) and
  accepted only if they fail at the base commit: they should pass after the patch;
- **regression tests**, the repository's existing tests that exercise the changed code, chosen
  from the base tree and the patch alone (``scoring.execution.choose_tests``): those that passed at the base
  should still pass.

Each run builds its own working copy outside any project checkout (``git archive`` of the base
commit from the task's worktree, which it only reads), applies the candidate patch, puts the
tests back to the base commit's content (a patch cannot win by editing the tests), writes the
reproduction tests, and runs the repository's own test command on the chosen files in an isolated
process (``fixgraph.sandbox.process``). Outputs are parsed with swebench's log parsers. Runs without the
patch are cached per task.

The ``oracle-tests`` ablation (:func:`hidden_outcome`) runs the instance's hidden tests the same
way instead; it needs the :class:`~fixgraph.dataset.EvaluationData` handed over explicitly.

Backends (``TestSettings.backend``): ``venv`` builds a virtualenv per (repo, version) from
swebench's install specs (``scoring.execution.envs``); ``local`` runs with the current interpreter (for
fixture repos and machines already set up); ``docker`` uses the official SWE-bench instance
images (``scoring.execution.docker``).
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fixgraph import phases
from fixgraph.config import RegressionSettings
from fixgraph.dataset import EvaluationData, Task
from fixgraph.records import atomic_write
from fixgraph.repo.workspace import Worktree, content_key
from scoring.execution.image_tests import OWN_BUILD_BACKENDS, unmatched_tests
from scoring.execution.offline_tests import needs_internet, network_failure
from scoring.execution.specs import (
    NON_TEST_EXTS,
    SpecsError,
    patch_files,
    repo_specs,
    takes_node_ids,
    takes_test_labels,
)
from scoring.execution.testenv import (
    LOG_TAIL_CHARS,
    PASSING,
    EnvError,
    Suite,
    SuiteRun,
    SuiteRunner,
    TestEnv,
    git_apply,
    listed_head,
    owned_by,
)
from scoring.runtime import crash
from scoring.runtime.lines import Lines

if TYPE_CHECKING:
    from scoring.execution.choose_tests import Selection

__all__ = ["PASSING", "LOG_TAIL_CHARS", "Suite", "SuiteRun", "SuiteRunner", "TestEnv", "EnvError",
           "TestOutcome", "ReproTest", "baseline", "own_outcome", "hidden_outcome"]


@dataclass(frozen=True)
class ReproTest:
    """An accepted reproduction test: the file, the test ids in it that failed at the base, and the
    data files it reads (``support``: (path, content) pairs, written beside it for every run).

    A failing id equal to the file's own path stands for the whole file: at the base the test
    session crashed in the repository's code before it could report any test (the bug is in the
    test runner itself, as in pytest's own issues). It passes when every test of the file does.
    """

    path: str
    content: str
    failing: tuple[str, ...]
    support: tuple[tuple[str, str], ...] = ()

    def suite(self, timeout_s: float | None = None) -> Suite:
        return Suite(targets=(self.path,), added=((self.path, self.content), *self.support), timeout_s=timeout_s,
                     label="repro", own=True)

    def statuses_after(self, run: SuiteRun) -> dict[str, str]:
        """The status in ``run`` of each id that failed at the base."""
        out: dict[str, str] = {}
        for tid in self.failing:
            if tid != self.path:
                out[tid] = run.statuses.get(tid, "MISSING")
                continue
            own = [s for t, s in run.statuses.items() if owned_by(t, (self.path,))]
            whole = bool(own) and not run.timed_out and "INTERNALERROR>" not in run.log and all(
                s in PASSING or s == "SKIPPED" for s in own)
            out[tid] = "PASSED" if whole else "FAILED"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "content": self.content, "failing": list(self.failing),
                "files": [{"path": p, "content": c} for p, c in self.support]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReproTest:
        support = tuple((str(f["path"]), str(f["content"])) for f in data.get("files") or ())
        return cls(str(data["path"]), str(data["content"]), tuple(data.get("failing") or ()), support)


_INTERNAL_FRAME = re.compile(r'^INTERNALERROR>\s+File "([^"]+)", line (\d+)', re.MULTILINE)


def internal_error_frames(log: str, root: str = "") -> list[str]:
    """``file:line`` of the frames in the repository's own code (not site-packages, not the
    interpreter's) of a pytest INTERNALERROR traceback in ``log``; [] when there is none."""
    frames = []
    for path, line in _INTERNAL_FRAME.findall(log):
        if root and path.startswith(root.rstrip("/") + "/"):
            path = path[len(root.rstrip("/")) + 1:]
        if path.startswith("/") or path.startswith("<") or "site-packages/" in path:
            continue
        frames.append(f"{path}:{line}")
    return frames


@dataclass
class TestOutcome:
    """What the tests said about one candidate patch.

    ``fail_to_pass``: the tests that must go from failing to passing (the accepted reproduction
    tests; under the oracle ablation, the instance's FAIL_TO_PASS) with their status after the
    patch. ``pass_to_pass_before``/``_after``: the tests that must keep passing (the selected
    existing tests; under the oracle, PASS_TO_PASS) before and after the patch.
    """

    runnable: bool
    reason: str  # why not runnable, or which set could not run; "" when all ran
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    pass_to_pass_before: dict[str, str] = field(default_factory=dict)
    pass_to_pass_after: dict[str, str] = field(default_factory=dict)
    # Which sets ran: fix_score uses a set's rate only when it ran.
    repro_ran: bool = True
    regression_ran: bool = True
    source: str = "own"  # own | oracle
    crash: str = ""  # crash context and failing output for the Coder
    seconds: float = 0.0
    base_seconds: float = 0.0  # of ``seconds``, the base runs of the selected tests (0 when cached)
    log_tail: str = ""
    timed_out: bool = False
    network_isolated: bool = False
    backend: str = ""
    env: str = ""  # how the environment the tests ran in was made (testenv.env_made)
    notes: list[str] = field(default_factory=list)
    selection: dict[str, Any] = field(default_factory=dict)  # the regression selection, as recorded
    # Why each selected test that passed at the base fails with the patch: crash records (the
    # plugin's, or read from the log), each with ``test`` set; scoring.runtime.findings reads them.
    regression_crashes: list[dict[str, Any]] = field(default_factory=list)
    # Tests whose outcome here says nothing of the patch (scoring.execution.image_tests, and
    # offline_tests under the oracle), with the reason: kept out of fail_to_pass and pass_to_pass,
    # counted as neither a pass nor a regression.
    not_runnable_here: dict[str, str] = field(default_factory=dict)
    # Crash records of the reproduction tests still failing with the patch (plugin records, ``test`` set).
    repro_crashes: list[dict[str, Any]] = field(default_factory=list)
    # What the patched runs executed of the files asked to be traced (scoring.runtime.lines), None
    # when no run traced them.
    lines: Lines | None = None

    __test__ = False  # pytest: not a test class, whatever its name

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["lines"] = self.lines.to_dict() if self.lines is not None else None
        return out

    def broken(self, among: Iterable[str] | None = None) -> list[str]:
        """The tests that passed at the base and do not with the patch (``among``: only those), in
        the base run's order."""
        ids = self.pass_to_pass_before if among is None else among
        return [t for t in ids if self.pass_to_pass_before.get(t) in PASSING
                and self.pass_to_pass_after.get(t, "MISSING") not in PASSING]


# ---- runs without the patch, cached -----------------------------------------------------


BASE_CRASH_RECORDS = 200


def baseline(runner: SuiteRunner, task: Task, wt: Worktree, suite: Suite, runs: int = 1) -> SuiteRun:
    """The suite at the base commit, cached per task. With ``runs`` > 1 the suite runs that many
    times and a test whose status differs between runs is flaky: left out, and named in the notes."""
    env_key, path = _baseline_path(runner, task, wt, suite, runs)
    cached = _cached_baseline(path, runner.backend) if env_key else None
    if cached is not None:
        return cached
    first = runner.run_suite(task, wt, None, suite)
    seconds = first.seconds
    for _ in range(runs - 1):
        if first.error or not first.statuses or first.timed_out:
            if first.timed_out:  # a second run would be cut too: the time goes to other tests
                first.notes.append("the base run was cut by its timeout: run once, not checked for flaky tests")
            break
        again = runner.run_suite(task, wt, None, suite)
        seconds += again.seconds
        flaky = sorted(t for t in set(first.statuses) | set(again.statuses)
                       if first.statuses.get(t) != again.statuses.get(t))
        if flaky:
            first.notes.append(f"flaky at the base, left out: {', '.join(flaky[:20])}"
                               + (f" (+{len(flaky) - 20} more)" if len(flaky) > 20 else ""))
            first.statuses = {t: s for t, s in first.statuses.items() if t not in flaky}
        first.timed_out = first.timed_out or again.timed_out
    first.seconds = seconds
    stopped = stopped_at_collection(first)
    if (env_key and not first.timed_out and not first.error.startswith("env could not")
            and (first.statuses or stopped)):
        # A timeout may be load on the machine, and an env failure may be mended: do not pin them;
        # nor a run that reported no test at all for no reason pytest gave (an environment caught
        # mid-reinstall). One that pytest stopped at collection (a conftest that cannot be imported
        # at this commit in this env) is pinned: every attempt of every candidate would redo it.
        atomic_write(path, json.dumps({"statuses": first.statuses, "log": first.log_tail(),
                                       "stopped_at_collection": stopped,
                                       "timed_out": first.timed_out, "error": first.error,
                                       "network_isolated": first.network_isolated, "notes": first.notes,
                                       # What the Reproducer reads to tell a broken or offline test
                                       # from a reproduction.
                                       "crash_records": _kept_records(first.crash_records)}))
    return first


# pytest's words when it stops before running any test: a conftest or a test module that raised
# on import (examples/javascript's conftest in flask: its js_example package is not installed).
_COLLECTION_STOP = re.compile(r"^ImportError while loading conftest |Interrupted: \d+ errors? during collection", re.M)


def stopped_at_collection(run: SuiteRun) -> bool:
    """Whether ``run`` reported no test because pytest stopped at collection, by its own account
    (no error of fixgraph's, not cut by a timeout, no node id pytest could not find)."""
    return (not run.statuses and not run.error and not run.timed_out
            and bool(_COLLECTION_STOP.search(run.log)) and not _NOT_FOUND.search(run.log))


def _kept_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The crash records a cached base run keeps: the first ones, and every network failure
    (``scoring.execution.offline_tests`` reads them: a cached run must set aside what a fresh one does)."""
    return records[:BASE_CRASH_RECORDS] + [r for r in records[BASE_CRASH_RECORDS:] if network_failure(r)]


def _cached_baseline(path: Path, backend: str) -> SuiteRun | None:
    """The base run pinned at ``path``; None when there is none to trust: no file, a file cut short,
    or one pinned with no statuses that does not say pytest stopped at collection (written before
    such runs were left uncached)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(data, dict) or "log" not in data or not (
            data.get("statuses") or data.get("stopped_at_collection") is True):
        return None
    return SuiteRun(statuses=data["statuses"], log=data["log"], seconds=0.0,
                    timed_out=data.get("timed_out", False), error=data.get("error", ""),
                    network_isolated=data.get("network_isolated", False),
                    notes=list(data.get("notes", [])), backend=backend,
                    crash_records=list(data.get("crash_records", [])))


def _baseline_path(runner: SuiteRunner, task: Task, wt: Worktree, suite: Suite, runs: int) -> tuple[str, Path]:
    """(the env's key, where :func:`baseline` caches this suite's base run); no key: not cached."""
    env_key = runner.env_key(task, wt, suite.targets)  # the env the suite's run gets (run_suite)
    # "unrooted": test ids no longer hold the run's path (base runs cached before hold it);
    # "loopback-up": runs since the sandbox's own loopback is up (a test's local server works).
    # A new tag whenever what a run does or what is parsed from it changes ("user-name": test
    # processes have USER and LOGNAME; "django-full-ids": a
    # django test whose subTest failed, or that has a docstring, is read under its full id too;
    # other repositories' runs unchanged). Crash records read from a log (django's ERROR:/FAIL:
    # blocks, sympy's) come from the patched run's log when a test breaks, not from this cache: no tag.
    parsed = ("django-full-ids",) if task.repo == "django/django" else ()
    key = content_key(task.base_commit, *suite.key_parts(), env_key, runner.backend, str(runs), "unrooted",
                      "crash-records", "sympy-last-test", "loopback-up", "user-name", *parsed)
    return env_key, runner.cache_dir / "test-baselines" / f"{_safe(task.instance_id)}-{key}.json"


class _Beside:
    """A patched run started beside the base run, in a thread of its own: the two are independent
    until the base run says which tests to compare, so the first attempt waits for the slower of
    the two rather than their sum (on a busy machine, two processes also get two shares of it)."""

    def __init__(self, runner: SuiteRunner, task: Task, wt: Worktree, patch: str, suite: Suite):
        self.suite = suite
        self._result: list[SuiteRun] = []
        # A daemon: a benchmark stopped by SIGTERM does not wait for it (its sandbox dies with us).
        self._thread = threading.Thread(target=self._run, args=(runner, task, wt, patch, suite),
                                        daemon=True, name="patched-beside-base")
        self._thread.start()

    def _run(self, runner: SuiteRunner, task: Task, wt: Worktree, patch: str, suite: Suite) -> None:
        with phases.beside():
            self._result.append(runner.run_suite(task, wt, patch, suite))

    def result(self) -> SuiteRun:
        with phases.phase(phases.WAITING_ON_PATCHED_RUN):
            self._thread.join()
        return self._result[0] if self._result else SuiteRun({}, "", 0.0, error="the patched run raised")


def _regression_suite(targets: tuple[str, ...], protected: tuple[str, ...], settings: RegressionSettings) -> Suite:
    """A run of the selected regression tests: one of the Critic's own (base and patched compared),
    reporting what finished when its timeout cuts it."""
    return Suite(targets=targets, protected=protected, timeout_s=settings.timeout_s, label="regression",
                 finished_on_timeout=True, own=True)


def _first_suite(chosen: Selection, settings: RegressionSettings) -> Suite:
    """The suite of the selection's files and single tests, as its base run first tries it."""
    narrowed = tuple(dict.fromkeys(t.split("::", 1)[0] for t in chosen.tests))
    return _regression_suite((*chosen.files, *chosen.tests), (*chosen.files, *narrowed), settings)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:120]


# ---- the loop's own tests ---------------------------------------------------------------


def own_outcome(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, repro: list[ReproTest],
                settings: RegressionSettings, repro_timeout_s: float | None = None,
                issue_code: Sequence[Mapping[str, str]] = (), trace: Sequence[str] = ()) -> TestOutcome:
    """Judge ``patch`` (applied in ``wt``) with the reproduction tests and the selected existing tests.
    ``issue_code``: the issue's own code as a reproduction test, already run with the patch by the
    Critic's replay (``scoring.runtime.replay.reproductions``: id, status, detail); its statements count
    with the reproduction tests. ``trace``: files whose lines the patched runs record (``out.lines``)."""
    out = TestOutcome(runnable=False, reason="", source="own", backend=runner.backend)
    why: list[str] = []
    failing_runs: list[tuple[SuiteRun, list[str]]] = []
    out.repro_ran = bool(issue_code)
    out.fail_to_pass = {r["id"]: r["status"] for r in issue_code}
    still_crashing = [r["detail"] for r in issue_code if r["status"] not in PASSING]
    if issue_code:
        out.notes.append(f"the issue's own code reproduces the crash it reports in {len(issue_code)} statements "
                         f"({len(issue_code) - len(still_crashing)} pass with the patch)")
    if not repro and not issue_code:
        why.append("no reproduction test")
    traced = tuple(trace)
    _own_repro(runner, task, wt, patch, repro, repro_timeout_s, traced, out, why, failing_runs)
    out.regression_ran = False
    _own_regression(runner, task, wt, patch, settings, traced, out, why, failing_runs)
    out.runnable = out.repro_ran or out.regression_ran
    out.reason = "; ".join(why)
    contexts = ["\n".join(still_crashing)] if still_crashing else []
    contexts += [_failure_context(run, ids) for run, ids in failing_runs]
    out.crash = "\n\n".join(c for c in contexts if c)
    out.notes = list(dict.fromkeys(out.notes))
    return out


def _seen(out: TestOutcome, run: SuiteRun) -> None:
    out.env = out.env or run.env
    if run.lines is not None:
        if out.lines is None:
            out.lines = Lines()
        out.lines.merge(run.lines)


def _own_repro(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, repro: list[ReproTest],
               repro_timeout_s: float | None, traced: tuple[str, ...], out: TestOutcome, why: list[str],
               failing_runs: list[tuple[SuiteRun, list[str]]]) -> None:
    """Reproduction tests: each accepted test id should pass now."""
    for test in repro:
        after = runner.run_suite(task, wt, patch, replace(test.suite(repro_timeout_s), trace=traced))
        _seen(out, after)
        out.seconds += after.seconds
        out.notes += after.notes
        out.timed_out = out.timed_out or after.timed_out
        out.network_isolated = after.network_isolated
        if after.error:
            why.append(f"reproduction test {test.path}: {after.error}")
            continue
        out.repro_ran = True
        out.fail_to_pass |= test.statuses_after(after)
        still = [t for t in test.failing if out.fail_to_pass[t] not in PASSING]
        if still:
            failing_runs.append((after, still))
            # The plugin's records, else the runner's log (django's ERROR/FAIL blocks, sympy's).
            out.repro_crashes += crash.failures_of(after.crash_records, after.log, after.root, still,
                                                   [] if after.timed_out else [t for t in still if t not in after.statuses])


def _own_regression(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, settings: RegressionSettings,
                    traced: tuple[str, ...], out: TestOutcome, why: list[str],
                    failing_runs: list[tuple[SuiteRun, list[str]]]) -> None:
    """Regression tests: what passed at the base should still pass."""
    from scoring.execution import choose_tests

    # A reproduction test that rewrites an existing test file does not hide that file's base
    # version from the selection: the two run separately.
    costs = choose_tests.CostBook(runner.cache_dir, task.repo, task.version)
    try:
        spec = repo_specs(runner.cache_dir, task.repo, task.version)
        node_ids, labels = takes_node_ids(spec), takes_test_labels(spec)
    except SpecsError:
        node_ids = labels = False
    chosen = (choose_tests.select_tests(wt, patch, settings, costs=costs, node_ids=labels, repo=task.repo)
              if settings.enabled else None)
    if chosen is not None:
        out.selection = chosen.to_dict()
    if chosen is None or not chosen.files:
        why.append("no existing test exercises the changed code" if chosen is not None
                   else "regression tests are off")
        return
    first = _first_suite(chosen, settings)
    _, cached = _baseline_path(runner, task, wt, first, settings.base_runs)
    beside = (_Beside(runner, task, wt, patch, replace(first, trace=traced))
              if settings.patched_beside_base and not cached.is_file() else None)
    suite, narrowed, before = _base_run(runner, task, wt, chosen, settings)
    out.seconds += before.seconds
    out.base_seconds += before.seconds
    out.selection = chosen.to_dict()
    if (not before.error and not before.timed_out and len(chosen.files) > 1
            and not any(st in PASSING for st in before.statuses.values())):
        suite, before, alone_s = _runnable_files(runner, task, wt, chosen, settings)
        out.seconds += before.seconds + alone_s
        out.base_seconds += before.seconds + alone_s
        out.selection = chosen.to_dict()
    # A fresh, complete run: what each file costs, for later selections. A run cut by its timeout
    # says only that the files it did not finish are slow (not 300 s shared by the 8 tests it
    # reached): at least the timeout is theirs, or the next task selects them again.
    if before.seconds and not before.error and not before.timed_out:
        costs.record(wt, chosen.files, before.statuses, before.seconds / settings.base_runs, before.slowdown)
    elif before.timed_out:
        costs.record_timeout(wt, chosen.files, before.statuses, before.timeout_s or settings.timeout_s,
                             before.slowdown)
    out.notes += before.notes
    if before.error or not before.statuses:
        why.append("existing tests could not run at the base: "
                   + (before.error or _nothing_collected(before)))
    else:
        owned = {t: s for t, s in before.statuses.items() if owned_by(t, (*chosen.files, *narrowed))}
        # The run started beside the base one serves when the base run kept its suite.
        after = ((beside.result() if beside is not None and beside.suite == replace(suite, trace=traced)
                  else runner.run_suite(task, wt, patch, replace(suite, trace=traced))) if owned else None)
        if after is not None:
            _seen(out, after)
        if after is None:
            why.append("no selected existing test reported a result at the base")
        elif after.error:
            out.seconds += after.seconds
            why.append(f"existing tests: {after.error}")
        else:
            _compare_regression(runner, task, wt, patch, suite, settings, node_ids, owned, before, after, out,
                                failing_runs)
    if beside is not None:  # unused when the base run changed the suite: it must not outlive the check
        beside.result()


def _compare_regression(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, suite: Suite,
                        settings: RegressionSettings, node_ids: bool, owned: dict[str, str], before: SuiteRun,
                        after: SuiteRun, out: TestOutcome, failing_runs: list[tuple[SuiteRun, list[str]]]) -> None:
    """The selected tests' patched run against their base run: which broke, confirmed, and why."""
    out.seconds += after.seconds
    out.notes += after.notes
    out.timed_out = out.timed_out or after.timed_out
    out.network_isolated = after.network_isolated
    out.regression_ran = True
    # A test the base run did not reach (timeout) is left out, as the selection says; so
    # are ids that are no selected file's own (the inner sessions a test of pytest runs),
    # and those a patched run cut by its timeout did not reach: not broken, unknown.
    if after.timed_out:
        owned = {t: s for t, s in owned.items() if t in after.statuses}
    out.pass_to_pass_before = owned
    out.pass_to_pass_after = {t: after.statuses.get(t, "MISSING") for t in owned}
    _set_aside_unmatched(out, task.repo, runner.backend, wt, "", keep_runnable=True, base=before)
    broken = out.broken()
    if broken and settings.confirm_runs:
        flaky, spent = _unconfirmed(runner, task, wt, patch, suite, broken, settings.confirm_runs)
        out.seconds += spent
        if flaky:
            out.notes.append("broke with the patch but flaky (not every run again agreed), left out: "
                             + ", ".join(flaky[:20]) + (f" (+{len(flaky) - 20} more)" if len(flaky) > 20 else ""))
            for t in flaky:
                out.pass_to_pass_before.pop(t, None)
                out.pass_to_pass_after.pop(t, None)
            broken = out.broken()
    if broken:
        failing_runs.append((after, broken))
        # Tests a run that ended early never reached (not one cut by its timeout).
        unreported = [] if after.timed_out else [t for t in broken if t not in after.statuses]
        out.regression_crashes = crash.failures_of(after.crash_records, after.log, after.root, broken,
                                                   unreported)
        if not node_ids:  # sympy's and Django's runners: F is an assertion, traceback or not
            out.regression_crashes += crash.assertions_by_status(after.statuses, broken,
                                                                 out.regression_crashes)
    out.log_tail = after.log_tail()


# pytest's words for a node id it cannot find (older releases, then 8+), after which it runs nothing.
_NOT_FOUND = re.compile(r"^ERROR: (?:not found:|found no collectors for) (\S+)", re.M)


def _unconfirmed(runner: SuiteRunner, task: Task, wt: Worktree, patch: str, suite: Suite,
                 broken: list[str], runs: int) -> tuple[list[str], float]:
    """The ``broken`` tests that another ``runs`` runs at the base and with the patch do not
    confirm: failing at the base, or passing with the patch, in any of them (a hash seed, a clock,
    an order). A run that errs or does not report a test says nothing of it. Returns those tests
    and the seconds the runs took."""
    flaky: set[str] = set()
    seconds = 0.0
    for _ in range(runs):
        for side in (None, patch):
            again = runner.run_suite(task, wt, side, suite)
            seconds += again.seconds
            if again.error:
                continue
            for t in broken:
                status = again.statuses.get(t)
                if status is not None and (status not in PASSING if side is None else status in PASSING):
                    flaky.add(t)
        if len(flaky) == len(broken):
            break
    return [t for t in broken if t in flaky], seconds


def _base_run(runner: SuiteRunner, task: Task, wt: Worktree, chosen: Selection,
              settings: RegressionSettings) -> tuple[Suite, tuple[str, ...], SuiteRun]:
    """The selection's base run: its files and single tests. pytest runs nothing at all when a
    node id names no collected test (a module skipped at import: ``pint`` missing); such ids are
    left out and the run made again, once, then without single tests at all."""
    before, seconds = SuiteRun({}, "", 0.0), 0.0
    for attempt in range(3):
        narrowed = tuple(dict.fromkeys(t.split("::", 1)[0] for t in chosen.tests))
        suite = _first_suite(chosen, settings)
        before = baseline(runner, task, wt, suite, runs=settings.base_runs)
        seconds += before.seconds
        missing = _NOT_FOUND.findall(before.log) if chosen.tests else []
        if not missing:
            break
        named = [t for t in chosen.tests if any(m.endswith("/" + t) or m == t for m in missing)]
        gone = named if named and attempt == 0 else list(chosen.tests)
        chosen.left_out += [f"{t}: pytest does not find it at the base (its module is skipped?)" for t in gone]
        chosen.tests = [t for t in chosen.tests if t not in gone]
    before.seconds = seconds
    return suite, narrowed, before


def _runnable_files(runner: SuiteRunner, task: Task, wt: Worktree, chosen: Selection,
                    settings: RegressionSettings) -> tuple[Suite, SuiteRun, float]:
    """The selection without the files where nothing passes at the base, run alone: one test module
    that cannot be imported stops the whole run (pytest's collection error; sympy's ``bin/test``,
    whose reporter crashes) before the others run. ``chosen`` records what was left out. Returns
    the suite of the others, its base run, and the seconds the runs alone took."""
    alive, seconds = [], 0.0
    for f in chosen.files:
        one = baseline(runner, task, wt, _regression_suite((f,), (f,), settings))
        seconds += one.seconds
        if any(st in PASSING for st in one.statuses.values()):
            alive.append(f)
        else:
            chosen.left_out.append(f"{f}: nothing passes at the base, run alone ({_nothing_collected(one)[:120]})")
    chosen.files = alive
    if chosen.tests:  # single tests come back with the next selection; this one has files to sort out
        chosen.left_out.append(f"{len(chosen.tests)} single tests: the files run alone instead")
        chosen.tests = []
    suite = _regression_suite(tuple(alive), tuple(alive), settings)
    before = baseline(runner, task, wt, suite, runs=settings.base_runs) if alive else SuiteRun({}, "", 0.0)
    return suite, before, seconds


def _failure_context(run: SuiteRun, failing: list[str]) -> str:
    """Why the tests failed: the crash plugin's frames and locals, else the log's traceback, else
    the log's tail (an assertion's message is there)."""
    if run.crash_records:
        text = crash.format_records(run.crash_records, failing)
        if text:
            return text
    if run.root:
        text = crash.from_log(run.log, Path(run.root), failing)
        if text:
            return text
    return f"Failing: {', '.join(failing[:10])}\n{run.log_tail(1500)}"


def _nothing_collected(run: SuiteRun) -> str:
    if run.timed_out:
        return "nothing collected: the test command timed out"
    lines = [ln for ln in run.log.strip().splitlines() if ln.strip() and not ln.startswith("[fixgraph]")]
    errors = [ln for ln in lines if re.match(r"^E\s+\w*(Error|Exception)", ln)]
    last = (errors or lines)[-1:] or ["no output"]
    return f"nothing collected ({last[0].strip()[:200]})"


# ---- the oracle-tests ablation ----------------------------------------------------------


def hidden_suite(task: Task, evaluation: EvaluationData) -> Suite:
    """The instance's own tests as swebench's harness runs them (its test_patch applied)."""
    ids = evaluation.FAIL_TO_PASS + evaluation.PASS_TO_PASS
    files = [f for f in patch_files(evaluation.test_patch) if not f.endswith(NON_TEST_EXTS)]
    if not files:
        for tid in ids:
            path = tid.split("::", 1)[0].split(" ", 1)[0]
            if path.endswith(".py") and path not in files:
                files.append(path)
    protected = [f for f in patch_files(evaluation.test_patch) if f.endswith(".py")]
    for tid in ids:
        f = tid.split("::", 1)[0]
        if f.endswith(".py") and f not in protected:
            protected.append(f)
    return Suite(targets=tuple(files), protected=tuple(protected), extra_patch=evaluation.test_patch,
                 label="hidden")


def as_listed(statuses: dict[str, str], ids: list[str]) -> dict[str, str]:
    """The status of each of a dataset's test ids in a run's ``statuses`` ("MISSING": not reported).

    SWE-bench's lists were made by a parser that split a summary line at its spaces, so a
    parametrized id with a space is listed cut there (``test_f[x,`` for ``test_f[x, y-z]``), and
    today's parser reports the whole id. A cut id takes the status of the ids it is the head of,
    the last one reported as that parser kept it: else a test that passes reads as missing, and a
    patch the harness resolved reads as failing (sphinx-8713, 188 ids of 13 matplotlib instances)."""
    heads: dict[str, str] = {}
    for full, status in statuses.items():
        head = listed_head(full)
        if head != full:
            heads[head] = status
    return {t: statuses.get(t, heads.get(t, "MISSING")) for t in ids}


def listed_among(tests: Iterable[str], ids: Iterable[str]) -> list[str]:
    """Of ``tests`` (full ids, as a run reports them), those a dataset's list ``ids`` holds, read
    as :func:`as_listed` reads it: listed whole, or cut at its first space."""
    listed = set(ids)
    return [t for t in tests if t in listed or listed_head(t) in listed]


def hidden_outcome(runner: SuiteRunner, task: Task, evaluation: EvaluationData, wt: Worktree,
                   patch: str) -> TestOutcome:
    """The instance's hidden tests, before and after ``patch``: eval/ benchmarks and the
    ``oracle-tests`` ablation only. Its figures are an upper bound, never a SWE-bench result."""
    out = TestOutcome(runnable=False, reason="", source="oracle", backend=runner.backend)
    if not evaluation.FAIL_TO_PASS:
        out.reason = "no FAIL_TO_PASS tests"
        return out
    suite = hidden_suite(task, evaluation)
    before = baseline(runner, task, wt, suite)
    out.seconds += before.seconds
    out.pass_to_pass_before = as_listed(before.statuses, evaluation.PASS_TO_PASS)
    if before.error:
        out.reason = before.error
        out.log_tail = before.log_tail()
        return out
    after = runner.run_suite(task, wt, patch, suite) if patch.strip() else before
    out.seconds += after.seconds if after is not before else 0.0
    ids = evaluation.FAIL_TO_PASS + evaluation.PASS_TO_PASS
    if all(s == "MISSING" for run in (before, after) for s in as_listed(run.statuses, ids).values()):
        # None of the instance's tests was reported, with or without the patch: a collection
        # error, an environment that cannot import the package, a hang. (Without the patch alone
        # is not enough: some bugs crash the test runner itself, pytest-dev__pytest-7168.)
        out.reason = _nothing_collected(before)
        out.log_tail = before.log_tail()
        out.timed_out = before.timed_out
        return out
    out.log_tail = after.log_tail()
    out.timed_out = after.timed_out
    out.network_isolated = after.network_isolated
    out.notes = before.notes + after.notes
    if after.error:
        out.reason = after.error
        return out
    out.runnable = True
    out.fail_to_pass = as_listed(after.statuses, evaluation.FAIL_TO_PASS)
    out.pass_to_pass_after = as_listed(after.statuses, evaluation.PASS_TO_PASS)
    _set_aside_unmatched(out, task.repo, runner.backend, wt, evaluation.test_patch, base=before,
                         pass_to_pass=evaluation.PASS_TO_PASS)
    if not out.runnable:
        return out
    failing = [t for t, s in out.fail_to_pass.items() if s not in PASSING]
    failing += out.broken()
    out.crash = _failure_context(after, failing) if failing else ""
    return out


def _set_aside_unmatched(out: TestOutcome, repo: str, backend: str, wt: Worktree, test_patch: str,
                         keep_runnable: bool = False, base: SuiteRun | None = None,
                         pass_to_pass: Collection[str] = ()) -> None:
    """Take the tests that cannot match here (:func:`not_runnable_here`; ``pass_to_pass``: the
    dataset's PASS_TO_PASS, for the hidden outcome) out of the outcome's sets, with a note per
    reason. An outcome left with no FAIL_TO_PASS test is not runnable, with the reason (unless
    ``keep_runnable``: the loop's own regression tests, beside its reproduction tests)."""
    unmatched = not_runnable_here(repo, backend, [*out.fail_to_pass, *out.pass_to_pass_after], wt.path,
                                  test_patch, base, pass_to_pass)
    if not unmatched:
        return
    out.not_runnable_here = unmatched
    fail_to_pass = list(out.fail_to_pass)
    for t in unmatched:
        for group in (out.fail_to_pass, out.pass_to_pass_before, out.pass_to_pass_after):
            group.pop(t, None)
    out.notes += set_aside_notes(unmatched)
    if not out.fail_to_pass and not keep_runnable:
        out.runnable = False
        out.reason = not_runnable_reason(unmatched, fail_to_pass)


# Why a PASS_TO_PASS test that does not pass here even without the patch is set aside.
FAILS_AT_BASE_HERE = ("does not pass here without the patch either, where the harness's image passes it "
                      "(a tool, font or service this machine lacks)")


def not_runnable_here(repo: str, backend: str, ids: list[str], root: Path, test_patch: str,
                      base: SuiteRun | None, pass_to_pass: Collection[str] = ()) -> dict[str, str]:
    """Of ``ids``, the tests that cannot match here, with the reason: image comparisons
    (``scoring.execution.image_tests``; the test files read at ``root`` with ``test_patch``'s edits)
    and, when the run without the patch is given (``base``), the tests it shows failing for want of
    the internet (``scoring.execution.offline_tests``), and, on this machine's own builds, the
    ``pass_to_pass`` tests it shows not passing at all.

    With ``base``, an image comparison is set aside only where it does not pass there: one that
    passes without the patch matches this build (no text, or within its tolerance), so it runs,
    and its failing with the patch is a break like any other (matplotlib-23562: the one verdict of
    the grader's 397 that differed from the harness's, with 53 such tests set aside).

    A PASS_TO_PASS test passes without the patch in the harness's image by its definition: one
    that does not pass here without it (fails, errors, is skipped or not reported) meets something
    this machine lacks (matplotlib's LaTeX and Ghostscript tests; the specs' ``apt-get`` steps are
    not run here), and whatever the patch does to it says nothing."""
    with tempfile.TemporaryDirectory(prefix="fixgraph-tests-") as tmp:
        unmatched = unmatched_tests(repo, backend, ids, test_file_reader(root, test_patch, Path(tmp)))
    if base is not None:
        at_base = as_listed(base.statuses, list(unmatched))
        unmatched = {t: why for t, why in unmatched.items() if at_base[t] not in PASSING}
        unmatched |= {t: why for t, why in needs_internet(base, ids).items() if t not in unmatched}
        if backend in OWN_BUILD_BACKENDS and pass_to_pass:
            at_base = as_listed(base.statuses, [t for t in pass_to_pass if t not in unmatched])
            unmatched |= {t: FAILS_AT_BASE_HERE for t, st in at_base.items() if st not in PASSING}
    return unmatched


def set_aside_notes(unmatched: Mapping[str, str]) -> list[str]:
    """One note per reason: how many tests were set aside for it, and the first names."""
    by_reason: dict[str, list[str]] = {}
    for t, why in unmatched.items():
        by_reason.setdefault(why, []).append(t)
    return [f"{len(names)} tests not runnable here ({why}): " + ", ".join(sorted(names)[:3])
            + (" ..." if len(names) > 3 else "") for why, names in by_reason.items()]


def not_runnable_reason(unmatched: Mapping[str, str], fail_to_pass: Iterable[str]) -> str:
    """Why an outcome whose every FAIL_TO_PASS test is set aside is not runnable."""
    reasons = dict.fromkeys(unmatched[t] for t in fail_to_pass if t in unmatched)
    return f"every FAIL_TO_PASS test is not runnable here: {'; '.join(reasons)}"


def test_file_reader(root: Path, test_patch: str, tmp: Path) -> Callable[[str], str | None]:
    """A reader of test files as a run has them: the checkout's, with ``test_patch``'s Python files
    applied (its binary baseline images left out)."""
    sections = re.split(r"(?m)^(?=diff --git )", test_patch)
    py = "".join(sec for sec in sections if re.match(r"diff --git a/\S+\.py b/\S+\.py", sec))
    patched: set[str] = set()
    if py:
        for rel in patch_files(py):
            if (root / rel).is_file():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / rel, tmp / rel)
        if not git_apply(tmp, py):
            patched = set(patch_files(py))

    def read(rel: str) -> str | None:
        for base in ((tmp,) if rel in patched else ()) + (root,):
            path = base / rel
            if path.is_file():
                return path.read_text(encoding="utf-8", errors="replace")
        return None

    return read
