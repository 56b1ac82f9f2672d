"""Package sources: the machine's own (pip config, PIP_*/UV_* variables) kept apart from anything written.

A lockfile or dossier never holds an index URL, a find-links path or a credential of the machine that made it.
Remote sources are recorded as scheme and host only; local ones (paths, ``file://``) only as what kind of source
they are. pip's configuration is read here the way pip reads it (its files, ``PIP_CONFIG_FILE``, ``PIP_*``
variables; several values per option, one per line or space-separated), so no pip is needed to know it.

Every text Kernodeck writes is checked against the values of every source and credential variable (:func:`needles`)
before it is written; what it prints from its subprocesses goes through :func:`redact_text`.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import KernodeckError

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s'\"`]+)@")
_QUERY = re.compile(r"(?P<url>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"`?#<>]*)\?[^\s'\"`#<>]*")
PYPI = "https://pypi.org/simple"
_PUBLIC = (PYPI, "https://pypi.org", "https://files.pythonhosted.org")

# pip's option names of a package source, and the variables that set sources for pip and uv.
_PIP_KEYS = ("index-url", "extra-index-url", "find-links")
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
SOURCE_VARS = tuple(_ENV_KEYS)
MIRROR_PREFIX = "KERNODECK_INDEX_"
# Credential variables: uv's per-index ones, pip's client certificate, any *TOKEN*/*PASSWORD* of pip, uv or Kernodeck.
_CREDENTIAL_VAR = re.compile(r"^(PIP|UV|KERNODECK)_\w*(PASSWORD|TOKEN|SECRET|CLIENT_CERT)\w*$")


def redact_url(url: str) -> str:
    """``https://user:secret@host/x?token=t`` -> ``https://***@host/x?***``; local paths become a placeholder."""
    if is_local(url):
        return "<local>"
    return _redact_generic(url)


def strip_credentials(url: str) -> str:
    """``https://user:secret@host/x`` -> ``https://host/x``: a URL fit to write into a file meant to be used (the
    installer gets credentials from its keyring, netrc or variables at install time)."""
    return _USERINFO.sub(lambda m: m.group("scheme"), url)


def public_url(url: str) -> str:
    """A declared (public) URL as it may be written: no userinfo, no query, no fragment."""
    parts = urllib.parse.urlsplit(strip_credentials(url))
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def host_of(url: str) -> str:
    """``https://u:p@host:8443/tok/simple?x`` -> ``https://host:8443``: all that is recorded of a remote source."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}" if host else "<remote>"


def _redact_generic(text: str) -> str:
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)
    return _QUERY.sub(lambda m: f"{m.group('url')}?***", text)


def is_local(location: str) -> bool:
    return location.startswith(("file:", "/", ".", "~")) or bool(re.match(r"^[A-Za-z]:[\\/]", location))


@dataclass(frozen=True)
class Source:
    kind: str  # "index-url" | "extra-index-url" | "find-links"
    location: str

    def redacted(self) -> str:
        """What a written file may say of it: its kind and, for a remote one, scheme and host only."""
        where = "<local path>" if is_local(self.location) else host_of(self.location)
        return f"{self.kind} {where}"


# --- pip's configuration, read as pip reads it (pip/_internal/configuration.py) -----------------------------------


def pip_config_files() -> list[Path]:
    """pip's configuration files in the order pip loads them (later ones override earlier ones)."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if env_file == os.devnull:
        return []  # pip skips every file when PIP_CONFIG_FILE is os.devnull
    files: list[Path] = []
    if sys.platform == "darwin":
        files.append(Path("/Library/Application Support/pip/pip.conf"))
    elif os.name == "nt":
        files.append(Path(os.environ.get("PROGRAMDATA", "C:\\ProgramData")) / "pip" / "pip.ini")
    else:
        dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        files += [Path(d) / "pip" / "pip.conf" for d in dirs.split(os.pathsep) if d]
        files.append(Path("/etc/pip.conf"))
    if not (env_file and os.path.exists(env_file)):  # pip reads no user file when PIP_CONFIG_FILE exists
        home = Path(os.path.expanduser("~"))
        if os.name == "nt":
            files += [home / "pip" / "pip.ini", Path(os.environ.get("APPDATA", home)) / "pip" / "pip.ini"]
        else:
            files.append(home / ".pip" / "pip.conf")
            if sys.platform == "darwin":
                files.append(home / "Library" / "Application Support" / "pip" / "pip.conf")
            xdg = os.environ.get("XDG_CONFIG_HOME") or str(home / ".config")
            files.append(Path(xdg) / "pip" / "pip.conf")
    files.append(Path(sys.prefix) / ("pip.ini" if os.name == "nt" else "pip.conf"))
    if env_file:
        files.append(Path(env_file))
    return files


def _normal(name: str) -> str:
    name = name.lower().replace("_", "-")
    return name[2:] if name.startswith("--") else name


def _file_items() -> list[tuple[str, str, str]]:
    """(section, option, value) of every pip configuration file, in load order."""
    items: list[tuple[str, str, str]] = []
    for path in pip_config_files():
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error, UnicodeDecodeError):
            continue
        for section in parser.sections():
            items += [(section, _normal(key), value) for key, value in parser.items(section)]
    return items


def pip_config(command: str = "install") -> list[tuple[str, str]]:
    """pip's settings for ``command`` as (option, value) pairs in pip's override order: ``[global]`` of every file,
    then ``[command]`` of every file, then the ``PIP_*`` variables. The last pair of an option is the one pip uses."""
    items = _file_items()
    ordered = [(key, value) for section, key, value in items if section == "global"]
    ordered += [(key, value) for section, key, value in items if section == command]
    ordered += [(_normal(var[4:]), value) for var, value in os.environ.items()
                if var.startswith("PIP_") and var not in ("PIP_VERSION", "PIP_HELP", "PIP_CONFIG_FILE")]
    return ordered


def _effective(config: list[tuple[str, str]]) -> dict[str, str]:
    return dict(config)  # the last value of each option wins, as in pip


def _split(value: str, commas: bool = False) -> list[str]:
    """Several values of one option: pip splits on any whitespace (one per line or space-separated); uv's
    find-links variable takes commas."""
    return [v for v in re.split(r"[\s,]+" if commas else r"\s+", value.strip()) if v]


def _uv_index_url(entry: str) -> str:
    """``UV_INDEX`` entries may be ``name=url``."""
    name, sep, url = entry.partition("=")
    return url if sep and "://" not in name and not is_local(name) else entry


def machine_sources(config: list[tuple[str, str]] | None = None) -> list[Source]:
    """The package sources this machine's pip (config files and PIP_* variables) and uv variables point at."""
    settings = _effective(pip_config() if config is None else config)
    found = [Source(key, loc) for key in _PIP_KEYS for loc in _split(settings.get(key, ""))]
    for var, kind in _ENV_KEYS.items():
        if var.startswith("UV_"):
            for loc in _split(os.environ.get(var, ""), commas=var == "UV_FIND_LINKS"):
                found.append(Source(kind, _uv_index_url(loc) if var == "UV_INDEX" else loc))
    unique: dict[tuple[str, str], Source] = {(s.kind, s.location): s for s in found}
    return list(unique.values())


_TRUE = ("1", "true", "yes", "y", "on", "t")


def pip_no_index(config: list[tuple[str, str]] | None = None) -> bool:
    """Whether this machine's pip is told to use no index at all (``PIP_NO_INDEX`` or ``no-index`` in its config)."""
    if os.environ.get("UV_NO_INDEX", "").strip().lower() in _TRUE:
        return True
    settings = _effective(pip_config() if config is None else config)
    return settings.get("no-index", "").strip().lower() in _TRUE


# --- a variant's index, or its mirror --------------------------------------------------------------------------


def mirror_var(variant: str) -> str:
    """``cpu`` -> ``KERNODECK_INDEX_CPU``: the variable that replaces a variant's declared index."""
    return MIRROR_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", variant).upper()


@dataclass(frozen=True)
class VariantIndex:
    """Where a variant's torch layer comes from: its declared public index, or the mirror that replaces it."""

    variant: str
    declared: str
    mirror: str | None = None

    @property
    def url(self) -> str:
        return self.mirror or self.declared

    @property
    def var(self) -> str:
        return mirror_var(self.variant)

    @property
    def is_pypi(self) -> bool:
        return self.url.rstrip("/") == PYPI

    def describe(self) -> str:
        """How a message, a report or procedure.md may name it (a mirror by its variable only, never URL or host)."""
        if self.mirror:
            return f"the {self.variant} variant's index, replaced by the mirror in {self.var}"
        return f"the {self.variant} variant's index {public_url(self.declared)}"

    def shown(self) -> str:
        """The index as a recorded command shows it: the declared URL, or the variable holding the mirror."""
        return f"${self.var}" if self.mirror else public_url(self.declared)

    def expandable(self, command: str) -> str:
        """A recorded (shlex-quoted) command with the mirror's variable left for the shell to expand."""
        return command.replace(f"'${self.var}'", f'"${self.var}"') if self.mirror else command


def variant_index(variant: str, declared: str) -> VariantIndex:
    mirror = os.environ.get(mirror_var(variant), "").strip() or None
    return VariantIndex(variant, declared, mirror)


def index_args(index: VariantIndex) -> list[str]:
    """The installer option that names the variant's index (pip and uv spell it alike); none for PyPI."""
    return [] if index.is_pypi else ["--extra-index-url", index.url]


def uv_environment(sources: list[Source], extra_index: bool = False) -> dict[str, str]:
    """Hand the machine's pip sources to uv through its own variables (nothing lands in an argv or a file), each in
    uv's syntax: ``UV_INDEX`` space-separated, ``UV_FIND_LINKS`` comma-separated."""
    env: dict[str, str] = {}
    index = [s.location for s in sources if s.kind == "index-url"]
    extra = [s.location for s in sources if s.kind == "extra-index-url"]
    links = [s.location for s in sources if s.kind == "find-links"]
    if index:
        env["UV_DEFAULT_INDEX"] = index[-1]
    if extra:
        env["UV_INDEX"] = " ".join(extra)
    if links:
        env["UV_FIND_LINKS"] = ",".join(links)
    if extra_index or len(index) + len(extra) + len(links) > 0:
        # Several indexes may serve the same name (a local mirror beside PyPI, PyTorch's index serving numpy): take
        # the best match, as pip does. The lock's hashes decide which file is accepted, whatever index serves it.
        env["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return env


def indexes_asked(sources: list[Source], index: VariantIndex | None, no_index: bool = False,
                  unreachable: str = "") -> str:
    """The sources an install asked, as an error may name them (hosts, never paths or credentials)."""
    asked: list[str] = []
    replaced = [s for s in sources if s.kind == "index-url"]
    if no_index:
        asked.append("no index (no-index)")
    elif replaced:
        asked.append(f"this machine's index-url ({host_of(replaced[-1].location)})"
                     if not is_local(replaced[-1].location) else "this machine's index-url (a local path)")
    else:
        asked.append(PYPI)
    if index is not None and not index.is_pypi:
        asked.append(f"{index.describe()} (not asked: unreachable from here, {unreachable})" if unreachable
                     else index.describe())
    for source in sources:
        if source.kind != "index-url":
            asked.append(f"this machine's {source.redacted()}")
    return "; ".join(dict.fromkeys(asked))


# --- what must never be written ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Needle:
    """A value that must not appear in anything written: where it came from, and whether it is a local path."""

    value: str
    origin: str
    local: bool = False
    part: bool = False  # a secret part of a URL (userinfo, password, query, token-like path segment)


_TOKENISH = re.compile(r"^(?=[^/]*\d)(?=[^/]*[A-Za-z])[A-Za-z0-9_\-.~%=+]{8,}$")
_VERSIONISH = re.compile(r"^(v?\d+([._-]\d+)*|[a-z]+\d+(\.\d+)*)$")


def _secret_parts(url: str) -> list[str]:
    parts = urllib.parse.urlsplit(url)
    found: list[str] = []
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found.append(userinfo)
        user, _, password = userinfo.partition(":")
        found += [password, urllib.parse.unquote(password), user if len(user) >= 8 else ""]
    if parts.query:
        found.append(parts.query)
        found += [v for _, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)]
    if parts.fragment:
        found.append(parts.fragment)
    found += [seg for seg in parts.path.split("/") if _TOKENISH.match(seg) and not _VERSIONISH.match(seg)]
    return [p for p in dict.fromkeys(found) if len(p) >= 4]


def _values(value: str, origin: str, public: set[str], commas: bool = False) -> list[Needle]:
    out: list[Needle] = []
    for loc in _split(value, commas=commas):
        loc = _uv_index_url(loc)
        if is_local(loc):
            path = loc.removeprefix("file://").rstrip("/") or loc
            out += [Needle(v, origin, local=True) for v in dict.fromkeys((loc.rstrip("/"), path)) if len(v) >= 4]
            continue
        bare = loc.rstrip("/")
        parts = _secret_parts(loc)
        has_path = bool(urllib.parse.urlsplit(loc).path.strip("/"))
        if bare not in public and (has_path or parts) and len(bare) >= 4:
            out.append(Needle(bare, origin))
            plain = public_url(loc).rstrip("/")  # the same URL without its userinfo and query: not written either
            if plain != bare and plain not in public and has_path:
                out.append(Needle(plain, origin))
        out += [Needle(p, origin, part=True) for p in parts]
    return out


def needles(public: Iterable[str] = (), declared: Iterable[str] = ()) -> list[Needle]:
    """The values of every source and credential variable and of pip's configured sources (every file, every
    section): none may appear in a written file. ``public`` URLs (PyPI, the project's declared indexes) may.
    ``declared`` URLs (the project's indexes as pyproject.toml spells them) add their secret parts: userinfo, query."""
    allowed = {p.rstrip("/") for p in (*_PUBLIC, *public)}
    found: list[Needle] = [Needle(p, "a declared index's userinfo or query", part=True)
                           for url in declared for p in _secret_parts(url)]
    for var, value in sorted(os.environ.items()):
        if var in _ENV_KEYS:
            found += _values(value, var, allowed, commas=var == "UV_FIND_LINKS")
        elif var.startswith(MIRROR_PREFIX):
            found += _values(value, var, set(_PUBLIC))  # a mirror's URL is never written, even without secrets
        elif _CREDENTIAL_VAR.match(var) and len(value.strip()) >= 4:
            found.append(Needle(value.strip(), var, part=True))
    for section, key, value in _file_items():
        if key in _PIP_KEYS:
            found += _values(value, f"pip configuration ({section}.{key})", allowed)
    unique = {(n.value, n.local): n for n in found}
    return sorted(unique.values(), key=lambda n: -len(n.value))


class SecretInText(KernodeckError):
    """A source or credential of this machine ended up in a text about to be written or shown."""

    tip = ("nothing was written; this is a Kernodeck bug: report it with the file's name "
           "(never the value); meanwhile unset the variable or source named above")


def check_written(text: str, name: str, public: Iterable[str] = (), declared: Iterable[str] = ()) -> None:
    """Refuse to write ``text`` to ``name`` if it holds a value of a source or credential variable (or a secret part
    of a ``declared`` index URL)."""
    for needle in needles(public, declared):
        if needle.value in text:
            what = "a path" if needle.local else "a secret part" if needle.part else "the URL"
            raise SecretInText(f"{what} of a package source or credential ({needle.origin}) ended up in {name}; "
                               "not writing it")


def redact_text(text: str, public: Iterable[str] = ()) -> str:
    """Text fit to print: URL userinfo and query strings masked, every source or credential value replaced (a remote
    source by its host, a secret part by ``***``). Local paths stay (the console is this machine's own)."""
    for needle in needles(public):
        if needle.local or needle.value not in text:
            continue
        if needle.part:
            shown = "***"
        elif needle.origin.startswith(MIRROR_PREFIX):
            shown = f"${needle.origin}"  # a mirror is named by its variable, never its URL or host
        else:
            shown = f"{host_of(needle.value)}/***"
        text = text.replace(needle.value, shown)
    return _redact_generic(text)


def scrub_text(text: str, public: Iterable[str] = ()) -> str:
    """Text fit to write into a dossier: as :func:`redact_text`, and local source paths replaced by a placeholder."""
    for needle in needles(public):
        if needle.local and needle.value in text:
            text = text.replace(needle.value, f"<local source: {needle.origin}>")
    return redact_text(text, public)


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
