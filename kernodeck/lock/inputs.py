"""What a lock depends on: its input files (the ``.in`` files pyproject names, the torch layer, every file they
name by ``-r``/``-c``, and every file of a local package source they name by ``-f``/``-i``/``--extra-index-url``:
:mod:`kernodeck.lock.includes`), the variant, the target, the resolver and the resolution date.

Each input is fingerprinted (:class:`LockInputs`); the lock's header records them, and the drift check
(:mod:`kernodeck.lock.check`) compares what it recorded with what they are now.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from kernodeck import tips
from kernodeck._fs import sha256_file, sha256_text
from kernodeck.errors import ConfigError, LockFailed
from kernodeck.lock.includes import read_inputs
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.sources import redact_text

RESOLVERS = {"pip-tools": "pip-tools", "uv": "uv"}
AS_OF_KEY = "resolve-as-of"


@dataclass(frozen=True)
class LockInputs:
    """Everything a lock depends on, each with its fingerprint."""

    entries: tuple[tuple[str, str], ...]
    # a file an input names by -r/-c -> where ("requirements/base.in:1"): what the drift check says of it
    named: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    # a local package source an input names (its path relative to the project) -> where, as Linked.where says it
    folders: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def as_dict(self) -> dict[str, str]:
        return dict(self.entries)

    def describe(self, key: str) -> str:
        """An input file as the drift check names it: with where it is named, or the source folder it is in."""
        named = dict(self.named)
        if key in named:
            return f"{key} (named in {named[key]})"
        folder = next((where for rel, where in self.folders if rel == "." or key == rel
                       or key.startswith(rel + "/")), None)
        return f"{key} (in {folder})" if folder else key

    def digest(self) -> str:
        return "sha256:" + sha256_text("\n".join(f"{k} {v}" for k, v in self.entries))


def input_files(project: Project, plat: Platform) -> list[str]:
    return [*project.requirements, plat.variant.torch_layer]


def lock_path(project: Project, plat: Platform) -> Path:
    return project.lockfiles / plat.lock_name


def pylock_path(project: Project, plat: Platform) -> Path:
    return project.lockfiles / plat.pylock_name


def resolver_version(project: Project, resolver: str) -> str:
    """The resolver's pinned version (pyproject dependency groups): what the drift check compares against."""
    if resolver not in RESOLVERS:
        raise ConfigError(f"unknown resolver {resolver!r}; known: {', '.join(RESOLVERS)}",
                          tip=tips.nox("lock", "--resolver", "uv"))
    pinned = project.tool_pins.get(RESOLVERS[resolver])
    if not pinned:
        raise ConfigError(f"{resolver} has no == pin in pyproject.toml's [dependency-groups]")
    return pinned


def as_of_instant(value: str, *, now: _dt.datetime | None = None) -> str:
    """A resolution date (``YYYY-MM-DD``, or ``YYYY-MM-DDTHH:MM:SSZ``) as the UTC instant both resolvers take: only
    files uploaded before it are candidates (uv ``--exclude-newer``, pip-compile ``--uploaded-prior-to``).

    A date means its midnight in UTC, never the machine's local time, so every machine draws the same line. A date
    still to come is refused: files uploaded between now and then would make the same inputs lock differently.
    """
    text = value.strip()
    try:
        if len(text) == 10:
            instant = _dt.datetime.strptime(text, "%Y-%m-%d").replace(tzinfo=_dt.UTC)
        else:
            instant = _dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC)
    except ValueError:
        raise ConfigError(f"{AS_OF_KEY} {value!r} is not a date (YYYY-MM-DD, or YYYY-MM-DDTHH:MM:SSZ in UTC)",
                          tip=tips.nox("lock", "--as-of", "2026-11-01")) from None
    if instant > (now or _dt.datetime.now(_dt.UTC)):
        raise ConfigError(f"{AS_OF_KEY} {value!r} is in the future: what is uploaded until then would change the "
                          "lock of the same inputs", tip="give a date that has passed, e.g. yesterday's")
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def effective_as_of(project: Project, override: str | None) -> str | None:
    """The resolution date a lock is made with: ``--as-of`` when given, else pyproject's ``resolve-as-of``."""
    value = override or project.resolve_as_of
    return as_of_instant(value) if value else None


def _existing(project: Project, plat: Platform) -> list[str]:
    """The declared input files, each refused when it is not there."""
    declared = input_files(project, plat)
    for rel in declared:
        if not (project.root / rel).is_file():
            raise ConfigError(f"input {rel} does not exist (declared for variant {plat.variant.name})")
        if Path(rel).name.lower() in METADATA_FILES:
            raise ConfigError(
                f"input {rel} is a package's metadata file, not a requirements file: the resolver builds it, and "
                "what its build reads (a dynamic dependencies file, setup.py's code) is no input of the lock",
                tip=f"list the requirements in a .in file (e.g. requirements/base.in) and name it instead of {rel}",
            )
    return declared


# Input files a resolver builds for their metadata (pip-compile and uv): a build may read any other file.
METADATA_FILES = ("pyproject.toml", "setup.py", "setup.cfg")


_KEYS = ("variant", "python", "os-arch", "resolver", AS_OF_KEY)


def compute_inputs(project: Project, plat: Platform, resolver: str, as_of: str | None = None) -> LockInputs:
    """``as_of``: the resolution instant (:func:`as_of_instant`), an input when there is one.

    The input files come first: the declared ones, then each file they name by ``-r``/``-c`` (nested too), by its path
    relative to the project; then each file of a local package source they name (a find-links folder, a local index),
    by its path. A project whose inputs name none has the entries (and the digest) it had before they were
    fingerprinted (red-team pass 44, LOCK4; pass 46, LOCK8)."""
    declared = _existing(project, plat)
    read = read_inputs(project.root, declared)
    entries = [(rel, "sha256:" + hashlib.sha256(data).hexdigest()) for rel, data in read.files]
    named, folders = read.named, read.linked
    seen = {rel for rel, _ in entries}
    for folder in folders:
        for rel in folder.files(project.root):
            if rel not in seen:
                seen.add(rel)
                entries.append((rel, "sha256:" + sha256_file(project.root / rel)))
    clash = next((rel for rel, _ in entries if rel in _KEYS), None)
    if clash:
        raise ConfigError(f"the input file {clash} bears the name of the lock's own {clash!r} input: the drift check "
                          "could not tell them apart", tip="rename the file (e.g. with a .in or .txt suffix)")
    entries.append(("variant", f"{plat.variant.name}:sha256:{sha256_text(plat.variant.digest_record())}"))
    entries.append(("python", plat.python))
    entries.append(("os-arch", plat.os_arch))
    entries.append(("resolver", f"{resolver}=={resolver_version(project, resolver)}"))
    if as_of:
        entries.append((AS_OF_KEY, as_of))
    return LockInputs(tuple(entries), tuple((n.rel, n.where) for n in named),
                      tuple((f.rel, f.where) for f in folders))


def all_input_files(project: Project, plat: Platform) -> list[str]:
    """The declared input files and every file they name by ``-r``/``-c`` (what the resolver reads)."""
    declared = _existing(project, plat)
    return [rel for rel, _ in read_inputs(project.root, declared).files]


def requirements_in(path: Path) -> list[Requirement]:
    """The requirements of a ``.in`` file, comments, options (``-r``, ``--index-url`` …) and unparsable lines left
    out (the resolver names those itself)."""
    found: list[Requirement] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            found.append(Requirement(line))
        except InvalidRequirement:
            continue
    return found


def layer_names(project: Project, plat: Platform) -> set[str]:
    """The names the variant's torch layer requires (an unreachable index is blamed only for these)."""
    return {canonicalize_name(req.name) for req in requirements_in(project.root / plat.variant.torch_layer)}


def pinned_layer_names(project: Project, plat: Platform) -> tuple[str, ...]:
    """The names the torch layer pins with ``==`` (one version whatever the resolution date)."""
    names = [canonicalize_name(req.name) for req in requirements_in(project.root / plat.variant.torch_layer)
             if [s.operator for s in req.specifier] == ["=="]]
    return tuple(sorted(set(names)))


def refuse_direct_references(project: Project, plat: Platform) -> None:
    """Refuse an input line that names a URL, a path or an editable instead of an index package: a lock pins
    versions and hashes from an index, and the error must name the .in file and line, not the lock. The files the
    inputs name by ``-r``/``-c`` are read too (the resolver reads them)."""
    for rel in all_input_files(project, plat):
        for number, raw in enumerate((project.root / rel).read_text(encoding="utf-8").splitlines(), 1):
            line = re.split(r"(?:^|\s)#", raw, maxsplit=1)[0].strip()
            what, name = "", ""
            if line.startswith(("-e ", "--editable")):
                what = "an editable requirement"
            elif not line or line.startswith("-"):
                continue  # options: -r/-c are followed (all_input_files), the others are the resolver's
            else:
                try:
                    req = Requirement(line)
                except InvalidRequirement:
                    if "://" in line or line.startswith((".", "/", "~")):
                        what = "a URL or path instead of a requirement"
                else:
                    name = req.name
                    what = "a direct URL requirement" if req.url else ""
            if what:
                raise LockFailed(
                    f"{rel}:{number}: {what} ({redact_text(line)}); a lock pins packages from an index by version "
                    "and hash, and cannot pin a URL or a local path",
                    tip=f"replace it with {name or 'NAME'}==VERSION from an index, then: {tips.LOCK}",
                )
