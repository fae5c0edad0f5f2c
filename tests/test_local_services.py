"""A service a repository's tests call over the network, served on the run's own loopback: real
httpbin in a real tool venv, a real sandbox with no network, real pytest."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from eval.hidden import run_hidden
from fixgraph.sandbox.process import netns_prefix
from scoring.execution import envs, services
from scoring.execution.runner import make_runner
from tests.testrun_helpers import CALC, REPO, apply_to, calc_instance, diff_for, local_settings

FIXED = CALC.replace("return a - b", "return a + b")
F2P = "tests/test_calc.py::test_add"

# As requests' own tests: the service's address from HTTPBIN_URL, httpbin.org when it is unset.
HTTPBIN_TEST = '''

def test_httpbin_get():
    import json, os, urllib.request
    base = os.environ.get("HTTPBIN_URL", "http://httpbin.org/")
    with urllib.request.urlopen(base.rstrip("/") + "/get?x=1", timeout=30) as resp:
        assert resp.status == 200
        assert json.load(resp)["args"] == {"x": "1"}


def test_httpbin_as_httpbin_org_answered():
    # keep-alive, and a chunked body taken (httpbin refuses one on any server but gunicorn)
    import http.client, json, os, urllib.parse
    url = urllib.parse.urlparse(os.environ["HTTPBIN_URL"])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("POST", "/post", body=iter([b"foo", b"bar"]), encode_chunked=True,
                 headers={"Content-Type": "application/octet-stream"})
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("Connection")) == (200, "keep-alive")
    assert json.loads(resp.read())["data"] == "foobar"
    conn.request("GET", "/get", headers={"Connection": "close"})  # the same connection
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("Connection")) == (200, "close")
'''


@pytest.mark.skipif(netns_prefix() is None, reason="no network namespaces on this kernel")
def test_a_test_that_reads_httpbin_url_gets_httpbin_in_the_sandbox(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(envs.LOCAL_SERVICES, REPO, envs.HTTPBIN)
    served = ["tests/test_calc.py::test_httpbin_get", "tests/test_calc.py::test_httpbin_as_httpbin_org_answered"]
    inst, wt, _ = calc_instance(tmp_path, extra_tests=HTTPBIN_TEST, f2p=[F2P, *served])
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    runner = make_runner(local_settings(timeout_s=120.0), tmp_path / "cache")
    out = run_hidden(runner, inst, wt, patch)
    assert out.runnable, out.reason
    assert out.network_isolated  # no network: only the run's own loopback, where httpbin was
    assert [out.fail_to_pass[t] for t in served] == ["PASSED", "PASSED"], out.log_tail
    # built once, recorded, and named by what it holds
    (tool,) = (tmp_path / "cache" / services.TOOLS_DIR).glob("httpbin-*/tool.json")
    meta = json.loads(tool.read_text())
    assert meta["ok"] and any(p.startswith("httpbin==0.10.4") for p in meta["freeze"])
    assert runner.env_key(inst.task(), wt).endswith("+" + tool.parent.name)


def test_a_repository_whose_tests_do_not_read_the_variable_gets_no_service(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    assert services.wanted("psf/requests", tmp_path) is None
    (tmp_path / "test_requests.py").write_text("import os\nHTTPBIN = os.environ.get('HTTPBIN_URL')\n")
    assert services.wanted("psf/requests", tmp_path) == envs.HTTPBIN
    assert services.wanted("pallets/flask", tmp_path) is None  # declared for requests only


def test_the_variable_is_never_looked_for_through_a_link(tmp_path: Path) -> None:
    # The copy is the repository's: a link may point anywhere on the machine fixgraph reads as root.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "conftest.py").write_text("HTTPBIN_URL\n")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(outside, work / "tests")
    os.symlink(outside / "conftest.py", work / "conftest.py")
    assert not services.reads(work, "HTTPBIN_URL")
