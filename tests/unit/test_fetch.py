"""``nox -s fetch`` (issue 31): a url source from a loopback server behind a bearer token, into the content-addressed
cache; no token gives one ERROR naming the variable; a wrong sha256 leaves nothing; the token is written nowhere."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomlkit

from tests.helpers.project import ROOT, kd

TOKEN = "tok_L00pbackS3cretValue42"  # a fake token: it must appear nowhere
DATA = b"\x00\x01weights" * 4096
DIGEST = hashlib.sha256(DATA).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(DATA)))
        self.end_headers()
        self.wfile.write(DATA)

    def log_message(self, *args: Any) -> None:  # quiet
        del args


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/models/w.bin"
    httpd.shutdown()
    httpd.server_close()


def _project(folder: Path, weights: dict[str, Any]) -> Path:
    doc = tomlkit.parse((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    doc["tool"]["kernodeck"]["application"]["weights"] = weights  # type: ignore[index]
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    (folder / "kernodeck").symlink_to(ROOT / "kernodeck", target_is_directory=True)  # kd runs it from the project
    return folder


def _env(cache: Path, token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "MODEL_TOKEN"}
    env["KERNODECK_CACHE"] = str(cache)
    if token is not None:
        env["MODEL_TOKEN"] = token
    return env


def _written(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_fetch_with_the_token_then_without_then_a_wrong_hash(server: str, tmp_path: Path) -> None:
    weights = {"url": server, "sha256": DIGEST, "token-env": "MODEL_TOKEN"}
    project = _project(tmp_path / "project", weights)
    cache = tmp_path / "cache"

    # no token: one ERROR naming the variable (not a value), nothing in the cache
    proc = kd(project, "fetch", env=_env(cache, None))
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "MODEL_TOKEN (token-env) is not set" in errors[0] and "HTTP 401" in errors[0], errors
    assert "TIP: set MODEL_TOKEN" in proc.stderr and _written(cache) == []

    # the right token: the file under its digest, whole
    proc = kd(project, "fetch", env=_env(cache, TOKEN))
    assert proc.returncode == 0, proc.stderr
    final = cache / "sha256" / DIGEST / "w.bin"
    assert final.read_bytes() == DATA and _written(cache) == [final]
    again = kd(project, "fetch", env=_env(cache, TOKEN))
    assert again.returncode == 0 and "already in the cache" in again.stdout, again.stdout
    seen = proc.stdout + proc.stderr + again.stdout + again.stderr
    assert TOKEN not in seen and "127.0.0.1" in seen

    # a wrong token names the variable as refused
    proc = kd(project, "fetch", env=_env(tmp_path / "other", "wrong-token-value"))
    assert "the token in MODEL_TOKEN was refused" in proc.stderr and "wrong-token-value" not in proc.stderr

    # a declared sha256 the server's file does not have: that download removed, nothing left under any name
    wrong = "f" * 64
    bad = _project(tmp_path / "bad", {**weights, "sha256": wrong})
    bad_cache = tmp_path / "bad-cache"
    proc = kd(bad, "fetch", env=_env(bad_cache, TOKEN))
    assert proc.returncode == 2 and f"not the declared {wrong}" in proc.stderr, proc.stderr
    assert "weights" in proc.stderr and _written(bad_cache) == []
    assert final.read_bytes() == DATA  # another source's file is not touched

    for path in _written(tmp_path):  # nothing fetch wrote holds the token
        assert TOKEN.encode() not in path.read_bytes(), path


def test_verify_fetches_a_missing_file_and_a_wrong_hash_fails_at_weights(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernodeck.inenv import locate
    from kernodeck.inenv._common import CheckFailed
    from kernodeck.project import app_contract
    from kernodeck.verify.runbuild import prefetch

    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MODEL_TOKEN", TOKEN)
    table = app_contract.load(ROOT)
    for digest, fails in ((DIGEST, False), ("e" * 64, True)):
        weights = {"url": server, "sha256": digest, "token-env": "MODEL_TOKEN"}
        app = app_contract.load(_project(tmp_path / digest[:4], weights))
        assert app.outputs == table.outputs
        config = app.run_config()
        prefetch(app, config)
        if not fails:
            assert "fetch_error" not in config["weights"]
            assert locate.locate(config["weights"], tmp_path, "weights", "weights")[1] == {"w.bin": DIGEST}
            continue
        with pytest.raises(CheckFailed) as caught:
            locate.locate(config["weights"], tmp_path, "weights", "weights")
        assert caught.value.layer == "weights" and f"not the declared {'e' * 64}" in str(caught.value)
        assert TOKEN not in str(caught.value)
    # nothing else left among the downloads (stat/ holds the digests' stat records)
    assert _written(tmp_path / "cache" / "sha256") == [tmp_path / "cache" / "sha256" / DIGEST / "w.bin"]


def test_a_redirect_to_another_host_is_not_sent_the_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A URL that redirects (a release asset to object storage): the bearer token follows a redirect on the same
    host, never one to another host (127.0.0.1 -> localhost here), which must not learn it."""
    from kernodeck.project import assets, fetch

    heard: dict[str, str | None] = {}

    class Storage(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard[self.path] = self.headers.get("Authorization")
            self.send_response(200)
            self.send_header("Content-Length", str(len(DATA)))
            self.end_headers()
            self.wfile.write(DATA)

        def log_message(self, *args: Any) -> None:
            del args

    storage = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Storage)

    class Release(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard[self.path] = self.headers.get("Authorization")
            there = (f"http://localhost:{storage.server_address[1]}/blob" if self.path == "/asset"
                     else "/asset")  # first a redirect on the same host, then to another one
            self.send_response(302)
            self.send_header("Location", there)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            del args

    release = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Release)
    for httpd in (storage, release):
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "cache"))
        monkeypatch.setenv("MODEL_TOKEN", TOKEN)
        src = assets.parse("weights", {"url": f"http://127.0.0.1:{release.server_address[1]}/w.bin",
                                       "sha256": DIGEST, "token-env": "MODEL_TOKEN"})
        assert fetch.fetch_one(src, timeout=10).path.read_bytes() == DATA
    finally:
        for httpd in (storage, release):
            httpd.shutdown()
            httpd.server_close()
    assert heard == {"/w.bin": f"Bearer {TOKEN}", "/asset": f"Bearer {TOKEN}", "/blob": None}
