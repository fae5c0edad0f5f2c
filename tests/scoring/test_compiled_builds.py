"""Compiled repositories' builds: offline settings, the shared compiler cache, failures told apart."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scoring.execution import linkcache
from scoring.execution.compiled import (
    MPL_SETUP_CFG,
    classify_failure,
    compiled_build,
    download_stand_ins,
    missing_system_packages,
    with_wheel_pins,
)
from scoring.execution.envs import pip_requirement
from scoring.execution.specs import repo_specs

# What a machine without Debian's build tools lacks: these tests skip, naming the package (.ci/run
# installs them all and fails on any skip). The builds themselves go on without ccache.
_NO_ROOT = "without root: install it from conda-forge or build it into ~/.local and put it on PATH"
needs_ccache = pytest.mark.skipif(
    not (shutil.which("ccache") and Path("/usr/lib/ccache/gcc").exists()),
    reason=f"ccache is not installed: apt-get install ccache ({_NO_ROOT})")
needs_compiler = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("g++") and shutil.which("ar")),
    reason=f"a C/C++ compiler is not installed: apt-get install build-essential ({_NO_ROOT})")

# other.cpp: a C++ extension, linked as distutils links C++ (with the C++ compiler's name)
SETUP_PY = """from setuptools import Extension, setup
setup(name="tiny", version="0.1", ext_modules=[Extension("tiny", ["tiny.c"]), Extension("other", ["other.cpp"])])
"""
TINY_C = """#include <Python.h>
static PyObject *value(PyObject *self, PyObject *args) { return PyLong_FromLong(%d); }
static PyMethodDef methods[] = {{"value", value, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "%s", NULL, -1, methods};
PyMODINIT_FUNC PyInit_%s(void) { return PyModule_Create(&mod); }
"""


def _checkout(src: Path, tiny: int, other: int) -> None:
    """A fresh checkout of one commit at the env's fixed source path, as each install gets."""
    shutil.rmtree(src, ignore_errors=True)
    src.mkdir(parents=True)
    (src / "setup.py").write_text(SETUP_PY)
    (src / "tiny.c").write_text(TINY_C % (tiny, "tiny", "tiny"))
    (src / "other.cpp").write_text(TINY_C.replace("PyMODINIT_FUNC", 'extern "C" PyMODINIT_FUNC') % (other, "other", "other"))


def _build(src: Path, env: dict[str, str], env_dir: Path) -> tuple[list[str], list[str], int]:
    """Build in place with the env's compiler settings (into a build folder of another name each
    time, as setuptools' editable install does); the ccache and link cache results logged, and
    tiny.value()."""
    build_temp = env_dir / "home" / f"tmp{len(list(env_dir.glob('home/tmp*')))}.build-temp"
    subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--build-temp", str(build_temp)],
                   cwd=src, env=env, check=True, capture_output=True, timeout=120)
    log = env_dir / "ccache.statslog"
    results = [ln for ln in log.read_text().splitlines() if ln == "cache_miss" or ln.endswith("_cache_hit")]
    log.unlink()
    link_log = env_dir / "linkcache.statslog"
    links = link_log.read_text().split()
    link_log.unlink()
    value = subprocess.run([sys.executable, "-c", "import other, tiny; print(tiny.value())"], cwd=src, env=env,
                           check=True, capture_output=True, text=True, timeout=60).stdout
    return sorted(results), sorted(links), int(value)


@pytest.mark.slow
@needs_ccache
@needs_compiler
def test_a_later_commit_compiles_only_what_changed(tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    env_dir.mkdir()
    (env_dir / "venv" / "bin").mkdir(parents=True)
    (env_dir / "venv" / "bin" / "python").symlink_to(sys.executable)  # the link cache runs with the env's Python
    build = compiled_build("scikit-learn/scikit-learn", "0.22", env_dir)
    assert build.path_prefix == [str(env_dir / "linkbin"), "/usr/lib/ccache"]
    assert build.env["CCACHE_DIR"] == str(env_dir / "ccache")
    env = dict(os.environ)
    build.apply(env)
    src = env_dir / "src"
    _checkout(src, 1, 10)
    results, links, value = _build(src, env, env_dir)
    assert results == ["cache_miss", "cache_miss"] and value == 1  # cold: both compiled
    assert links == ["link_miss", "link_miss"]  # and both linked
    _checkout(src, 1, 10)  # a later commit whose C sources did not change
    results, links, value = _build(src, env, env_dir)
    assert all(r.endswith("_hit") for r in results) and len(results) == 2 and value == 1
    assert links == ["link_hit", "link_hit"]  # the same objects and libraries: neither is linked again
    _checkout(src, 2, 10)  # one source changed: that one is compiled, the other comes from the cache
    results, links, value = _build(src, env, env_dir)
    assert "cache_miss" in results and sum(r.endswith("_hit") for r in results) == 1
    assert links == ["link_hit", "link_miss"]  # the changed object is linked, the unchanged one reused
    assert value == 2  # the run imports what its own commit's source builds
    assert not list((src).glob(".linkcache-*")) and not list((env_dir / "linkcache").glob(".new-*"))


@pytest.mark.slow
@needs_ccache
@needs_compiler
def test_a_link_is_reused_only_while_every_library_it_read_is_the_same(tmp_path: Path) -> None:
    """The link cache keys a link by its objects' bytes and arguments, and keeps beside it the bytes
    of each library the linker opened: the same static library again is a hit; the same objects and
    arguments with a changed library are linked again, and the extension returns the new value."""
    env_dir = tmp_path / "env"
    (env_dir / "venv" / "bin").mkdir(parents=True)
    (env_dir / "venv" / "bin" / "python").symlink_to(sys.executable)
    env = dict(os.environ)
    compiled_build("scikit-learn/scikit-learn", "0.22", env_dir).apply(env)
    work = tmp_path / "work"
    work.mkdir()

    def sh(*argv: str) -> str:
        return subprocess.run(argv, cwd=work, env=env, check=True, capture_output=True, text=True, timeout=60).stdout

    (work / "mod.c").write_text("int dep(void);\nint value(void) { return dep(); }\n")
    sh("gcc", "-fPIC", "-c", "mod.c", "-o", "mod.o")

    def link(dep: int) -> tuple[str, int]:
        (work / "dep.c").write_text(f"int dep(void) {{ return {dep}; }}\n")
        sh("gcc", "-fPIC", "-c", "dep.c", "-o", "dep.o")
        (work / "libdep.a").unlink(missing_ok=True)
        sh("ar", "rcsD", "libdep.a", "dep.o")
        sh("gcc", "-shared", "mod.o", "-L.", "-ldep", "-o", "mod.so")
        log = env_dir / "linkcache.statslog"
        result = log.read_text().strip()
        log.unlink()
        value = sh(sys.executable, "-c", "import ctypes; print(ctypes.CDLL('./mod.so').value())")
        return result, int(value)

    assert link(1) == ("link_miss", 1)
    assert link(1) == ("link_hit", 1)
    assert link(2) == ("link_miss", 2)  # mod.o and the arguments are the same; libdep.a is not
    # arguments in a response file are not seen: such a link is never taken from the cache
    assert linkcache.link_key("gcc", ["-shared", "@objs.rsp", "-o", "x.so"], str(work), env) is None


def test_matplotlib_uses_debian_freetype_and_qhull_and_skips_downloads(tmp_path: Path) -> None:
    build = compiled_build("matplotlib/matplotlib", "3.5", tmp_path)
    assert Path(build.env["MPLSETUPCFG"]).read_text() == MPL_SETUP_CFG
    steps = ["apt-get -y update && apt-get install -y imagemagick", 'QHULL_URL="http://x/q.tgz"',
             'wget -O "$QHULL_TAR" "$QHULL_URL"', 'mkdir -p "$QHULL_BUILD_DIR"', 'tar -xvzf "$QHULL_TAR" -C "$Q"',
             "python tools/gen.py"]
    assert build.pre_install(steps) == ["python tools/gen.py"]
    assert build.install("python -m pip install -e .") == "python -m pip install --no-build-isolation -e ."
    sk = compiled_build("scikit-learn/scikit-learn", "0.20", tmp_path)
    assert sk.constraints == ["cython<3"]
    assert sk.install("python -m pip install -v --no-use-pep517 --no-build-isolation -e .").count(
        "--no-build-isolation") == 1
    plain = compiled_build("psf/requests", "2.0", tmp_path)
    assert not plain.compiled and plain.env == {} and plain.pre_install(steps) == steps


def test_matplotlib_3_0_s_jquery_ui_download_is_stood_in_for_by_its_folder(tmp_path: Path) -> None:
    # setup.py's develop step at 3.0 skips the download when the folder is there
    (tmp_path / "setup.py").write_text('def _download_jquery_to(dest):\n'
                                       '    url = "https://jqueryui.com/resources/download/jquery-ui-1.12.1.zip"\n')
    assert download_stand_ins("matplotlib/matplotlib", tmp_path) == [
        "lib/matplotlib/backends/web_backend/jquery-ui-1.12.1"]
    assert (tmp_path / "lib/matplotlib/backends/web_backend/jquery-ui-1.12.1").is_dir()
    assert download_stand_ins("psf/requests", tmp_path) == []
    later = tmp_path / "later"
    later.mkdir()
    (later / "setup.py").write_text("from setuptools import setup\n")
    assert download_stand_ins("matplotlib/matplotlib", later) == [] and not (later / "lib").exists()
    assert download_stand_ins("matplotlib/matplotlib", tmp_path / "none") == []


def test_pins_with_no_wheel_for_the_specs_python_take_the_nearest_that_has_one(tmp_path: Path) -> None:
    spec = repo_specs(tmp_path, "scikit-learn/scikit-learn", "1.3")
    assert spec is not None and "'numpy==1.19.2'" in spec["packages"]  # quoted: split as a shell would
    pinned = with_wheel_pins("scikit-learn/scikit-learn", "1.3", spec)
    assert shlex.split(pinned["packages"])[:3] == ["numpy==1.19.3", "scipy==1.5.4", "cython==3.0.10"]
    assert "'pandas<2.0.0'" in pinned["packages"] and pinned["pip_packages"] == spec["pip_packages"]
    old = repo_specs(tmp_path, "scikit-learn/scikit-learn", "0.20")
    assert old is not None
    assert with_wheel_pins("scikit-learn/scikit-learn", "0.20", old) is old  # Python 3.6 has 1.19.2's wheel
    # pip 25.3 dropped --no-use-pep517, which scikit-learn's install command names
    assert pip_requirement(spec) == "pip<25.3" and pip_requirement({"install": "python -m pip install -e ."}) == "pip"


@pytest.mark.parametrize(("log", "timed_out", "kind", "transient"), [
    ("Failed to download any of the following: ['https://download.savannah.gnu.org/x.tar.gz']", False,
     "offline-download", False),
    ("WARNING: Retrying ... ReadTimeoutError(\"HTTPSConnectionPool(host='pypi.org')\")", False, "network", True),
    # the index proxy refused a host that is not the index (pip's retries say "Max retries exceeded" too)
    ("ProxyError('Cannot connect to proxy.', OSError('Tunnel connection failed: 403 Forbidden'))\nMax retries "
     "exceeded\n[fixgraph] the build step asked for more than the package index; refused: github.com:443", False,
     "offline-download", False),
    ("src/ft2font.cpp:12:10: fatal error: ft2build.h: No such file or directory\n"
     "error: command '/usr/bin/gcc' failed with exit code 1", False, "compiler", False),
    ("", True, "timeout", False),
    ("something else", False, "other", False),
])
def test_build_failures_are_told_apart(log: str, timed_out: bool, kind: str, transient: bool) -> None:
    failure = classify_failure(log, timed_out, 1800)
    assert (failure.kind, failure.transient) == (kind, transient)
    assert kind == "other" or failure.reason


@pytest.mark.slow
def test_a_test_that_segfaults_in_compiled_code_is_a_finding_with_the_signal(tmp_path: Path) -> None:
    """A crash in compiled code kills pytest before its summary: the test that was running fails
    with the signal in its crash record, the tests it finished keep their outcomes, nothing hangs."""
    from fixgraph.dataset import Task
    from fixgraph.repo.workspace import RepoCache
    from scoring.execution.outcomes import Suite
    from scoring.execution.runner import make_runner
    from tests.helpers.testrun_helpers import REPO, local_settings, make_repo

    tests = ("def test_first():\n    assert True\n\n\n"
             "def test_crash():\n    import ctypes\n    ctypes.string_at(0)\n\n\n"
             "def test_never():\n    assert True\n")
    mirrors, commit = make_repo(tmp_path, {"calc.py": "X = 1\n", "tests/test_calc.py": tests})
    wt = RepoCache(tmp_path / "cache", mirrors).worktree(REPO, commit, "segv")
    task = Task(instance_id="fixture__calc-segv", repo=REPO, base_commit=commit, problem_statement="")
    run = make_runner(local_settings(), tmp_path / "cache").run_suite(
        task, wt, None, Suite(targets=("tests/test_calc.py",), timeout_s=60))
    assert not run.timed_out and run.seconds < 60
    assert run.statuses == {"tests/test_calc.py::test_first": "PASSED", "tests/test_calc.py::test_crash": "FAILED"}
    assert [(r["nodeid"], r["type"]) for r in run.crash_records] == [("tests/test_calc.py::test_crash", "SIGSEGV")]
    assert any("SIGSEGV in tests/test_calc.py::test_crash" in n for n in run.notes)


@pytest.mark.slow
def test_an_install_stopped_midway_leaves_nothing_that_is_reused(tmp_path: Path) -> None:
    """fixgraph killed during a reinstall leaves a half-built ``src`` tree beside the good install:
    the next use drops it and the env leads to the last complete install again."""
    import json

    from fixgraph import config
    from scoring.execution.envs import VenvEnvs
    from tests.helpers.testrun_helpers import calc_instance

    inst, wt, _ = calc_instance(tmp_path)
    inst = inst.model_copy(update={"version": "0.1"})
    spec = {"python": "{}.{}".format(*sys.version_info[:2]), "install": "true", "test_cmd": "pytest -rA"}
    envs = VenvEnvs(tmp_path / "envs", tmp_path / "cache", config.TestSettings(backend="venv"),
                    specs=lambda repo, version: spec)
    path = envs.env_path(inst.task())
    (path / "base").mkdir(parents=True)
    (path / "src" / "half").mkdir(parents=True)  # what a killed build_ext left
    (path / "env.json").write_text(json.dumps({"ok": True, "installed_commit": inst.base_commit, "artifacts": []}))
    env = envs.get(inst.task(), wt)
    assert (path / "src").is_symlink() and (path / "src").resolve() == (path / "base").resolve()
    assert env.artifacts_root == path / "base"


IMAGE_TESTS = '''
from matplotlib.testing.decorators import check_figures_equal, image_comparison
import matplotlib.testing.decorators as mpl_dec


@image_comparison(['a.png'], remove_text=True)
def test_drawn():
    pass


@check_figures_equal(extensions=["png"])
def test_same(fig_test, fig_ref):
    pass


class TestK:
    @mpl_dec.image_comparison(['b.png'])
    def test_in_class(self):
        pass


def test_plain():
    pass
'''
NEW_IMAGE_TEST = '''diff --git a/lib/matplotlib/tests/test_x.py b/lib/matplotlib/tests/test_x.py
--- a/lib/matplotlib/tests/test_x.py
+++ b/lib/matplotlib/tests/test_x.py
@@ -22,2 +22,7 @@ class TestK:
 def test_plain():
     pass
+
+
+@image_comparison(['c.png'])
+def test_new():
+    pass
diff --git a/lib/matplotlib/tests/baseline_images/test_x/c.png b/lib/matplotlib/tests/baseline_images/test_x/c.png
new file mode 100644
Binary files /dev/null and b/lib/matplotlib/tests/baseline_images/test_x/c.png differ
'''


def test_image_comparisons_are_set_aside_with_the_reason_never_passes_or_regressions(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from scoring.execution.image_tests import decorated_tests, unmatched_tests
    from scoring.execution.outcomes import TestOutcome, _set_aside_unmatched

    assert decorated_tests(IMAGE_TESTS, "image_comparison") == {"test_drawn", "TestK::test_in_class"}
    # an alias made with functools.partial (test_mplot3d.py's mpl3d_image_comparison) is one too
    mplot3d = ("import functools\nfrom matplotlib.testing.decorators import image_comparison\n"
               "mpl3d_image_comparison = functools.partial(image_comparison, remove_text=True, style='default')\n"
               "@mpl3d_image_comparison(['aspects.png'])\ndef test_aspects():\n    pass\n"
               "def test_plain():\n    pass\n")
    assert decorated_tests(mplot3d, "image_comparison") == {"test_aspects"}
    f = "lib/matplotlib/tests/test_x.py"
    (tmp_path / f).parent.mkdir(parents=True)
    (tmp_path / f).write_text(IMAGE_TESTS)
    ids = [f"{f}::test_drawn[png]", f"{f}::test_same[png]", f"{f}::TestK::test_in_class[pdf]", f"{f}::test_plain"]
    assert unmatched_tests("matplotlib/matplotlib", "docker", ids, lambda p: IMAGE_TESTS) == {}  # the harness's build
    assert unmatched_tests("psf/requests", "venv", ids, lambda p: IMAGE_TESTS) == {}
    assert set(unmatched_tests("matplotlib/matplotlib", "venv", ids, lambda p: IMAGE_TESTS)) == {ids[0], ids[2]}

    # the test patch's new image test (its baseline PNG is binary) is one too; a FAIL_TO_PASS left: runnable
    out = TestOutcome(runnable=True, reason="", fail_to_pass={f"{f}::test_new[png]": "PASSED", ids[1]: "PASSED"},
                      pass_to_pass_before={i: "PASSED" for i in ids if i != ids[1]},
                      pass_to_pass_after={ids[0]: "FAILED", ids[2]: "PASSED", ids[3]: "PASSED"})
    wt = SimpleNamespace(path=tmp_path)
    _set_aside_unmatched(out, "matplotlib/matplotlib", "venv", wt, NEW_IMAGE_TEST)  # type: ignore[arg-type]
    assert out.runnable and out.fail_to_pass == {ids[1]: "PASSED"}
    assert out.pass_to_pass_after == {ids[3]: "PASSED"} and out.pass_to_pass_before == {ids[3]: "PASSED"}
    assert set(out.not_runnable_here) == {f"{f}::test_new[png]", ids[0], ids[2]}
    assert "3 tests not runnable here" in out.notes[0] and "FreeType" in out.notes[0]
    only_images = TestOutcome(runnable=True, reason="", fail_to_pass={f"{f}::test_new[png]": "FAILED"})
    _set_aside_unmatched(only_images, "matplotlib/matplotlib", "venv", wt, NEW_IMAGE_TEST)  # type: ignore[arg-type]
    assert not only_images.runnable and only_images.reason.startswith("every FAIL_TO_PASS test is not runnable here")

    # Given the run without the patch, an image comparison that passes there matches this build: it
    # stays, and its failing with the patch is a break; one that fails there too is set aside.
    from scoring.execution.testenv import SuiteRun
    base = SuiteRun({ids[0]: "PASSED", ids[2]: "FAILED", ids[3]: "PASSED", f"{f}::test_new[png]": "FAILED"},
                    "log", 1.0)
    diff = TestOutcome(runnable=True, reason="", fail_to_pass={f"{f}::test_new[png]": "PASSED", ids[1]: "PASSED"},
                       pass_to_pass_before={i: base.statuses[i] for i in (ids[0], ids[2], ids[3])},
                       pass_to_pass_after={ids[0]: "FAILED", ids[2]: "PASSED", ids[3]: "PASSED"})
    _set_aside_unmatched(diff, "matplotlib/matplotlib", "venv", wt, NEW_IMAGE_TEST, base=base)  # type: ignore[arg-type]
    assert set(diff.not_runnable_here) == {f"{f}::test_new[png]", ids[2]}
    assert diff.pass_to_pass_after == {ids[0]: "FAILED", ids[3]: "PASSED"} and diff.broken() == [ids[0]]


def test_cython_output_is_reused_only_where_every_input_is_the_same(tmp_path: Path) -> None:
    import os

    from scoring.execution.compiled import reuse_generated

    def tree(root: Path, files: dict[str, str]) -> Path:
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        return root

    base = {"pkg/a.pyx": "A", "pkg/b.pyx": "B", "pkg/c.pxd": "C", "pkg/t.pyx.tp": "T",
            "pkg/_build_utils/__init__.py": "directives"}
    old = tree(tmp_path / "old", {**base, "pkg/a.c": "gen A", "pkg/b.cpp": "gen B", "pkg/t.pyx": "T'",
                                  "pkg/t.c": "gen T"})
    new = tree(tmp_path / "new", {**base, "pkg/b.pyx": "B changed"})
    assert reuse_generated(old, new) == 3  # a.c, t.pyx from its template, t.c; not b.cpp
    assert (new / "pkg/a.c").read_text() == "gen A" and not (new / "pkg/b.cpp").exists()
    assert os.path.getmtime(new / "pkg/a.c") > os.path.getmtime(new / "pkg/a.pyx")  # Cython skips it
    for changed in ({"pkg/c.pxd": "C2"}, {"pkg/_build_utils/__init__.py": "other directives"}):
        fresh = tree(tmp_path / f"n{len(str(changed))}", {**base, **changed})
        assert reuse_generated(old, fresh) == 0 and not (fresh / "pkg/a.c").exists()
    assert reuse_generated(tmp_path / "none", new) == 0


def test_a_machine_without_the_debian_libraries_says_which_to_install(monkeypatch) -> None:
    from scoring.execution import compiled

    assert compiled.missing_system_packages("psf/requests") == ""
    monkeypatch.setitem(compiled.SYSTEM_LIBRARIES, "x/y", [("no-such-module-fixgraph", "libnothing-dev")])
    if shutil.which("pkg-config"):
        assert compiled.missing_system_packages("x/y") == (
            "building offline needs Debian's libnothing-dev: apt-get install libnothing-dev")
    else:  # the tool that answers is missing too: both named
        assert compiled.missing_system_packages("x/y") == (
            "building offline needs Debian's pkg-config and libnothing-dev: apt-get install pkg-config libnothing-dev")


def test_build_requirements_go_into_the_venv_but_not_what_the_spec_pins(tmp_path: Path) -> None:
    from scoring.execution.compiled import build_requires

    (tmp_path / "pyproject.toml").write_text('[build-system]\nrequires = ["certifi>=2020.06.20", '
                                             '"oldest-supported-numpy", "pybind11>=2.6", "setuptools_scm>=7", '
                                             '"setuptools>=64", "wheel"]\n')
    assert build_requires(tmp_path) == ["certifi>=2020.06.20", "pybind11>=2.6", "setuptools_scm>=7"]
    assert build_requires(tmp_path / "none") == []


FAKE_DEPENDENCIES = '''\
import os
calls = []


def cythonize_one(pyx_file, c_file, fingerprint, quiet, options=None):
    calls.append(("one", os.path.basename(pyx_file), fingerprint))
    if not fingerprint:  # forced, or no cache: generated, not stored
        return
    stem = os.path.join(options["cache"], "%s-%s" % (os.path.basename(c_file), fingerprint))
    if not os.path.exists(stem + ".gz"):  # as Cython: generate, then store under the fingerprint
        open(stem + ".gz", "w").close()


def cythonize(modules, cache=None, force=False):
    calls.append(("cythonize", cache, force))
    for name, fingerprint in modules:
        cythonize_one(name + ".pyx", name + ".c", None if force or not cache else fingerprint, True, {"cache": cache})
    return calls
'''


def test_cython_s_cache_is_handed_to_the_build_s_cythonize_and_counted(tmp_path: Path) -> None:
    """The install's sitecustomize (scoring/execution/cython_cache.py) gives the repository's own
    cythonize() call the env's cache (Cython then looks each module up by its fingerprint of the
    .pyx and all it cimports), unless the call passed one or forces; hits and misses are logged.
    A stand-in for Cython.Build.Dependencies: the test env has no Cython."""
    import subprocess
    import sys

    from scoring.execution.compiled import compiled_build

    env_dir = tmp_path / "env"
    env_dir.mkdir()
    build = compiled_build("scikit-learn/scikit-learn", "0.21", env_dir)
    env = {k: v for k, v in build.env.items() if k.startswith(("PYTHON", "FIXGRAPH_CYTHON"))}
    assert (Path(env["PYTHONPATH"]) / "sitecustomize.py").is_file()
    assert "FIXGRAPH_CYTHON_CACHE" not in compiled_build("matplotlib/matplotlib", "3.5", tmp_path / "mpl").env
    fake = tmp_path / "fake" / "Cython" / "Build"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")
    (fake / "__init__.py").write_text("from .Dependencies import cythonize\n")
    (fake / "Dependencies.py").write_text(FAKE_DEPENDENCIES)
    cache = Path(env["FIXGRAPH_CYTHON_CACHE"])
    cache.mkdir()
    script = ("import sys; from Cython.Build import cythonize; "
              "print(cythonize([('a', 'f1'), ('b', 'f2')], force=len(sys.argv) > 1)[0])")
    run_env = {"PATH": "/usr/bin:/bin", **env, "PYTHONPATH": f"{env['PYTHONPATH']}:{tmp_path / 'fake'}"}

    def run(*extra: str) -> str:
        done = subprocess.run([sys.executable, "-c", script, *extra], env=run_env, capture_output=True, text=True,
                              check=True)
        return done.stdout.strip()

    assert run() == f"('cythonize', '{cache}', False)"  # the env's cache, where the caller gave none
    assert run() == f"('cythonize', '{cache}', False)"
    assert (env_dir / "cython.statslog").read_text().split() == ["miss", "miss", "hit", "hit"]
    assert run("force") == "('cythonize', None, True)"  # a forced build regenerates: no cache
    assert (env_dir / "cython.statslog").read_text().split()[4:] == ["miss", "miss"]
    # The hook lives in the env's folder, where an install step can write: each build rewrites it.
    (Path(env["PYTHONPATH"]) / "sitecustomize.py").write_text("raise SystemExit('planted')\n")
    compiled_build("scikit-learn/scikit-learn", "0.21", env_dir)
    assert run() == f"('cythonize', '{cache}', False)"


_MPL_LACKS = missing_system_packages("matplotlib/matplotlib")


@pytest.mark.skipif(bool(_MPL_LACKS), reason=f"{_MPL_LACKS} ({_NO_ROOT})")
def test_this_machine_has_what_matplotlib_s_offline_build_needs() -> None:
    assert missing_system_packages("matplotlib/matplotlib") == ""
