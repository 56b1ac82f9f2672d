"""PEP 751 locks: ``lockfiles/pylock.<platform-id>.toml`` beside each requirements lock, same pins, same hashes.

The requirements lock says *what* (name, version, sha256); the pylock adds *where* each file lives, which PEP 751
requires: :mod:`kernodeck.lock.place` finds a public URL for every locked file, reading indexes through
:mod:`kernodeck.lock.index_client`; the machine's sources stay out of every written file.

Every pylock is read by the standard parser, :mod:`packaging.pylock` (:func:`read`, which validates it against the
PEP), and written by a TOML writer (:func:`dumps`, tomlkit) from a :class:`packaging.pylock.Pylock`; docs/pep751.md
says why the file list still comes from Kernodeck's own index client rather than ``uv pip compile``.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.pylock import Pylock, PylockValidationError

from kernodeck._proc import log
from kernodeck.errors import LockFailed
from kernodeck.lock import lockfile, twin, twinform
from kernodeck.lock.index_client import DistFile, Fetcher
from kernodeck.lock.place import locate
from kernodeck.project.platforms import Platform
from kernodeck.sources import Source, strip_credentials

# tomlkit is imported where used: every lock check reads a twin's digest, and it costs more than the check.


def render(lock: lockfile.Lockfile, plat: Platform, files: dict[str, list[DistFile]], lock_text: str) -> str:
    """The pylock text: :func:`kernodeck.lock.twinform.expected` (a :class:`packaging.pylock.Pylock`'s data),
    validated by packaging and written by :func:`dumps`.

    Packages and files are sorted, so that diffs stay small and the same lock always gives the same bytes. The text
    is read back by :func:`read` and must hold the data it was made from.
    """
    data = twinform.expected(lock, plat, files, lock_text)
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


def build(lock_text: str, path: Path, plat: Platform, machine: list[Source], *, no_index: bool,
          fetcher: Fetcher | None = None, known: dict[str, DistFile] | None = None) -> tuple[str, str]:
    """The requirements lock's text and its pylock's text (neither written yet): the lock's text as given, but for
    the names it records of the files the index serves at URLs that name no file (twinform.FILE_NAME)."""
    lock = lockfile.parse_text(lock_text, path)
    files = locate(lock.pins, plat, machine, no_index=no_index, fetcher=fetcher, known=known)
    names = twinform.file_names(files)
    if names != lock.header.get(twinform.FILE_NAME, []):
        lock_text = lockfile.with_header(lock_text, twinform.FILE_NAME, names)
        lock = lockfile.parse_text(lock_text, path)
    text = render(lock, plat, files, lock_text)
    log(f"kernodeck: PEP 751 lock for {plat.id}: {len(lock.pins)} packages, "
        f"{sum(len(v) for v in files.values())} files")
    return lock_text, text


def disagreements(pylock_path: Path, lock: lockfile.Lockfile, limit: int = 5) -> list[str]:
    """Where the PEP 751 twin and the requirements lock disagree: a package only in one, another version, other
    hashes. Empty when they hold the same pins and hashes."""
    return twin.disagreements(pylock_path, lock.hashed(), lock.path.name, limit)
