"""The index client behind the PEP 751 twin: which files an index lists for a project, with their sha256.

It reads simple repository pages, PEP 691 JSON or PEP 503 HTML, from remote indexes (one kept-alive connection per
host, the CA bundle and netrc credentials pip and uv would use) and from local folders (find-links folders and
local simple indexes, hashed once per file state). It writes nothing and knows no lock: :mod:`kernodeck.lock.place`
matches what it lists with a lock's hashes.
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kernodeck import __version__
from kernodeck._fs import sha256_file
from kernodeck.sources import is_local, redact_url

# http.client, urllib.request and ssl are imported where used: every lock check imports this module (through the
# twin's reader), and they cost more than the check.
if TYPE_CHECKING:
    import http.client
    import ssl

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_TIMEOUT = 30.0


@dataclass(frozen=True)
class DistFile:
    """One distribution file: its name, where it is downloaded from, and its sha256."""

    filename: str
    url: str
    sha256: str
    size: int | None = None
    upload_time: _dt.datetime | None = None

    @property
    def is_wheel(self) -> bool:
        return self.filename.endswith(".whl")


def file_matches(filename: str, name: str, version: str) -> bool:
    """Whether a distribution file name is ``name`` at exactly ``version``."""
    try:
        if filename.endswith(".whl"):
            fname, fver, _, _ = parse_wheel_filename(filename)
        else:
            fname, fver = parse_sdist_filename(filename)
        return fname == canonicalize_name(name) and fver == Version(version)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return False


class _Anchors(HTMLParser):
    """The links of a PEP 503 simple page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _time(value: object) -> _dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=_dt.UTC)


def _page_files(page_url: str, raw: bytes, content_type: str) -> list[DistFile]:
    """Files of a project page, PEP 691 JSON or PEP 503 HTML (whose links carry ``#sha256=``)."""
    files: list[DistFile] = []
    if "json" in content_type:
        data = json.loads(raw.decode("utf-8"))
        for entry in data.get("files", []):
            digest = (entry.get("hashes") or {}).get("sha256")
            if digest:
                files.append(DistFile(entry["filename"], urllib.parse.urljoin(page_url, entry["url"]), digest.lower(),
                                      entry.get("size"), _time(entry.get("upload-time"))))
        return files
    parser = _Anchors()
    parser.feed(raw.decode("utf-8", errors="replace"))
    for href in parser.hrefs:
        url, _, fragment = urllib.parse.urljoin(page_url, href).partition("#")
        algo, _, digest = fragment.partition("=")
        if algo == "sha256" and digest:
            files.append(DistFile(urllib.parse.unquote(url.rsplit("/", 1)[-1]), url, digest.lower()))
    return files


def _local_dir(location: str) -> Path:
    if location.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))
    return Path(location)


def ca_bundle(environ: dict[str, str] | None = None, pip_settings: dict[str, str] | None = None) -> str | None:
    """The CA bundle pip and uv would trust: pip's ``cert`` (``PIP_CERT`` or a pip configuration file), else
    ``SSL_CERT_FILE`` (uv's and OpenSSL's variable), else ``REQUESTS_CA_BUNDLE``; None: the system's store."""
    env = os.environ if environ is None else environ
    if pip_settings is None:
        from kernodeck.sources import pip_config

        pip_settings = dict(pip_config())
    for value in (pip_settings.get("cert"), env.get("SSL_CERT_FILE"), env.get("REQUESTS_CA_BUNDLE")):
        if value and Path(value).expanduser().is_file():
            return str(Path(value).expanduser())
    return None


def netrc_auth(host: str, environ: dict[str, str] | None = None) -> tuple[str, str] | None:
    """(login, password) for ``host`` from the netrc file pip (requests) and uv read: ``$NETRC``, else ``~/.netrc``."""
    import netrc

    env = os.environ if environ is None else environ
    path = Path(env["NETRC"]).expanduser() if env.get("NETRC") else Path.home() / ".netrc"
    if not path.is_file():
        return None
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    if not entry:
        return None
    login, _, password = entry
    return login, password or ""


class Fetcher:
    """Reads project pages of simple indexes over one kept-alive connection per host.

    Sequential and kept alive on purpose: 66 pages take ~0.5 s this way, while parallel fresh connections were
    measured here at ~6 s (most waited ~5 s each, connection setup under concurrency). It trusts the CA bundle pip
    and uv are told to trust (:func:`ca_bundle`) and sends the netrc credentials they would send (:func:`netrc_auth`)
    to a host whose URL carries none.
    """

    def __init__(self, timeout: float = _TIMEOUT) -> None:
        self.timeout = timeout
        self.cafile = ca_bundle()
        self._context: ssl.SSLContext | None = None
        self._conns: dict[tuple[str, str], http.client.HTTPConnection] = {}
        self._pages: dict[tuple[str, str], list[DistFile]] = {}
        self.unreachable: dict[str, str] = {}  # index -> why; an index that failed once is not asked again
        self._proxied = any(os.environ.get(v) for v in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"))

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def _get(self, url: str, redirects: int = 5) -> tuple[int, str, bytes, str]:
        """(status, content type, body, final URL)."""
        import http.client
        import ssl
        import urllib.error
        import urllib.request

        headers = {"Accept": f"{SIMPLE_JSON}, text/html;q=0.1", "User-Agent": f"kernodeck/{__version__}"}
        parts = urllib.parse.urlsplit(url)
        user, password = urllib.parse.unquote(parts.username or ""), urllib.parse.unquote(parts.password or "")
        if not (user or password) and (found := netrc_auth(parts.hostname or "")):
            user, password = found
        if user or password:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        if self._context is None:  # loading a CA bundle costs ~10 ms: once per fetcher
            self._context = ssl.create_default_context(cafile=self.cafile)
        context = self._context
        if self._proxied:  # urllib knows the proxy variables; http.client does not
            bare = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
            request = urllib.request.Request(bare, headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=self.timeout, context=context) as response:
                    return 200, response.headers.get("Content-Type", ""), response.read(), response.geturl()
            except urllib.error.HTTPError as exc:
                return exc.code, "", b"", url
        key = (parts.scheme, parts.netloc)
        for attempt in range(2):  # a kept-alive connection the server closed meanwhile is reopened once
            conn = self._conns.get(key)
            if conn is None:
                host = parts.hostname or ""
                if parts.scheme == "https":
                    conn = http.client.HTTPSConnection(host, parts.port, timeout=self.timeout, context=context)
                else:
                    conn = http.client.HTTPConnection(host, parts.port, timeout=self.timeout)
                self._conns[key] = conn
            path = parts.path + (f"?{parts.query}" if parts.query else "")
            try:
                conn.request("GET", path or "/", headers=headers)
                response = conn.getresponse()
                body = response.read()
            except (http.client.HTTPException, ConnectionError) as exc:
                conn.close()
                self._conns.pop(key, None)
                if attempt:
                    raise OSError(str(exc)) from None
                continue
            if response.status in (301, 302, 303, 307, 308) and redirects:
                location = urllib.parse.urljoin(url, response.getheader("Location", ""))
                return self._get(location, redirects - 1)
            return response.status, response.getheader("Content-Type", ""), body, url
        raise OSError(f"{redact_url(url)}: no answer")

    def index_files(self, index: str, name: str) -> list[DistFile]:
        """The files an index lists for ``name`` ([] when it lists none). Raises OSError when it cannot be read."""
        key = (index, canonicalize_name(name))
        if key not in self._pages:
            if index in self.unreachable:
                raise OSError(self.unreachable[index])
            try:
                self._pages[key] = self._index_files(index, name)
            except OSError as exc:
                self.unreachable[index] = str(exc)
                raise
        return self._pages[key]

    def _index_files(self, index: str, name: str) -> list[DistFile]:
        project = canonicalize_name(name)
        if is_local(index):
            page = _local_dir(index) / project / "index.html"
            if page.is_file():
                return _page_files(page.as_uri(), page.read_bytes(), "text/html")
            return []
        url = index.rstrip("/") + f"/{project}/"
        try:
            status, content_type, body, final = self._get(url)
        except (OSError, ValueError) as exc:
            raise OSError(f"{redact_url(url)}: {getattr(exc, 'reason', exc)}") from None
        if status == 404:
            return []
        if status != 200:
            raise OSError(f"{redact_url(url)}: HTTP {status}")
        return _page_files(final, body, content_type)


def index_files(index: str, name: str) -> list[DistFile]:
    """One index page, read on its own connection (see :class:`Fetcher` for many)."""
    fetcher = Fetcher()
    try:
        return fetcher.index_files(index, name)
    finally:
        fetcher.close()


_HASHED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256: a 190 MB wheel is read once


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _HASHED:
        return _HASHED[key]
    _HASHED[key] = sha256_file(path)
    return _HASHED[key]


def local_files(locations: Iterable[str], name: str, version: str) -> dict[str, tuple[str, int]]:
    """sha256 -> (file name, size) of ``name==version`` in local folders (find-links) and local simple indexes."""
    found: dict[str, tuple[str, int]] = {}
    for location in locations:
        folder = _local_dir(location)
        if not folder.is_dir():
            continue
        page = folder / canonicalize_name(name) / "index.html"
        if page.is_file():
            for entry in _page_files(page.as_uri(), page.read_bytes(), "text/html"):
                if file_matches(entry.filename, name, version):
                    target = _local_dir(entry.url)
                    size = target.stat().st_size if target.is_file() else 0
                    found[entry.sha256] = (entry.filename, size)
            continue
        for path in folder.iterdir():
            if path.is_file() and file_matches(path.name, name, version):
                found[_sha256(path)] = (path.name, path.stat().st_size)
    return found
