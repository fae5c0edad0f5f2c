"""Port reuse: a stopped fake's keep-alive connection must not answer for the next one."""
import pytest

from eval.fakes.llm_server import FakeLLMServer
from fixgraph.models.transport import deadline_client

pytestmark = pytest.mark.slow


def test_a_stopped_fake_leaves_no_connection_that_answers_for_the_next(tmp_path):
    client = deadline_client(30.0)
    first = FakeLLMServer(lambda tool, body: {})
    port = first.httpd.server_address[1]
    with first:
        assert client.get(f"{first.base_url}/models").status_code == 200
    second = FakeLLMServer(lambda tool, body: {}, port=port)
    with second:
        assert client.get(f"{second.base_url}/models").status_code == 200
    assert len(second.requests) == 1
