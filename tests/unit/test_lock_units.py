"""Units of locking: uv's source order, the index reader behind the PEP 751 twin, resolver output clean-up."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from kernodeck.errors import CommandFailed, LockFailed
from kernodeck.lock import index_client, lockfile, place, resolvers, twin
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from kernodeck.sources import PYPI, Source
from tests.helpers.project import ROOT

PROJECT = load_project(ROOT)
CPU = parse_platform_id(PROJECT, "cp311-linux_x86_64-cpu")
MPS = parse_platform_id(PROJECT, "cp311-macosx_arm64-mps")
MIRRORS = [Source("find-links", "/w"), Source("extra-index-url", "file:///m1"), Source("extra-index-url", "file:///m2")]


def test_uv_public_sources_go_before_the_machine_mirrors() -> None:
    env = resolvers.uv_lock_environment(CPU, "https://download.pytorch.org/whl/cpu", MIRRORS, no_index=False)
    assert env["UV_INDEX"].split() == [PYPI, "https://download.pytorch.org/whl/cpu", "file:///m1", "file:///m2"]
    assert env["UV_DEFAULT_INDEX"] == PYPI and env["UV_FIND_LINKS"] == "/w"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match" and env["UV_NO_CONFIG"] == "1"
    assert "MACOSX_DEPLOYMENT_TARGET" not in env


def test_uv_machine_index_url_replaces_pypi_as_pip_does() -> None:
    replaced = [Source("index-url", "https://u:p@proxy.example/simple"), *MIRRORS]
    env = resolvers.uv_lock_environment(CPU, None, replaced, no_index=False)
    assert env["UV_DEFAULT_INDEX"] == "https://u:p@proxy.example/simple"
    assert PYPI not in env["UV_INDEX"].split()
    assert env["UV_INDEX"].split()[0] == "https://u:p@proxy.example/simple"


def test_uv_no_index_and_macos_target() -> None:
    env = resolvers.uv_lock_environment(MPS, None, [Source("find-links", "/w")], no_index=True)
    assert env["UV_NO_INDEX"] == "1" and "UV_INDEX" not in env and env["UV_FIND_LINKS"] == "/w"
    assert env["MACOSX_DEPLOYMENT_TARGET"] == "14.0"


def test_uv_command_holds_no_source() -> None:
    cmd = resolvers.command("uv", MPS, ["requirements/base.in"], "out.txt", "https://x.example/simple", False)
    assert not [c for c in cmd if "index" in c or "find-links" in c or "x.example" in c]
    assert cmd[cmd.index("--python-platform") + 1] == "aarch64-apple-darwin"


def test_tracebacks_are_dropped_from_resolver_output() -> None:
    output = ("  ERROR: Could not find a version that satisfies the requirement torch==9\n"
              "Traceback (most recent call last):\n  File \"/x/pip.py\", line 3, in resolve\n    raise X\n"
              "pip._vendor.resolvelib.resolvers.ResolutionImpossible: [x]\n"
              "pip._internal.exceptions.DistributionNotFound: No matching distribution found for torch==9\n")
    kept = resolvers.without_tracebacks(output)
    assert kept == "  ERROR: Could not find a version that satisfies the requirement torch==9"


def test_uv_reason_carries_its_cause_line() -> None:
    output = ("error: No solution found when resolving dependencies\n"
              "  cause: Because only kdtiny-beta<=2.0 is available and you require kdtiny-beta>=3, ...\n")
    exc = CommandFailed(["uv"], 1, "error: No solution found when resolving dependencies", output)
    assert resolvers.reason(exc).endswith("cause: Because only kdtiny-beta<=2.0 is available and you require "
                                          "kdtiny-beta>=3, ...")


# ---- the index reader, against a local HTTP server ------------------------------------------------------------

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


def test_a_hash_no_source_holds_is_refused_by_name(tmp_path: Path) -> None:
    pin = lockfile.Pin("kdtiny-nowhere", "1.0", "", ("c" * 64,), 5)
    with pytest.raises(LockFailed, match=r"kdtiny-nowhere \(1 hash") as err:
        place.locate([pin], CPU, [Source("find-links", str(tmp_path))], no_index=True)
    assert "--pylock-only" in err.value.tip


class _NoNetwork(index_client.Fetcher):
    """A fetcher that records what it was asked and answers nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def index_files(self, index: str, name: str) -> list[index_client.DistFile]:
        self.asked.append(name)
        raise OSError("no network in this test")


def test_relock_reuses_the_files_its_pylock_already_places() -> None:
    lock = lockfile.read(ROOT / "lockfiles" / f"{CPU.id}.txt")
    known = twin.known_files(ROOT / "lockfiles" / CPU.pylock_name)
    assert all(h in known for pin in lock.pins for h in pin.hashes)
    fetcher = _NoNetwork()
    files = place.locate(lock.pins, CPU, [], no_index=False, fetcher=fetcher, known=known)
    assert fetcher.asked == [] and sum(len(v) for v in files.values()) == sum(len(p.hashes) for p in lock.pins)
    # a hash the twin does not place is looked up (and here, with no network, refused by name)
    first = lock.pins[0]
    changed = lockfile.Pin(first.name, first.version, first.marker, ("0" * 64,), first.line)
    fetcher = _NoNetwork()
    with pytest.raises(LockFailed, match=first.name):
        place.locate([changed], CPU, [], no_index=False, fetcher=fetcher, known=known)
    assert first.name in fetcher.asked


class _Unreachable(index_client.Fetcher):
    """A fetcher for which every index is out of reach (as the real one records it)."""

    def index_files(self, index: str, name: str) -> list[index_client.DistFile]:
        self.unreachable[index] = "no network in this test"
        raise OSError(self.unreachable[index])


class _Lists(index_client.Fetcher):
    """A fetcher whose indexes answer, listing ``files`` for every name."""

    def __init__(self, files: list[index_client.DistFile]) -> None:
        super().__init__()
        self.files = files

    def index_files(self, index: str, name: str) -> list[index_client.DistFile]:
        return self.files


def _first_pin_and_twin() -> tuple[lockfile.Pin, dict[str, index_client.DistFile]]:
    lock = lockfile.read(ROOT / "lockfiles" / f"{CPU.id}.txt")
    return lock.pins[0], twin.known_files(ROOT / "lockfiles" / CPU.pylock_name)


def test_a_hash_added_by_hand_is_named_as_such_not_blamed_on_the_network() -> None:
    """--pylock-only after a hash was added to a pin the twin places: the cause is the added hash, even offline."""
    pin, known = _first_pin_and_twin()
    added = lockfile.Pin(pin.name, pin.version, pin.marker, (*pin.hashes, "0" * 64), pin.line)
    with pytest.raises(LockFailed) as refused:
        place.locate([added], CPU, [], no_index=False, fetcher=_Unreachable(), known=known)
    message, tip = str(refused.value), refused.value.tip
    assert f"first {pin.name} (1 hash(es), e.g. sha256:0000000000000000" in message
    assert "added to the lock after the twin was written (by hand?)" in message
    assert tip.endswith(f"nox -s lock -- --platform {CPU.id}") and "reached" not in tip, tip


def test_a_hash_no_reachable_index_lists_is_not_a_published_file() -> None:
    """Every index answered and none lists the hash among the pin's files: no network to blame."""
    pin, known = _first_pin_and_twin()
    stranger = lockfile.Pin(pin.name, pin.version, pin.marker, ("0" * 64,), pin.line)
    listed = [known[h] for h in pin.hashes]
    with pytest.raises(LockFailed) as refused:
        place.locate([stranger], CPU, [], no_index=False, fetcher=_Lists(listed), known={})
    assert f"no file of {pin.name} {pin.version} that pypi.org" in str(refused.value)
    assert "not the hash of a published file" in str(refused.value) and "unreachable" not in str(refused.value)
    assert "reached" not in refused.value.tip and "--pylock-only" not in refused.value.tip


def test_the_network_is_named_only_when_it_is_the_cause() -> None:
    """The control: a hash nothing known places and no index could be asked for: rerun where they can be reached."""
    pin, _ = _first_pin_and_twin()
    stranger = lockfile.Pin(pin.name, pin.version, pin.marker, ("0" * 64,), pin.line)
    with pytest.raises(LockFailed) as refused:
        place.locate([stranger], CPU, [], no_index=False, fetcher=_Unreachable(), known={})
    assert "unreachable (no network in this test)" in str(refused.value)
    assert "added to the lock" not in str(refused.value)
    assert "can be reached" in refused.value.tip and "--pylock-only" in refused.value.tip
