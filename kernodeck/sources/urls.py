"""URLs of package sources: what of one may be shown (scheme and host), how it is spelt (normalised), whether it
parses, and whether it answers. Pure functions of their argument: nothing here reads the machine's configuration."""

from __future__ import annotations

import functools
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s'\"`]+)@")
_QUERY = re.compile(r"(?P<url>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"`?#<>]*)\?[^\s'\"`#<>]*")
PYPI = "https://pypi.org/simple"
PUBLIC = (PYPI, "https://pypi.org", "https://files.pythonhosted.org")
DEFAULT_PORT = {"http": 80, "https": 443}


def redact_url(url: str) -> str:
    """``https://user:secret@host/x?token=t`` -> ``https://***@host/x?***``; local paths become a placeholder."""
    if is_local(url):
        return "<local>"
    return redact_generic(url)


def strip_credentials(url: str) -> str:
    """``https://user:secret@host/x`` -> ``https://host/x``: a URL fit to write into a file meant to be used (the
    installer gets credentials from its keyring, netrc or variables at install time)."""
    return _USERINFO.sub(lambda m: m.group("scheme"), url)


def public_url(url: str) -> str:
    """A declared (public) URL as it may be written: no userinfo, no query, no fragment."""
    parts = urllib.parse.urlsplit(strip_credentials(url))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def host_of(url: str) -> str:
    """``https://u:p@host:8443/tok/simple?x`` -> ``https://host:8443``: all that is recorded of a remote source
    (``<remote>`` for a URL that does not parse: nothing of it is shown)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "<remote>"
    shown_port = f":{port}" if port and port != DEFAULT_PORT.get(parts.scheme.lower()) else ""
    return f"{parts.scheme.lower()}://{host}{shown_port}" if host else "<remote>"


def redact_generic(text: str) -> str:
    """Every URL's userinfo and query string in a text masked (``***``), whoever's URL it is."""
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)
    return _QUERY.sub(lambda m: f"{m.group('url')}?***", text)


def is_local(location: str) -> bool:
    """A path or a ``file:`` URL (a Windows drive path included), never a remote source."""
    return location.startswith(("file:", "/", ".", "~")) or bool(re.match(r"^[A-Za-z]:[\\/]", location))


def is_path(location: str) -> bool:
    """A local folder or file, as pip and uv take one (``wheels`` relative to the current folder included)."""
    return is_local(location) or "://" not in location


@dataclass(frozen=True)
class Base:
    """A secret source URL, normalised (scheme and host lower-cased, the default port filled in, the path
    percent-decoded without its trailing slash): every URL under it, however spelt, is secret."""

    scheme: str
    host: str
    port: int | None
    path: str
    origin: str = ""

    def holds(self, other: Base) -> bool:
        same = (self.scheme, self.host, self.port) == (other.scheme, other.host, other.port)
        return same and (other.path == self.path or other.path.startswith(self.path + "/"))


@functools.lru_cache(maxsize=4096)  # pure; a dossier's review normalises the same lock URLs again and again
def normalise(url: str) -> Base | None:
    """``HTTP://Mirror.Corp:80/a%2Db/simple/`` -> ``Base("http", "mirror.corp", 80, "/a-b/simple")``; None for a
    URL that does not parse (a bad port, an unclosed ``[``) or has no host."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
        host = parts.hostname or ""
    except ValueError:
        return None
    if not host:
        return None
    scheme = parts.scheme.lower()
    path = urllib.parse.unquote(parts.path).rstrip("/")
    return Base(scheme, host, port or DEFAULT_PORT.get(scheme), path)


def malformed(url: str) -> str:
    """Why a remote source URL cannot be used ("" when it can): the reason only, never the value."""
    if is_local(url.strip()):
        return ""  # a path or a file: URL (no host)
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return "an unbalanced [ or ] in its host"
    try:
        parts.port  # noqa: B018 (urllib checks the port when it is read)
    except ValueError:
        return "its port is not a number from 0 to 65535"
    if not parts.hostname:
        return "no host"
    return ""


def reachable(url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Whether an index answers, quickly: a lock must say "unreachable", never hang on retries."""
    import urllib.error  # imported here: urllib.request pulls in ssl and http.client, which most commands never use
    import urllib.request

    if is_local(url):
        path = Path(url.removeprefix("file://"))
        return (path.exists(), "" if path.exists() else "no such folder")
    request = urllib.request.Request(url.rstrip("/") + "/", method="HEAD")
    if not url.startswith(("http://", "https://")):
        return False, "not an http(s) or file URL"
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return True, ""
    except urllib.error.HTTPError as exc:
        # The host answered: an index root may refuse HEAD or listing and still serve its packages.
        return exc.code < 500, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        return False, str(reason)
