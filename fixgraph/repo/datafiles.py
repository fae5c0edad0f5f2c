"""Where the Reproducer's data files may go: beside its test, and never as configuration.

A reproduction test may read a few data files it brings (a JSON fixture, a sample input). They
are written into the test runs' copies and committed with the pull request, so a file that a test
runner, git, a build or a CI service reads as configuration would change far more than the test:
a root ``conftest.py`` runs in every test session, ``.gitattributes`` names filter drivers, a
workflow under ``.github/`` runs in the repository's CI. :func:`data_file_problem` refuses those,
anything in a dot-folder, and anything that is not in the test's own folder (or below it).
"""

from __future__ import annotations

import posixpath
import re

# Files read as configuration by pytest, tox, nox, setuptools, pip, git, coverage, CI services and
# Python itself (site's customize modules and .pth files), wherever they are.
CONFIG_NAMES = frozenset({
    "conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "setup.py", "pyproject.toml", "noxfile.py",
    "__init__.py", "sitecustomize.py", "usercustomize.py", "manage.py", "Makefile", "GNUmakefile", "makefile",
    "MANIFEST.in", "CMakeLists.txt", "meson.build", "Dockerfile", "Jenkinsfile", "azure-pipelines.yml",
    "azure-pipelines.yaml", "appveyor.yml", "appveyor.yaml", "codecov.yml", "bitbucket-pipelines.yml",
    "environment.yml", "Pipfile", "poetry.lock", "hatch.toml", "pdm.toml", "setup_package.py", "CODEOWNERS",
})
CONFIG_PATTERN = re.compile(r"\.pth$|^requirements[^/]*\.(txt|in)$|\.(egg-link|whl)$")
# CI and tooling folders that are not dot-folders.
CONFIG_DIRS = frozenset({"ci", "workflows", "scripts", "bin", "site-packages", "node_modules"})


def data_file_problem(test_path: str, path: str) -> str:
    """Why ``path`` cannot be a data file of the test at ``test_path`` ("" when it can)."""
    parts = path.split("/")
    if any(p.startswith(".") for p in parts):
        return f"data file {path!r} is in a dot-folder or is a dot-file (configuration, not data)"
    name = parts[-1]
    if name in CONFIG_NAMES or CONFIG_PATTERN.search(name):
        return f"data file {path!r} is a file a test runner, build or git reads as configuration"
    if any(p in CONFIG_DIRS for p in parts[:-1]):
        return f"data file {path!r} is in a CI or tooling folder"
    home, folder = posixpath.dirname(test_path), posixpath.dirname(path)
    if not home:
        return f"data file {path!r}: a test at the repository's root brings no data files (the root is configuration's)"
    if folder != home and not folder.startswith(home + "/"):
        return f"data file {path!r} is not beside the test (in {home!r} or a folder below it)"
    return ""
