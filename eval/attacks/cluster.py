"""Attacks on the local Ray that ``--executor ray`` starts: who can reach it, what its workers hold.

One local Ray, started by ``RayExecutor.start`` in a child process with secrets in its
environment (the driver's, as ``graph.py`` has them), is looked at once per bench: the sockets
its processes listen on, its node address, its workers' environment, and what a worker killed
while it holds a secret leaves in Ray's session folder.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from eval.attacks import ROOT, SECRET, attack

PAYLOAD_SECRET = "ghp_attackbenchPAYLOAD0123456789"
NAMED_SECRET = "attackbench-named-secret-4242"


def _address(hexaddr: str) -> str:
    ip = hexaddr.split(":")[0]
    if len(ip) == 8:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(ip, 16)))
    raw = bytes.fromhex(ip)
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def listening(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket the processes ``pids`` listen on."""
    sockets: dict[str, tuple[str, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A":  # LISTEN
                sockets[cols[9]] = (_address(cols[1]), int(cols[1].rsplit(":", 1)[1], 16))
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in sockets:
                found.append((pid, *sockets[link[8:-1]]))
    return found


_PROBE = """
import json, os, signal, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
os.environ["OPENAI_API_KEY"] = {secret!r}
os.environ["ACME_DEPLOY_TOKEN"] = {named!r}
from fixgraph.config import RunConfig
from pipeline.executors import RayExecutor
from eval.attacks.cluster import listening
ex = RayExecutor.start(RunConfig.model_validate({{"executor": {{"local_cpus": 1}}}}))
import ray
report = {{}}

@ray.remote(max_retries=0)
def env():
    return dict(os.environ)

worker_env = ray.get(env.remote())
report["worker_env_secret"] = sorted(k for k, v in worker_env.items() if v in ({secret!r}, {named!r}))
mine = os.getpid()
parents = {{}}
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            parents[int(p)] = int(open(f"/proc/{{p}}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass

def ours(pid):  # this Ray's processes only: descendants of this driver (other Rays may run here)
    seen = set()
    while pid not in seen and pid > 1:
        seen.add(pid)
        pid = parents.get(pid, 0)
        if pid == mine:
            return True
    return False

ray_pids = {{p for p in parents if p != mine and ours(p)}}
leaky = []
for p in ray_pids:
    try:
        data = open(f"/proc/{{p}}/environ", "rb").read()
    except OSError:
        continue
    if {secret!r}.encode() in data or {named!r}.encode() in data:
        leaky.append(p)
report["ray_processes"] = len(ray_pids)
report["processes_with_secret"] = leaky
report["listening"] = sorted({{(a, port) for _, a, port in listening(ray_pids)}})
report["node"] = ray.nodes()[0]["NodeManagerAddress"]
session = Path(ray._private.worker._global_node.get_session_dir_path())
marker = Path({marker!r})

@ray.remote(max_retries=0)
def hold(token):
    marker.write_text(str(os.getpid()))
    time.sleep(60)
    return token

ref = hold.remote({payload!r})
deadline = time.monotonic() + 60
while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.1)
os.kill(int(marker.read_text()), signal.SIGKILL)
try:
    ray.get(ref, timeout=60)
    report["killed"] = "returned"
except Exception as exc:
    report["killed"] = type(exc).__name__
del ref
ex.close()
hits = []
for path in session.rglob("*"):
    try:
        if path.is_file() and path.stat().st_size < 50_000_000 and {payload!r}.encode() in path.read_bytes():
            hits.append(str(path.relative_to(session)))
    except OSError:
        pass
report["session_files_with_payload"] = hits
print("REPORT " + json.dumps(report))
"""

_REPORT: list[dict[str, Any]] = []


def _report(tmp: Path) -> dict[str, Any]:
    if not _REPORT:
        script = _PROBE.format(root=str(ROOT), secret=SECRET, named=NAMED_SECRET, payload=PAYLOAD_SECRET,
                               marker=str(tmp / "holding.pid"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        said = ""
        for _ in range(2):  # Ray's start can time out on a loaded machine: once more, then say why
            proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                                  timeout=300, env=env, cwd=tmp)
            line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")), None)
            if line is not None:
                _REPORT.append(json.loads(line[7:]))
                break
            errors = [ln for ln in proc.stderr.splitlines() if "Error" in ln] or proc.stderr.strip().splitlines()
            said = (errors or ["no output"])[-1][:300]
        else:
            raise RuntimeError(f"the Ray probe failed twice: {said}")
    return _REPORT[0]


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


@attack("ray", "a local Ray listens on an address other than loopback", quick=False)
def _ray_binds(tmp: Path) -> str:
    if not ray_available():
        return ""  # no Ray, nothing listens
    outside = [f"{a}:{p}" for a, p in _report(tmp)["listening"] if not a.endswith("127.0.0.1") and a != "::1"]
    return f"listening on {outside}" if outside else ""


@attack("ray", "a local Ray's node address is the machine's (what workers and peers dial)", quick=False)
def _ray_node_address(tmp: Path) -> str:
    if not ray_available():
        return ""
    node = _report(tmp)["node"]
    return "" if node == "127.0.0.1" else f"node address {node}"


@attack("ray", "Ray's processes and workers inherit the driver's secrets", quick=False)
def _ray_env(tmp: Path) -> str:
    if not ray_available():
        return ""
    rep = _report(tmp)
    problems = []
    if rep["worker_env_secret"]:
        problems.append(f"a worker's environment holds {rep['worker_env_secret']}")
    if rep["processes_with_secret"]:
        problems.append(f"{len(rep['processes_with_secret'])} of {rep['ray_processes']} Ray processes hold a secret")
    return "; ".join(problems)


@attack("ray", "a Ray worker killed while it holds a secret leaves it in Ray's session files", quick=False)
def _ray_killed_worker(tmp: Path) -> str:
    if not ray_available():
        return ""
    rep = _report(tmp)
    if rep["killed"] == "returned":
        return "the killed task returned"
    hits = rep["session_files_with_payload"]
    return f"the secret is in {hits[:3]}" if hits else ""
