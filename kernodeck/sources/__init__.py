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
from typing import Any

from kernodeck.errors import KernodeckError

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
# Other variables holding a URL pip or uv fetches from (uv's Python download mirrors, publish targets; the proxies
# both honour): never written either, and their userinfo never shown.
_URL_VARS = ("PIP_INDEX", "PIP_PROXY", "UV_PYTHON_INSTALL_MIRROR", "UV_PYPY_INSTALL_MIRROR",
             "UV_PYTHON_DOWNLOADS_JSON_URL", "UV_PUBLISH_URL", "UV_PUBLISH_CHECK_URL",
             "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
# Credential variables: uv's per-index ones (UV_INDEX_<NAME>_USERNAME/_PASSWORD), pip's client certificate, any
# *TOKEN*/*PASSWORD* of pip, uv or Kernodeck.
_CREDENTIAL_VAR = re.compile(r"^(PIP|UV|KERNODECK)_\w*(PASSWORD|TOKEN|SECRET|CLIENT_CERT|USERNAME)\w*$")
# uv's settings (uv.toml, [tool.uv], and their [pip] table) that name a URL or a folder uv reads packages from.
_UV_KEYS = ("index-url", "extra-index-url", "find-links", "python-install-mirror", "pypy-install-mirror",
            "python-downloads-json-url", "publish-url", "check-url")
_DEFAULT_PORT = {"http": 80, "https": 443}


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
    """``https://u:p@host:8443/tok/simple?x`` -> ``https://host:8443``: all that is recorded of a remote source
    (``<remote>`` for a URL that does not parse: nothing of it is shown)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        return "<remote>"
    shown_port = f":{port}" if port and port != _DEFAULT_PORT.get(parts.scheme.lower()) else ""
    return f"{parts.scheme.lower()}://{host}{shown_port}" if host else "<remote>"


def _redact_generic(text: str) -> str:
    text = _USERINFO.sub(lambda m: f"{m.group('scheme')}***@", text)
    return _QUERY.sub(lambda m: f"{m.group('url')}?***", text)


def is_local(location: str) -> bool:
    return location.startswith(("file:", "/", ".", "~")) or bool(re.match(r"^[A-Za-z]:[\\/]", location))


def _is_path(location: str) -> bool:
    """A local folder or file, as pip and uv take one (``wheels`` relative to the current folder included)."""
    return is_local(location) or "://" not in location


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


# --- uv's configuration files (docs.astral.sh/uv/concepts/configuration-files) -----------------------------------


def uv_config_files(cwd: Path | None = None) -> list[Path]:
    """Every uv configuration file uv may read here: ``UV_CONFIG_FILE``, the project's (``uv.toml`` or a
    ``pyproject.toml`` with ``[tool.uv]`` in the nearest folder up from ``cwd`` that has one), the user's and the
    system's. All of them, whatever ``UV_NO_CONFIG`` says: a source is kept secret wherever uv could find it."""
    files: list[Path] = []
    if os.environ.get("UV_CONFIG_FILE"):
        files.append(Path(os.environ["UV_CONFIG_FILE"]))
    try:
        folder = (cwd or Path.cwd()).resolve()
    except OSError:  # the current folder was removed: no project file to find
        folder = None
    for parent in (folder, *folder.parents) if folder else ():
        found = [f for f in (parent / "uv.toml", parent / "pyproject.toml") if f.is_file()]
        if (parent / "uv.toml").is_file() or any(_has_tool_uv(f) for f in found if f.name == "pyproject.toml"):
            files += found
            break
    home = Path(os.path.expanduser("~"))
    if os.name == "nt":
        files.append(Path(os.environ.get("APPDATA", home)) / "uv" / "uv.toml")
        files.append(Path(os.environ.get("SYSTEMDRIVE", "C:") + "\\") / "ProgramData" / "uv" / "uv.toml")
    else:
        files.append(Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "uv" / "uv.toml")
        dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        files += [Path(d) / "uv" / "uv.toml" for d in dirs.split(os.pathsep) if d]
        files.append(Path("/etc/uv/uv.toml"))
    return list(dict.fromkeys(files))


def _read_toml(path: Path) -> dict[str, Any]:
    import tomllib

    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}  # uv itself refuses a broken file; nothing of it can reach a text


def _has_tool_uv(pyproject: Path) -> bool:
    try:
        return "[tool.uv" in pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def _uv_settings_urls(table: dict[str, Any], where: str) -> list[tuple[str, str]]:
    """(origin, value) of each source a uv settings table names: its keys, its ``[pip]`` table, ``[[index]]``."""
    found: list[tuple[str, str]] = []
    for scope, settings in (("", table), ("pip.", table.get("pip"))):
        if not isinstance(settings, dict):
            continue
        for key in _UV_KEYS:
            values = settings.get(key)
            for value in values if isinstance(values, list) else [values]:
                if isinstance(value, str) and value.strip():
                    found.append((f"{where} {scope}{key}", value))
    indexes = table.get("index")
    for entry in indexes if isinstance(indexes, list) else []:
        for key in ("url", "publish-url"):
            if isinstance(entry, dict) and isinstance(entry.get(key), str):
                found.append((f"{where} index.{key}", entry[key]))
    return found


def uv_config_sources(cwd: Path | None = None) -> list[tuple[str, str]]:
    """(origin, value) of every source in every uv configuration file uv may read here."""
    found: list[tuple[str, str]] = []
    for path in uv_config_files(cwd):
        if not path.is_file():
            continue
        data = _read_toml(path)
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("uv", {})
            if not isinstance(data, dict):
                continue
        found += _uv_settings_urls(data, f"uv configuration {path}")
    return found


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
    shown: str = ""  # what the console shows instead (a remote source's scheme and host, or a mirror's variable)


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
    return Base(scheme, host, port or _DEFAULT_PORT.get(scheme), path)


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


_TOKENISH = re.compile(r"^(?=[^/]*\d)(?=[^/]*[A-Za-z])[A-Za-z0-9_\-.~%=+]{8,}$")
# A path segment without digits still reads as a token when it is long and mixes cases with no word separator
# (``AbCdEfGhIjKlMnOpQrSt``); ``sentence-transformers`` or ``simple`` do not.
_MIXED_TOKEN = re.compile(r"^(?=[^/]*[a-z])(?=[^/]*[A-Z])[A-Za-z0-9_~]{12,}$")
_VERSIONISH = re.compile(r"^(v?\d+([._-]\d+)*|[a-z]+\d+(\.\d+)*)$")


def _encodings(value: str) -> list[str]:
    """A value as it may be spelt in a URL: as given, percent-decoded, percent-encoded."""
    plain = urllib.parse.unquote(value)
    return list(dict.fromkeys((value, plain, urllib.parse.quote(plain, safe=""), urllib.parse.quote(plain))))


def _secret_parts(url: str) -> list[str]:
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return []
    found: list[str] = []
    userinfo = parts.netloc.rpartition("@")[0]
    if userinfo:
        found.append(userinfo)
        user, _, password = userinfo.partition(":")
        found += [*_encodings(password), *(_encodings(user) if len(user) >= 8 else [])]
    if parts.query:
        found.append(parts.query)
        found += [e for _, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) for e in _encodings(v)]
    if parts.fragment:
        found.append(parts.fragment)
    for segment in parts.path.split("/"):
        plain = urllib.parse.unquote(segment)
        if (_TOKENISH.match(segment) or _MIXED_TOKEN.match(plain)) and not _VERSIONISH.match(plain):
            found += _encodings(segment)
    return [p for p in dict.fromkeys(found) if len(p) >= 4]


def _spellings(url: str, base: Base) -> list[str]:
    """The URL's host and path as a text may spell them, without scheme or userinfo: the host as given and
    lower-cased; the default port dropped or added; the path as given, decoded or encoded; no trailing slash."""
    parts = urllib.parse.urlsplit(url.strip())
    given_host = parts.netloc.rpartition("@")[2].rsplit(":", 1)[0] if parts.port else parts.netloc.rpartition("@")[2]
    hosts = dict.fromkeys((given_host, given_host.lower(), base.host))
    default = _DEFAULT_PORT.get(base.scheme)
    ports = {f":{base.port}" if base.port else ""}
    if base.port == default:
        ports |= {"", f":{default}"}
    spelt = [*_encodings(parts.path.rstrip("/") or "/"), urllib.parse.quote(base.path, safe="/")]
    paths = dict.fromkeys(p.rstrip("/") for p in spelt)
    return [f"{h}{p}{path}" for h in hosts for p in sorted(ports) for path in paths if path]


@dataclass(frozen=True)
class Secrets:
    """What must never be written, read once from every source: plain needles and normalised URL bases."""

    needles: tuple[Needle, ...]
    bases: tuple[Base, ...]
    public: tuple[Base, ...]

    def secret_base(self, url: str) -> Base | None:
        """The secret source a URL in a text lies under (the most specific of the secret and public ones wins)."""
        found = normalise(url)
        if found is None:
            return None
        secret = max((b for b in self.bases if b.holds(found)), key=lambda b: len(b.path), default=None)
        if secret is None:
            return None
        public = max((len(b.path) for b in self.public if b.holds(found)), default=-1)
        return secret if len(secret.path) > public else None


def source_values() -> list[tuple[str, str, bool]]:
    """(origin, value, comma-separated) of every package source pip or uv reads here: their variables
    (``PIP_*``, ``UV_*``, proxies), ``KERNODECK_INDEX_*``, pip's files (every file, every section), uv's files."""
    found: list[tuple[str, str, bool]] = []
    for var, value in sorted(os.environ.items()):
        if var in _ENV_KEYS or var in _URL_VARS or var.startswith(MIRROR_PREFIX):
            found.append((var, value, var == "UV_FIND_LINKS"))
    for section, key, value in _file_items():
        if key in _PIP_KEYS or key in ("index", "proxy"):
            found.append((f"pip configuration [{section}] {key}", value, False))
    found += [(origin, value, False) for origin, value in uv_config_sources()]
    return found


def _values(
    value: str, origin: str, public: tuple[Base, ...], commas: bool = False
) -> tuple[list[Needle], list[Base]]:
    needles_: list[Needle] = []
    bases: list[Base] = []
    for loc in _split(value, commas=commas):
        loc = _uv_index_url(loc)
        if _is_path(loc):
            path = loc.removeprefix("file://").rstrip("/") or loc
            spelt = (loc.rstrip("/"), path, urllib.parse.unquote(path))
            needles_ += [Needle(v, origin, local=True) for v in dict.fromkeys(spelt) if len(v) >= 4]
            continue
        parts = _secret_parts(loc)
        needles_ += [Needle(p, origin, part=True) for p in parts]
        base = normalise(loc)
        if base is None:  # a malformed value: all of it is secret (the command refuses it, naming the variable)
            needles_.append(Needle(loc, origin, part=True))
            continue
        base = Base(base.scheme, base.host, base.port, base.path, origin)
        if not base.path or any(p.holds(base) and p.path == base.path for p in public):
            continue  # a host alone, or a public index, may be named
        bases.append(base)
        shown = f"${origin}" if origin.startswith(MIRROR_PREFIX) else f"{host_of(loc).split('://', 1)[-1]}/***"
        needles_ += [Needle(s, origin, shown=shown) for s in _spellings(loc, base) if len(s) >= 4]
    return needles_, bases


_CACHE: dict[tuple[object, ...], Secrets] = {}


def _signature() -> tuple[object, ...]:
    """What the secrets are read from: the variables, the current folder and the config files' stats."""
    env = tuple(sorted((k, v) for k, v in os.environ.items()
                       if k.startswith(("PIP_", "UV_", "KERNODECK_", "XDG_", "HOME", "APPDATA", "PROGRAMDATA"))
                       or k in _URL_VARS))
    stats: list[tuple[str, int, int]] = []
    for path in (*pip_config_files(), *uv_config_files()):
        try:
            st = path.stat()
            stats.append((str(path), st.st_mtime_ns, st.st_size))
        except OSError:
            continue
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    return env, cwd, tuple(stats)


def secrets(public: Iterable[str] = (), declared: Iterable[str] = ()) -> Secrets:
    """Every source and credential value of this machine (:func:`source_values`, credential variables) and the
    secret parts of the ``declared`` indexes; ``public`` URLs (PyPI, the project's declared indexes) may be named.
    Read once per change of the variables or files (each printed line is redacted with it)."""
    public, declared = tuple(public), tuple(declared)
    key = (_signature(), public, declared)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    allowed = tuple(b for b in (normalise(p) for p in (*_PUBLIC, *public)) if b is not None)
    mirror_public = tuple(b for b in (normalise(p) for p in _PUBLIC) if b is not None)
    found: list[Needle] = [Needle(p, "a declared index's userinfo or query", part=True)
                           for url in declared for p in _secret_parts(url)]
    bases: list[Base] = []
    for origin, value, commas in source_values():
        # a mirror's URL is never written, even when it is a declared index's
        more, under = _values(value, origin, mirror_public if origin.startswith(MIRROR_PREFIX) else allowed, commas)
        found += more
        bases += under
    for var, value in sorted(os.environ.items()):
        # a user name is secret only when it is long enough not to be a common word ("user", "admin", "__token__")
        if _CREDENTIAL_VAR.match(var) and len(value.strip()) >= (10 if var.endswith("USERNAME") else 4):
            found += [Needle(v, var, part=True) for v in _encodings(value.strip())]
    unique = {(n.value, n.local): n for n in found}
    result = Secrets(tuple(sorted(unique.values(), key=lambda n: -len(n.value))), tuple(dict.fromkeys(bases)), allowed)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[key] = result
    return result


def needles(public: Iterable[str] = (), declared: Iterable[str] = ()) -> list[Needle]:
    """The plain values that may not appear in a written file (see :func:`secrets`)."""
    return list(secrets(public, declared).needles)


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"`<>]+")


def _urls(text: str) -> Iterable[tuple[int, int, str]]:
    """(start, end, url) of each URL in a text, trailing punctuation left out."""
    for match in _URL_IN_TEXT.finditer(text):
        url = match.group(0).rstrip(".,;:)]}")
        yield match.start(), match.start() + len(url), url


class SecretInText(KernodeckError):
    """A source or credential of this machine ended up in a text about to be written or shown."""

    tip = ("nothing was written; this is a Kernodeck bug: report it with the file's name "
           "(never the value); meanwhile unset the variable or source named above")


def _set_aside(text: str, found: Secrets) -> tuple[str, list[str], Base | None]:
    """The text with each URL under a secret source replaced by how it may be shown, and each public URL set aside
    (a numbered placeholder; it is scanned for secret parts only: a machine source may share its host and path under
    another scheme); the public URLs; the first secret source found."""
    out: list[str] = []
    kept: list[str] = []
    first: Base | None = None
    last = 0
    for start, end, url in _urls(text):
        base = found.secret_base(url)
        normal = normalise(url)
        if base is not None:
            first = first or base
            shown = f"${base.origin}" if base.origin.startswith(MIRROR_PREFIX) else f"{host_of(url)}/***"
        elif normal is not None and any(b.holds(normal) for b in found.public):
            shown = f"\x00{len(kept)}\x00"
            kept.append(url)
        else:
            continue
        out += [text[last:start], shown]
        last = end
    return "".join([*out, text[last:]]), kept, first


def _restore(text: str, kept: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda m: kept[int(m.group(1))], text) if kept else text


def check_written(text: str, name: str, public: Iterable[str] = (), declared: Iterable[str] = ()) -> None:
    """Refuse to write ``text`` to ``name`` if it holds a value of a source or credential variable in any spelling
    (or a secret part of a ``declared`` index URL)."""
    found = secrets(public, declared)
    masked, _, base = _set_aside(text, found)
    if base is not None:
        raise SecretInText(f"the URL of a package source ({base.origin}) ended up in {name}; not writing it")
    for needle in found.needles:
        if needle.value in (text if needle.part or needle.local else masked):
            what = "a path" if needle.local else "a secret part" if needle.part else "the URL"
            raise SecretInText(f"{what} of a package source or credential ({needle.origin}) ended up in {name}; "
                               "not writing it")


def redact_text(text: str, public: Iterable[str] = ()) -> str:
    """Text fit to print: URL userinfo and query strings masked, every source or credential value replaced in any
    spelling (a remote source by its scheme and host, a mirror by its variable, a secret part by ``***``). Local
    paths stay (the console is this machine's own)."""
    found = secrets(public)
    text, kept, _ = _set_aside(text, found)
    for needle in found.needles:
        if needle.local:
            continue
        shown = "***" if needle.part else needle.shown or "***"
        if needle.value in text:
            text = text.replace(needle.value, shown)
        if needle.part:
            kept = [url.replace(needle.value, shown) for url in kept]
    return _redact_generic(_restore(text, kept))


def scrub_text(text: str, public: Iterable[str] = ()) -> str:
    """Text fit to write into a dossier: as :func:`redact_text`, and local source paths replaced by a placeholder."""
    for needle in needles(public):
        if needle.local and needle.value in text:
            text = text.replace(needle.value, f"<local source: {needle.origin}>")
    return redact_text(text, public)


class MalformedSource(KernodeckError):
    """A source variable or configuration entry whose URL does not parse: named, its value never shown."""


def require_valid_sources() -> None:
    """Refuse a malformed URL in any source pip or uv would read (one ERROR naming where it is, not its value),
    before an installer turns it into a traceback or prints it."""
    for origin, value, commas in source_values():
        for loc in _split(value, commas=commas):
            loc = _uv_index_url(loc)
            why = "" if _is_path(loc) else malformed(loc)
            if why:
                where = origin if " " in origin else f"the variable {origin}"
                fix = f"fix or unset {origin}" if " " not in origin else f"fix that entry ({origin})"
                raise MalformedSource(f"{where} holds a malformed URL: {why} (its value is not shown)",
                                      tip=f"{fix}, then rerun")


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
