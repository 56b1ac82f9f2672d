"""What must never be written: every value of a source or credential of this machine, in every spelling, and the
checks and rewrites of a text against them.

:func:`secrets` reads them (kept while the variables, the current folder and the configuration files' contents stay
the same); a caller writing many files reads them once and hands the :class:`Secrets` to :func:`check_written`,
:func:`scrub_text` and :func:`redact_text` (``secrets=``), which then read nothing.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from kernodeck.errors import SecretInText
from kernodeck.sources.installer_config import (
    MIRROR_PREFIX,
    URL_VARS,
    config_bytes,
    pip_config_files,
    source_values,
    split_values,
    uv_config_files,
    uv_index_url,
)
from kernodeck.sources.urls import DEFAULT_PORT, PUBLIC, Base, host_of, is_path, normalise, redact_generic

# Credential variables: uv's per-index ones (UV_INDEX_<NAME>_USERNAME/_PASSWORD), pip's client certificate, any
# *TOKEN*/*PASSWORD* of pip, uv or Kernodeck.
# Hugging Face's (HF_TOKEN) too, and the variables a project names as a weights or data source's token-env
# (:func:`declare_token_variables`).
_CREDENTIAL_VAR = re.compile(r"^(PIP|UV|KERNODECK|HF)_\w*(PASSWORD|TOKEN|SECRET|CLIENT_CERT|USERNAME)\w*$")
_TOKEN_VARS: set[str] = set()


def declare_token_variables(names: Iterable[str]) -> None:
    """Variables whose values are credentials (a source's ``token-env``, read at load): never written or printed."""
    _TOKEN_VARS.update(names)


@dataclass(frozen=True)
class Needle:
    """A value that must not appear in anything written: where it came from, and whether it is a local path."""

    value: str
    origin: str
    local: bool = False
    part: bool = False  # a secret part of a URL (userinfo, password, query, token-like path segment)
    shown: str = ""  # what the console shows instead (a remote source's scheme and host, or a mirror's variable)


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
    default = DEFAULT_PORT.get(base.scheme)
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


def _values(
    value: str, origin: str, public: tuple[Base, ...], commas: bool = False
) -> tuple[list[Needle], list[Base]]:
    needles_: list[Needle] = []
    bases: list[Base] = []
    for loc in split_values(value, commas=commas):
        loc = uv_index_url(loc)
        if is_path(loc):
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
    """What the secrets are read from: the variables, the current folder and the config files' contents (each
    read once while its stat stays the same, :func:`config_bytes`: a changed file changes the signature)."""
    env = tuple(sorted((k, v) for k, v in os.environ.items()
                       if k.startswith(("PIP_", "UV_", "KERNODECK_", "XDG_", "HOME", "APPDATA", "PROGRAMDATA", "HF_"))
                       or k in URL_VARS or k in _TOKEN_VARS))
    files = dict.fromkeys((*pip_config_files(), *uv_config_files()))
    contents = tuple((str(path), data) for path in files if (data := config_bytes(path)) is not None)
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    return env, cwd, contents


def secrets(public: Iterable[str] = (), declared: Iterable[str] = ()) -> Secrets:
    """Every source and credential value of this machine (:func:`source_values`, credential variables) and the
    secret parts of the ``declared`` indexes; ``public`` URLs (PyPI, the project's declared indexes) may be named.
    Read once per change of the variables or files (each printed line is redacted with it)."""
    public, declared = tuple(public), tuple(declared)
    key = (_signature(), public, declared)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    allowed = tuple(b for b in (normalise(p) for p in (*PUBLIC, *public)) if b is not None)
    mirror_public = tuple(b for b in (normalise(p) for p in PUBLIC) if b is not None)
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
        credential = _CREDENTIAL_VAR.match(var) or var in _TOKEN_VARS
        if credential and len(value.strip()) >= (10 if var.endswith("USERNAME") else 4):
            found += [Needle(v, var, part=True) for v in _encodings(value.strip())]
    unique = {(n.value, n.local): n for n in found}
    result = Secrets(tuple(sorted(unique.values(), key=lambda n: -len(n.value))), tuple(dict.fromkeys(bases)), allowed)
    if len(_CACHE) > 64:
        _CACHE.clear()
    _CACHE[key] = result
    return result


_read = secrets  # the functions below take a ``secrets`` argument that hides this function's name


def needles(public: Iterable[str] = (), declared: Iterable[str] = ()) -> list[Needle]:
    """The plain values that may not appear in a written file (see :func:`secrets`)."""
    return list(secrets(public, declared).needles)


_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"`<>]+")


def _urls(text: str) -> Iterable[tuple[int, int, str]]:
    """(start, end, url) of each URL in a text, trailing punctuation left out."""
    for match in _URL_IN_TEXT.finditer(text):
        url = match.group(0).rstrip(".,;:)]}")
        yield match.start(), match.start() + len(url), url


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


def check_written(
    text: str, name: str, public: Iterable[str] = (), declared: Iterable[str] = (), *, secrets: Secrets | None = None
) -> None:
    """Refuse to write ``text`` to ``name`` if it holds a value of a source or credential variable in any spelling
    (or a secret part of a ``declared`` index URL). Given ``secrets`` (read once by the caller, with its own public
    and declared URLs), nothing is read and ``public``/``declared`` are not used."""
    found = secrets if secrets is not None else _read(public, declared)
    masked, _, base = _set_aside(text, found)
    if base is not None:
        raise SecretInText(f"the URL of a package source ({base.origin}) ended up in {name}; not writing it")
    for needle in found.needles:
        if needle.value in (text if needle.part or needle.local else masked):
            what = "a path" if needle.local else "a secret part" if needle.part else "the URL"
            raise SecretInText(f"{what} of a package source or credential ({needle.origin}) ended up in {name}; "
                               "not writing it")


def redact_text(text: str, public: Iterable[str] = (), *, secrets: Secrets | None = None) -> str:
    """Text fit to print: URL userinfo and query strings masked, every source or credential value replaced in any
    spelling (a remote source by its scheme and host, a mirror by its variable, a secret part by ``***``). Local
    paths stay (the console is this machine's own). Given ``secrets``, nothing is read."""
    found = secrets if secrets is not None else _read(public)
    text, kept, _ = _set_aside(text, found)
    for needle in found.needles:
        if needle.local:
            continue
        shown = "***" if needle.part else needle.shown or "***"
        if needle.value in text:
            text = text.replace(needle.value, shown)
        if needle.part:
            kept = [url.replace(needle.value, shown) for url in kept]
    return redact_generic(_restore(text, kept))


def scrub_text(text: str, public: Iterable[str] = (), *, secrets: Secrets | None = None) -> str:
    """Text fit to write into a dossier: as :func:`redact_text`, and local source paths replaced by a placeholder.
    Given ``secrets``, nothing is read."""
    found = secrets if secrets is not None else _read(public)
    for needle in found.needles:
        if needle.local and needle.value in text:
            text = text.replace(needle.value, f"<local source: {needle.origin}>")
    return redact_text(text, secrets=found)
