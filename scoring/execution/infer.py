"""Infer a test environment from a repository's own files, for repositories swebench has no spec for.

Each part (Python version, install commands, test command, log parser) is read by a small function
from the files a maintainer already keeps: pyproject.toml, setup.cfg, setup.py, tox.ini, noxfile.py,
requirements files, CI workflows, Makefile. A committed ``[tool.fixgraph]`` table in pyproject.toml
or a ``.fixgraph.toml`` overrides any part, so a maintainer fixes what inference gets wrong.
The key is the content of the files the install reads: a new commit that leaves them alone reuses
the environment.
"""

from __future__ import annotations

import configparser
import hashlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import tomllib
from collections.abc import Iterable, Set
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from fixgraph.repo import gitsafe

TEST_EXTRAS = ("test", "tests", "testing", "dev")
REQUIREMENT_NAMES = ("requirements-test.txt", "requirements-tests.txt", "requirements-dev.txt",
                     "requirements_test.txt", "requirements_dev.txt", "test-requirements.txt",
                     "dev-requirements.txt", "requirements/test.txt", "requirements/tests.txt",
                     "requirements/dev.txt", "tests/requirements.txt")
DEPENDENCY_FILES = ("pyproject.toml", "setup.cfg", "setup.py", "tox.ini", "noxfile.py",
                    "requirements.txt", ".fixgraph.toml", *REQUIREMENT_NAMES)
OVERRIDE_KEYS = frozenset({"python", "setup", "test_cmd", "exclude", "services", "parser"})
DEFAULT_PYTHON = "3.11"
KNOWN_MINORS = tuple(f"3.{m}" for m in range(6, 14))
# Besides the dependency files, where a repository says its Python and its test command.
CONFIG_FILES = ("Makefile", "pytest.ini", "conftest.py", "tests/conftest.py")
WORKFLOWS = ".github/workflows/"


class ConfigError(ValueError):
    """A committed fixgraph table that cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class Service:
    """A server the tests call, started on the test run's own loopback before its tests
    (``scoring.execution.serve_declared``): ``command`` with ``{port}`` replaced by ``port`` (0: a
    free port of that loopback), up once the port accepts a connection within ``timeout_s``; the
    tests get the port in ``env``'s variables (``{port}`` replaced too). A ``command`` of "" is a
    name the table gave alone that fixgraph knows no command for."""

    name: str
    command: str = ""
    port: int = 0
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: float = 30.0

    def variables(self) -> dict[str, str]:
        """What the tests are given, ``{port}`` still to replace: ``<NAME>_PORT`` and ``env``'s."""
        return {f"{re.sub(r'[^A-Za-z0-9]', '_', self.name).upper()}_PORT": "{port}", **dict(self.env)}

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "command": self.command, "port": self.port, "env": dict(self.env),
                "timeout_s": self.timeout_s}


# The services a table may name alone, by their usual server and port (in the run's own network
# namespace a fixed port is the run's alone). Their binary is the machine's or the env's.
KNOWN_SERVICES = {
    "redis": Service("redis", "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no", 6379),
    "memcached": Service("memcached", "memcached -l 127.0.0.1 -p {port} -U 0", 11211),
}
SERVICE_KEYS = frozenset({"name", "command", "port", "env", "timeout"})
MAX_SERVICE_TIMEOUT_S = 120
# Variables the tests' run is given by fixgraph or whose change would move the run, not the
# service: a table's ``env`` sets none of them.
_RESERVED_VARS = re.compile(r"(PATH|HOME|TMPDIR|USER|LOGNAME|SHELL|LANG|LC_\w*|LD_\w*|PYTHON\w*|FIXGRAPH_\w*|"
                            r"PIP_\w*|PYTEST_\w*|VIRTUAL_ENV)")


@dataclass(frozen=True)
class InferredEnv:
    python: str
    install: tuple[str, ...]
    test_cmd: str
    parser: str  # "pytest" or "unittest"
    exclude: tuple[str, ...] = ()
    services: tuple[Service, ...] = ()
    key: str = ""
    how: dict[str, str] = field(default_factory=dict)  # part -> where it came from, for PR bodies
    # The version a setuptools_scm/hatch-vcs build is told: a test run's copy has no git history.
    scm_version: str = ""
    # The package's folder in a repository of several ("" for the root): its files made the env.
    package: str = ""


def _read(root: Path, name: str) -> str:
    path = root / name
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    except OSError:
        return ""


def _pyproject(root: Path) -> dict:
    text = _read(root, "pyproject.toml")
    try:
        return tomllib.loads(text) if text else {}
    except tomllib.TOMLDecodeError:
        return {}  # a broken pyproject is the repository's problem; infer from the other files


def _setup_cfg(root: Path) -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read_string(_read(root, "setup.cfg"))
    except configparser.Error:
        pass
    return cfg


def _minor_sort(minors: set[str]) -> list[str]:
    return sorted(minors, key=lambda v: tuple(int(p) for p in v.split(".")))


def _from_requires_python(spec: str) -> str:
    """Newest known minor the specifier allows (``>=3.8``, ``>=3.9,<3.13``, ``~=3.10``)."""
    if not spec:
        return ""
    try:
        specifier = SpecifierSet(spec)
    except InvalidSpecifier:
        return ""
    allowed = [m for m in KNOWN_MINORS if specifier.contains(f"{m}.0", prereleases=True)]
    newest_safe = [m for m in allowed if m != KNOWN_MINORS[-1]]  # the newest minor often lacks wheels
    return (newest_safe or allowed or [""])[-1]


def _from_classifiers(classifiers: list[str]) -> str:
    minors = {m.group(1) for c in classifiers
              if (m := re.fullmatch(r"Programming Language :: Python :: (3\.\d+)", c.strip()))}
    return _minor_sort(minors)[-1] if minors else ""


def _from_tox(root: Path) -> str:
    found = set(re.findall(r"\bpy3(\d{1,2})\b", _read(root, "tox.ini")))
    minors = {f"3.{d}" for d in found if f"3.{d}" in KNOWN_MINORS}
    return _minor_sort(minors)[-1] if minors else ""


def _from_ci(root: Path) -> str:
    minors: set[str] = set()
    workflows = root / ".github" / "workflows"
    for path in sorted(workflows.glob("*.y*ml")) if workflows.is_dir() else []:
        text = path.read_text(encoding="utf-8", errors="replace")
        minors |= {m for m in re.findall(r"""["']?(3\.\d{1,2})["']?""", text) if m in KNOWN_MINORS}
    return _minor_sort(minors)[-1] if minors else ""


def infer_python(root: Path) -> tuple[str, str]:
    project = _pyproject(root).get("project", {})
    cfg = _setup_cfg(root)
    candidates = (
        ("requires-python", _from_requires_python(str(project.get("requires-python", "")))),
        ("setup.cfg python_requires", _from_requires_python(cfg.get("options", "python_requires", fallback=""))),
        ("classifiers", _from_classifiers([str(c) for c in project.get("classifiers", [])]
                                          or cfg.get("metadata", "classifiers", fallback="").splitlines())),
        ("CI matrix", _from_ci(root)),
        ("tox.ini", _from_tox(root)),
    )
    for how, minor in candidates:
        if minor:
            return minor, how
    return DEFAULT_PYTHON, "default"


def _extras(root: Path) -> list[str]:
    data = _pyproject(root)
    names = set(data.get("project", {}).get("optional-dependencies", {}))
    cfg = _setup_cfg(root)
    if cfg.has_section("options.extras_require"):
        names |= set(cfg.options("options.extras_require"))
    setup_py = _read(root, "setup.py")
    names |= {n for n in TEST_EXTRAS if re.search(rf"""["']{n}["']\s*:""", setup_py)}
    return _test_named(names)


def _test_named(names: set[str]) -> list[str]:
    """The test extras or groups among ``names``; ``dev`` only when none is named for tests (a dev
    group also brings linters, type checkers and docs tools the tests do not need)."""
    tests = [n for n in TEST_EXTRAS if n in names and n != "dev"]
    return tests or (["dev"] if "dev" in names else [])


def _dependency_groups(root: Path) -> list[str]:
    return _test_named(set(_pyproject(root).get("dependency-groups", {})))


def _tox_deps(root: Path) -> list[str]:
    text = _read(root, "tox.ini")
    match = re.search(r"^\[testenv\][^\[]*?^deps\s*=\s*(.*?)(?=^\S|\Z)", text, re.M | re.S)
    if not match:
        return []
    lines = [ln.strip() for ln in match.group(1).splitlines()]
    # "-r"/"-e" lines name files or the project the other install commands already cover; a
    # factor-conditional line ("pypy: ...") or a substitution belongs to one tox env, not all.
    return [ln for ln in lines if ln and not ln.startswith(("#", "-", "."))
            and "{" not in ln and not re.match(r"!?[\w.,-]+:\s", ln)]


def _extra_requirements(root: Path, extras: list[str]) -> list[str] | None:
    """The requirements the ``extras`` name, read from pyproject.toml or setup.cfg; None when one of
    them is declared where it cannot be read without running code (setup.py). The project's own
    name among them (``calc[extra]``) is left out: the editable install is the project."""
    project = _pyproject(root).get("project", {})
    declared: dict[str, list[str]] = {k: [str(r) for r in v] for k, v in project.get("optional-dependencies", {}).items()}
    cfg = _setup_cfg(root)
    if cfg.has_section("options.extras_require"):
        for name in cfg.options("options.extras_require"):
            declared.setdefault(name, [ln.strip() for ln in cfg.get("options.extras_require", name).splitlines()
                                       if ln.strip() and not ln.strip().startswith("#")])
    if any(e not in declared for e in extras):
        return None
    own = re.sub(r"[-_.]+", "-", str(project.get("name") or cfg.get("metadata", "name", fallback=""))).lower()
    reqs = [r for e in extras for r in declared[e]]
    return [r for r in reqs if re.sub(r"[-_.]+", "-", re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]).lower() != own]


def infer_install(root: Path) -> tuple[list[str], str]:
    extras = _extras(root)
    reqs = _extra_requirements(root, extras) if extras else None
    # Extras read from the build files are installed by the env's build (as_spec): what they put in
    # site-packages (pytest-cov's .pth) is the build's, not the install step's.
    target = f".[{','.join(extras)}]" if extras and reqs is None else "."
    commands = [f"pip install -e {target}"] if _installable(root) else []
    if reqs:
        commands.append("pip install " + " ".join(_quote(r) for r in reqs))
    if (root / "requirements.txt").is_file() and not _installable(root):
        commands.append("pip install -r requirements.txt")
    commands += [f"pip install -r {n}" for n in REQUIREMENT_NAMES if (root / n).is_file()]
    groups = _dependency_groups(root)
    if groups:
        commands.append("pip install " + " ".join(f"--group {g}" for g in groups))
    deps = _tox_deps(root)
    if deps:
        commands.append("pip install " + " ".join(_quote(d) for d in deps))
    how = "extras " + ",".join(extras) if extras else "plain install"
    return commands, how


def _installable(root: Path) -> bool:
    return any((root / n).is_file() for n in ("pyproject.toml", "setup.py", "setup.cfg"))


def _quote(requirement: str) -> str:
    return shlex.quote(requirement)


def infer_test_cmd(root: Path) -> tuple[str, str, str]:
    """(command, parser, where it came from)."""
    if "pytest" in _pyproject(root).get("tool", {}) or _setup_cfg(root).has_section("tool:pytest"):
        return "pytest -rA", "pytest", "pytest config"
    if (root / "pytest.ini").is_file() or "[pytest]" in _read(root, "tox.ini"):
        return "pytest -rA", "pytest", "pytest config"
    if re.search(r"^\s*commands\s*=.*\bpytest\b", _read(root, "tox.ini"), re.M):
        return "pytest -rA", "pytest", "tox commands"
    if re.search(r"\bpytest\b", _ci_text(root) + _read(root, "Makefile") + _read(root, "noxfile.py")):
        return "pytest -rA", "pytest", "CI/Makefile/nox test step"
    if (root / "conftest.py").is_file() or (root / "tests" / "conftest.py").is_file():
        return "pytest -rA", "pytest", "conftest.py"
    # pytest runs unittest's test cases too, and takes the files and node ids the tests are chosen
    # by; ``unittest discover`` takes neither. The committed table can still ask for unittest.
    return "pytest -rA", "pytest", "no runner configured: pytest, which runs unittest cases too"


def _ci_text(root: Path) -> str:
    workflows = root / ".github" / "workflows"
    if not workflows.is_dir():
        return ""
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in sorted(workflows.glob("*.y*ml")))


def load_overrides(root: Path) -> tuple[dict, str]:
    """The maintainer's committed table and the file it came from: ``.fixgraph.toml`` wins over
    ``[tool.fixgraph]``."""
    table: dict = {}
    source = ""
    text = _read(root, "pyproject.toml")
    if text:
        try:
            table.update(tomllib.loads(text).get("tool", {}).get("fixgraph", {}))
        except tomllib.TOMLDecodeError:
            pass
        source = "pyproject.toml [tool.fixgraph]" if table else ""
    own = _read(root, ".fixgraph.toml")
    if own:
        try:
            table.update(tomllib.loads(own))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f".fixgraph.toml is not valid TOML: {exc}") from None
        source = ".fixgraph.toml"
    try:
        return _checked(table), source
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def _checked(table: dict) -> dict:
    unknown = sorted(set(table) - OVERRIDE_KEYS)
    if unknown:
        raise ConfigError(f"fixgraph config: unknown key(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(OVERRIDE_KEYS))}")
    if "python" in table and (not isinstance(table["python"], str)
                              or not re.fullmatch(r"3\.\d{1,2}", table["python"])):
        raise ConfigError("fixgraph config: python must be a string like \"3.11\"")
    for key in ("setup", "exclude"):
        if key in table and not (isinstance(table[key], list)
                                 and all(isinstance(v, str) for v in table[key])):
            raise ConfigError(f"fixgraph config: {key} must be a list of strings")
    if "services" in table:
        table = {**table, "services": parse_services(table["services"])}
    if "test_cmd" in table and not (isinstance(table["test_cmd"], str) and table["test_cmd"].strip()):
        raise ConfigError("fixgraph config: test_cmd must be a non-empty string")
    if table.get("parser", "pytest") not in ("pytest", "unittest"):
        raise ConfigError("fixgraph config: parser must be \"pytest\" or \"unittest\"")
    return table


def parse_services(value: object) -> tuple[Service, ...]:
    """The ``services`` key: a list of names fixgraph knows (``KNOWN_SERVICES``) or not, and of
    tables ``{name, command, port?, env?, timeout?}``. ConfigError names the entry and its key."""
    if not isinstance(value, list):
        raise ConfigError("fixgraph config: services must be a list of names or tables")
    out: list[Service] = []
    for i, entry in enumerate(value):
        where = f"services[{i}]"
        if isinstance(entry, str):
            _service_name(entry, where)
            out.append(KNOWN_SERVICES.get(entry, Service(entry)))
        elif isinstance(entry, dict):
            out.append(_service_table(entry, where))
        else:
            raise ConfigError(f"fixgraph config: {where} must be a name or a table")
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"fixgraph config: services: {sorted(n for n in names if names.count(n) > 1)[0]} "
                          "is declared twice")
    return tuple(out)


def _service_name(name: object, where: str) -> str:
    if not (isinstance(name, str) and re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,39}", name)):
        raise ConfigError(f"fixgraph config: {where} name must be a word of letters, digits, '_', '.', '-'")
    return name


def _service_table(entry: dict, where: str) -> Service:
    unknown = sorted(set(entry) - SERVICE_KEYS)
    if unknown:
        raise ConfigError(f"fixgraph config: {where}: unknown key(s) {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(SERVICE_KEYS))}")
    name = _service_name(entry.get("name"), where)
    command = entry.get("command")
    if not isinstance(command, str):
        command = ""
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    if not words:
        raise ConfigError(f"fixgraph config: {where}.command must be a non-empty shell-quoted command")
    port = entry.get("port", 0)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ConfigError(f"fixgraph config: {where}.port must be a port number (1-65535)")
    if not port and "{port}" not in command:
        raise ConfigError(f"fixgraph config: {where}: without a port the command must take {{port}}")
    timeout = entry.get("timeout", Service.timeout_s)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_SERVICE_TIMEOUT_S:
        raise ConfigError(f"fixgraph config: {where}.timeout must be seconds, at most {MAX_SERVICE_TIMEOUT_S}")
    env = entry.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        raise ConfigError(f"fixgraph config: {where}.env must be a table of variable = \"text\"")
    for var in env:
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", var) or _RESERVED_VARS.fullmatch(var):
            raise ConfigError(f"fixgraph config: {where}.env: {var} is not a variable a service may set")
    return Service(name, command, port, tuple(sorted(env.items())), float(timeout))


def services_of(spec: dict | None) -> tuple[Service, ...]:
    """The services an env's spec (``as_spec``) declares."""
    out = []
    for entry in (spec or {}).get("services", ()) or ():
        if isinstance(entry, str):
            out.append(KNOWN_SERVICES.get(entry, Service(entry)))
        elif isinstance(entry, dict):
            out.append(Service(str(entry.get("name", "")), str(entry.get("command", "")), int(entry.get("port", 0)),
                               tuple(sorted(dict(entry.get("env", {})).items())),
                               float(entry.get("timeout_s", Service.timeout_s))))
    return tuple(out)


def describe_service(service: Service) -> str:
    if not service.command:
        return f"{service.name} (no command for service {service.name}: its tests are not run)"
    port = f"port {service.port}" if service.port else "a free port"
    return f"{service.name} (`{service.command}` on {port} of the run's loopback, {', '.join(service.variables())})"


def env_key(root: Path, python: str, install: tuple[str, ...] | list[str] = ()) -> str:
    """Same dependency files, Python and install commands -> same key -> the environment is reused
    across issues."""
    digest = hashlib.sha256("\0".join([python, *install]).encode())
    for name in DEPENDENCY_FILES:
        content = _read(root, name)
        if content:
            digest.update(f"\0{name}\0".encode() + _built_from(name, content).encode())
    return digest.hexdigest()[:16]


def _built_from(name: str, content: str) -> str:
    """What of a dependency file the build reads: ``.fixgraph.toml``'s services start with each
    run, not in the build, so a table that changes only them keeps its env (the runs' key has them)."""
    if name != ".fixgraph.toml":
        return content
    try:
        table = tomllib.loads(content)
    except tomllib.TOMLDecodeError:
        return content
    if "services" not in table:
        return content
    del table["services"]
    return json.dumps(table, sort_keys=True, default=str)


def infer(root: Path) -> InferredEnv:
    """The environment for the checkout at ``root``; raises ConfigError on a bad committed table."""
    overrides, source = load_overrides(root)
    python, py_how = infer_python(root)
    install, install_how = infer_install(root)
    test_cmd, parser, test_how = infer_test_cmd(root)
    how = {"python": py_how, "install": install_how, "test_cmd": test_how}
    if "python" in overrides:
        python, how["python"] = overrides["python"], source
    if "setup" in overrides:
        install, how["install"] = list(overrides["setup"]), source
    if "test_cmd" in overrides:
        test_cmd, how["test_cmd"] = overrides["test_cmd"], source
        parser = overrides.get("parser", "unittest" if "unittest" in test_cmd else "pytest")
    return InferredEnv(python=python, install=tuple(install), test_cmd=test_cmd, parser=parser,
                       exclude=tuple(overrides.get("exclude", ())),
                       services=overrides.get("services", ()),
                       key=env_key(root, python, install), how=how)


def infer_at(repo: Path, commit: str, package: str = "") -> InferredEnv:
    """The environment of ``commit`` of the git repository at ``repo``, read from that commit's
    files (never the work tree, which may hold a candidate patch); of the package in folder
    ``package`` of a repository of several (:func:`package_of`), its paths then said from the
    repository's root, where installs and tests run. Raises ConfigError on a bad committed table or
    a commit git cannot read."""
    prefix = f"{package}/" if package else ""
    # The CI workflows are the repository's, at its root, for every package.
    names = [n for n in git_output(repo, "ls-tree", "-r", "--name-only", commit).splitlines()
             if n.startswith(WORKFLOWS) or (n.startswith(prefix) and n[len(prefix):] in (*DEPENDENCY_FILES,
                                                                                          *CONFIG_FILES))]
    with tempfile.TemporaryDirectory(prefix="fixgraph-infer-") as tmp:
        if names:
            archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", commit, "--", *names],
                                     capture_output=True, env=gitsafe.hardened_env(), timeout=120)
            untar = subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, capture_output=True, timeout=120)
            if archive.returncode != 0 or untar.returncode != 0:
                raise ConfigError(f"cannot read the build files of {commit[:12]}")
        if package:
            root = Path(tmp) / package
            root.mkdir(parents=True, exist_ok=True)
            if (Path(tmp) / ".github").is_dir() and not (root / ".github").exists():
                (root / ".github").symlink_to(Path(tmp) / ".github")
        env = infer(Path(tmp) / package if package else Path(tmp))
    return replace(in_package(env, package) if package else env, scm_version=scm_version(repo, commit))


# What makes a folder a package's root: the files a build reads.
PACKAGE_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg")


def package_of(tracked: Set[str], files: Iterable[str]) -> str:
    """The folder of the package ``files`` belong to in a repository whose commit tracks ``tracked``:
    the nearest folder above each file with a build file, the one most of them share (the first
    file's on a tie); "" for the root, or when no folder above any file has one."""
    votes: dict[str, int] = {}
    for name in files:
        folder = os.path.dirname(name)
        while folder and not any(f"{folder}/{m}" in tracked for m in PACKAGE_MARKERS):
            folder = os.path.dirname(folder)
        votes[folder] = votes.get(folder, 0) + 1
    return max(votes, key=lambda f: votes[f]) if votes else ""


def in_package(env: InferredEnv, package: str) -> InferredEnv:
    """``env``, inferred from the files of folder ``package``, with its paths said from the
    repository's root: the editable install and the requirements files are the package's, the test
    ids stay the repository's (``--rootdir``), a committed table's setup runs in the package's folder."""
    def rooted(cmd: str) -> str:
        words = shlex.split(cmd)
        if words[:2] != ["pip", "install"]:
            return f"cd {shlex.quote(package)} && {cmd}"
        out = []
        for i, word in enumerate(words):
            prev = words[i - 1] if i else ""
            if prev == "-e" and word.startswith("."):
                word = f"./{package}{word[1:]}"
            elif prev == "-r":
                word = f"{package}/{word}"
            elif prev == "--group":
                word = f"{package}/pyproject.toml:{word}"
            out.append(word)
        return shlex.join(out)

    install = tuple(f"cd {shlex.quote(package)} && {c}" for c in env.install) if "fixgraph" in env.how.get(
        "install", "") else tuple(rooted(c) for c in env.install)
    test_cmd = env.test_cmd if "fixgraph" in env.how.get("test_cmd", "") else f"{env.test_cmd} --rootdir=."
    key = hashlib.sha256(f"{env.key}\0{package}".encode()).hexdigest()[:16]
    return replace(env, install=install, test_cmd=test_cmd, key=key, package=package,
                   exclude=tuple(e if e.startswith(f"{package}/") else f"{package}/{e}" for e in env.exclude))


def git_output(repo: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, env=gitsafe.hardened_env(),
                              timeout=120)
    except subprocess.TimeoutExpired:
        raise ConfigError(f"git {args[0]} timed out in {repo}") from None
    if proc.returncode != 0:
        raise ConfigError(f"git {args[0]} failed in {repo}: "
                          + (proc.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0][:200])
    return proc.stdout.decode(errors="replace")


def scm_version(repo: Path, commit: str) -> str:
    """The newest tag reachable from ``commit`` as a version ("0.0.0" when none is one)."""
    try:
        tag = git_output(repo, "describe", "--tags", "--abbrev=0", commit).strip()
    except ConfigError:
        return "0.0.0"
    try:
        return str(Version(tag.removeprefix("v")))
    except InvalidVersion:
        return "0.0.0"


def _pytest_cmd(env: InferredEnv) -> str:
    """The test command with the tests the table leaves out: ``path::test`` deselected, a path ignored;
    an inferred one goes on past a module that fails to import."""
    if env.parser != "pytest":
        return env.test_cmd
    flags = [f"--deselect={e}" if "::" in e else f"--ignore={e}" for e in env.exclude]
    if "fixgraph" not in env.how.get("test_cmd", ""):
        # One test module that cannot be imported here (a data folder CI clones) stops pytest's
        # whole session otherwise; the other modules' tests still say something.
        flags.append("--continue-on-collection-errors")
    return " ".join([env.test_cmd, *(shlex.quote(f) for f in flags)])


def _split_install(env: InferredEnv) -> tuple[list[str], list[str]]:
    """(pip arguments the env's build installs, commands run in the checkout). The inferred test
    dependencies (requirements files, groups, tox deps) go into the build, read from its checkout
    of the commit: what they put in site-packages (pytest-cov's ``.pth``) is the build's, not an
    install step planting a file in the shared env. A committed table's setup commands run as they
    are written."""
    if "fixgraph" in env.how.get("install", ""):
        return [], list(env.install)
    build: list[str] = []
    commands: list[str] = []
    for cmd in env.install:
        words = shlex.split(cmd)
        if words[:2] == ["pip", "install"] and "-e" not in words:
            build += words[2:]
        else:
            commands.append(cmd)
    return build, commands


def as_spec(env: InferredEnv) -> dict[str, object]:
    """The environment in swebench's spec shape, so the venv builder that takes specs can build it.
    pytest is installed first when the command is pytest's: a repository whose test extras did not
    name it (tox-only deps the inference missed) still runs its tests."""
    build, commands = _split_install(env)
    return {"python": env.python, "install": " && ".join(commands), "pre_install": [],
            "pip_packages": (["pytest"] if env.parser == "pytest" else []) + build,
            "test_cmd": _pytest_cmd(env), "parser": env.parser, "inferred": True, "env_key": env.key,
            "how": dict(env.how), "exclude": list(env.exclude), "services": [s.as_dict() for s in env.services],
            "scm_version": env.scm_version, "description": describe(env)}


def describe(env: InferredEnv) -> str:
    """How the environment was made, one part a line: for ``--check`` output and PR bodies."""
    lines = [f"package {env.package}/ of several (the one the tests and the patch touch)"] if env.package else []
    lines += [f"python {env.python} ({env.how.get('python', '')})",
             f"install ({env.how.get('install', '')}): " + ("; ".join(env.install) or "nothing"),
             f"tests ({env.how.get('test_cmd', '')}): {env.test_cmd} [{env.parser} log]"]
    if env.exclude:
        lines.append("left out: " + ", ".join(env.exclude))
    if env.services:
        lines.append("services started for the tests: " + ", ".join(describe_service(s) for s in env.services))
    return "\n".join(lines + [f"env key {env.key}"])


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m scoring.execution.infer",
                                     description="Print the test environment inferred for a checkout.")
    parser.add_argument("repo", type=Path, help="a local checkout of a Python repository")
    args = parser.parse_args(argv)
    if not args.repo.is_dir():
        print(f"error: {args.repo} is not a directory", file=sys.stderr)
        return 2
    try:
        print(describe(infer(args.repo)))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
