"""One typed object per run: caps, models, thresholds, budgets, mode.

Loaded from a named TOML file in ``configs/`` and overlaid with environment settings
(``.env`` is read by the CLI before this runs). Nodes read this object; they never read
environment variables themselves.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONFIGS_DIR = PROJECT_ROOT / "configs"


class ConfigError(Exception):
    """A setting is missing or wrong; the message is one line meant for the user."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Models(_Strict):
    """Model name per role. Any OpenAI-compatible server's model names work."""

    planner: str = "gpt-4o-mini"
    explorer: str = "gpt-4o-mini"
    coder: str = "gpt-4o"
    critic: str = "gpt-4o-mini"


class Price(_Strict):
    """US dollars per million tokens."""

    input: float = 0.0
    output: float = 0.0


DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": Price(input=2.5, output=10.0),
    "gpt-4o-mini": Price(input=0.15, output=0.6),
    "gpt-4.1": Price(input=2.0, output=8.0),
    "gpt-4.1-mini": Price(input=0.4, output=1.6),
}


DEFAULT_NODE_OUTPUT_TOKENS: dict[str, int] = {
    "planner": 1024, "explorer": 1536, "coder": 4096, "reproducer": 4096, "critic": 1024,
}
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"})


class LLMSettings(_Strict):
    base_url: str | None = None
    api_key: SecretStr | None = None
    models: Models = Models()
    temperature: float = 0.0
    timeout_s: float = Field(default=120.0, gt=0)
    # Retries are the OpenAI client's own: only connection errors, timeouts, 408/409/429 and 5xx,
    # with exponential backoff that honours Retry-After.
    max_retries: int = Field(default=4, ge=0, le=10)
    # One re-ask when a reply is not valid structured output, then the task fails with the reason.
    structured_reasks: int = Field(default=1, ge=0, le=3)
    use_responses_api: bool = False
    # A cap on each reply, so that one call's cost is bounded before it is made (see llm.Meter);
    # the cap of a node not named in node_output_tokens.
    max_output_tokens: int = Field(default=4096, ge=64)
    # The cap per node (planner, explorer, coder, reproducer, critic): a small reply needs no 4096.
    node_output_tokens: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_NODE_OUTPUT_TOKENS))
    # Send the cap as ``max_tokens`` too (the field most OpenAI-compatible servers read; OpenAI's
    # own reads ``max_completion_tokens``). None: for every server but api.openai.com.
    send_max_tokens: bool | None = None
    # Stream replies, so that a server sees the client go when a call times out and stops
    # generating (fixgraph still waits for the whole reply). None: for every server but api.openai.com.
    stream: bool | None = None
    # Retries of a call that timed out. None: once for a local server (loopback: its queue is
    # one request deep, so a retry waits behind the abandoned generation), max_retries elsewhere.
    timeout_retries: int | None = Field(default=None, ge=0, le=10)
    prices: dict[str, Price] = Field(default_factory=lambda: dict(DEFAULT_PRICES))

    @property
    def openai(self) -> bool:
        """Calls go to OpenAI's own API (no base URL, or api.openai.com)."""
        return not self.base_url or urlsplit(self.base_url).hostname == "api.openai.com"

    @property
    def local(self) -> bool:
        """The server runs on this machine (a discovered one, or a loopback base URL)."""
        return bool(self.base_url) and (urlsplit(self.base_url or "").hostname or "") in LOOPBACK_HOSTS

    def output_cap(self, node: str) -> int:
        return self.node_output_tokens.get(node, self.max_output_tokens)

    def retries_after_timeout(self) -> int:
        if self.timeout_retries is not None:
            return self.timeout_retries
        return min(1, self.max_retries) if self.local else self.max_retries


class Budget(_Strict):
    """Per-task and per-run spending caps; a task over budget ends cleanly with what it has."""

    task_tokens: int = Field(default=400_000, gt=0)
    task_dollars: float = Field(default=2.0, gt=0)
    run_dollars: float | None = Field(default=None, gt=0)


class ExplorerSettings(_Strict):
    max_files: int = Field(default=8, ge=1)
    max_iterations: int = Field(default=3, ge=1)
    token_budget: int = Field(default=24_000, ge=1000)
    # Files bigger than this many lines are shown as a skeleton with bodies only for suspects.
    skeleton_over_lines: int = Field(default=400, ge=50)
    max_planner_reruns: int = Field(default=2, ge=0)
    candidates_shown: int = Field(default=30, ge=1)
    # The Planner's repository map (ranked candidates and folded tree) fits in this many tokens.
    map_tokens: int = Field(default=6000, ge=500)
    # Execution evidence for the ranking: the issue's own code run once at the base commit, in the
    # test sandbox the Critic uses (scoring/runtime/issue_run.py), before the Planner ranks the files.
    execute_issue: bool = True
    execute_timeout_s: float = Field(default=60.0, gt=0)


class CoderSettings(_Strict):
    # Everything the Coder is shown of the code fits in this many tokens.
    token_budget: int = Field(default=32_000, ge=2000)
    # Lines of raw context around each suspect when a file is too big to show whole.
    window_lines: int = Field(default=60, ge=5)
    # Patches the Coder writes per round, each judged by the Critic; the delivered one is chosen
    # by scoring/verdict/choose_patch.py. 1 is one patch per round, chosen by fix_score.
    candidates: int = Field(default=1, ge=1, le=8)
    # Candidates after the first are sampled at this temperature, with the files shown in a
    # rotated order (the first is the usual prompt at llm.temperature).
    sample_temperature: float = Field(default=0.8, ge=0.0, le=2.0)


class CriticSettings(_Strict):
    enabled: bool = True
    static: bool = True
    pyflakes: bool = True
    # Attributes the patch reads that exist nowhere in the repository or the standard library.
    names: bool = True
    # Let pyright infer what unannotated functions outside the touched files return (call-site
    # return type inference). Off: their calls return Unknown and the touched files alone are
    # analyzed in full; the static phase is then about 1.3x faster over the benchmark (2x on some
    # sympy patches) with higher precision and lower recall (README, The Critic).
    infer_unannotated: bool = True
    llm_check: bool = True
    llm_check_calls: int = Field(default=1, ge=1, le=5)
    # Where the loop's test signal comes from: "own" (reproduction tests the pipeline writes and the
    # repository's existing tests, selected from the patch), "off", or "oracle" (the instance's
    # hidden FAIL_TO_PASS/PASS_TO_PASS tests: an upper-bound ablation, never a SWE-bench result).
    tests: Literal["own", "oracle", "off"] = "own"
    # With tests = "own" and the static phase on, start the patch's tests beside the static phase,
    # the LLM check and the replay (agents/critic.py, TestsAhead): the run they get when nothing
    # is suspected, kept only when the Critic asks for exactly that run. A task then waits for the
    # longer of the two, not their sum; a patch with a suspicion waits for the run ahead to end
    # before its traced run.
    tests_ahead: bool = True
    guard: Literal["block", "warn", "off"] = "warn"
    # Run the issue's code again with the patch and compare it with its run at the base
    # (scoring/runtime/replay.py): a new crash in the repository, or the issue's reported crash still
    # there, makes the patch Unsafe. Needs the venv or local backend; off with tests = "off".
    replay_issue: bool = True
    replay_timeout_s: float = Field(default=60.0, gt=0)
    # A reproduction test that still fails with the patch by raising (not an assertion) in the
    # repository's code, in regression.runtime_scope, makes the patch Unsafe with a runtime finding,
    # as a regressed test's crash does (scoring/runtime/findings.py).
    repro_crashes: bool = True
    # The pyright command (a name on PATH or a path); the static phase fails loudly without it.
    pyright: str = "pyright"
    # Check with pyright's language server kept running a worktree (scoring/static/pyright_server.py):
    # node and typeshed paid once, not at each check; the same diagnostics as the command line,
    # which runs a check the server cannot answer (said in the attempt's notes).
    pyright_server: bool = True
    static_timeout_s: float = Field(default=300.0, gt=0)
    fix_score_threshold: float = Field(default=0.8, ge=0.0, le=1.0)
    # A patch no test ran on (its score semantic, or none) fails the task instead of being delivered
    # (graph.py --require-tests): for runs whose machine may lack an env.
    require_tests: bool = False

    @field_validator("tests", mode="before")
    @classmethod
    def _tests_bool(cls, value: object) -> object:
        # Older configs say tests = true/false.
        if isinstance(value, bool):
            return "own" if value else "off"
        return value


class ReproSettings(_Strict):
    """The reproduction test the pipeline writes from the issue (agents/reproducer.py)."""

    enabled: bool = True
    # LLM tries to get a test that runs and fails at the base commit.
    max_tries: int = Field(default=3, ge=1, le=10)
    # Wall-clock cap for one run of the reproduction test.
    timeout_s: float = Field(default=180.0, gt=0)
    # The issue's own code as a reproduction test too (scoring/runtime/replay.py): its statements that
    # raised the crash the issue reports at the base commit, run again with the patch by the
    # Critic's replay (critic.replay_issue), count with the reproduction tests in test_pass_rate.
    issue_code: bool = True


class RegressionSettings(_Strict):
    """The repository's existing tests that exercise the changed code (scoring/execution/choose_tests.py)."""

    enabled: bool = True
    # At most this many test files are run; the rest are recorded as left out.
    max_files: int = Field(default=6, ge=1)
    # Test files bigger than this are left out (a 10k-line test module is a slow, broad net).
    max_file_bytes: int = Field(default=400_000, ge=1000)
    # Seconds one run of the selection is expected to take, by the files' measured (else
    # estimated) cost (scoring.execution.choose_tests.CostBook); files that do not fit are left out.
    max_expected_s: float = Field(default=40.0, gt=0)
    # Wall-clock cap for one run of the selection on an idle machine, stretched by the load per
    # core when the run starts (up to tests.timeout_s); tests it did not reach are left out.
    timeout_s: float = Field(default=300.0, gt=0)
    # Runs of the selection at the base commit; a test whose outcome differs between them is
    # flaky and left out.
    base_runs: int = Field(default=1, ge=1, le=3)
    # When the patch breaks selected tests, the base and the patched run are each made this many
    # more times; a broken test that fails at the base or passes with the patch in any of them is
    # flaky: left out and named in the notes. Costs time only when a test breaks. Seen on a gold
    # patch: sympy's test_wallis_product recurses without end under some hash seeds, at the base too.
    confirm_runs: int = Field(default=1, ge=0, le=2)
    # When the base run is not cached, the patched run starts beside it (two test processes): the
    # first attempt then takes about the slower of the two runs, not their sum.
    patched_beside_base: bool = True
    # Read an assertion failure in a test named after the issue's subject as an expected behaviour
    # change, not a regression (scoring/verdict/expected_change.py). Off: on rows no rule was chosen on it
    # dropped a true regression and cleared no false positive (docs/benchmarks/critic.md).
    expected_changes: bool = False
    # Where a selected test's non-assertion crash counts as a runtime error (scoring/runtime/findings.py):
    # "touched", a frame in a file the patch touched; "source", also when the innermost repository
    # frame is any non-test source file (an untouched caller of a changed helper). "source": on
    # run 2's sample it added a true positive and no false positive (docs/benchmarks/critic.md).
    runtime_scope: Literal["touched", "source"] = "source"


class TestSettings(_Strict):
    backend: Literal["venv", "docker", "local"] = "venv"
    timeout_s: float = Field(default=900.0, gt=0)
    cpu_s: int = Field(default=1800, gt=0)
    memory_mb: int = Field(default=4096, gt=0)
    network_isolation: bool = True
    locals_repr_chars: int = Field(default=200, ge=20)
    env_dir: Path | None = None
    # Every env built with this Python ("3.11") instead of the spec's: measures which substitutes are
    # safe (eval.gold_bench --python); such envs live in folders of their own.
    python: str | None = None
    # Building a (repo, version) virtualenv: wall-clock cap for the whole build.
    build_timeout_s: float = Field(default=1800.0, gt=0)
    # An env's install at one base commit serves another commit of the same (repo, version) when
    # nothing the install reads changed between them (scoring/execution/envs.py); false reinstalls per commit.
    reuse_install: bool = True
    # A patch that adds a requirement to setup.cfg, pyproject.toml or requirements*.txt gets it for its
    # run, as wheels without their dependencies (scoring/execution/patch_deps.py), as swebench's harness
    # installs the patched repository again; false runs the tests in the env as it is.
    patch_dependencies: bool = True
    # Docker backend: registry namespace of the official SWE-bench instance images.
    docker_namespace: str = "swebench"
    # Where test runs make their working copies (default: the system's temp dir). Never inside
    # fixgraph's checkout: pytest would climb up to fixgraph's own configuration.
    run_root: Path | None = None


class GitHubSettings(_Strict):
    token: SecretStr | None = None
    base_url: str = "https://api.github.com"
    app_id: int | None = None
    app_private_key: SecretStr | None = None
    webhook_secret: SecretStr | None = None
    label: str = "fixgraph"
    command: str = "/fixgraph"
    allowlist: tuple[str, ...] = ()
    # Push to this remote URL instead of the issue's repository (a fork, or a local bare repo).
    push_remote: str | None = None
    max_concurrent_jobs: int = Field(default=2, ge=1)
    # Rounds of revision a review can start on one of the bot's PRs (each a run with its own budget).
    max_revisions: int = Field(default=3, ge=0)
    # The bot (bot/, fixgraph/github/pr.py).
    # The installation to use when an event does not name one (polling as a GitHub App).
    app_installation_id: int | None = None
    # Commenters allowed to trigger with the command, besides the repo's owners, members and
    # collaborators (GitHub's author_association).
    allowed_users: tuple[str, ...] = ()
    # The bot's own login, so its comments never trigger it (its comments also carry a marker).
    bot_login: str | None = None
    # Owner of push_remote when it is a fork: the PR's head becomes "<fork_owner>:<branch>".
    fork_owner: str | None = None
    commit_name: str = "fixgraph"
    commit_email: str = "fixgraph@users.noreply.github.com"
    # The PR also adds the reproduction test (it failed before the fix and passes after).
    include_repro_test: bool = True
    timeout_s: float = Field(default=30.0, gt=0)
    # Pauses between API calls that GitHub asks integrators to keep (PyGithub's throttle).
    request_pause_s: float = Field(default=0.25, ge=0)
    write_pause_s: float = Field(default=1.0, ge=0)
    # Longest wait on a rate limit (Retry-After or the reset time) before giving up on a call.
    rate_limit_max_wait_s: float = Field(default=900.0, ge=0)
    poll_interval_s: float = Field(default=60.0, gt=0)
    webhook_host: str = "127.0.0.1"
    # Not 8080 (llama.cpp's server) nor any port fixgraph.models.discover looks at.
    webhook_port: int = Field(default=8787, ge=0, le=65535)

    @field_validator("allowlist", "allowed_users", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        # From the environment these come as "owner/a, owner/b".
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value


class TaskResources(_Strict):
    """What one task asks a Ray cluster for."""

    cpus: float = Field(default=1.0, gt=0)
    # 0: no memory request (Ray then schedules by CPUs alone).
    memory_mb: int = Field(default=0, ge=0)


class ExecutorSettings(_Strict):
    """``--executor ray`` (pipeline/executors.py); the thread pool ignores this block."""

    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=0, ge=0)
    # A test-heavy repository may ask for more, e.g. [executor.repo_resources."sympy/sympy"].
    repo_resources: dict[str, TaskResources] = Field(default_factory=dict)
    # How often Ray reruns a task whose worker process died; the rerun resumes from its checkpoint.
    max_retries: int = Field(default=2, ge=0, le=10)
    # The CPUs a local Ray (no --ray-address) gets; 0: this machine's.
    local_cpus: int = Field(default=0, ge=0)
    # How long joining a cluster may take before the run stops with one line.
    connect_timeout_s: float = Field(default=15.0, gt=0)

    def resources(self, repo: str) -> TaskResources:
        return self.repo_resources.get(repo) or TaskResources(cpus=self.cpus, memory_mb=self.memory_mb)


class RunConfig(_Strict):
    name: str = "redo"
    eval_mode: bool = True
    max_attempts: int = Field(default=3, ge=1, le=10)
    # SWE-bench's hints_text (comments made on the issue before the fix) is the task's only when
    # this is true; off, as in the usual SWE-bench setting.
    hints_text: bool = False
    recursion_limit: int = Field(default=80, ge=10)
    llm: LLMSettings = LLMSettings()
    budget: Budget = Budget()
    explorer: ExplorerSettings = ExplorerSettings()
    coder: CoderSettings = CoderSettings()
    critic: CriticSettings = CriticSettings()
    repro: ReproSettings = ReproSettings()
    regression: RegressionSettings = RegressionSettings()
    tests: TestSettings = TestSettings()
    github: GitHubSettings = GitHubSettings()
    executor: ExecutorSettings = ExecutorSettings()
    cache_dir: Path = Path(".cache/fixgraph")
    predictions_dir: Path = Path("predictions")
    runs_dir: Path = Path("runs")

    @property
    def oracle(self) -> bool:
        """The hidden-tests ablation: its results are an upper bound, not SWE-bench results."""
        return self.critic.enabled and self.critic.tests == "oracle"

    @property
    def label(self) -> str:
        """The config's name, marked ``oracle-tests`` when the hidden tests are in the loop, so that
        no run id, record, predictions file or dashboard column can pass it off as a SWE-bench result."""
        return self.name if not self.oracle or "oracle-tests" in self.name else f"{self.name}-oracle-tests"

    def require_llm(self) -> None:
        """Fail fast, before any work, when no LLM can be called."""
        if self.llm.api_key is None or not self.llm.api_key.get_secret_value():
            raise ConfigError(
                "OPENAI_API_KEY is not set (put it in .env or the environment; "
                "for a local server any non-empty value works)"
            )

    def secrets(self) -> list[str]:
        """Every secret value this config holds, for redaction."""
        found = [self.llm.api_key, self.github.token, self.github.app_private_key,
                 self.github.webhook_secret]
        return [s.get_secret_value() for s in found if s is not None and s.get_secret_value()]


# Environment variables that may override the config file, and where they go.
ENV_KEYS: dict[str, tuple[str, ...]] = {
    "OPENAI_API_KEY": ("llm", "api_key"),
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "FIXGRAPH_MODEL_PLANNER": ("llm", "models", "planner"),
    "FIXGRAPH_MODEL_EXPLORER": ("llm", "models", "explorer"),
    "FIXGRAPH_MODEL_CODER": ("llm", "models", "coder"),
    "FIXGRAPH_MODEL_CRITIC": ("llm", "models", "critic"),
    "FIXGRAPH_LLM_TIMEOUT": ("llm", "timeout_s"),
    "FIXGRAPH_TASK_DOLLARS": ("budget", "task_dollars"),
    "FIXGRAPH_RUN_DOLLARS": ("budget", "run_dollars"),
    "GITHUB_TOKEN": ("github", "token"),
    "GITHUB_BASE_URL": ("github", "base_url"),
    "GITHUB_APP_ID": ("github", "app_id"),
    "GITHUB_APP_PRIVATE_KEY": ("github", "app_private_key"),
    "GITHUB_WEBHOOK_SECRET": ("github", "webhook_secret"),
    "FIXGRAPH_PUSH_REMOTE": ("github", "push_remote"),
    "GITHUB_APP_INSTALLATION_ID": ("github", "app_installation_id"),
    "FIXGRAPH_ALLOWLIST": ("github", "allowlist"),
    "FIXGRAPH_ALLOWED_USERS": ("github", "allowed_users"),
    "FIXGRAPH_LABEL": ("github", "label"),
    "FIXGRAPH_MAX_REVISIONS": ("github", "max_revisions"),
    "FIXGRAPH_BOT_LOGIN": ("github", "bot_login"),
    "FIXGRAPH_WEBHOOK_HOST": ("github", "webhook_host"),
    "FIXGRAPH_WEBHOOK_PORT": ("github", "webhook_port"),
    "EVAL_MODE": ("eval_mode",),
    "FIXGRAPH_CACHE_DIR": ("cache_dir",),
}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def config_path(name: str) -> Path:
    """A config is a name in ``configs/`` or a path to a TOML file."""
    candidate = Path(name)
    if candidate.suffix == ".toml" or os.sep in name:
        path = candidate
    else:
        path = CONFIGS_DIR / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in CONFIGS_DIR.glob("*.toml")))
        raise ConfigError(f"unknown config {name!r} (known: {known})")
    return path


def load_config(name: str = "redo", env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """Read ``configs/<name>.toml``, overlay environment settings, validate strictly."""
    env = os.environ if env is None else env
    path = config_path(name)
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start}): a config is UTF-8 TOML") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    data.setdefault("name", path.stem)
    for var, dest in ENV_KEYS.items():
        raw = env.get(var)
        if raw is None or (raw == "" and var != "EVAL_MODE"):
            continue
        value: Any = raw
        if var == "EVAL_MODE":
            low = raw.strip().lower()
            if low not in _TRUE | _FALSE:
                raise ConfigError(f"EVAL_MODE must be true or false, not {raw!r}")
            value = low in _TRUE
        _set(data, dest, value)
    for dotted, value in (overrides or {}).items():
        _set(data, tuple(dotted.split(".")), value)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        if err["type"] == "extra_forbidden":
            raise ConfigError(f"{path}: unknown key {where!r}") from None
        raise ConfigError(f"{path}: {where}: {err['msg']}") from None
