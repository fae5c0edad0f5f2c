"""The process's known secrets, and masking them in text fixgraph stores or sends.

Test output is hostile: whatever a test prints lands in the baseline cache, the Coder's next
prompt (sent to the LLM provider), checkpoints and records. The sandbox keeps secrets out of the
test's reach; this is the second line: every such text goes through ``redact`` before it is kept.
A run registers its config's secrets once (``register``); the module also knows the usual
environment variables, so code that has no config at hand is covered too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable

MASK = "***"
# Values shorter than this are not secrets worth masking (and would mangle ordinary text).
MIN_SECRET_CHARS = 4
ENV_SECRETS = ("OPENAI_API_KEY", "GITHUB_TOKEN", "GH_TOKEN", "GITHUB_WEBHOOK_SECRET", "GITHUB_APP_PRIVATE_KEY",
               "ANTHROPIC_API_KEY")

_lock = threading.Lock()
_registered: set[str] = set()


def register(secrets: Iterable[str]) -> None:
    with _lock:
        _registered.update(s for s in secrets if s and len(s) >= MIN_SECRET_CHARS)


def known() -> list[str]:
    with _lock:
        found = set(_registered)
    found.update(v for k in ENV_SECRETS if len(v := os.environ.get(k, "")) >= MIN_SECRET_CHARS)
    # Longest first: a secret that contains another is masked whole.
    return sorted(found, key=len, reverse=True)


def redact(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every known secret (and each of ``secrets``) replaced by ``***``."""
    extra = [s for s in secrets or () if s and len(s) >= MIN_SECRET_CHARS]
    for secret in sorted({*known(), *extra}, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, MASK)
    return text
