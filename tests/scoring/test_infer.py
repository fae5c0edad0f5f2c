"""Environment inference from a repository's own files, and the committed override table."""

from pathlib import Path

import pytest

from eval.fixtures.repos import make_monorepo
from scoring.execution.infer import (
    ConfigError,
    InferredEnv,
    describe,
    git_output,
    in_package,
    infer,
    infer_at,
    package_of,
)


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_pyproject_with_extras_and_pytest_config(tmp_path):
    root = _repo(tmp_path, {"pyproject.toml": (
        '[project]\nname="x"\nrequires-python=">=3.9,<3.13"\n'
        '[project.optional-dependencies]\ntest=["pytest"]\ndocs=["sphinx"]\n'
        '[tool.pytest.ini_options]\naddopts="-q"\n')})
    env = infer(root)
    assert env.python == "3.12" and env.how["python"] == "requires-python"
    assert env.install == ("pip install -e .", "pip install pytest")  # the extra, read from the file
    assert env.test_cmd.startswith("pytest") and env.parser == "pytest"


def test_setup_py_with_requirements_file_and_classifiers(tmp_path):
    root = _repo(tmp_path, {
        "setup.py": "from setuptools import setup\nsetup(name='x', classifiers=[])\n",
        "setup.cfg": "[metadata]\nclassifiers =\n    Programming Language :: Python :: 3.8\n"
                     "    Programming Language :: Python :: 3.10\n",
        "requirements-dev.txt": "pytest\n"})
    env = infer(root)
    assert env.python == "3.10" and env.how["python"] == "classifiers"
    assert env.install == ("pip install -e .", "pip install -r requirements-dev.txt")


def test_tox_only_runs_unittest_cases_with_pytest(tmp_path):
    root = _repo(tmp_path, {"setup.py": "", "tox.ini": "[tox]\nenvlist = py38,py311\n"
                            "[testenv]\ndeps =\n    mock\n    -e .\ncommands = python -m unittest\n"})
    env = infer(root)
    assert env.python == "3.11" and env.how["python"] == "tox.ini"
    assert "pip install mock" in env.install
    assert env.parser == "pytest" and "unittest" in env.how["test_cmd"]


def test_ci_matrix_gives_python_and_pytest(tmp_path):
    root = _repo(tmp_path, {"setup.py": "", ".github/workflows/ci.yml":
                            "python-version: ['3.8', '3.10']\nrun: pytest tests\n"})
    env = infer(root)
    assert (env.python, env.how["python"], env.parser) == ("3.10", "CI matrix", "pytest")


def test_committed_table_overrides_every_part(tmp_path):
    root = _repo(tmp_path, {"pyproject.toml": (
        '[project]\nname="x"\nrequires-python=">=3.8"\n'
        '[tool.fixgraph]\npython="3.9"\nsetup=["pip install -e ."]\n'
        'test_cmd="python -m unittest discover -v"\nexclude=["tests/test_net.py"]\n'
        'services=["redis"]\n')})
    env = infer(root)
    assert env.python == "3.9" and env.install == ("pip install -e .",)
    assert env.parser == "unittest" and env.exclude == ("tests/test_net.py",)
    assert [s.name for s in env.services] == ["redis"] and env.how["test_cmd"] == "pyproject.toml [tool.fixgraph]"
    assert env.services[0].command.startswith("redis-server --port {port}") and env.services[0].port == 6379
    assert "services started for the tests: redis (`redis-server --port {port}" in describe(env)


def test_key_follows_dependency_files_only(tmp_path):
    root = _repo(tmp_path, {"pyproject.toml": '[project]\nname="x"\n', "src/x/a.py": "A = 1\n"})
    first = infer(root).key
    (root / "src/x/a.py").write_text("A = 2\n")
    assert infer(root).key == first
    (root / "pyproject.toml").write_text('[project]\nname="x"\ndependencies=["attrs"]\n')
    assert infer(root).key != first


@pytest.mark.parametrize("text, message", [
    ("python = 3.9\n", "python must be a string"),
    ("pythn = '3.9'\n", "unknown key(s) pythn"),
    ("setup = 'pip install .'\n", "setup must be a list of strings"),
    ("test_cmd = ''\n", "test_cmd must be a non-empty string"),
    ("python = [\n", "not valid TOML"),
    ("services = 'redis'\n", "services must be a list of names or tables"),
    ("services = [3]\n", "services[0] must be a name or a table"),
    ("services = ['re dis']\n", "services[0] name must be a word"),
    ("services = [{name = 'kv'}]\n", "services[0].command must be a non-empty"),
    ("services = [{name = 'kv', command = 'kv --x \"'}]\n", "services[0].command must be a non-empty"),
    ("services = [{name = 'kv', command = 'kv-server'}]\n", "services[0]: without a port the command must take {port}"),
    ("services = [{name = 'kv', command = 'kv {port}', port = 70000}]\n", "services[0].port must be a port number"),
    ("services = [{name = 'kv', command = 'kv {port}', timeout = 900}]\n", "services[0].timeout must be seconds"),
    ("services = [{name = 'kv', command = 'kv {port}', env = {PATH = '/x'}}]\n", "services[0].env: PATH is not"),
    ("services = [{name = 'kv', command = 'kv {port}', cmd = 'x'}]\n", "services[0]: unknown key(s) cmd"),
    ("services = ['redis', {name = 'redis', command = 'r {port}'}]\n", "services: redis is declared twice"),
])
def test_bad_committed_file_is_one_clear_error(tmp_path, text, message):
    root = _repo(tmp_path, {".fixgraph.toml": text})
    with pytest.raises(ConfigError) as caught:
        infer(root)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_declared_service_is_read_with_its_port_and_variables_and_leaves_the_env_key(tmp_path):
    table = ('services = [{name = "kv", command = "python kv_server.py {port}", env = {KV_URL = "kv://127.0.0.1:{port}"},'
             ' timeout = 5}, "memcached", "postgres"]\n')
    root = _repo(tmp_path, {"pyproject.toml": '[project]\nname="x"\n', ".fixgraph.toml": table})
    env = infer(root)
    kv, memcached, postgres = env.services
    assert (kv.command, kv.port, kv.timeout_s) == ("python kv_server.py {port}", 0, 5.0)
    assert kv.variables() == {"KV_PORT": "{port}", "KV_URL": "kv://127.0.0.1:{port}"}
    assert memcached.port == 11211 and memcached.command.startswith("memcached ")
    assert postgres.command == ""  # a name fixgraph knows no command for: said, never guessed
    assert "postgres (no command for service postgres" in describe(env)
    assert "kv (`python kv_server.py {port}` on a free port of the run's loopback, KV_PORT, KV_URL)" in describe(env)
    # The services start with each run, not in the build: a table changing only them keeps the env.
    (root / ".fixgraph.toml").write_text(table.replace("timeout = 5", "timeout = 9"))
    assert infer(root).key == env.key
    (root / ".fixgraph.toml").write_text('python = "3.10"\n' + table)
    assert infer(root).key != env.key


def test_broken_pyproject_and_empty_repo_still_infer(tmp_path):
    root = _repo(tmp_path, {"pyproject.toml": "[project\n"})
    env = infer(root)
    assert env.python == "3.11" and env.how["python"] == "default"
    assert infer(tmp_path / "missing").install == ()


def test_command_line_prints_env_and_refuses_bad_input(tmp_path, capsys):
    from scoring.execution.infer import main
    root = _repo(tmp_path / "ok", {"pyproject.toml": '[project]\nname="x"\nrequires-python=">=3.10"\n'})
    assert main([str(root)]) == 0
    assert "python 3.12 (requires-python)" in capsys.readouterr().out
    assert main([str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    bad = _repo(tmp_path / "bad", {".fixgraph.toml": "python = 3\n"})
    assert main([str(bad)]) == 2
    assert "python must be a string" in capsys.readouterr().err


def test_spec_shape_for_the_venv_builder(tmp_path):
    from scoring.execution.infer import as_spec
    root = _repo(tmp_path, {"setup.py": "", "requirements-test.txt": "pytest\n"})
    spec = as_spec(infer(root))
    # the test requirements are the build's (read from its checkout), the project's install the commit's
    assert spec["install"] == "pip install -e ."
    assert spec["pip_packages"] == ["pytest", "-r", "requirements-test.txt"]
    assert spec["test_cmd"] == "pytest -rA --continue-on-collection-errors"  # the committed table's runs as written
    assert spec["python"] == "3.11" and spec["pre_install"] == [] and spec["inferred"] is True


def test_tox_deps_skip_factor_lines_and_requirement_files(tmp_path):
    root = _repo(tmp_path, {"setup.py": "", "tox.ini": (
        "[testenv]\ndeps =\n    !pypy: -r {toxinidir}/requirements_test.txt\n"
        "    pypy: coverage\n    -rrequirements-dev.txt\n    hypothesis>=6\n")})
    assert infer(root).install == ("pip install -e .", "pip install 'hypothesis>=6'")


def test_a_monorepo_infers_the_env_of_the_package_its_files_belong_to(tmp_path):
    inst = make_monorepo(tmp_path, "3.11")
    repo = tmp_path / "fixture+mono"
    tracked = set(git_output(repo, "ls-tree", "-r", "--name-only", "HEAD").splitlines())
    tests = ["packages/strutil/tests/test_core.py"]
    assert package_of(tracked, tests) == "packages/strutil"
    assert package_of(tracked, ["packages/calc/src/calc/ops.py", *tests, *tests]) == "packages/strutil"
    assert package_of(tracked, ["README.md"]) == "" and package_of(tracked, []) == ""
    env = infer_at(repo, inst["base_commit"], "packages/strutil")
    assert env.install == ("pip install -e ./packages/strutil", "pip install pytest")  # its test extra, read
    assert env.python == "3.11" and env.how["python"] == "requires-python"
    assert env.test_cmd == "pytest -rA --rootdir=." and env.package == "packages/strutil"
    assert "package packages/strutil/" in describe(env)
    other = infer_at(repo, inst["base_commit"], "packages/calc")
    assert other.key != env.key and infer_at(repo, inst["base_commit"]).key not in (env.key, other.key)
    # nothing to install at the root: what a run without files gets
    assert infer_at(repo, inst["base_commit"]).install == ()


def test_a_packages_own_requirements_groups_and_table_are_said_from_the_root():
    env = InferredEnv(python="3.12", install=("pip install -e .[test]", "pip install -r requirements-dev.txt",
                                              "pip install --group test", "pip install 'attrs>=22'"),
                      test_cmd="pytest -rA", parser="pytest", exclude=("tests/test_slow.py",), key="k",
                      how={"install": "extras test", "test_cmd": "pytest config"})
    moved = in_package(env, "libs/a b")
    assert moved.install == ("pip install -e './libs/a b[test]'", "pip install -r 'libs/a b/requirements-dev.txt'",
                             "pip install --group 'libs/a b/pyproject.toml:test'", "pip install 'attrs>=22'")
    assert moved.exclude == ("libs/a b/tests/test_slow.py",) and moved.key != env.key
    table = in_package(InferredEnv(python="3.12", install=("make dev",), test_cmd="make test", parser="pytest",
                                   how={"install": ".fixgraph.toml", "test_cmd": ".fixgraph.toml"}), "libs/a")
    assert table.install == ("cd libs/a && make dev",) and table.test_cmd == "make test"
