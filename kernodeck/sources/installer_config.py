"""This machine's package sources, read the way pip and uv read them: pip's configuration files (``PIP_CONFIG_FILE``
included; several values per option, one per line or space-separated), uv's (``uv.toml``, ``[tool.uv]``,
``UV_CONFIG_FILE``), their ``PIP_*``/``UV_*`` variables and ``KERNODECK_INDEX_*``. No pip or uv is needed to know them.

Each configuration file's content is read once per process: :func:`config_bytes` keeps it by the file's path and
stat, so a run that writes many files reads pip's configuration once, and a changed file is read again.
"""

from __future__ import annotations

import configparser
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck.errors import MalformedSource
from kernodeck.sources.urls import host_of, is_local, is_path, malformed

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
URL_VARS = ("PIP_INDEX", "PIP_PROXY", "UV_PYTHON_INSTALL_MIRROR", "UV_PYPY_INSTALL_MIRROR",
             "UV_PYTHON_DOWNLOADS_JSON_URL", "UV_PUBLISH_URL", "UV_PUBLISH_CHECK_URL",
             "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
# uv's settings (uv.toml, [tool.uv], and their [pip] table) that name a URL or a folder uv reads packages from.
_UV_KEYS = ("index-url", "extra-index-url", "find-links", "python-install-mirror", "pypy-install-mirror",
            "python-downloads-json-url", "publish-url", "check-url")


# The content of each configuration file read so far, by path: (its stat when read, its bytes or None).
_CONTENT: dict[str, tuple[tuple[int, int, int, int], bytes | None]] = {}
# A file changed this close to the moment it was read may change again within the same coarse timestamp (a clock
# tick, a filesystem's granularity) and keep its stat: such a file is read again each time, as git does with a
# "racily clean" entry, until its change is older than this.
_RACY_NS = 100_000_000


def config_bytes(path: Path) -> bytes | None:
    """A configuration file's content (None when it is absent or unreadable), read again only when its stat
    (inode, size, modification and change times) differs from when it was read, or it had just changed then."""
    try:
        st = path.stat()
    except OSError:
        return None
    key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _CONTENT.get(str(path))
    if known is not None and known[0] == key:
        return known[1]
    try:
        data: bytes | None = path.read_bytes()
    except OSError:
        data = None
    if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > _RACY_NS:
        _CONTENT[str(path)] = (key, data)
    else:
        _CONTENT.pop(str(path), None)
    return data


@dataclass(frozen=True)
class Source:
    kind: str  # "index-url" | "extra-index-url" | "find-links"
    location: str
    # uv's name of an index (UV_INDEX=corp=URL): uv applies UV_INDEX_CORP_USERNAME/_PASSWORD to it by that name. No
    # part of the source's identity (its URL is what is compared and recorded), and never written.
    name: str = field(default="", compare=False)

    @property
    def for_uv(self) -> str:
        """The source as uv's UV_INDEX/UV_DEFAULT_INDEX take it: ``name=url`` when it has a name."""
        return f"{self.name}={self.location}" if self.name else self.location

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
        data = config_bytes(path)
        if data is None:
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read_string(data.decode("utf-8"), source=str(path))
        except (configparser.Error, UnicodeDecodeError):
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


def split_values(value: str, commas: bool = False) -> list[str]:
    """Several values of one option: pip splits on any whitespace (one per line or space-separated); uv's
    find-links variable takes commas."""
    return [v for v in re.split(r"[\s,]+" if commas else r"\s+", value.strip()) if v]


def uv_index_url(entry: str) -> str:
    """``UV_INDEX`` entries may be ``name=url``."""
    return uv_index_entry(entry)[1]


def uv_index_entry(entry: str) -> tuple[str, str]:
    """(name, url) of a ``UV_INDEX``/``UV_DEFAULT_INDEX`` entry, ``name=url`` or a URL alone (name "")."""
    name, sep, url = entry.partition("=")
    return (name, url) if sep and "://" not in name and not is_local(name) else ("", entry)


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

    data = config_bytes(path)
    try:
        return tomllib.loads(data.decode("utf-8")) if data is not None else {}
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}  # uv itself refuses a broken file; nothing of it can reach a text


def _has_tool_uv(pyproject: Path) -> bool:
    data = config_bytes(pyproject)
    return data is not None and b"[tool.uv" in data


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
    found = [Source(key, loc) for key in _PIP_KEYS for loc in split_values(settings.get(key, ""))]
    for var, kind in _ENV_KEYS.items():
        if var.startswith("UV_"):
            for loc in split_values(os.environ.get(var, ""), commas=var == "UV_FIND_LINKS"):
                name, url = uv_index_entry(loc) if var in ("UV_INDEX", "UV_DEFAULT_INDEX") else ("", loc)
                found.append(Source(kind, url, name))
    unique: dict[tuple[str, str], Source] = {}
    for source in found:  # the last of a location wins, as it did; a name given to it once is kept
        named = source.name or getattr(unique.get((source.kind, source.location)), "name", "")
        unique[(source.kind, source.location)] = Source(source.kind, source.location, named)
    return list(unique.values())


_TRUE = ("1", "true", "yes", "y", "on", "t")


def pip_no_index(config: list[tuple[str, str]] | None = None) -> bool:
    """Whether this machine's pip is told to use no index at all (``PIP_NO_INDEX`` or ``no-index`` in its config)."""
    if os.environ.get("UV_NO_INDEX", "").strip().lower() in _TRUE:
        return True
    settings = _effective(pip_config() if config is None else config)
    return settings.get("no-index", "").strip().lower() in _TRUE


def source_values() -> list[tuple[str, str, bool]]:
    """(origin, value, comma-separated) of every package source pip or uv reads here: their variables
    (``PIP_*``, ``UV_*``, proxies), ``KERNODECK_INDEX_*``, pip's files (every file, every section), uv's files."""
    found: list[tuple[str, str, bool]] = []
    for var, value in sorted(os.environ.items()):
        if var in _ENV_KEYS or var in URL_VARS or var.startswith(MIRROR_PREFIX):
            found.append((var, value, var == "UV_FIND_LINKS"))
    for section, key, value in _file_items():
        if key in _PIP_KEYS or key in ("index", "proxy"):
            found.append((f"pip configuration [{section}] {key}", value, False))
    found += [(origin, value, False) for origin, value in uv_config_sources()]
    return found


def require_valid_sources() -> None:
    """Refuse a malformed URL in any source pip or uv would read (one ERROR naming where it is, not its value),
    before an installer turns it into a traceback or prints it."""
    for origin, value, commas in source_values():
        for loc in split_values(value, commas=commas):
            loc = uv_index_url(loc)
            why = "" if is_path(loc) else malformed(loc)
            if why:
                where = origin if " " in origin else f"the variable {origin}"
                fix = f"fix or unset {origin}" if " " not in origin else f"fix that entry ({origin})"
                raise MalformedSource(f"{where} holds a malformed URL: {why} (its value is not shown)",
                                      tip=f"{fix}, then rerun")

