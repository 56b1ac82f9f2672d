"""``nox -s fetch``: every declared ``url`` source (weights and data) into the content-addressed cache.

The cache (``KERNODECK_CACHE``, default ``~/.cache/kernodeck``; the in-env side finds files at the same place,
``kernodeck/inenv/locate.py``) holds each file at ``sha256/<digest>/<name>``: a file is kept only under the digest its
declaration pins. A download streams into a temporary file beside its final name, hashed as it arrives; only a
complete file with the declared sha256 is moved into place (``os.replace``), a wrong one is removed (only that
download) and is an error in layer ``weights``. A ``token-env`` variable's value is sent as a bearer token and
never printed or written.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernodeck import tips
from kernodeck._fs import sha256_file
from kernodeck._proc import log
from kernodeck.errors import KernodeckError
from kernodeck.project import app_contract
from kernodeck.project.assets import Source, SourceKind, public_url
from kernodeck.project.config import Project

_BLOCK = 1 << 20


def cache_root() -> Path:
    """``KERNODECK_CACHE``, else the user's cache folder (the in-env side computes the same)."""
    if os.environ.get("KERNODECK_CACHE"):
        return Path(os.environ["KERNODECK_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "kernodeck"


def url_name(src: Source) -> str:
    """The file name a URL source is kept under (``kernodeck/inenv/locate.py``'s ``url_name``)."""
    return str(src.declared.get("name") or str(src.declared["url"]).rstrip("/").rsplit("/", 1)[-1] or "file")


def cached_path(src: Source) -> Path:
    return cache_root() / "sha256" / str(src.declared["sha256"]) / url_name(src)


class FetchError(KernodeckError):
    """A URL source that could not be fetched as declared."""


@dataclass(frozen=True)
class Fetched:
    role: str
    path: Path
    downloaded: bool  # False: already in the cache with its sha256


def url_sources(project: Project) -> list[Source]:
    """The declared ``url`` sources, weights first, then data by name."""
    app = app_contract.load(project.root)
    found = [app.weights] if app.weights is not None else []
    found += [app.data[name] for name in sorted(app.data)]
    return [src for src in found if src.kind is SourceKind.URL]


def _request(src: Source) -> urllib.request.Request:
    headers = {"User-Agent": "kernodeck-fetch"}
    var = src.declared.get("token-env")
    if var and os.environ.get(str(var)):
        headers["Authorization"] = f"Bearer {os.environ[str(var)]}"
    return urllib.request.Request(str(src.declared["url"]), headers=headers)


class _SameHostAuthorization(urllib.request.HTTPRedirectHandler):
    """A redirect keeps the bearer token only to the same scheme, host and port: urllib's own handler copies every
    header to wherever the server redirects (a release asset's redirect to object storage, another host), which hands
    the token to that host (and object storage refuses a request carrying two credentials)."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            old, moved = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(new.full_url)
            if (old.scheme, old.hostname, old.port) != (moved.scheme, moved.hostname, moved.port):
                new.remove_header("Authorization")
        return new


def _open(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.build_opener(_SameHostAuthorization).open(request, timeout=timeout)


def _refused(src: Source, status: int) -> FetchError:
    var = src.declared.get("token-env")
    shown = public_url(str(src.declared["url"]))
    if var and not os.environ.get(str(var)):
        why = f"the variable {var} (token-env) is not set"
        tip = f"set {var} to a token that may read {shown}, then: {tips.FETCH}"
    elif var:
        why = f"the token in {var} was refused"
        tip = f"give {var} a token that may read {shown}, then: {tips.FETCH}"
    else:
        why = "no token-env is declared"
        tip = f'declare token-env = "NAME" in {src.where} and set NAME, then: {tips.FETCH}'
    return FetchError(f"{src.where}: {shown} answered HTTP {status}: {why}", tip=tip)


def fetch_one(src: Source, timeout: float = 60) -> Fetched:
    """One URL source into the cache, hash-checked; a file already there with its sha256 is kept."""
    final = cached_path(src)
    want = str(src.declared["sha256"])
    if final.is_file() and sha256_file(final) == want:
        return Fetched(src.role, final, downloaded=False)
    final.parent.mkdir(parents=True, exist_ok=True)
    part = final.with_name(f".{final.name}.part-{os.getpid()}")
    shown = public_url(str(src.declared["url"]))
    log(f"fetch {src.role}: {shown} -> {final}")
    digest = hashlib.sha256()
    try:
        with _open(_request(src), timeout) as response, part.open("wb") as out:
            while block := response.read(_BLOCK):
                digest.update(block)
                out.write(block)
    except urllib.error.HTTPError as exc:
        part.unlink(missing_ok=True)
        if exc.code in (401, 403):
            raise _refused(src, exc.code) from None
        raise FetchError(f"{src.where}: {shown} answered HTTP {exc.code}", tip=tips.FETCH) from None
    except (urllib.error.URLError, OSError) as exc:
        part.unlink(missing_ok=True)
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"{src.where}: {shown} could not be fetched ({type(exc).__name__}: {reason})",
                         tip=f"check the network, then: {tips.FETCH}") from None
    if digest.hexdigest() != want:
        part.unlink(missing_ok=True)
        raise FetchError(f"{src.where}: {shown} has sha256 {digest.hexdigest()}, not the declared {want}; "
                         "the download was removed", tip=f"check {src.where}.sha256 (or the URL), then: {tips.FETCH}")
    os.replace(part, final)
    return Fetched(src.role, final, downloaded=True)


def fetch(project: Project) -> list[Fetched]:
    """Every declared URL source into the cache."""
    return [fetch_one(src) for src in url_sources(project)]
