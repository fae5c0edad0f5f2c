"""A loopback stand-in for the dataset hub: the two calls fixgraph.hub makes (a dataset's info at a
revision, and a file at a commit), over a repository whose commits the test writes."""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

SPLIT = "data/test-00000-of-00001.parquet"


def parquet(rows: list[dict[str, str]]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buf)
    return buf.getvalue()


@dataclass
class FakeHub:
    dataset: str
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> path -> content
    refs: dict[str, str] = field(default_factory=dict)  # branch -> commit
    requests: list[str] = field(default_factory=list)
    url: str = ""

    def commit(self, rows: list[dict[str, str]], branch: str = "main") -> str:
        sha = hashlib.sha1(json.dumps(rows, sort_keys=True).encode()).hexdigest()
        self.commits[sha] = {SPLIT: parquet(rows), "README.md": b"# fake\n"}
        self.refs[branch] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        return revision if revision in self.commits else self.refs.get(revision)


def _handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    info_prefix = f"/api/datasets/{hub.dataset}/revision/"
    file_prefix = f"/datasets/{hub.dataset}/resolve/"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str], head: bool = False) -> None:
            self.send_response(status)
            for k, v in {"Content-Length": str(len(body)), **headers}.items():
                self.send_header(k, v)
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _serve(self, head: bool) -> None:
            path = unquote(self.path.split("?")[0])
            hub.requests.append(f"{self.command} {path}")
            if path.startswith(info_prefix):
                sha = hub.resolve(path[len(info_prefix):])
                if sha is None:
                    return self._send(404, b'{"error":"Revision Not Found"}', {"X-Error-Code": "RevisionNotFound"}, head)
                body = json.dumps({"id": hub.dataset, "sha": sha, "private": False,
                                   "siblings": [{"rfilename": p} for p in hub.commits[sha]]}).encode()
                return self._send(200, body, {"Content-Type": "application/json"}, head)
            if path.startswith(file_prefix):
                revision, _, name = path[len(file_prefix):].partition("/")
                sha = hub.resolve(revision)
                content = hub.commits.get(sha or "", {}).get(name)
                if sha is None or content is None:
                    return self._send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
                etag = hashlib.sha256(content).hexdigest()
                return self._send(200, content, {"X-Repo-Commit": sha, "ETag": f'"{etag}"'}, head)
            return self._send(404, b"", {}, head)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self._serve(head=False)

        def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
            self._serve(head=True)

    return Handler


@contextmanager
def serve_hub(hub: FakeHub) -> Iterator[FakeHub]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(hub))
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
