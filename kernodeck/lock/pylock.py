"""PEP 751 locks: ``lockfiles/pylock.<platform-id>.toml`` beside each requirements lock, same pins, same hashes.

The requirements lock says *what* (name, version, sha256); the pylock adds *where* each file lives, which PEP 751
requires. File names and URLs come from the public sources only: PyPI's JSON simple API (PEP 691; matched by
sha256, as hashin matches PyPI's JSON) and the variant's declared index. A file only this machine's sources hold
(e.g. ``torch 2.13.0+cpu`` from a local find-links folder) is named by its file name under the variant's declared
index, never by its local path: the machine's sources stay out of every written file.

Every pylock is read by the standard parser, :mod:`packaging.pylock` (:func:`read`, which validates it against the
PEP), and written by a TOML writer (:func:`dumps`, tomlkit) from a :class:`packaging.pylock.Pylock`; docs/pep751.md
says why the file list still comes from this module's own index client rather than ``uv pip compile``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import json
import os
import threading
import tomllib
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.markers import Marker
from packaging.pylock import Package, PackageSdist, PackageWheel, Pylock, PylockValidationError
from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from kernodeck import __version__
from kernodeck._proc import log
from kernodeck.errors import LockFailed, LockfileError
from kernodeck.lock import lockfile
from kernodeck.project.platforms import UV_PLATFORM_ENV, Platform
from kernodeck.sources import PYPI, Source, is_local, redact_url, strip_credentials, variant_index

# http.client, urllib.request (ssl) and tomlkit are imported where used: every lock check reads a twin's digest, and
# they cost more than the check.
if TYPE_CHECKING:
    import http.client
    import ssl

LOCK_VERSION = "1.0"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
_TIMEOUT = 30.0

# platform.system()/sys.platform and platform.machine() of each OS/arch we name, for the `environments` marker.
_MARKERS = {
    "linux_x86_64": ("linux", "x86_64"),
    "linux_aarch64": ("linux", "aarch64"),
    "macosx_arm64": ("darwin", "arm64"),
    "macosx_x86_64": ("darwin", "x86_64"),
    "win_amd64": ("win32", "AMD64"),
}


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


def environment_marker(plat: Platform) -> str:
    """The PEP 508 marker that selects ``plat`` (the pylock's ``environments`` entry)."""
    if plat.os_arch not in _MARKERS:
        raise LockFailed(f"no environment marker known for {plat.os_arch}; known: {', '.join(_MARKERS)}")
    system, machine = _MARKERS[plat.os_arch]
    return (f'python_version == "{plat.python}" and platform_python_implementation == "CPython" '
            f'and sys_platform == "{system}" and platform_machine == "{machine}"')


def _matches(filename: str, name: str, version: str) -> bool:
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
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    _HASHED[key] = digest.hexdigest()
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
                if _matches(entry.filename, name, version):
                    target = _local_dir(entry.url)
                    size = target.stat().st_size if target.is_file() else 0
                    found[entry.sha256] = (entry.filename, size)
            continue
        for path in folder.iterdir():
            if path.is_file() and _matches(path.name, name, version):
                found[_sha256(path)] = (path.name, path.stat().st_size)
    return found


def _public_indexes(plat: Platform) -> list[str]:
    indexes = [PYPI]
    if plat.variant.index.rstrip("/") != PYPI:
        indexes.append(plat.variant.index.rstrip("/"))
    return indexes


def _local_locations(plat: Platform, machine: list[Source]) -> list[str]:
    found = [s.location for s in machine if s.kind in ("find-links", "extra-index-url", "index-url")
             and is_local(s.location)]
    if is_local(plat.variant.index):
        found.append(plat.variant.index.rstrip("/"))
    return found


class Prefetch:
    """Reads the pages (and hashes the local files) of the pins a lock is likely to keep, while the resolver runs.

    A lock made again mostly keeps its pins: what the old lock names is fetched in the background, so that the
    PEP 751 twin costs little more than the resolver's own time. :meth:`finish` hands over what was read.
    """

    def __init__(self, pins: list[lockfile.Pin], plat: Platform, machine: list[Source], *, no_index: bool) -> None:
        self.fetcher = Fetcher()
        self._args = (pins, plat, machine, no_index)
        self._thread = threading.Thread(target=self._run, name="kernodeck-pylock-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        pins, plat, machine, no_index = self._args
        indexes = [] if no_index else _public_indexes(plat)
        local = _local_locations(plat, machine)
        for pin in pins:
            for index in indexes:
                try:
                    self.fetcher.index_files(index, pin.name)
                except OSError:
                    continue
            if plat.variant.index.rstrip("/") != PYPI:
                local_files(local, pin.name, pin.version)

    def finish(self) -> Fetcher:
        self._thread.join()
        return self.fetcher


def known_files(pylock_file: Path) -> dict[str, DistFile]:
    """The files an existing PEP 751 lock already places, by sha256: a lock made again reuses them unasked.

    A sha256 names one file's content, so the URL it was found at stays right for it; only new hashes are looked up.
    """
    try:
        data = read(pylock_file)
    except LockfileError:
        return {}
    known: dict[str, DistFile] = {}
    for package in data.packages:
        for entry in package_files(package):
            digest = entry.hashes.get("sha256")
            if digest and entry.url and entry.name:
                known[digest] = DistFile(entry.name, entry.url, digest, entry.size, entry.upload_time)
    return known


def locate(
    pins: list[lockfile.Pin], plat: Platform, machine: list[Source], *, no_index: bool, fetcher: Fetcher | None = None,
    known: dict[str, DistFile] | None = None,
) -> dict[str, list[DistFile]]:
    """Every locked file of every pin, by sha256, with a public URL. Raises when a locked hash cannot be placed."""
    declared = plat.variant.index.rstrip("/")
    indexes = [] if no_index else _public_indexes(plat)
    # A mirror of the variant's index (KERNODECK_INDEX_<VARIANT>) is read for hashes it alone can place; the URL
    # written is the file's under the declared index, never the mirror's.
    mirror = None if no_index else variant_index(plat.variant.name, plat.variant.index).mirror
    local_locations = _local_locations(plat, machine)
    fetcher = fetcher or Fetcher()
    unreachable = fetcher.unreachable

    def one(pin: lockfile.Pin) -> tuple[str, list[DistFile], list[str]]:
        wanted = set(pin.hashes)
        # A file is placed by its hash AND its name and version: a pin edited by hand (numpy==2.0.0 with the hashes
        # of numpy 2.4.6) must never be written as version 2.0.0 beside files named numpy-2.4.6.
        elsewhere: dict[str, str] = {}

        def fits(entry: DistFile) -> bool:
            if _matches(entry.filename, pin.name, pin.version):
                return True
            elsewhere[entry.sha256] = entry.filename
            return False

        placed: dict[str, DistFile] = {h: known[h] for h in wanted if known and h in known and fits(known[h])}
        for index in indexes if wanted - set(placed) else []:
            try:
                listed = fetcher.index_files(index, pin.name)
            except OSError:
                continue
            for entry in listed:
                if entry.sha256 in wanted and entry.sha256 not in placed and fits(entry):
                    placed[entry.sha256] = entry
        missing = wanted - set(placed)
        if missing and mirror and declared != PYPI:
            try:
                for entry in fetcher.index_files(mirror, pin.name):
                    if entry.sha256 in missing:
                        url = f"{declared}/{urllib.parse.quote(entry.filename)}"
                        placed[entry.sha256] = DistFile(entry.filename, url, entry.sha256, entry.size)
            except OSError:
                pass
        missing = wanted - set(placed)
        if missing and declared != PYPI:
            # Not on a reachable public index: name it under the declared index (PyTorch's indexes serve files
            # at <index>/<file name>), learning the file name from this machine's local copy.
            for digest, (filename, size) in local_files(local_locations, pin.name, pin.version).items():
                if digest in missing:
                    url = f"{declared}/{urllib.parse.quote(filename)}"
                    placed[digest] = DistFile(filename, url, digest, size or None)
        missing = wanted - set(placed)
        wrong = sorted(h for h in missing if h in elsewhere)
        if wrong:
            raise LockFailed(
                f"{pin.spec}: its hash sha256:{wrong[0][:16]}… is the file {elsewhere[wrong[0]]}, not a file of "
                f"{pin.name} {pin.version} ({len(wrong)} such hash(es)): the lock was edited by hand?",
                tip=f"nox -s lock -- --platform {plat.id}   (or --upgrade-package {pin.name}==VERSION)",
            )
        return pin.name, sorted(placed.values(), key=lambda f: f.filename), sorted(missing)

    try:
        results = [one(pin) for pin in pins]
    finally:
        fetcher.close()
    unplaced = [(name, missing) for name, _, missing in results if missing]
    if unplaced:
        name, missing = unplaced[0]
        why = "; ".join(f"{redact_url(i)} unreachable ({w})" for i, w in unreachable.items()) or (
            "no public index lists them" if indexes else "no index may be used here (no-index)")
        raise LockFailed(
            f"cannot write the PEP 751 lock for {plat.id}: {len(unplaced)} package(s) have locked files whose URL is "
            f"unknown, first {name} ({len(missing)} hash(es), e.g. sha256:{missing[0][:16]}…): {why}",
            tip=f"rerun where pypi.org (and {redact_url(declared)}) can be reached: "
                f"nox -s lock -- --platform {plat.id} --pylock-only",
        )
    return {name: files for name, files, _ in results}


def render(lock: lockfile.Lockfile, plat: Platform, files: dict[str, list[DistFile]], lock_text: str) -> str:
    """The pylock text: a :class:`packaging.pylock.Pylock` (validated by packaging) written by :func:`dumps`.

    Packages and files are sorted, so that diffs stay small and the same lock always gives the same bytes. The text
    is read back by :func:`read` and must hold the data it was made from.
    """
    packages = []
    for pin in sorted(lock.pins, key=lambda p: p.name):
        pin_files = files[pin.name]
        hosts = {f.url.split("/", 3)[2] for f in pin_files}
        index = None
        if all(f.url.startswith("https://files.pythonhosted.org/") for f in pin_files):
            index = PYPI
        elif len(hosts) == 1 and plat.variant.index.rstrip("/") != PYPI:
            index = strip_credentials(plat.variant.index.rstrip("/"))
        sdists = [f for f in pin_files if not f.is_wheel]
        wheels = [PackageWheel(**_file_fields(f)) for f in pin_files if f.is_wheel]
        packages.append(Package(
            name=canonicalize_name(pin.name), version=Version(pin.version),
            marker=Marker(pin.marker) if pin.marker else None, index=index,
            sdist=PackageSdist(**_file_fields(sdists[0])) if sdists else None, wheels=wheels or None,
        ))
    tool: dict[str, Any] = {
        "platform": plat.id,
        "requirements-lock": plat.lock_name,
        "requirements-lock-sha256": hashlib.sha256(lock_text.encode("utf-8")).hexdigest(),
        "version": __version__,
    }
    target = UV_PLATFORM_ENV.get(plat.os_arch, {}).get("MACOSX_DEPLOYMENT_TARGET")
    if target:
        # uv targets macOS 13.0 unless told otherwise (MACOSX_DEPLOYMENT_TARGET), and the macOS 14 wheels this lock
        # holds (torch's arm64 wheels) are then refused: the lock says which macOS it was made for.
        tool["macos-deployment-target"] = target
    made = Pylock(
        lock_version=Version(LOCK_VERSION), environments=[Marker(environment_marker(plat))],
        requires_python=SpecifierSet(f"=={plat.python}.*"), created_by="kernodeck", packages=packages,
        tool={"kernodeck": tool},
    )
    data = made.to_dict()  # asdict deep-copies ~5000 values: once (a third of a second)
    try:
        Pylock.from_dict(data)  # what made.validate() does, without a second to_dict()
    except PylockValidationError as exc:
        raise LockFailed(f"the PEP 751 lock for {plat.id} is not valid ({exc}); not writing it") from None
    text = dumps(data, f"PEP 751 lock for {plat.id}, written by Kernodeck beside {plat.lock_name} (same pins, same "
                       "hashes); do not edit by hand.")
    if strip_credentials(text) != text:
        raise LockFailed(f"the PEP 751 lock for {plat.id} would hold a URL credential; not writing it")
    if tomllib.loads(text) != data:
        raise LockFailed(f"the PEP 751 lock for {plat.id} does not read back as written; not writing it")
    return text


def _file_fields(entry: DistFile) -> dict[str, Any]:
    return {
        "name": entry.filename, "url": strip_credentials(entry.url), "size": entry.size or None,
        "upload_time": entry.upload_time.astimezone(_dt.UTC) if entry.upload_time is not None else None,
        "hashes": {"sha256": entry.sha256},
    }


# The order of a file's keys in the tables Kernodeck writes (the PEP's data model puts upload-time before url; the
# committed locks were written in this order and stay byte-identical).
_FILE_KEYS = ("name", "url", "path", "upload-time", "size", "hashes")


def _inline(table: dict[str, Any]) -> Any:
    import tomlkit

    inline = tomlkit.inline_table()
    for key in sorted(table, key=lambda k: _FILE_KEYS.index(k) if k in _FILE_KEYS else len(_FILE_KEYS)):
        value = table[key]
        inline.append(key, _inline(value) if isinstance(value, dict) else value)
    return inline


def dumps(lock: Pylock | Mapping[str, Any], header: str) -> str:
    """The TOML text of a pylock (or of its ``to_dict()``), written by tomlkit: top-level keys, one ``[[packages]]``
    table each, a file as an inline table (the wheels one per line), then ``[tool.*]``. Deterministic: the same data
    gives the same bytes."""
    import tomlkit

    data = dict(lock.to_dict() if isinstance(lock, Pylock) else lock)
    doc = tomlkit.document()
    doc.add(tomlkit.comment(header))
    for key, value in data.items():
        if key not in ("packages", "tool"):
            doc.add(key, value)
    packages = tomlkit.aot()
    for package in data["packages"]:
        table = tomlkit.table()
        for key, value in package.items():
            if key == "sdist":
                table.add(key, _inline(value))
            elif key == "wheels":
                wheels = tomlkit.array()
                wheels.extend(_inline(w) for w in value)
                table.add(key, wheels.multiline(True))
            else:
                table.add(key, value)
        packages.append(table)
    doc.add(tomlkit.nl())
    doc.add("packages", packages)
    if data.get("tool"):
        tool = tomlkit.table(is_super_table=True)
        for name, section in data["tool"].items():
            tool.add(name, section)
        doc.add("tool", tool)
    return tomlkit.dumps(doc)


def read(pylock_path: Path) -> Pylock:
    """A pylock read and validated by :mod:`packaging.pylock`; raises :class:`LockfileError` naming what is wrong.

    Read once per file state (path, size, mtime): a lock check reads the twin's digest and its packages.
    """
    try:
        stat = pylock_path.stat()
        key = (str(pylock_path), stat.st_size, stat.st_mtime_ns)
        if key not in _READ:
            _READ.clear()
            _READ[key] = Pylock.from_dict(tomllib.loads(pylock_path.read_text(encoding="utf-8")))
        return _READ[key]
    except (OSError, UnicodeDecodeError) as exc:
        raise LockfileError(pylock_path.name, None, f"cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LockfileError(pylock_path.name, None, f"is not TOML: {exc}") from None
    except PylockValidationError as exc:
        raise LockfileError(pylock_path.name, None, f"is not a valid PEP 751 lock: {exc}") from None


_READ: dict[tuple[str, int, int], Pylock] = {}


def package_files(package: Package) -> list[PackageWheel | PackageSdist]:
    return [*(package.wheels or ()), *([package.sdist] if package.sdist else [])]


def build(lock_text: str, path: Path, plat: Platform, machine: list[Source], *, no_index: bool,
          fetcher: Fetcher | None = None, known: dict[str, DistFile] | None = None) -> str:
    """The pylock text for a requirements lock's text (not yet written)."""
    lock = lockfile.parse_text(lock_text, path)
    files = locate(lock.pins, plat, machine, no_index=no_index, fetcher=fetcher, known=known)
    text = render(lock, plat, files, lock_text)
    log(f"kernodeck: PEP 751 lock for {plat.id}: {len(lock.pins)} packages, "
        f"{sum(len(v) for v in files.values())} files")
    return text


def recorded_digest(pylock_path: Path) -> str | None:
    """The requirements-lock digest a pylock was written for (None when it records none or cannot be read)."""
    try:
        tool = read(pylock_path).tool or {}
    except LockfileError:
        return None
    value = tool.get("kernodeck", {}).get("requirements-lock-sha256")
    return value if isinstance(value, str) else None


def disagreements(pylock_path: Path, lock: lockfile.Lockfile, limit: int = 5) -> list[str]:
    """Where the PEP 751 twin and the requirements lock disagree: a package only in one, another version, other
    hashes. Empty when they hold the same pins and hashes."""
    try:
        data = read(pylock_path)
    except LockfileError as exc:
        return [str(exc)]
    twin: dict[str, tuple[str, set[str]]] = {}
    for package in data.packages:
        hashes = {str(e.hashes.get("sha256", "")) for e in package_files(package)}
        twin[package.name] = (str(package.version or ""), hashes)
    pins = {p.name: (p.version, set(p.hashes)) for p in lock.pins}
    found: list[str] = []
    for name in sorted(set(pins) | set(twin)):
        if name not in twin:
            found.append(f"{name} is pinned in {lock.path.name} but not in {pylock_path.name}")
        elif name not in pins:
            found.append(f"{name} is in {pylock_path.name} but not pinned in {lock.path.name}")
        elif pins[name][0] != twin[name][0]:
            found.append(f"{name}: {pins[name][0]} in {lock.path.name}, {twin[name][0]} in {pylock_path.name}")
        elif pins[name][1] != twin[name][1]:
            found.append(f"{name} {pins[name][0]}: other hashes in {lock.path.name} than in {pylock_path.name}")
    return found[:limit] + ([f"… and {len(found) - limit} more"] if len(found) > limit else [])
