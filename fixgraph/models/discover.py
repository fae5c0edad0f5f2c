"""Finding a model without being told (local OpenAI-compatible servers on loopback), and the
endpoint's gate before a run.

With no ``OPENAI_BASE_URL`` and no key, the usual local servers are asked ``GET /v1/models`` at
their default ports, all at once, within about a second; the first in this list that answers is
used. Before a run's first task, ``endpoint_gate`` asks the endpoint once: the three answers no
retry can change (the connection refused, the key refused, a model the server does not have) end
the run in seconds, before any repository is indexed. Standard library only, so that ``--help``,
bad-input errors and a dead endpoint are answered fast.
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import SecretStr

from fixgraph.config import ConfigError, Models, RunConfig

ROLES = tuple(Models.model_fields)
# (name, base URL) in the order they are preferred when several answer.
LOCAL_SERVERS: tuple[tuple[str, str], ...] = (
    ("Ollama", "http://127.0.0.1:11434/v1"),
    ("vLLM", "http://127.0.0.1:8000/v1"),
    ("LM Studio", "http://127.0.0.1:1234/v1"),
    ("llama.cpp server", "http://127.0.0.1:8080/v1"),
)
PROBE_TIMEOUT_S = 1.0
# The gate's requests: a refusal comes at once; a server that is up lists its models well within this.
GATE_TIMEOUT_S = 4.0
OPENAI_URL = "https://api.openai.com/v1"
# Local servers ignore the key, but the OpenAI client refuses to start without one.
LOCAL_KEY = "local"


@dataclass(frozen=True)
class Server:
    name: str
    base_url: str
    models: tuple[str, ...]


def list_models(base_url: str, api_key: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> list[str]:
    """The model ids a server lists at ``GET {base_url}/models``; raises OSError or ValueError."""
    req = urllib.request.Request(base_url.rstrip("/") + "/models", headers={"Accept": "application/json"})
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - a URL the user configured
        body = json.loads(resp.read(1_000_000))
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("GET /models did not answer an OpenAI model list")
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def probe(servers: Sequence[tuple[str, str]] = LOCAL_SERVERS, timeout_s: float = PROBE_TIMEOUT_S) -> Server | None:
    """The first of ``servers`` (in order) that lists at least one model, all asked in parallel."""
    found: dict[int, Server] = {}

    def ask(i: int, name: str, url: str) -> None:
        try:
            models = list_models(url, timeout_s=timeout_s)
        except Exception:  # noqa: BLE001 - whatever else listens there (a web app on 8000), it is not ours
            return
        if models:
            found[i] = Server(name, url, tuple(models))

    threads = [threading.Thread(target=ask, args=(i, n, u), daemon=True) for i, (n, u) in enumerate(servers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout_s + 0.2
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return found[min(found)] if found else None


def local_servers() -> list[tuple[str, str]]:
    """Where to look: the usual default ports, or ``FIXGRAPH_LOCAL_SERVERS`` (comma-separated base
    URLs; empty to look nowhere)."""
    raw = os.environ.get("FIXGRAPH_LOCAL_SERVERS")
    if raw is None:
        return list(LOCAL_SERVERS)
    return [("server", url.strip()) for url in raw.split(",") if url.strip()]


def tried(servers: Sequence[tuple[str, str]] = LOCAL_SERVERS) -> str:
    return ", ".join(f"{name} ({url.removesuffix('/v1')})" for name, url in servers)


def with_local_server(cfg: RunConfig, server: Server) -> RunConfig:
    """``cfg`` pointed at ``server``: a role keeps its model when the server has it, or when it was
    chosen (not the default); otherwise it gets the server's first model."""
    defaults = Models()
    models = {}
    for role in ROLES:
        chosen = getattr(cfg.llm.models, role)
        keep = chosen in server.models or chosen != getattr(defaults, role)
        models[role] = chosen if keep else server.models[0]
    llm = cfg.llm.model_copy(update={"base_url": server.base_url, "api_key": SecretStr(LOCAL_KEY),
                                     "models": Models(**models)})
    return cfg.model_copy(update={"llm": llm})


def resolve_llm(cfg: RunConfig, servers: Sequence[tuple[str, str]] = LOCAL_SERVERS,
                timeout_s: float = PROBE_TIMEOUT_S) -> tuple[RunConfig, str | None]:
    """The config with an LLM it can call, and the one line to print when one was found locally.

    A key or a base URL already set wins: nothing is probed. Raises ConfigError listing what was
    tried when nothing answers."""
    has_key = cfg.llm.api_key is not None and bool(cfg.llm.api_key.get_secret_value())
    if has_key:
        return cfg, None
    if cfg.llm.base_url:
        # A local server named without a key: any non-empty key works there, and nobody bills it
        # (its model may still be called gpt-4o-mini: the smoke's run was charged OpenAI's price).
        llm = cfg.llm.model_copy(update={"api_key": SecretStr(LOCAL_KEY), "prices": {}})
        return cfg.model_copy(update={"llm": llm}), None
    server = probe(servers, timeout_s)
    if server is None:
        raise ConfigError(
            "OPENAI_API_KEY is not set (put it in .env or the environment; for a local server "
            f"set OPENAI_BASE_URL) and no local server answered GET /v1/models: tried {tried(servers)}")
    cfg = with_local_server(cfg, server)
    names = sorted({getattr(cfg.llm.models, r) for r in ROLES})
    line = f"fixgraph: using {server.name} at {server.base_url}, model {', '.join(names)}"
    return cfg, line


def endpoint_gate(cfg: RunConfig, timeout_s: float = GATE_TIMEOUT_S) -> None:
    """Raise ConfigError, in one line, when the endpoint refuses the connection, the key or a
    configured model. Anything else (a 5xx, a server without ``GET /models``) is left to the calls'
    own retries. A model the server does not list gets one 1-token request, as some servers serve
    names they do not list (Ollama's ``llama3`` for ``llama3:latest``, llama.cpp any name): only a
    404 to it is an unknown model."""
    url = cfg.llm.base_url or OPENAI_URL
    key = cfg.llm.api_key.get_secret_value() if cfg.llm.api_key else None
    listed: list[str] | None = None
    try:
        listed = list_models(url, key, timeout_s=timeout_s)
    except urllib.error.HTTPError as exc:
        _refused_key(url, exc.code, "GET /models")
    except (OSError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(f"cannot reach the LLM server at {url} ({_short(reason)}): check OPENAI_BASE_URL "
                          "and that the server is running (python graph.py --check says more)") from None
    except ValueError:
        pass  # no model list there: the calls will say
    for model in sorted({getattr(cfg.llm.models, r) for r in ROLES}):
        if listed is not None and model in listed:
            continue
        code = _probe_status(url, key, model, timeout_s)
        _refused_key(url, code, f"a 1-token call to {model}")
        if code == 404:
            have = f" (it lists: {', '.join(listed[:8]) or 'none'})" if listed is not None else ""
            roles = ", ".join(r for r in ROLES if getattr(cfg.llm.models, r) == model)
            raise ConfigError(f"the LLM server at {url} has no model {model}{have}: pass --model NAME "
                              f"or --model-<role> NAME ({roles})")


def _refused_key(url: str, code: int | None, asked: str) -> None:
    if code in (401, 403):
        raise ConfigError(f"the LLM server at {url} refused the key ({asked} answered {code}): check OPENAI_API_KEY")


def _probe_status(url: str, key: str | None, model: str, timeout_s: float) -> int | None:
    """The HTTP status of a 1-token chat request for ``model``; None when it got no answer."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "ok"}], "max_tokens": 1})
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions", data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - a URL the user configured
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, http.client.HTTPException):
        return None


def _short(exc: object, limit: int = 120) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
