"""Attacks through a shared environment's build and install: symlinks fixgraph's own copies could
follow (as root, outside the sandbox), and files one task's install step leaves for the others."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eval.attacks import SECRET, attack
from eval.attacks.sandbox import _git

PY = "{}.{}".format(*sys.version_info[:2])


def _repo(tmp: Path, files: dict[str, str], links: dict[str, str] | None = None) -> tuple[Path, str]:
    """A mirrors folder with acme/calc holding ``files`` and the symlinks ``links`` (path -> target)."""
    src = tmp / "mirrors" / "acme+calc"
    src.mkdir(parents=True)
    _git(src, "init", "-q", "-b", "main")
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    for rel, target in (links or {}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).symlink_to(target)
    _git(src, "add", "-A")
    _git(src, "commit", "-q", "-m", "base")
    return tmp / "mirrors", _git(src, "rev-parse", "HEAD")


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """pip finds no index at once (the build's pip steps fail fast; the attack needs none)."""
    old = os.environ.get("PIP_NO_INDEX")
    os.environ["PIP_NO_INDEX"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PIP_NO_INDEX", None)
        else:
            os.environ["PIP_NO_INDEX"] = old


def _venv_env(tmp: Path, files: dict[str, str], install: str, links: dict[str, str] | None = None,
              template: bool = True) -> Any:
    """(envs, task, worktree, runner) for acme/calc on the venv backend with ``install`` as its step."""
    from fixgraph.config import TestSettings
    from fixgraph.dataset import Task
    from fixgraph.repo.workspace import RepoCache
    from scoring.execution.envs import VenvEnvs
    from scoring.execution.runner import SubprocessRunner

    mirrors, sha = _repo(tmp, files, links)
    wt = RepoCache(tmp / "cache", mirrors).worktree("acme/calc", sha, "acme__calc-1")
    spec = {"python": PY, "install": install, "test_cmd": "pytest -rA"}
    settings = TestSettings(backend="venv", timeout_s=60, build_timeout_s=120)
    envs = VenvEnvs(tmp / "envs", tmp / "cache", settings, specs=lambda repo, version: spec)
    task = Task(instance_id="acme__calc-1", repo="acme/calc", base_commit=sha, problem_statement="p", version="0.1")
    if template:
        # A copy of one env built for the bench: its install is another commit's, so this task's
        # install step runs in it as in a shared env (and the bench builds one venv, not ten).
        shutil.copytree(_template(), envs.env_path(task), symlinks=True)
    return envs, task, wt, SubprocessRunner(settings, tmp / "cache", envs, "venv")


_TEMPLATE: list[Path] = []


def _template() -> Path:
    """The env folder of acme/calc 0.1, built once per process (an install step that does nothing)."""
    if not _TEMPLATE:
        root = Path(tempfile.mkdtemp(prefix="fixgraph-attack-env-"))
        atexit.register(shutil.rmtree, root, True)
        envs, task, wt, _ = _venv_env(root, {"calc.py": "x = 0\n"}, "true", template=False)
        with _offline():
            envs.get(task, wt)
        _TEMPLATE.append(envs.env_path(task))
    return _TEMPLATE[0]


# ---- symlinks fixgraph's own copies could follow ----------------------------------------------


@attack("symlink", "install step turns a tracked symlink into a folder; the artifact is copied through it",
        quick=False, sandbox=True)
def _artifact_through_link(tmp: Path) -> str:
    """The issue's escape: the copy has the link again, and the artifact copied as fixgraph lands
    wherever it leads (here a stand-in for site-packages)."""
    site = tmp / "site-packages"
    site.mkdir()
    install = "rm pkg/data && mkdir pkg/data && printf 'import os\\n' > pkg/data/evil.pth"
    envs, task, wt, runner = _venv_env(tmp, {"pkg/__init__.py": ""}, install, {"pkg/data": str(site)})
    with _offline():
        env = envs.get(task, wt)
        if "pkg/data/evil.pth" not in env.artifacts:
            return f"the setup did not record the artifact: {env.artifacts}"
        done, _ = runner.run_python(task, wt, {}, ["-c", "print('ran')"], 30)
    if (site / "evil.pth").exists():
        return "the artifact was written through the copy's symlink, outside the run's copy"
    return "" if "ran" in done.output else f"the run did not happen: {done.output[-200:]}"


def _overlay_case(tmp: Path, links: dict[str, str], artifacts: dict[str, str],
                  base_links: dict[str, str] | None = None) -> tuple[list[str], Path]:
    """``_overlay`` of ``artifacts`` (installed checkout -> run copy); the copy holds ``links``,
    the installed checkout ``base_links``. Returns (notes, the run's copy)."""
    from scoring.execution.runner import _overlay
    from scoring.execution.testenv import TestEnv

    work, base = tmp / "work", tmp / "base"
    work.mkdir()
    for rel, target in links.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).symlink_to(target)
    for rel, text in artifacts.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text)
    for rel, target in (base_links or {}).items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).symlink_to(target)
    env = TestEnv(python=sys.executable, spec=None, artifacts_root=base,
                  artifacts=[*artifacts, *(base_links or {})])
    return list(_overlay(env, work) or []), work


@attack("symlink", "artifact copy: a folder on the way is an absolute symlink in the copy")
def _overlay_abs_dir(tmp: Path) -> str:
    outside = tmp / "outside"
    outside.mkdir()
    notes, _ = _overlay_case(tmp, {"pkg/data": str(outside)}, {"pkg/data/x.pth": "import os\n"})
    return "written through the link" if (outside / "x.pth").exists() else ("" if notes else "refused silently")


@attack("symlink", "artifact copy: a relative ../ symlink on the way")
def _overlay_rel_dir(tmp: Path) -> str:
    outside = tmp / "outside"
    outside.mkdir()
    notes, _ = _overlay_case(tmp, {"pkg/data": "../../outside"}, {"pkg/data/x.pth": "import os\n"})
    return "written through the link" if (outside / "x.pth").exists() else ("" if notes else "refused silently")


@attack("symlink", "artifact copy: the destination itself is a dangling symlink")
def _overlay_dangling(tmp: Path) -> str:
    target = tmp / "outside" / "planted.pth"
    target.parent.mkdir()
    notes, _ = _overlay_case(tmp, {"pkg/_version.py": str(target)}, {"pkg/_version.py": "import os\n"})
    return "created the link's target" if target.exists() else ("" if notes else "refused silently")


@attack("symlink", "artifact copy: a chain of links (link to a link to a folder)")
def _overlay_chain(tmp: Path) -> str:
    outside = tmp / "outside"
    outside.mkdir()
    (tmp / "hop").symlink_to(outside)
    notes, _ = _overlay_case(tmp, {"a": str(tmp / "hop")}, {"a/b/x.pth": "import os\n"})
    return "written through the chain" if list(outside.rglob("x.pth")) else ("" if notes else "refused silently")


@attack("symlink", "artifact source is a symlink to a secret: its content would reach the tests")
def _overlay_source_link(tmp: Path) -> str:
    secret = tmp / "secret.env"
    secret.write_text(f"OPENAI_API_KEY={SECRET}\n")
    secret.chmod(0o600)
    _, work = _overlay_case(tmp, {}, {}, base_links={"pkg/leak.txt": str(secret)})
    leaked = work / "pkg" / "leak.txt"
    return "the secret was copied into the run's copy" if leaked.exists() and SECRET in leaked.read_text() else ""


@attack("symlink", "the install step's artifact list records a link (to a secret)")
def _artifact_list_link(tmp: Path) -> str:
    from scoring.execution.envs import _file_set

    root = tmp / "checkout"
    root.mkdir()
    (root / "real.py").write_text("x = 1\n")
    (root / "leak.txt").symlink_to("/etc/hostname")
    (root / "linked").symlink_to(tmp)
    listed = _file_set(root)
    return f"links listed as artifacts: {sorted(listed - {'real.py'})}" if listed != {"real.py"} else ""


@attack("symlink", "a tracked .tox symlink: tox --current-env's pyvenv.cfg written through it")
def _tox_link(tmp: Path) -> str:
    from scoring.execution.runner import _tox_current_env
    from scoring.execution.testenv import TestEnv

    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    outside = tmp / "outside"
    (outside / "py39").mkdir(parents=True)
    work = tmp / "work"
    work.mkdir()
    (work / ".tox").symlink_to(outside)
    env = TestEnv(python=str(venv / "bin" / "python"), spec=None)
    _tox_current_env(["tox", "--current-env", "-e", "py39"], env, work)
    return "pyvenv.cfg written through the link" if (outside / "py39" / "pyvenv.cfg").exists() else ""


@attack("symlink", "requirements.txt is a symlink to a secret file (read as fixgraph, printed by pip)")
def _requirements_link(tmp: Path) -> str:
    from scoring.execution.specs import requirements_text

    secret = tmp / "secret.env"
    secret.write_text(f"OPENAI_API_KEY={SECRET}\n")
    checkout = tmp / "checkout"
    checkout.mkdir()
    (checkout / "requirements.txt").symlink_to(secret)
    text = requirements_text(checkout, "acme/calc", ["requirements.txt"]) or ""
    return "the secret became a requirement pip would print" if SECRET in text else ""


@attack("symlink", "requirements.txt includes -r ../../secret outside the checkout")
def _requirements_include(tmp: Path) -> str:
    from scoring.execution.specs import requirements_text

    (tmp / "secret.env").write_text(f"OPENAI_API_KEY={SECRET}\n")
    checkout = tmp / "a" / "checkout"
    checkout.mkdir(parents=True)
    (checkout / "requirements.txt").write_text("pytest\n-r ../../secret.env\n")
    text = requirements_text(checkout, "acme/calc", ["requirements.txt"]) or ""
    return "the include outside the checkout was read" if SECRET in text else ""


@attack("symlink", "a repository whose tracked files are all symlinks (bad input)")
def _all_links(tmp: Path) -> str:
    from fixgraph.repo.workspace import RepoCache
    from scoring.execution.runner import _overlay
    from scoring.execution.testenv import TestEnv, materialize

    outside = tmp / "outside"
    outside.mkdir()
    (outside / "calc.py").write_text("x = 1\n")
    links = {"calc.py": str(outside / "calc.py"), "pkg": str(outside), "setup.py": "/etc/passwd"}
    mirrors, sha = _repo(tmp, {}, links)
    wt = RepoCache(tmp / "cache", mirrors).worktree("acme/calc", sha, "t-1")
    work = tmp / "work"
    if err := materialize(wt, sha, work):
        return f"could not copy the commit: {err}"
    base = tmp / "base"
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "gen.py").write_text("y = 2\n")
    (base / "calc.py").write_text("z = 3\n")
    notes = _overlay(TestEnv(python=sys.executable, spec=None, artifacts_root=base,
                             artifacts=["pkg/gen.py", "calc.py"]), work) or []
    if (outside / "gen.py").exists() or (outside / "calc.py").read_text() != "x = 1\n":
        return "an artifact was written through a tracked link"
    return "" if notes else "refused silently"


# ---- one task's install step and the shared env --------------------------------------------


def _plant(tmp: Path, rel: str, text: str) -> str:
    """An install step that writes ``rel`` into the shared venv's site-packages: the install must
    be refused and the file gone."""
    from scoring.execution.testenv import EnvError

    install = f"sp=$(python -c 'import sysconfig;print(sysconfig.get_paths()[\"purelib\"])') && " \
              f"mkdir -p \"$sp/$(dirname {rel})\" && printf '{text}' > \"$sp/{rel}\""
    envs, task, wt, _ = _venv_env(tmp, {"calc.py": "x = 1\n"}, install)
    with _offline():
        try:
            envs.get(task, wt)
            refused = ""
        except EnvError as exc:
            refused = str(exc)
    left = list((envs.env_path(task) / "venv").glob(f"lib/python*/site-packages/{rel}"))
    if left:
        return f"{rel} stayed in the shared env" + ("" if refused else " and the install was accepted")
    return "" if "refused" in refused else f"not refused: {refused or 'accepted'}"


@attack("shared-env", "an install step writes sitecustomize.py into the shared venv", quick=False, sandbox=True)
def _sitecustomize(tmp: Path) -> str:
    return _plant(tmp, "sitecustomize.py", "import os\\n")


@attack("shared-env", "an install step writes usercustomize.py into the shared venv", quick=False, sandbox=True)
def _usercustomize(tmp: Path) -> str:
    return _plant(tmp, "usercustomize.py", "import os\\n")


@attack("shared-env", "an install step writes a .pth with an import line", quick=False, sandbox=True)
def _pth(tmp: Path) -> str:
    return _plant(tmp, "zz-evil.pth", "import os; os.environ.setdefault(\"X\", \"1\")\\n")


@attack("shared-env", "an install step writes a sitecustomize package (folder)", quick=False, sandbox=True)
def _sitecustomize_pkg(tmp: Path) -> str:
    return _plant(tmp, "sitecustomize/__init__.py", "import os\\n")


@attack("shared-env", "a file planted in the venv after its install is caught before the next run", quick=False)
def _planted_later(tmp: Path) -> str:
    envs, task, wt, _ = _venv_env(tmp, {"calc.py": "x = 1\n"}, "true")
    with _offline():
        first = envs.get(task, wt)
        site = next(Path(first.python).parent.parent.glob("lib/python*/site-packages"))
        (site / "sitecustomize.py").write_text("import os\n")  # as a run without a sandbox could
        envs.get(task, wt)
    return "the planted file was still there for the next run" if (site / "sitecustomize.py").exists() else ""


@attack("shared-env", "an install step deletes its own env folder (bad input)", quick=False, sandbox=True)
def _deletes_env(tmp: Path) -> str:
    from scoring.execution.testenv import EnvError

    envs, task, wt, _ = _venv_env(tmp, {"calc.py": "x = 1\n"}, "rm -rf ../venv ../base ../env.json; true")
    with _offline():
        try:
            envs.get(task, wt)
            return "the install was accepted with its env gone"
        except EnvError as exc:
            return "" if "removed" in str(exc) else f"unexpected reason: {exc}"


# ---- build and install steps and the network ------------------------------------------------

# The repository's setup.py, run by its install step: it reaches for ``{addr}:{port}`` directly, or
# through the build's proxy (``https_proxy``, when the step has one) as a tunnel.
_SETUP_REACH = '''
import os, socket
from urllib.parse import urlsplit

def reach():
    proxy = os.environ.get("https_proxy") if {via_proxy} else None
    try:
        if proxy:
            s = socket.create_connection((urlsplit(proxy).hostname, urlsplit(proxy).port), timeout=5)
            s.sendall(b"CONNECT {addr}:{port} HTTP/1.1\\r\\nHost: {addr}\\r\\n\\r\\n")
            answer = s.recv(200)
            s.close()
            return "CONNECTED" if b" 200 " in answer else "refused " + answer.decode(errors="replace")
        socket.create_connection(("{addr}", {port}), timeout=5).close()
        return "CONNECTED"
    except OSError as exc:
        return "refused %s" % exc

print("SETUP RAN", reach())
'''


def _install_reaches(tmp: Path, addr: str, via_proxy: bool = False) -> str:
    """An install step runs the repository's setup.py, which connects to a listener on the host at
    ``addr``: the listener must see no connection, and the step must have run."""
    from eval.attacks.sandbox import listener
    from scoring.execution.testenv import EnvError

    srv, port, hits = listener(addr)
    try:
        setup = _SETUP_REACH.format(addr=addr, port=port, via_proxy=via_proxy)
        envs, task, wt, _ = _venv_env(tmp, {"setup.py": setup, "calc.py": "x = 1\n"}, "python setup.py")
        with _offline(), contextlib.suppress(EnvError):
            envs.get(task, wt)
    finally:
        srv.close()
    meta = json.loads((envs.env_path(task) / "env.json").read_text())
    log = meta.get("install_log_tail", "") + meta.get("failed_install_log_tail", "")
    if hits or "SETUP RAN CONNECTED" in log:
        return f"the install step reached {addr}:{port} on the host"
    return "" if "SETUP RAN refused" in log else f"the install step did not run: {log[-200:]}"


@attack("network", "an install step's setup.py connects to a loopback listener on the host", quick=False,
        sandbox=True)
def _install_loopback(tmp: Path) -> str:
    return _install_reaches(tmp, "127.0.0.1")


@attack("network", "an install step's setup.py connects to the machine's own address beyond loopback",
        quick=False, sandbox=True)
def _install_outside(tmp: Path) -> str:
    from eval.attacks.sandbox import outside_address

    addr = outside_address()
    return "" if addr is None else _install_reaches(tmp, addr)


@attack("network", "an install step asks the build's index proxy for a tunnel to the host's loopback",
        quick=False, sandbox=True)
def _install_via_proxy(tmp: Path) -> str:
    return _install_reaches(tmp, "127.0.0.1", via_proxy=True)


@attack("network", "an env's requirement is a URL on the host's loopback (pip fetches it in the build)",
        quick=False, sandbox=True)
def _build_fetches_loopback(tmp: Path) -> str:
    from eval.attacks.sandbox import listener

    srv, port, hits = listener()
    try:
        envs, task, wt, _ = _venv_env(tmp, {"calc.py": "x = 1\n"}, "true", template=False)
        spec = {"python": PY, "install": "true", "test_cmd": "pytest -rA",
                "pip_packages": [f"http://127.0.0.1:{port}/acme-0.1.tar.gz"]}
        envs.specs = lambda repo, version: spec
        with _offline(), contextlib.suppress(Exception):
            envs.get(task, wt)
    finally:
        srv.close()
    if hits:
        return f"the build's pip reached 127.0.0.1:{port} on the host"
    meta = json.loads((envs.env_path(task) / "env.json").read_text())
    return "" if str(port) in meta.get("log_tail", "") else f"pip never tried the URL: {meta.get('reason', '')[:200]}"
