"""Package sources: the machine's own (pip config, PIP_*/UV_* variables) kept apart from anything written.

A lockfile or dossier never holds an index URL, a find-links path or a credential of the machine that made it.
Sources are recorded redacted; local ones (paths, ``file://``) only as what kind of source they are.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s'\"]+)@")
PYPI = "https://pypi.org/simple"


def redact_url(url: str) -> str:
    """``https://user:secret@host/x`` -> ``https://***@host/x``; local paths become a placeholder."""
    if is_local(url):
        return "<local>"
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", url)


def strip_credentials(url: str) -> str:
    """``https://user:secret@host/x`` -> ``https://host/x``: a URL fit to write into a file meant to be used (the
    installer gets credentials from its keyring, netrc or variables at install time)."""
    return _USERINFO.sub(lambda m: m.group("scheme"), url)


def redact_text(text: str) -> str:
    """Strip the user:password part of every URL in free text."""
    return _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)


def is_local(location: str) -> bool:
    return location.startswith(("file:", "/", ".", "~")) or bool(re.match(r"^[A-Za-z]:[\\/]", location))


@dataclass(frozen=True)
class Source:
    kind: str  # "index-url" | "extra-index-url" | "find-links"
    location: str

    def redacted(self) -> str:
        where = "<local path>" if is_local(self.location) else redact_url(self.location)
        return f"{self.kind} {where}"


_PIP_KEYS = {"index-url": "index-url", "extra-index-url": "extra-index-url", "find-links": "find-links"}
_ENV_KEYS = {
    "PIP_INDEX_URL": "index-url",
    "PIP_EXTRA_INDEX_URL": "extra-index-url",
    "PIP_FIND_LINKS": "find-links",
    "UV_INDEX_URL": "index-url",
    "UV_DEFAULT_INDEX": "index-url",
    "UV_EXTRA_INDEX_URL": "extra-index-url",
    "UV_INDEX": "extra-index-url",
    "UV_FIND_LINKS": "find-links",
}


def pip_config(python: str = sys.executable) -> list[tuple[str, str]]:
    """This machine's pip settings as (option, value) pairs, from ``pip config list`` (files and PIP_* variables)."""
    try:
        out = subprocess.run(
            [python, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    pairs = []
    for line in out.splitlines():
        key, _, value = line.partition("=")
        pairs.append((key.rsplit(".", 1)[-1], value.strip().strip("'\"")))
    return pairs


def machine_sources(python: str = sys.executable, config: list[tuple[str, str]] | None = None) -> list[Source]:
    """The package sources this machine's pip (config files and PIP_* variables) and uv variables point at."""
    found: list[Source] = []
    for name, value in pip_config(python) if config is None else config:
        if name in _PIP_KEYS:
            for loc in value.split():
                found.append(Source(_PIP_KEYS[name], loc))
    for var, kind in _ENV_KEYS.items():
        for loc in os.environ.get(var, "").split():
            found.append(Source(kind, loc))
    unique: dict[tuple[str, str], Source] = {(s.kind, s.location): s for s in found}
    return list(unique.values())


_TRUE = ("1", "true", "yes", "y", "on", "t")


def pip_no_index(python: str = sys.executable, config: list[tuple[str, str]] | None = None) -> bool:
    """Whether this machine's pip is told to use no index at all (``PIP_NO_INDEX`` or ``no-index`` in its config)."""
    if os.environ.get("PIP_NO_INDEX", "").strip().lower() in _TRUE:
        return True
    if os.environ.get("UV_NO_INDEX", "").strip().lower() in _TRUE:
        return True
    pairs = pip_config(python) if config is None else config
    return any(name == "no-index" and value.lower() in _TRUE for name, value in pairs)


def secrets_in_environment() -> list[str]:
    """Credential strings present in source variables (for scanning written files in tests and the dossier)."""
    secrets: list[str] = []
    for var in _ENV_KEYS:
        for loc in os.environ.get(var, "").split():
            match = _USERINFO.search(loc)
            if match:
                userinfo = match.group("userinfo")
                secrets.append(userinfo)
                if ":" in userinfo:  # user:password -> the password alone is secret too
                    secrets.append(userinfo.split(":", 1)[1])
    return secrets


def uv_environment(sources: list[Source]) -> dict[str, str]:
    """Hand the machine's pip sources to uv through its own variables: nothing lands in an argv or a file."""
    env: dict[str, str] = {}
    index = [s.location for s in sources if s.kind == "index-url"]
    extra = [s.location for s in sources if s.kind == "extra-index-url"]
    links = [s.location for s in sources if s.kind == "find-links"]
    if index:
        env["UV_DEFAULT_INDEX"] = index[-1]
    if extra:
        env["UV_INDEX"] = " ".join(extra)
    if links:
        env["UV_FIND_LINKS"] = " ".join(links)
    if len(index) + len(extra) + len(links) > 0:
        # Several indexes may serve the same name (a local mirror beside PyPI): take the best match, as pip does.
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def reachable(url: str, timeout: float = 5.0) -> tuple[bool, str]:
    """Whether an index answers, quickly: a lock must say "unreachable", never hang on retries."""
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
