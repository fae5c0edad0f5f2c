"""Task sets from the dataset hub, against a loopback stand-in: which commit is read, what is cached,
what a run says when the commit is not the pinned one."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixgraph import dataset
from fixgraph.dataset import DatasetError, hub_spec, load_dataset_any
from fixgraph.hub import HubError, cached, prepare_hub
from tests.helpers.hub_server import FakeHub, serve_hub

VERIFIED = "SWE-bench/SWE-bench_Verified"


def row(p2p: list[str]) -> dict[str, str]:
    return {"instance_id": "astropy__astropy-7606", "repo": "astropy/astropy", "base_commit": "a" * 40,
            "problem_statement": "p", "version": "1.3", "patch": "", "test_patch": "",
            "FAIL_TO_PASS": json.dumps(["t::f"]), "PASS_TO_PASS": json.dumps(p2p), "difficulty": "<15 min fix"}


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeHub, str, str]]:
    fake = FakeHub(VERIFIED)
    before = fake.commit([row(["t::a", "t::gone"])])
    after = fake.commit([row(["t::a"])])  # the edit moves main
    with serve_hub(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
        yield fake, before, after


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_pinned_commit_is_read_and_nothing_is_said(hub: tuple[FakeHub, str, str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    _, before, _ = hub
    monkeypatch.setitem(dataset.HUB_REVISIONS, "verified", before)
    [inst] = load_dataset_any("verified", tmp_path)
    assert inst.PASS_TO_PASS == ["t::a", "t::gone"]  # main has moved on; the pin has not
    assert inst.dataset == f"{VERIFIED}@{before}"  # what the run's records say it read
    assert capsys.readouterr().err == ""


def test_unpinned_reads_main_and_names_the_commit(hub: tuple[FakeHub, str, str], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _, _, after = hub
    [inst] = load_dataset_any("verified", tmp_path)
    assert inst.PASS_TO_PASS == ["t::a"] and inst.dataset == f"{VERIFIED}@{after}"
    assert capsys.readouterr().err.strip() == f"note: read {VERIFIED} at revision {after} (no revision is pinned for it)"


def test_another_revision_than_the_pin_is_read_when_asked_and_said(
        hub: tuple[FakeHub, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    _, before, after = hub
    monkeypatch.setitem(dataset.HUB_REVISIONS, "verified", after)
    [inst] = load_dataset_any(f"verified@{before}", tmp_path)
    assert inst.PASS_TO_PASS == ["t::a", "t::gone"] and inst.dataset == f"{VERIFIED}@{before}"
    assert f"at revision {before} (not the pinned {after})" in capsys.readouterr().err


def test_a_cached_pinned_commit_is_read_without_the_hub(hub: tuple[FakeHub, str, str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, before, _ = hub
    monkeypatch.setitem(dataset.HUB_REVISIONS, "verified", before)
    load_dataset_any("verified", tmp_path)
    asked = len(fake.requests)
    [inst] = load_dataset_any("verified", tmp_path)
    assert len(fake.requests) == asked  # a commit never changes: no question to the hub
    assert inst.PASS_TO_PASS == ["t::a", "t::gone"]


def test_offline_the_cached_main_is_read(hub: tuple[FakeHub, str, str], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, after = hub
    load_dataset_any("verified", tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    assert cached(tmp_path, VERIFIED) and not cached(tmp_path, dataset.HUB_DATASETS["lite"])
    prepare_hub(tmp_path, VERIFIED)
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    capsys.readouterr()
    [inst] = load_dataset_any("verified", tmp_path)
    assert inst.PASS_TO_PASS == ["t::a"]
    assert after in capsys.readouterr().err


def test_offline_a_revision_not_cached_is_one_line(hub: tuple[FakeHub, str, str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _, before, _ = hub
    load_dataset_any("verified", tmp_path)  # main cached, the older commit not
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(HubError, match=f"{VERIFIED} at revision {before} is not cached"):
        prepare_hub(tmp_path, VERIFIED, revision=before)


def test_an_unknown_revision_on_the_hub_is_one_line(hub: tuple[FakeHub, str, str], tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="could not load SWE-bench/SWE-bench_Verified at revision nope"):
        load_dataset_any("verified@nope", tmp_path)


def test_names_revisions_and_paths() -> None:
    assert hub_spec("verified@abc") == (VERIFIED, "abc", dataset.HUB_REVISIONS["verified"])
    assert hub_spec(None) == (dataset.HUB_DATASETS["lite"], dataset.HUB_REVISIONS["lite"], dataset.HUB_REVISIONS["lite"])
    assert hub_spec("rows@2026.jsonl") is None
    with pytest.raises(DatasetError, match="no revision after '@'"):
        hub_spec("verified@")
