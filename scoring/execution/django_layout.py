"""django's test layout: where its tests live, how they are named and which cannot run here.

django keeps its source under ``django/`` and its tests in one folder per test app,
``tests/<app>/`` (``tests.py``, ``test_<x>.py``, nested ``tests/<app>/<sub>/test_<x>.py``), run by
``tests/runtests.py`` with labels (``<app>.tests``, ``<app>.test_x.Class.test_y``) and reported
as ``test_y (<app>.test_x.Class)`` (``...Class.test_y`` from Python 3.11). A fixture repository
with ``tests/runtests.py`` is read the same way. The runs use ``--settings=test_sqlite``: a test
app for another database or for GIS libraries only skips there, so it is not runnable here and
never a regression (:func:`not_runnable`). Imports nothing of fixgraph's: the floor of
``scoring.execution``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import PurePosixPath

DJANGO = "django/django"
RUNNER = "tests/runtests.py"
# ``test_y (app.test_x.Class)`` and, from Python 3.11, ``test_y (app.test_x.Class.test_y)``.
_TEST_ID = re.compile(r"^(\S+) \(([\w.]+)\)")
# Test apps (and modules) that need a database other than SQLite, or GIS libraries: under
# ``test_sqlite`` they are skipped, so they say nothing of a patch here.
_OTHER_DATABASE = {
    "tests/postgres_tests/": "needs a PostgreSQL database (the runs use test_sqlite)",
    "tests/gis_tests/": "needs GIS libraries and a spatial database (the runs use test_sqlite)",
    "tests/backends/postgresql/": "needs a PostgreSQL database (the runs use test_sqlite)",
    "tests/backends/mysql/": "needs a MySQL database (the runs use test_sqlite)",
    "tests/backends/oracle/": "needs an Oracle database (the runs use test_sqlite)",
}
_OTHER_DATABASE_MODULE = re.compile(r"(^|_)(postgresql|postgres|mysql|oracle)\.py$")


def is_django(repo: str, tracked: Iterable[str]) -> bool:
    """Whether a repository has django's test layout: django itself, or a tree with its runner."""
    return repo == DJANGO or RUNNER in set(tracked)


def is_app_test(path: str) -> bool:
    """A test module of a test app (``tests/<app>/...``), not the runner's own files
    (``tests/test_sqlite.py`` is the settings module, ``tests/runtests.py`` the runner)."""
    parts = PurePosixPath(path).parts
    return len(parts) >= 3 and parts[0] == "tests" and path.endswith(".py")


def not_runnable(path: str) -> str:
    """Why a test module cannot run with the SQLite test settings ("" when it can)."""
    for prefix, why in _OTHER_DATABASE.items():
        if path.startswith(prefix):
            return why
    if path.startswith("tests/") and _OTHER_DATABASE_MODULE.search(PurePosixPath(path).name):
        return "tests a database other than SQLite (the runs use test_sqlite)"
    return ""


def app_tests(module: str, tests: list[str], max_files: int) -> list[str]:
    """The test modules of the test apps named after a source module's packages or the module
    itself (``django/utils/text.py`` -> ``tests/utils_tests/``, ``tests/text/``;
    ``django/db/migrations/writer.py`` -> ``tests/migrations/``), from apps holding at most
    ``max_files`` test modules (a bigger one is a subsystem: other signals pick in it)."""
    path = PurePosixPath(module)
    names = [p for p in path.parent.parts if p != "django"]
    names.append(path.parent.name if path.stem == "__init__" else path.stem)
    out: list[str] = []
    for name in dict.fromkeys(n.lstrip("_") for n in names if n.lstrip("_")):
        for app in (name, f"{name}_tests", f"{name}s"):
            group = [t for t in tests if t.startswith(f"tests/{app}/")]
            if group and len(group) <= max_files:
                out += [t for t in group if t not in out]
    return out


def label_of(path: str) -> str:
    """``tests/<app>/test_x.py`` -> ``<app>.test_x``."""
    return path.removesuffix(".py").removeprefix("tests/").replace("/", ".")


def owner_label(test_id: str) -> str:
    """The dotted ``<app>.<module>.<Class>[.<test>]`` of a django test id; "" for another id."""
    m = _TEST_ID.match(test_id)
    return m.group(2) if m else ""


def owning_file(test_id: str, files: Iterable[str]) -> str | None:
    """Which of ``files`` a django test id belongs to (its module's label is a prefix of the id's
    dotted name); None when none does (``unittest.loader._FailedTest``: a label not imported)."""
    dotted = owner_label(test_id)
    if not dotted:
        return None
    for f in files:
        if f.endswith(".py") and dotted.startswith(label_of(f) + "."):
            return f
    return None


def is_failed_import(test_id: str) -> bool:
    """django's runner reports a label it could not import as a test of ``_FailedTest``."""
    return owner_label(test_id).startswith("unittest.loader._FailedTest")


# unittest's default pattern (test*.py), which django's runner uses: tests.py is the usual module.
_TEST_MODULE = re.compile(r"^tests/(\w+)/(?:\w+/)*test\w*\.py$")


def check_test_path(path: str, tracked: Iterable[str]) -> str:
    """Why a new test module is not where django's runner finds it by a label ("" when it is):
    ``tests/<app>/test_<x>.py`` (or any ``test*.py``, as the app's ``tests.py``) in an existing test app."""
    m = _TEST_MODULE.match(path)
    if not m:
        return (f"{path!r} is not where django keeps tests: write tests/<app>/test_<x>.py (or the "
                "app's tests.py) in an existing test app, run by the label <app>.test_<x>")
    folder = str(PurePosixPath(path).parent) + "/"
    if not any(t.startswith(folder) for t in tracked):
        return (f"{path!r}: there is no test app {folder} (the runner imports labels of existing test "
                "apps: pick the app whose tests are closest, e.g. the one of the changed module)")
    return ""


def defines_test_case(tree: object) -> bool:
    """Whether a parsed module defines a class with a base and ``test_...`` methods, its own or a
    mixin's from the same module (``class T(SessionTestsMixin, TestCase)``): what unittest's loader
    (and so django's runner) collects; module-level test functions are not."""
    if not isinstance(tree, ast.Module):
        return False
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    with_tests = {c.name for c in classes
                  if any(isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                         for m in c.body)}
    while grown := {c.name for c in classes if c.name not in with_tests
                    and any(isinstance(b, ast.Name) and b.id in with_tests for b in c.bases)}:
        with_tests |= grown
    return any(c.bases and c.name in with_tests for c in classes)


def is_summary_name(test_id: str) -> bool:
    """A bare ``test_x``: what swebench's django parser reads off a ``FAIL: test_x (...)`` line."""
    return bool(re.fullmatch(r"test\w*", test_id))
