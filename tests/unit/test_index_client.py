"""The index reader behind the PEP 751 twin (kernodeck/lock/index_client.py): JSON and HTML pages, redirects, a
cache, local indexes and find-links."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from kernodeck.lock import index_client

SHA_A, SHA_B = "a" * 64, "b" * 64


class _Index(http.server.BaseHTTPRequestHandler):
    requests: ClassVar[list[str]] = []

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        type(self).requests.append(self.path)
        if self.path == "/simple/jsonpkg/":
            body = json.dumps({"meta": {"api-version": "1.0"}, "name": "jsonpkg", "files": [
                {"filename": "jsonpkg-1.0-py3-none-any.whl", "url": "../../files/jsonpkg-1.0-py3-none-any.whl",
                 "hashes": {"sha256": SHA_A}, "size": 10, "upload-time": "2026-01-02T03:04:05.123Z"}]}).encode()
            self._send(200, "application/vnd.pypi.simple.v1+json", body)
        elif self.path == "/simple/htmlpkg/":
            body = (b'<html><body><a href="/files/htmlpkg-2.0%2Blocal-py3-none-any.whl#sha256=' + SHA_B.encode()
                    + b'">htmlpkg</a><a href="/files/no-hash.whl">x</a></body></html>')
            self._send(200, "text/html", body)
        elif self.path == "/simple/moved/":
            self.send_response(301)
            self.send_header("Location", "/simple/jsonpkg/")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/simple/broken/":
            self._send(503, "text/plain", b"down")
        else:
            self._send(404, "text/plain", b"no")

    def _send(self, code: int, content_type: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    _Index.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def test_fetcher_reads_json_html_redirects_and_caches(index: str) -> None:
    fetcher = index_client.Fetcher()
    try:
        (entry,) = fetcher.index_files(index, "JSONPkg")
        assert entry.filename == "jsonpkg-1.0-py3-none-any.whl" and entry.sha256 == SHA_A and entry.size == 10
        assert entry.url == index.removesuffix("/simple") + "/files/jsonpkg-1.0-py3-none-any.whl"
        assert entry.upload_time is not None and entry.upload_time.year == 2026
        (html,) = fetcher.index_files(index, "htmlpkg")
        assert html.filename == "htmlpkg-2.0+local-py3-none-any.whl" and html.sha256 == SHA_B
        assert fetcher.index_files(index, "moved")[0].sha256 == SHA_A
        assert fetcher.index_files(index, "absent") == []
        fetcher.index_files(index, "jsonpkg")
        assert _Index.requests.count("/simple/jsonpkg/") == 2  # once itself, once through the redirect
        with pytest.raises(OSError, match="HTTP 503"):
            fetcher.index_files(index, "broken")
        with pytest.raises(OSError):  # an index that failed is not asked again
            fetcher.index_files(index, "jsonpkg-other")
        assert "/simple/jsonpkg-other/" not in _Index.requests
    finally:
        fetcher.close()


def test_unreachable_index_is_an_oserror_at_once() -> None:
    with pytest.raises(OSError, match=r"127\.0\.0\.1:9"):
        index_client.index_files("http://127.0.0.1:9/simple", "x")


def test_local_simple_index_and_find_links(tmp_path: Path) -> None:
    page = tmp_path / "index" / "demo"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<a href="../../files/demo-1.0.tar.gz#sha256={SHA_A}">demo</a>')
    links = tmp_path / "links"
    links.mkdir()
    (links / "demo-1.0-py3-none-any.whl").write_bytes(b"not really a wheel")
    (links / "demo-1.1-py3-none-any.whl").write_bytes(b"another version")
    found = index_client.local_files([(tmp_path / "index").as_uri(), str(links)], "demo", "1.0")
    assert found[SHA_A] == ("demo-1.0.tar.gz", 0)
    assert len(found) == 2 and all(name.startswith("demo-1.0") for name, _ in found.values())
