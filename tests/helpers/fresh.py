"""A machine that is not this one: the environment of a fresh machine, and a stand-in for a variant's index.

Reusable by any test that runs Kernodeck (or nox) as a new user would, on a machine with no package configuration:

    env = fresh_env(tmp_path / "home", KERNODECK_INDEX_CPU=mirror.url)
    subprocess.run([*nox_command(), "-s", "verify"], cwd=project, env=env)

``fresh_env``: HOME and the XDG config folders empty, ``PIP_CONFIG_FILE=/dev/null``, every ``PIP_*``/``UV_*`` variable
removed (a shared uv cache folder is kept, as a speed-up only: it holds files by hash, never a source).

``LocalIndex``: a PEP 503 simple index served on 127.0.0.1 by the test itself, holding the files it is given
(``simple/<name>/`` links each as ``<file>#sha256=<hash>``). Files are served from where they lie; their paths are
kept in memory only, never written.

``machine_file``: a file with a given sha256 found in THIS machine's pip sources (read at import time, before the
hermetic fixture drops the variables). Its location is never printed or written. ``torch_file``: the torch file a
committed cpu lock pins (for a mirror that stands in for the PyTorch index).
"""

from __future__ import annotations

import hashlib
import html
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename

from kernodeck._fs import sha256_file
from kernodeck.lock import lockfile

# The caller's environment as it was before any fixture ran (the hermetic fixture removes PIP_*/UV_* per test).
_ORIGINAL_ENV = dict(os.environ)
# Variables a fresh machine does not have: package sources and configuration of pip, uv and Kernodeck.
_DROP_PREFIXES = ("PIP_", "UV_", "KERNODECK_", "XDG_", "PYTHON", "VIRTUAL_ENV", "CONDA", "PYENV_VERSION", "NOX_")


# The suite's own uv cache (set once per session by conftest, inside pytest's base folder): every LocalIndex serves on
# a new port, so uv keeps a new unpacked torch (~0.7 GB) per test; in the suite's folder they go with it, never into
# this machine's cache (where they stayed: 24 GB after a few runs).
_SUITE_UV_CACHE: list[str] = []


def use_suite_uv_cache(folder: Path) -> None:
    """Share ``folder`` as the uv cache of every fresh machine of this session (conftest calls it once)."""
    _SUITE_UV_CACHE[:] = [str(folder)]


def uv_cache_dir() -> str | None:
    """The uv cache fresh machines share to stay fast (content-addressed, never a source): the caller's UV_CACHE_DIR
    when set, else the suite's own folder, else this machine's cache."""
    if _ORIGINAL_ENV.get("UV_CACHE_DIR"):
        return _ORIGINAL_ENV["UV_CACHE_DIR"]
    if _SUITE_UV_CACHE:
        return _SUITE_UV_CACHE[0]
    base = _ORIGINAL_ENV.get("XDG_CACHE_HOME") or os.path.join(_ORIGINAL_ENV.get("HOME", "/"), ".cache")
    return os.path.join(base, "uv")


def fresh_env(home: Path, *, share_uv_cache: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a fresh machine: an empty HOME and config folders, no pip configuration, no PIP_*/UV_*
    source variable; PATH keeps the tools (python, uv, nox) a user would have installed."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".config").mkdir(exist_ok=True)
    (home / ".xdg-dirs").mkdir(exist_ok=True)
    env = {k: v for k, v in _ORIGINAL_ENV.items() if not k.startswith(_DROP_PREFIXES)}
    tools = os.pathsep.join(dict.fromkeys([str(Path(sys.executable).parent), *_path_without_shims()]))
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_CONFIG_DIRS=str(home / ".xdg-dirs"),  # no /etc/xdg/pip/pip.conf, no /etc/xdg/uv/uv.toml
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        PIP_CONFIG_FILE=os.devnull,  # pip skips every configuration file, /etc/pip.conf included
        PATH=tools,
    )
    cache = uv_cache_dir() if share_uv_cache else None
    if cache:
        env["UV_CACHE_DIR"] = cache
    env.update(extra)
    return env


def _path_without_shims() -> list[str]:
    return [p for p in _ORIGINAL_ENV.get("PATH", "").split(os.pathsep) if p]


def nox_command() -> list[str]:
    """nox as a user runs it: the nox installed beside the test interpreter."""
    return [sys.executable, "-m", "nox"]


# --- this machine's files (found, never located in anything written) ------------------------------------------------


def _machine_locations() -> list[Path]:
    """Local folders of this machine's pip sources: find-links folders and file:// indexes (as pip reads them)."""
    saved = dict(os.environ)
    try:
        os.environ.clear()
        os.environ.update(_ORIGINAL_ENV)
        from kernodeck.sources import is_local, machine_sources

        found = [s.location for s in machine_sources() if is_local(s.location)]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return [Path(urllib.parse.unquote(loc.removeprefix("file://"))) for loc in found]


def machine_file(filename_prefix: str, sha256: str) -> Path | None:
    """The file of this machine's pip sources whose name starts with ``filename_prefix`` and whose sha256 is
    ``sha256`` (a find-links folder, or ``<index>/<project>/`` of a local simple index); None when there is none."""
    name = canonicalize_name(filename_prefix.split("-", 1)[0])
    for folder in _machine_locations():
        for candidate_dir in (folder, folder / name, folder / str(name).replace("-", "_")):
            if not candidate_dir.is_dir():
                continue
            for path in sorted(candidate_dir.glob(f"{filename_prefix}*")):
                if path.is_file() and sha256_file(path) == sha256:
                    return path
    return None


CPU_LOCK = "cp311-linux_x86_64-cpu"
LOCKFILES = Path(__file__).resolve().parents[2] / "lockfiles"


def torch_file(cache: Path, lockfiles: Path = LOCKFILES) -> Path:
    """The torch file the cpu lock in ``lockfiles`` pins (this checkout's by default): from this machine's pip
    sources, else downloaded into ``cache`` from the URL the PEP 751 twin names (a CI runner reaches the PyTorch
    index); never located in anything written."""
    import tomllib

    pin = next(p for p in lockfile.read(lockfiles / f"{CPU_LOCK}.txt").pins if p.name == "torch")
    for digest in sorted(pin.hashes):
        found = machine_file(f"torch-{pin.version}-", digest)
        if found is not None:
            return found
    twin = tomllib.loads((lockfiles / f"pylock.{CPU_LOCK}.toml").read_text(encoding="utf-8"))
    package = next(p for p in twin["packages"] if p["name"] == "torch")
    wheel = next(w for w in package["wheels"] if w["hashes"]["sha256"] in pin.hashes)
    target = cache / wheel["name"]
    try:
        with urllib.request.urlopen(wheel["url"], timeout=60) as response, target.open("wb") as out:
            digest = hashlib.sha256()
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        pytest.skip(f"the lock's torch file is neither in this machine's pip sources nor downloadable: {exc}")
    assert digest.hexdigest() == wheel["hashes"]["sha256"]
    return target


# --- a PEP 503 index on 127.0.0.1 ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Served:
    path: Path
    sha256: str


class LocalIndex:
    """A PEP 503 simple index on 127.0.0.1: ``/simple/<project>/`` lists the given files with their hashes."""

    def __init__(self, files: list[Path], *, projects: tuple[str, ...] = (),
                 upload_times: dict[str, str] | None = None) -> None:
        """``upload_times`` (file name -> ``YYYY-MM-DDTHH:MM:SSZ``): the pages are PEP 700 JSON (API 1.1), with each
        file's upload time, to a client that accepts JSON, as PyPI serves them; else HTML, undated."""
        self.files: dict[str, _Served] = {path.name: _Served(path, sha256_file(path)) for path in files}
        self.upload_times = upload_times
        self.projects: dict[str, list[str]] = {str(canonicalize_name(p)): [] for p in projects}
        for filename in self.files:
            project = str(parse_wheel_filename(filename)[0])
            self.projects.setdefault(project, []).append(filename)
        self.requests: list[str] = []
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return self.url_with()

    def url_with(self, path_prefix: str = "") -> str:
        """The index URL; ``path_prefix`` (e.g. a fake token) goes before ``/simple`` and is ignored when serving."""
        assert self._server is not None, "the index is not serving"
        prefix = f"/{path_prefix.strip('/')}" if path_prefix else ""
        return f"http://127.0.0.1:{self._server.server_address[1]}{prefix}/simple"

    def _page(self, project: str) -> bytes | None:
        if project not in self.projects:
            return None
        links = "".join(
            f'<a href="/files/{urllib.parse.quote(f)}#sha256={self.files[f].sha256}">{html.escape(f)}</a><br/>\n'
            for f in sorted(self.projects[project])
        )
        return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()

    def _json_page(self, project: str) -> bytes | None:
        if project not in self.projects or self.upload_times is None:
            return None
        files = [{"filename": f, "url": f"/files/{urllib.parse.quote(f)}", "hashes": {"sha256": self.files[f].sha256},
                  "upload-time": self.upload_times[f]} for f in sorted(self.projects[project])]
        return json.dumps({"meta": {"api-version": "1.1"}, "name": project, "files": files}).encode()

    @contextmanager
    def serving(self) -> Iterator[LocalIndex]:
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet: the test reads index.requests
                pass

            def do_GET(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                index.requests.append(path)
                parts = [p for p in path.split("/") if p]
                if "simple" in parts:  # a prefix before simple/ (a token in the path, cloudsmith style) is accepted
                    parts = parts[parts.index("simple"):]
                if len(parts) == 2 and parts[0] == "simple":
                    name = str(canonicalize_name(parts[1]))
                    dated = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
                    body = index._json_page(name) if dated else None
                    kind = "application/vnd.pypi.simple.v1+json" if body is not None else "text/html"
                    body = body if body is not None else index._page(name)
                    if body is None:
                        self.send_error(404)
                        return
                    self.send_response(200)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif len(parts) == 2 and parts[0] == "files" and urllib.parse.unquote(parts[1]) in index.files:
                    served = index.files[urllib.parse.unquote(parts[1])]
                    self.send_response(200)
                    self.send_header("Content-Type", "application/octet-stream")
                    self.send_header("Content-Length", str(served.path.stat().st_size))
                    self.end_headers()
                    with served.path.open("rb") as handle:
                        shutil.copyfileobj(handle, self.wfile, 1 << 20)
                else:
                    self.send_error(404)

            def do_HEAD(self) -> None:
                self.send_response(200 if self.path.rstrip("/").endswith("/simple") else 404)
                self.end_headers()

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=10)
            self._forget_cached()

    def _forget_cached(self) -> None:
        """uv caches a registry file under its index's URL, and this index's port dies with it: what uv kept from it is
        never used again. Drop it from the suite's own cache (a torch is 0.7 GB); never from a cache the suite does
        not own."""
        served = sorted(project for project, files in self.projects.items() if files)
        uv = Path(sys.executable).with_name("uv")
        if not served or not _SUITE_UV_CACHE or uv_cache_dir() != _SUITE_UV_CACHE[0] or not uv.exists():
            return
        subprocess.run([str(uv), "cache", "clean", "--cache-dir", _SUITE_UV_CACHE[0], *served],
                       capture_output=True, timeout=300, check=False)


def fetch(url: str) -> str:
    """GET a page of a local index (for the test's own checks)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def run_nox(project: Path, env: dict[str, str], *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``nox ARGS`` in ``project`` as a user runs it."""
    return subprocess.run([*nox_command(), *args], cwd=project, env=env, text=True, capture_output=True,
                          timeout=timeout, check=False)
