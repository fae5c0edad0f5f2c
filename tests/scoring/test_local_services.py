"""A service a repository's tests call over the network, served on the run's own loopback: real
httpbin in a real tool venv, a real sandbox with no network, real pytest."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from eval.hidden import run_hidden
from fixgraph.sandbox.process import netns_prefix
from scoring.execution import envs, services
from scoring.execution.runner import make_runner
from tests.helpers.testrun_helpers import CALC, REPO, apply_to, calc_instance, diff_for, local_settings

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
    conn.request("POST", "/post", body=b"x")  # no content type invented for a body that has none
    resp = conn.getresponse()
    assert "Content-Type" not in json.loads(resp.read())["headers"]
    conn.request("GET", "/get", headers={"Connection": "close"})  # the same connection
    resp = conn.getresponse()
    assert (resp.status, resp.getheader("Connection")) == (200, "close")


def test_httpbin_is_given_nothing_of_the_run():
    import os
    procs = [p for p in os.listdir("/proc") if p.isdigit()]
    servers = [p for p in procs if b"\\0-m\\0gunicorn\\0" in open(f"/proc/{p}/cmdline", "rb").read()]
    assert servers
    for pid in servers:
        names = {v.split(b"=")[0] for v in open(f"/proc/{pid}/environ", "rb").read().split(b"\\0") if v}
        assert names <= {b"PATH", b"HOME", b"TMPDIR", b"LANG", b"LC_ALL"}
'''


@pytest.mark.slow
@pytest.mark.skipif(netns_prefix() is None, reason="no network namespaces on this kernel")
def test_a_test_that_reads_httpbin_url_gets_httpbin_in_the_sandbox(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(envs.LOCAL_SERVICES, REPO, envs.HTTPBIN)
    served = [f"tests/test_calc.py::{t}" for t in ("test_httpbin_get", "test_httpbin_as_httpbin_org_answered",
                                                   "test_httpbin_is_given_nothing_of_the_run")]
    # gunicorn reads ./gunicorn.conf.py; the copy's is never its
    inst, wt, _ = calc_instance(tmp_path, extra_tests=HTTPBIN_TEST, f2p=[F2P, *served],
                                files={"gunicorn.conf.py": "raise SystemExit('the copy was read')\n"})
    patch = apply_to(wt, diff_for(tmp_path, "calc.py", CALC, FIXED))
    runner = make_runner(local_settings(timeout_s=120.0), tmp_path / "cache")
    out = run_hidden(runner, inst, wt, patch)
    assert out.runnable, out.reason
    assert out.network_isolated  # no network: only the run's own loopback, where httpbin was
    assert [out.fail_to_pass[t] for t in served] == ["PASSED"] * 3, out.log_tail
    # built once, recorded, and named by what it holds
    (tool,) = (tmp_path / "cache" / services.TOOLS_DIR).glob("httpbin-*/tool.json")
    meta = json.loads(tool.read_text())
    assert meta["ok"] and {"httpbin==0.10.4", *services.SERVER_PACKAGES} <= set(meta["freeze"])
    assert runner.env_key(inst.task(), wt).endswith("+" + tool.parent.name)
    # outside any sandbox too, the server does not outlive the tests
    python = services.ToolEnvs(tool.parent.parent, 600).venv(envs.HTTPBIN) / "bin" / "python"
    done = subprocess.run(services.wrapped(python, envs.HTTPBIN, [sys.executable, "-c",
                                                                  "import os; print(os.environ['HTTPBIN_URL'])"]),
                          capture_output=True, text=True, timeout=120)
    url = urllib.parse.urlparse(done.stdout.strip())
    assert (url.hostname, done.returncode) == ("127.0.0.1", 0), done.stderr
    deadline = time.monotonic() + 10
    with pytest.raises(ConnectionRefusedError):
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((url.hostname, url.port), timeout=5):
                    time.sleep(0.2)
            except ConnectionResetError:
                time.sleep(0.2)  # a server going down can still accept and then reset: not gone yet


@pytest.mark.slow
def test_a_service_that_does_not_start_leaves_the_variable_unset_and_the_tests_run(tmp_path: Path) -> None:
    # this interpreter has no such app (nor, maybe, gunicorn): the reason is said, the command runs
    done = subprocess.run([sys.executable, "-I", "-c", services.SERVE_SOURCE.read_text(), "SERVED_URL",
                           "no_such_module_here:app", "/get", "--", sys.executable, "-c",
                           "import os; print(os.environ.get('SERVED_URL'))"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "None\n")
    assert done.stderr.startswith("[fixgraph] no_such_module_here:app not served, SERVED_URL left unset: gunicorn exited")


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
