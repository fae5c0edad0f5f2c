"""Interpreter resolution, with uv provisioning from a loopback mirror: a real uv, a real archive in
the layout uv unpacks (python/bin/pythonX.Y, lib/pythonX.Y with a _sysconfigdata_ file), whose
python execs this test's interpreter, so what uv installs really runs (test_provisioned_env.py serves
real interpreters and builds an env with one)."""
from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from eval.fakes.python_mirror import Archive, PythonMirror
from fixgraph.config import TestSettings
from fixgraph.dataset import Task
from scoring.execution import interpreters
from scoring.execution.envs import VenvEnvs
from scoring.execution.interpreters import resolve
from scoring.execution.readiness import check_env

XY = f"{sys.version_info[0]}.{sys.version_info[1]}"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(interpreters.uv_binary() is None, reason="uv is not installed: pip install uv")]


def _archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        def add(name: str, text: str, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            data = text.encode()
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        add(f"python/bin/python{XY}", f'#!/bin/sh\nexec "{sys.executable}" "$@"\n', 0o755)
        add(f"python/lib/python{XY}/_sysconfigdata__linux_x86_64-linux-gnu.py",
            "# system configuration generated and used by the sysconfig module\nbuild_time_vars = {}\n")
    return buf.getvalue()


def _shim(folder: Path) -> Archive:
    body = _archive()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"cpython-{XY}.99.tar.gz"
    path.write_bytes(body)
    return Archive(path, (sys.version_info[0], sys.version_info[1], 99), hashlib.sha256(body).hexdigest())


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PythonMirror]:
    m = PythonMirror([_shim(tmp_path / "archives")])
    # A machine without this minor: only what fixgraph installs into its cache counts.
    monkeypatch.setattr(interpreters, "system_pythons", lambda: {})
    monkeypatch.setattr(interpreters, "_failed", {})
    monkeypatch.setattr(interpreters, "_offered", {})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("UV_PYTHON_INSTALL_MIRROR", raising=False)
    yield m
    m.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the archive is a linux-x86_64 build")
def test_provisioned_from_a_mirror_runs_and_is_found_next_time(mirror: PythonMirror, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(mirror.downloads_json(tmp_path / "dl.json")))
    cache = tmp_path / "cache"
    got = resolve(XY, cache_dir=cache, repo="django/django", version="4.2")
    assert got.how == "provisioned" and got.python == XY and got.path
    assert Path(got.path).is_relative_to(cache / interpreters.PYTHONS_DIR)
    out = subprocess.run([got.path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == str(sys.version_info[:2])
    again = resolve(XY, cache_dir=cache)
    assert again.how == "found" and again.path == got.path and len(mirror.asked) == 1
    assert not (tmp_path / "home" / ".local" / "bin").exists()  # --no-bin: nothing outside the cache


@pytest.mark.parametrize("fault", ["bad hash", "cut", "absent"])
def test_a_failed_download_leaves_nothing_and_says_why(mirror: PythonMirror, tmp_path: Path, fault: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    mirror.mode = {"cut": "cut", "absent": "absent"}.get(fault, "whole")
    dl = mirror.downloads_json(tmp_path / "dl.json", sha256="0" * 64 if fault == "bad hash" else None)
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(dl))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    cache = tmp_path / "cache"
    got = resolve(XY, cache_dir=cache, repo="django/django", version="3.0")
    assert got.how == "missing" and got.path is None and "\n" not in got.reason
    assert got.reason.startswith(f"needs Python {XY} for django 3.0: `uv python install {XY}`")
    if fault == "bad hash":
        assert "hash mismatch" in got.reason.lower()
    assert interpreters.managed_pythons(cache) == {}
    assert not list((cache / interpreters.PYTHONS_DIR).glob("cpython-*"))
    # the failure is remembered: the next task of the repository does not wait on it again
    asked = len(mirror.asked)
    assert resolve(XY, cache_dir=cache).how == "missing" and len(mirror.asked) == asked


def test_the_install_mirror_setting_is_honoured(mirror: PythonMirror, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # uv's own list of downloads, its host replaced by the organisation's mirror
    monkeypatch.delenv("UV_PYTHON_DOWNLOADS_JSON_URL", raising=False)
    monkeypatch.setenv("UV_PYTHON_INSTALL_MIRROR", mirror.url)
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    mirror.mode = "absent"
    got = resolve("3.12", cache_dir=tmp_path / "cache")
    assert got.how == "missing" and mirror.asked and mirror.asked[0].endswith(".tar.gz")


def test_substitute_only_where_measured(mirror: PythonMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interpreters, "system_pythons", lambda: {(3, 11): "/p/python3.11"})
    monkeypatch.setattr(interpreters, "SAFE_SUBSTITUTES", {("psf/requests", "2.4"): {"3.9": ("3.11",)}})
    # the build asks uv for the spec's minor before taking a substitute, and the check says so
    first = resolve("3.9", cache_dir=tmp_path, provision=False, repo="psf/requests", version="2.4")
    assert first.how == "missing" and first.provisionable and first.python == "3.9"
    other = resolve("3.9", cache_dir=tmp_path, provision=False, repo="django/django", version="4.2")
    assert other.how == "missing" and other.path is None and other.provisionable
    assert other.reason == "needs Python 3.9 for django 4.2: `uv python install 3.9` or `pyenv install 3.9`"
    # an organisation's list without 3.9: the substitute already on the machine
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(mirror.downloads_json(tmp_path / "dl.json")))
    got = resolve("3.9", cache_dir=tmp_path, provision=False, repo="psf/requests", version="2.4")
    assert got == interpreters.Resolution("/p/python3.11", "3.11", "substitute", got.reason)
    assert "measured safe" in got.reason
    assert resolve("3.11", cache_dir=tmp_path, provision=False).how == "found"
    assert resolve("", cache_dir=tmp_path, provision=False).how == "missing"


def test_a_minor_uv_does_not_offer_is_missing_without_a_download(mirror: PythonMirror, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's list starts at 3.8: the check must not promise 3.6 from uv, nor a build wait on it."""
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(mirror.downloads_json(tmp_path / "dl.json")))
    other = "3.6" if XY != "3.6" else "3.7"
    monkeypatch.setattr(interpreters, "SAFE_SUBSTITUTES", {})
    check = resolve(other, cache_dir=tmp_path / "cache", provision=False, repo="django/django", version="3.0")
    assert check.how == "missing" and not check.provisionable
    assert check.reason == f"needs Python {other} for django 3.0: `pyenv install {other}` (uv offers no Python {other} build)"
    built = resolve(other, cache_dir=tmp_path / "cache", repo="django/django", version="3.0")
    assert built.how == "missing" and built.reason == check.reason and not mirror.asked
    assert resolve(XY, cache_dir=tmp_path / "cache", provision=False).provisionable  # the list has this one


def _spec_uv_lacks() -> str:
    return "3.6" if XY != "3.6" else "3.7"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the archive is a linux-x86_64 build")
def test_a_safe_substitute_uv_offers_is_installed_when_the_spec_minor_cannot_be(
        mirror: PythonMirror, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's machine has no 3.6 and uv offers none: the measured-safe substitute is installed
    into the cache, said by --check beforehand, and recorded as a substitute."""
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(mirror.downloads_json(tmp_path / "dl.json")))
    spec = _spec_uv_lacks()
    monkeypatch.setattr(interpreters, "SAFE_SUBSTITUTES", {("django/django", "3.0"): {spec: ("3.7", XY)}})
    cache = tmp_path / "cache"
    check = resolve(spec, cache_dir=cache, provision=False, repo="django/django", version="3.0")
    assert (check.how, check.python, check.path, check.provisionable) == ("substitute", XY, None, True)
    assert check.reason == (f"Python {XY} for {spec} (measured safe for django/django 3.0), which uv will "
                            "install into the cache")
    task = Task(repo="django/django", instance_id="django__django-1", base_commit="0" * 40, problem_statement="x",
                version="3.0")
    settings = TestSettings()
    envs = VenvEnvs(cache / "envs", cache, settings, specs=lambda repo, version: {"python": spec})
    row = check_env(task, cache, settings, envs)
    assert (row.python, row.state, row.reason) == (XY, "to build", check.reason)
    assert not mirror.asked  # the check downloads nothing
    got = resolve(spec, cache_dir=cache, repo="django/django", version="3.0")
    assert (got.how, got.python) == ("substitute", XY) and got.path
    assert Path(got.path).is_relative_to(cache / interpreters.PYTHONS_DIR)
    assert got.reason.startswith(f"Python {XY} for {spec} (measured safe for django/django 3.0; installed by uv")
    out = subprocess.run([got.path, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == str(sys.version_info[:2])
    again = resolve(spec, cache_dir=cache, repo="django/django", version="3.0")
    assert (again.how, again.path) == ("substitute", got.path) and len(mirror.asked) == 1
    # a pair not measured safe gets no substitute, installed or not
    other = resolve(spec, cache_dir=tmp_path / "other", repo="django/django", version="3.1")
    assert other.how == "missing" and other.path is None


@pytest.mark.parametrize("fault", ["bad hash", "cut"])
def test_a_failed_substitute_download_leaves_nothing_and_says_why(mirror: PythonMirror, tmp_path: Path, fault: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    mirror.mode = "cut" if fault == "cut" else "whole"
    dl = mirror.downloads_json(tmp_path / "dl.json", sha256="0" * 64 if fault == "bad hash" else None)
    monkeypatch.setenv("UV_PYTHON_DOWNLOADS_JSON_URL", str(dl))
    monkeypatch.setenv("UV_HTTP_RETRIES", "0")
    spec = _spec_uv_lacks()
    monkeypatch.setattr(interpreters, "SAFE_SUBSTITUTES", {("django/django", "3.0"): {spec: (XY,)}})
    cache = tmp_path / "cache"
    got = resolve(spec, cache_dir=cache, repo="django/django", version="3.0")
    assert got.how == "missing" and got.path is None and "\n" not in got.reason
    assert got.reason.startswith(f"needs Python {spec} for django 3.0: `pyenv install {spec}` (uv offers no "
                                 f"Python {spec} build), or Python {XY} (measured safe for django/django 3.0) (uv: {XY}: ")
    if fault == "bad hash":
        assert "hash mismatch" in got.reason.lower()
    assert interpreters.managed_pythons(cache) == {}
    assert not list((cache / interpreters.PYTHONS_DIR).glob("cpython-*"))
    # remembered: the check no longer promises it, and the next task does not download again
    asked = len(mirror.asked)
    assert not resolve(spec, cache_dir=cache, provision=False, repo="django/django", version="3.0").provisionable
    assert resolve(spec, cache_dir=cache, repo="django/django", version="3.0").how == "missing"
    assert len(mirror.asked) == asked
