"""Run one test command isolated: scrubbed environment, no network, resource limits, hard timeout.

- Environment: built from nothing but an allow-list (PATH, HOME, LANG, ...) plus what the caller
  passes, so API keys and tokens in the parent's environment never reach the tests.
- Network: the command runs in a new network namespace (``unshare -n``; ``unshare -rn`` when not
  root) when the kernel allows it here, probed once. Inside, even loopback is down.
- Limits: CPU time, address space and no core files via ``resource.setrlimit`` in the child; a
  wall-clock timeout that kills the whole process group (the child starts a new session).
- Output: bytes, decoded as UTF-8 with replacement, so non-UTF-8 output never raises.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Variables a test process may inherit from the parent; everything else is dropped.
_INHERITED = ("TZ", "TERM", "SOURCE_DATE_EPOCH")
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
# Lengthy output is cut to its last part: parsers need the summary, which comes last.
MAX_OUTPUT_BYTES = 8_000_000


@dataclass(frozen=True)
class Limits:
    timeout_s: float
    cpu_s: int
    memory_mb: int
    network_isolation: bool = True


@dataclass
class Completed:
    returncode: int
    output: str
    seconds: float
    timed_out: bool
    isolated_network: bool


def scrubbed_env(home: Path, extra: Mapping[str, str] | None = None,
                 path_prefix: Sequence[str] = ()) -> dict[str, str]:
    """A minimal environment: no secrets can leak because nothing is copied by default."""
    env = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    env.update(
        PATH=":".join([*path_prefix, _SYSTEM_PATH]),
        HOME=str(home),
        TMPDIR=str(home),
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        PYTHONIOENCODING="utf-8:backslashreplace",
        PIP_NO_INPUT="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        GIT_TERMINAL_PROMPT="0",
        NO_COLOR="1",
    )
    env.update(extra or {})
    return env


@functools.cache
def netns_prefix() -> tuple[str, ...] | None:
    """The command prefix that gives a process its own (empty) network namespace, or None."""
    exe = shutil.which("unshare")
    if exe is None:
        return None
    candidates = [(exe, "-n"), (exe, "-rn")] if os.geteuid() == 0 else [(exe, "-rn")]
    for prefix in candidates:
        try:
            proc = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return prefix
    return None


def _limit_child(cpu_s: int, memory_mb: int) -> None:  # pragma: no cover - runs in the child
    mem = int(memory_mb) * 1024 * 1024
    for which, soft, hard in ((resource.RLIMIT_CPU, int(cpu_s), int(cpu_s) + 5),
                              (resource.RLIMIT_AS, mem, mem), (resource.RLIMIT_CORE, 0, 0)):
        _, cur_hard = resource.getrlimit(which)
        if cur_hard != resource.RLIM_INFINITY:  # an unprivileged process cannot raise its hard limit
            soft, hard = min(soft, cur_hard), min(hard, cur_hard)
        resource.setrlimit(which, (soft, hard))


def run_isolated(cmd: Sequence[str], cwd: Path, env: Mapping[str, str], limits: Limits) -> Completed:
    """Run ``cmd``; never raises for the command's own failures, timeouts or bad output."""
    prefix = netns_prefix() if limits.network_isolation else None
    argv = [*(prefix or ()), *cmd]
    start = time.monotonic()
    timed_out = False
    with tempfile.TemporaryFile() as sink:
        try:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=sink,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=functools.partial(_limit_child, limits.cpu_s, limits.memory_mb),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return Completed(127, f"cannot start {cmd[0]}: {exc}", 0.0, False, prefix is not None)
        try:
            rc = proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            rc = proc.wait()
        finally:
            # Tests may leave daemons behind in the group; they go too.
            _kill_group(proc)
        size = sink.seek(0, os.SEEK_END)
        sink.seek(max(0, size - MAX_OUTPUT_BYTES))
        data = sink.read()
    text = data.decode("utf-8", errors="replace")
    if timed_out:
        text += f"\n[fixgraph] killed after the {limits.timeout_s:g}s wall-clock limit\n"
    return Completed(rc, text, time.monotonic() - start, timed_out, prefix is not None)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
