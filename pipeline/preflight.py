"""``python graph.py --check``: is each part ready, and what to do when it is not.

The LLM endpoint answers, each configured model is listed there and answers one tiny call with a
tool call (the structured output every node needs), the Planner's model answers one realistic
call (a Planner-sized prompt with its schema: seconds per call and an estimate per task, with a
warning when a task would pass its budget or calls the timeout), pyright runs, git works, the test
backend can build an environment, and (outside EVAL_MODE) the GitHub token reaches GitHub with the
scopes publishing needs. Without a key or a server every other part is still checked. The bot
runs the same checks at start.
A run asks less, once, before its first task: ``fixgraph.models.discover.endpoint_gate``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from fixgraph.config import Budget, ConfigError, RunConfig
from fixgraph.models.discover import OPENAI_URL, ROLES, list_models

# Each model's probe call: a small reply, and a few cents at most even on an expensive model.
CHECK_BUDGET = Budget(task_tokens=5_000, task_dollars=0.05)
CHECK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Check:
    part: str
    ready: bool
    detail: str
    # Ready, but something the user should know before a long run (a slow server).
    warning: bool = False


class Ping(BaseModel):
    """Answer ok=true."""

    ok: bool = Field(description="always true")


def check_endpoint(cfg: RunConfig) -> tuple[Check, list[str] | None]:
    url = cfg.llm.base_url or OPENAI_URL
    key = cfg.llm.api_key.get_secret_value() if cfg.llm.api_key else None
    try:
        models = list_models(url, key, timeout_s=min(cfg.llm.timeout_s, 10.0))
    except Exception as exc:  # noqa: BLE001 - any failure here is the one thing to report
        return Check("LLM endpoint", False, f"{url} does not answer GET /models ({_short(exc)}): "
                     "check OPENAI_BASE_URL and that the server is running"), None
    return Check("LLM endpoint", True, f"{url} lists {len(models)} model(s)"), models


def check_models(cfg: RunConfig, listed: list[str]) -> list[Check]:
    out = []
    for model in sorted({getattr(cfg.llm.models, r) for r in ROLES}):
        roles = ", ".join(r for r in ROLES if getattr(cfg.llm.models, r) == model)
        if model in listed:
            out.append(Check(f"model {model}", True, f"listed by the server ({roles})"))
        else:
            have = ", ".join(listed[:8]) or "none"
            out.append(Check(f"model {model}", False, f"not listed by the server (it has: {have}); "
                             f"pass --model NAME or --model-<role> NAME ({roles})"))
    return out


def check_tool_calling(cfg: RunConfig, model: str) -> Check:
    """One tiny real call through the project's LLM class, asking for a Ping tool call."""
    from fixgraph.models.llm import LLM, LLMFailure, Meter, make_chat_model

    llm_settings = cfg.llm.model_copy(update={"timeout_s": min(cfg.llm.timeout_s, CHECK_TIMEOUT_S),
                                              "max_retries": 0, "max_output_tokens": 64})
    probe_cfg = cfg.model_copy(update={"llm": llm_settings})
    roles = [r for r in ROLES if getattr(cfg.llm.models, r) == model]
    llm = LLM(lambda role: make_chat_model(probe_cfg, role), Meter(CHECK_BUDGET, cfg.llm.prices),
              reasks=0, retries=0)
    try:
        llm.structured(roles[0], "check", Ping, [HumanMessage("Call the Ping tool with ok=true.")])
    except LLMFailure as exc:
        msg = str(exc)
        if "truncated:" in msg:
            return Check(f"tool calling {model}", False,
                         f"the tool call was cut off ({_short(msg)}): the server stopped the reply early; "
                         "check its context size (llama.cpp: --n_ctx) and llm.max_output_tokens")
        if "did not call" in msg or "no valid Ping" in msg:
            return Check(f"tool calling {model}", False,
                         "the model did not answer with a tool call: the nodes need tool calling "
                         "(structured output); use a model that supports it, or start the server with "
                         "tool calling on (vLLM: --enable-auto-tool-choice --tool-call-parser ...)")
        return Check(f"tool calling {model}", False, f"the probe call failed: {_short(msg)}")
    except Exception as exc:  # noqa: BLE001 - e.g. the budget: report, do not crash the check
        return Check(f"tool calling {model}", False, f"the probe call failed: {_short(exc)}")
    return Check(f"tool calling {model}", True, "answered a tool call")


def calls_per_task(cfg: RunConfig) -> tuple[int, int]:
    """LLM calls a task usually makes (a plan, two exploration steps, a test, a patch and its
    check) and at most (every rerun, re-ask aside)."""
    repro = cfg.repro.enabled and cfg.critic.enabled and cfg.critic.tests == "own"
    check = cfg.critic.enabled and cfg.critic.llm_check
    usual = 1 + min(2, cfg.explorer.max_iterations) + int(repro) + 1 + int(check)
    plans = 1 + cfg.explorer.max_planner_reruns
    most = (plans * (1 + cfg.explorer.max_iterations) + (cfg.repro.max_tries if repro else 0)
            + cfg.max_attempts * cfg.coder.candidates * (1 + (cfg.critic.llm_check_calls if check else 0)))
    return usual, most


def planner_prompt(cfg: RunConfig) -> list[Any]:
    """The Planner's prompt with a made-up issue and a repository map as long as ``explorer.map_tokens``
    (about four characters a token)."""
    from fixgraph.prompts import render

    rows, n = [], 0
    while sum(len(r) + 1 for r in rows) < cfg.explorer.map_tokens * 4:
        rows.append(f"pkg/module_{n}.py: class Handler{n}(process, validate, render_{n}), def helper_{n}(value)")
        n += 1
    problem = ("Calling `Handler3.render_3()` with an empty value raises `KeyError: 'name'` instead of "
               "returning an empty string.\n\n```python\nfrom pkg.module_3 import Handler3\n"
               "Handler3().render_3({})\n```\n")
    return [SystemMessage(render("system", role="the Planner")),
            HumanMessage(render("planner", repo="example/pkg", problem=problem, repo_map="\n".join(rows),
                                execution="", feedback="", previous=[], max_files=cfg.explorer.max_files))]


def check_speed(cfg: RunConfig, model: str) -> Check:
    """One realistic call (the Planner's prompt size and its schema, its output cap, the run's
    timeout): seconds per call, an estimate per task, and a warning when that is too slow."""
    from fixgraph.models.llm import LLM, LLMFailure, Meter, make_chat_model
    from fixgraph.models.transport import CallPolicy
    from fixgraph.state import Plan

    part = f"speed {model}"
    probe_cfg = cfg.model_copy(update={"llm": cfg.llm.model_copy(update={"max_retries": 0, "timeout_retries": 0})})
    roles = [r for r in ROLES if getattr(cfg.llm.models, r) == model]
    meter = Meter(cfg.budget, cfg.llm.prices)
    llm = LLM(lambda role: make_chat_model(probe_cfg, role), meter, reasks=0,
              policy=CallPolicy.of(probe_cfg.llm), node_caps=cfg.llm.node_output_tokens)
    t0 = time.monotonic()
    try:
        llm.structured(roles[0], "planner", Plan, planner_prompt(cfg))
    except LLMFailure as exc:
        msg = str(exc)
        if "timed out" in msg:
            return Check(part, False, f"a Planner-sized call did not finish within llm.timeout_s = "
                         f"{cfg.llm.timeout_s:g} s: the server is too slow for that setting; raise "
                         "llm.timeout_s / FIXGRAPH_LLM_TIMEOUT, or use a smaller model")
        return Check(part, False, f"a Planner-sized call failed: {_short(msg)}")
    except Exception as exc:  # noqa: BLE001 - e.g. the budget: report, do not crash the check
        return Check(part, False, f"a Planner-sized call failed: {_short(exc)}")
    seconds = time.monotonic() - t0
    usual, most = calls_per_task(cfg)
    detail = (f"a Planner-sized call ({meter.tokens} tokens) took {seconds:.1f} s; a task makes about {usual} "
              f"calls (up to {most}): about {_minutes(usual * seconds)}, up to {_minutes(most * seconds)}")
    warn = []
    if seconds > 0.5 * cfg.llm.timeout_s:
        warn.append(f"longer calls (the Coder's) may pass llm.timeout_s = {cfg.llm.timeout_s:g} s: raise "
                    "llm.timeout_s / FIXGRAPH_LLM_TIMEOUT")
    if meter.tokens * usual > cfg.budget.task_tokens:
        warn.append(f"about {meter.tokens * usual} tokens a task, over budget.task_tokens = {cfg.budget.task_tokens}")
    if meter.dollars * usual > cfg.budget.task_dollars:
        warn.append(f"about ${meter.dollars * usual:.2f} a task, over budget.task_dollars = {cfg.budget.task_dollars}")
    return Check(part, True, detail + ("; WARNING: " + "; ".join(warn) if warn else ""), warning=bool(warn))


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def check_pyright(cfg: RunConfig) -> Check:
    if not (cfg.critic.enabled and cfg.critic.static):
        return Check("pyright", True, "not used by this config")
    from scoring.static.differential import StaticAnalysisUnavailable, check_available

    try:
        return Check("pyright", True, check_available(cfg.critic))
    except StaticAnalysisUnavailable as exc:
        return Check("pyright", False, f"{exc} (it fetches Node on first use), or set critic.pyright to its path")


def check_git() -> Check:
    try:
        out = subprocess.run(["git", "--version"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Check("git", False, f"git does not run ({_short(exc)}): install git")
    if out.returncode != 0:
        return Check("git", False, f"git --version failed (exit {out.returncode}): install git")
    return Check("git", True, out.stdout.strip())


def check_test_backend(cfg: RunConfig) -> Check:
    backend = cfg.tests.backend
    part = f"test backend {backend}"
    if not cfg.critic.enabled or cfg.critic.tests == "off":
        return Check(part, True, "not used by this config")
    if backend == "local":
        return Check(part, True, "runs the tests in this Python" + _sandbox_note())
    if backend == "docker":
        from scoring.execution.docker import engine_status

        why = engine_status()
        if why:
            return Check(part, False, f"{why}: start Docker, or set [tests] backend = \"venv\"")
        return Check(part, True, "a Docker engine answers")
    with tempfile.TemporaryDirectory(prefix="fixgraph-check-") as tmp:
        try:
            out = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(Path(tmp) / "v")],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Check(part, False, f"python -m venv did not run ({_short(exc)})")
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["failed"])[-1]
        return Check(part, False, f"python -m venv failed ({_short(last)}): install python3-venv")
    return Check(part, True, f"{Path(sys.executable).name} -m venv builds an environment" + _sandbox_note())


def _sandbox_note() -> str:
    """How test processes will be held: a machine without namespaces still runs them, but the
    user should know the tests are not contained (SECURITY.md)."""
    from fixgraph.sandbox.process import SANDBOX_UID, sandbox_mode

    return {"uid": f"; tests sandboxed as uid {SANDBOX_UID} in namespaces of their own",
            "userns": "; tests sandboxed in a user namespace of their own"}.get(
        sandbox_mode(), "; NO SANDBOX: namespaces (unshare) are unavailable here, so tests run with a "
                        "scrubbed environment and limits only (see SECURITY.md)")


def check_github(cfg: RunConfig) -> Check:
    if cfg.eval_mode:
        return Check("GitHub", True, "not used in EVAL_MODE")
    from github.GithubException import GithubException

    from fixgraph.github.client import GitHubAccess

    try:
        access = GitHubAccess(cfg)
    except ConfigError as exc:
        return Check("GitHub", False, str(exc))
    if access.app_auth is not None:
        return Check("GitHub", True, "GitHub App configured (each job uses its installation's token)")
    from github import Auth, Github

    # No backoff here: the check says at once what is wrong; only a dropped connection is tried again.
    gh = Github(auth=Auth.Token(access.token or ""), base_url=cfg.github.base_url.rstrip("/"),
                timeout=int(min(cfg.github.timeout_s, 10)), retry=None)
    for attempt in (1, 2):
        try:
            login = gh.get_user().login
            break
        except GithubException as exc:
            return Check("GitHub", False, f"GET /user answered {exc.status}: check GITHUB_TOKEN and GITHUB_BASE_URL")
        except Exception as exc:  # noqa: BLE001 - connection errors come in many types
            # A connection dropped once (a server restarting, a busy proxy) gets one more try; a
            # server that is down refuses twice, at once.
            if attempt == 2:
                return Check("GitHub", False, f"{cfg.github.base_url} unreachable ({_short(exc)})")
            time.sleep(1.0)
    scopes = gh.oauth_scopes
    if scopes is None:  # fine-grained tokens: GitHub does not list their permissions
        return Check("GitHub", True, f"token of {login} (fine-grained: needs Contents, Issues and "
                     "Pull requests read and write on the repository)")
    if not {"repo", "public_repo"} & set(scopes):
        return Check("GitHub", False, f"token of {login} has scopes {', '.join(scopes) or 'none'}; "
                     "publishing needs repo (or public_repo for public repositories)")
    return Check("GitHub", True, f"token of {login}, scopes {', '.join(scopes)}")


def run_checks(cfg: RunConfig, tool_check: Callable[[RunConfig, str], Check] = check_tool_calling,
               speed_check: Callable[[RunConfig, str], Check] = check_speed, llm_error: str = "") -> list[Check]:
    """Every part; ``llm_error``: why no LLM could be set up (no key, no local server), reported
    as the endpoint's line while every other part is still checked."""
    if llm_error:
        checks = [Check("LLM endpoint", False, llm_error)]
    else:
        endpoint, listed = check_endpoint(cfg)
        checks = [endpoint]
        if listed is not None:
            model_checks = check_models(cfg, listed)
            checks += model_checks
            tools = [tool_check(cfg, c.part.removeprefix("model ")) for c in model_checks if c.ready]
            checks += tools
            planner = cfg.llm.models.planner
            if any(t.ready and t.part == f"tool calling {planner}" for t in tools):
                checks.append(speed_check(cfg, planner))
    checks += [check_pyright(cfg), check_git(), check_test_backend(cfg), check_github(cfg)]
    return checks


def print_report(checks: list[Check], out: Callable[[str], None] = print) -> bool:
    """One line per part; True when every part is ready (a warning is ready)."""
    for c in checks:
        out(f"{('WARNING  ' if c.warning else 'ready    ') if c.ready else 'NOT READY'}  {c.part}: {c.detail}")
    ok = all(c.ready for c in checks)
    out("all ready" if ok else f"{sum(not c.ready for c in checks)} part(s) not ready")
    return ok


def _short(exc: object, limit: int = 200) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
