"""Git that runs nothing it was not told to: fixgraph's own git commands ignore hooks and config
that repositories, the machine or the user's home could hold.

Code under test, and the repositories themselves, are hostile: a ``.git/config`` can name an
``fsmonitor`` or a hook path, a global config a credential helper or a proxy command, and git
runs them. The settings below are passed as command-line-level config (``GIT_CONFIG_COUNT``),
which outranks every config file; system and global files are not read at all. ``harden()``
puts them in this process's environment, so every git child (subprocess or GitPython) has them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", "/dev/null"),
    ("core.sshCommand", "ssh"),
    ("core.gitProxy", ""),
    ("core.pager", "cat"),
    ("credential.interactive", "false"),
    # Only the transports fixgraph uses: no ext:: (runs a command), no git:// (unauthenticated).
    ("protocol.allow", "never"),
    ("protocol.file.allow", "always"),
    ("protocol.https.allow", "always"),
    ("protocol.http.allow", "always"),
    ("protocol.ssh.allow", "always"),
    ("uploadpack.allowFilter", "false"),
    ("safe.bareRepository", "all"),
)


def env_vars() -> dict[str, str]:
    """The environment variables that make git ignore outside config and apply SAFE_CONFIG."""
    env = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0",
           "GIT_CONFIG_COUNT": str(len(SAFE_CONFIG))}
    for i, (key, value) in enumerate(SAFE_CONFIG):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def hardened_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the hardening applied."""
    env = dict(os.environ if base is None else base)
    # A GIT_DIR/GIT_WORK_TREE/GIT_EXEC_PATH from outside would point git elsewhere.
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_EXEC_PATH", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_EXTERNAL_DIFF", "GIT_SSH", "GIT_SSH_COMMAND",
                "GIT_PROXY_COMMAND"):
        env.pop(key, None)
    env.update(env_vars())
    return env


def harden() -> None:
    """Apply the hardening to this process's environment (idempotent)."""
    clean = hardened_env()
    for key in [k for k in os.environ if k not in clean]:
        del os.environ[key]
    os.environ.update(clean)
