"""Issue 35's findings, one test each: every one failed on the commit before the fix."""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import pytest

from eval.attacks import install


def test_artifacts_are_never_copied_through_a_symlink(tmp_path: Path) -> None:
    for attack in (install._overlay_abs_dir, install._overlay_rel_dir, install._overlay_dangling,
                   install._overlay_chain, install._overlay_source_link, install._all_links):
        case = tmp_path / attack.__name__
        case.mkdir()
        assert attack(case) == "", attack.__name__


def test_the_artifact_list_and_tox_and_requirements_follow_no_link(tmp_path: Path) -> None:
    for attack in (install._artifact_list_link, install._tox_link, install._requirements_link,
                   install._requirements_include):
        case = tmp_path / attack.__name__
        case.mkdir()
        assert attack(case) == "", attack.__name__


def test_a_refused_artifact_is_noted_and_the_rest_copied(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    notes, work = install._overlay_case(tmp_path, {"pkg/data": str(outside)},
                                        {"pkg/data/x.pth": "import os\n", "pkg/_version.py": "V = 1\n"})
    assert (work / "pkg" / "_version.py").read_text() == "V = 1\n"
    assert len(notes) == 1 and "pkg/data/x.pth" in notes[0] and "symlink" in notes[0]
    assert not (outside / "x.pth").exists()


@pytest.mark.slow
def test_the_install_artifact_escape_end_to_end(tmp_path: Path) -> None:
    assert install._artifact_through_link(tmp_path) == ""


def test_env_listing_flags_what_no_install_may_leave() -> None:
    from scoring.execution.envcheck import changed, planted

    build = {"lib/python3.11/site-packages/distutils-precedence.pth": "f:aa:code",
             "lib/python3.11/site-packages/pip": "d"}
    now = {**build, "lib/python3.11/site-packages/sitecustomize.py": "f:bb",
           "lib/python3.11/site-packages/__editable__.calc-0.1.pth": "f:cc",
           "lib/python3.11/site-packages/evil.pth": "f:dd:code",
           "lib/python3.11/site-packages/calc": "d"}
    assert planted(build, now) == ["lib/python3.11/site-packages/evil.pth",
                                   "lib/python3.11/site-packages/sitecustomize.py"]
    assert changed(now, {**now, "lib/python3.11/site-packages/usercustomize.py": "f:ee"}) == [
        "lib/python3.11/site-packages/usercustomize.py"]


def test_an_editable_finder_pth_is_no_plant(tmp_path: Path) -> None:
    from scoring.execution.envcheck import listing, planted

    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "__editable__.calc-0.1.pth").write_text(
        "import __editable___calc_0_1_finder; __editable___calc_0_1_finder.install()\n")
    (site / "paths.pth").write_text("/some/where\n")
    assert planted({}, listing(tmp_path / "venv")) == []
    (site / "paths.pth").write_text("/some/where\nimport os; os.system('id')\n")
    assert planted({}, listing(tmp_path / "venv")) == ["lib/python3.11/site-packages/paths.pth"]


NSPKG = ("import sys, types, os;has_mfs = sys.version_info > (3, 5);p = os.path.join({root}, *('mpl_toolkits',));"
         "importlib = has_mfs and __import__('importlib.util');has_mfs and __import__('importlib.machinery');"
         "m = has_mfs and sys.modules.setdefault('mpl_toolkits', importlib.util.module_from_spec("
         "importlib.machinery.PathFinder.find_spec('mpl_toolkits', [os.path.dirname(p)])));"
         "m = m or sys.modules.setdefault('mpl_toolkits', types.ModuleType('mpl_toolkits'));"
         "mp = (m or []) and m.__dict__.setdefault('__path__',[]);(p not in mp) and mp.append(p)\n")


def test_setuptools_namespace_pth_rooted_in_the_env_is_no_plant(tmp_path: Path) -> None:
    """matplotlib before 3.7 installs matplotlib-nspkg.pth for mpl_toolkits (setuptools' fixed
    template): allowed when its root is the site dir or inside the env's folder; any other root,
    or one more statement, is a plant."""
    from scoring.execution.envcheck import listing, planted

    site = tmp_path / "venv" / "lib" / "python3.8" / "site-packages"
    site.mkdir(parents=True)
    pth = site / "matplotlib-nspkg.pth"
    # setuptools 60 and later write it without the has_mfs guard.
    newer = NSPKG.replace("has_mfs = sys.version_info > (3, 5);", "").replace("has_mfs and ", "")
    for template in (NSPKG, newer):
        for root in ("sys._getframe(1).f_locals['sitedir']", repr(str(tmp_path / "src" / "lib"))):
            pth.write_text(template.format(root=root))
            assert planted({}, listing(tmp_path / "venv")) == [], root
    for bad in (NSPKG.format(root=repr("/tmp/elsewhere/lib")),
                NSPKG.format(root=repr(str(tmp_path / "src" / ".." / ".." / "x"))),
                NSPKG.format(root="sys._getframe(1).f_locals['sitedir']").rstrip() + ";import os\n"):
        pth.write_text(bad)
        assert planted({}, listing(tmp_path / "venv")) == ["lib/python3.8/site-packages/matplotlib-nspkg.pth"], bad


@pytest.mark.slow
def test_an_install_step_cannot_plant_sitecustomize_in_the_shared_env(tmp_path: Path) -> None:
    assert install._sitecustomize(tmp_path / "a") == ""
    assert install._pth(tmp_path / "b") == ""
    assert install._deletes_env(tmp_path / "c") == ""


@pytest.mark.slow
@pytest.mark.xdist_group("ray")  # with tests/pipeline/test_ray.py: one local Ray at a time (see there)
def test_a_local_ray_binds_loopback_and_its_workers_hold_no_driver_secret(tmp_path: Path) -> None:
    from eval.attacks import cluster

    assert cluster._ray_binds(tmp_path) == ""
    assert cluster._ray_node_address(tmp_path) == ""
    assert cluster._ray_env(tmp_path) == ""
    assert cluster._ray_killed_worker(tmp_path) == ""


def test_ray_starts_with_no_secret_in_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from pipeline.executors import _without_secrets

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdef")
    monkeypatch.setenv("ACME_DEPLOY_TOKEN", "t0ken-0123456789")
    monkeypatch.setenv("LANG", "C.UTF-8")
    with _without_secrets():
        assert "OPENAI_API_KEY" not in os.environ and "ACME_DEPLOY_TOKEN" not in os.environ
        assert os.environ["LANG"] == "C.UTF-8"
    assert os.environ["OPENAI_API_KEY"] == "sk-test-0123456789abcdef"


@pytest.mark.slow
def test_the_reproducers_data_files_are_never_configuration(tmp_path: Path) -> None:
    from eval.attacks import ATTACKS, repro  # noqa: F401 - registers the attacks

    for a in [a for a in ATTACKS if a.cls == "repro-files"]:
        case = tmp_path / str(abs(hash(a.name)))
        case.mkdir()
        assert a.run(case) == "", a.name


@pytest.mark.parametrize("name", ["rename-to-tmp", "operator-attrgetter", "operator-methodcaller", "sys-modules-lookup",
                                  "dict-get-lookup", "getattribute-lookup", "builtins-getattr", "path-rename-to-tmp",
                                  "unverified-context"])
def test_the_guard_sees_issue_35s_bypasses(tmp_path: Path, name: str) -> None:
    from eval.attacks.patch_guard import _guard_attack
    from eval.fixtures.guard_cases import BYPASSES

    assert _guard_attack(name, *BYPASSES[name])(tmp_path) == ""


@pytest.mark.slow
@pytest.mark.parametrize("name", ["predictions_dir under /proc", "graph.py --workers abc", "graph.py --frobnicate"])
def test_bad_command_lines_get_one_line_and_exit_2(tmp_path: Path, name: str) -> None:
    from eval.attacks import (
        ATTACKS,  # noqa: F401 - registers the attacks
        )

    (attack,) = [a for a in ATTACKS if a.name == name]
    assert attack.run(tmp_path) == ""


@pytest.mark.slow
def test_host_unix_sockets_in_world_writable_folders_are_hidden(tmp_path: Path) -> None:
    from eval.attacks import ATTACKS, sockets  # noqa: F401 - registers the attacks
    from fixgraph.sandbox.process import sandbox_mode

    if sandbox_mode() == "none":
        pytest.skip("no namespaces here")
    for a in [a for a in ATTACKS if a.cls == "unix-socket"]:
        # A short folder: a Unix socket's path has at most 107 bytes, and xdist's tmp_path is long.
        with tempfile.TemporaryDirectory(prefix="fg-", dir="/tmp") as short:
            assert a.run(Path(short)) == "", a.name


@pytest.mark.slow
def test_build_and_install_steps_reach_the_index_only(tmp_path: Path) -> None:
    from fixgraph.sandbox.process import sandbox_mode

    if sandbox_mode() == "none":
        pytest.skip("no namespaces here")
    assert install._install_loopback(tmp_path / "a") == ""
    assert install._install_outside(tmp_path / "b") == ""
    assert install._install_via_proxy(tmp_path / "c") == ""
    assert install._build_fetches_loopback(tmp_path / "d") == ""


def _ask(proxy_path: Path, request: bytes) -> bytes:
    import socket

    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(str(proxy_path))
        s.sendall(request)
        answer = s.recv(200)
        if b" 200 " in answer:
            s.sendall(b"ping")
            answer += s.recv(200)
        return answer


def test_the_index_proxy_tunnels_to_the_index_and_nothing_else() -> None:
    import socket
    import threading

    from fixgraph.sandbox.indexproxy import REFUSED, serving

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        port = srv.getsockname()[1]

        def echo() -> None:
            with contextlib.suppress(OSError):
                conn, _ = srv.accept()
                with conn:
                    conn.sendall(conn.recv(100))

        threading.Thread(target=echo, daemon=True).start()
        with serving(trusted=frozenset()) as proxy:  # the public index only: loopback refused
            assert _ask(proxy.path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()) == REFUSED
            assert _ask(proxy.path, f"GET http://127.0.0.1:{port}/x HTTP/1.1\r\n\r\n".encode()) == REFUSED
            assert _ask(proxy.path, b"CONNECT pypi.org:22 HTTP/1.1\r\n\r\n") == REFUSED
            assert proxy.refused == [f"127.0.0.1:{port}", f"GET http://127.0.0.1:{port}/x HTTP/1.1", "pypi.org:22"]
        with serving(trusted=frozenset({("127.0.0.1", port)})) as proxy:  # an index the operator named
            assert _ask(proxy.path, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode()).endswith(b"\r\n\r\nping")
        assert not proxy.path.exists()


def test_the_operators_index_is_the_only_other_host(tmp_path: Path) -> None:
    from fixgraph.sandbox.indexproxy import operator_indexes

    env = {"PIP_INDEX_URL": "https://mirror.example:8443/simple", "PIP_EXTRA_INDEX_URL": "http://plain.example/simple"}
    assert ("mirror.example", 8443) in operator_indexes(env)
    assert all(host != "plain.example" for host, _ in operator_indexes(env))  # plain http: never tunnelled


def test_the_runs_folder_in_tmp_is_never_another_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from scoring.execution import testenv

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    testenv._private_run_root.cache_clear()
    mine = tmp_path / f"fixgraph-testruns-{os.geteuid()}"
    assert testenv.run_root(None) == mine.resolve() and not mine.stat().st_mode & 0o022
    mine.chmod(0o777)  # as if another user had made it first: anyone could swap a run's copy
    private = testenv.run_root(None)
    assert private != mine.resolve() and private.owner() == mine.owner() and private.stat().st_mode & 0o777 == 0o700
    assert testenv.run_root(None) == private  # one per process, not one per run
    mine.rmdir()
    mine.symlink_to(tmp_path)  # a link planted in its place
    assert testenv.run_root(None) == private
    testenv._private_run_root.cache_clear()


def test_the_index_proxy_holds_a_bounded_number_of_connections() -> None:
    import socket

    from fixgraph.sandbox.indexproxy import MAX_CONNECTIONS, REFUSED, serving

    with serving(trusted=frozenset()) as proxy:
        held = []
        for _ in range(MAX_CONNECTIONS):  # each sends half a request and waits: a thread each
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(proxy.path))
            s.sendall(b"CONNECT 127.0.0.1:9")
            held.append(s)
        extra = socket.socket(socket.AF_UNIX)
        extra.settimeout(10)
        extra.connect(str(proxy.path))
        assert extra.recv(100) == b""  # closed at once: no thread for it
        for s in held:
            s.sendall(b" HTTP/1.1\r\n\r\n")
            s.settimeout(10)
            assert s.recv(200) == REFUSED
            s.close()
        assert _ask(proxy.path, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\n\r\n") == REFUSED  # slots given back
