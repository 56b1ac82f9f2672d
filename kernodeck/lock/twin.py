"""Reading a PEP 751 twin: parsed and validated by :mod:`packaging.pylock`, once per file state, and compared with
the pins and hashes of the requirements lock it was written for.

It imports no other module of Kernodeck's locking (the requirements lock is handed over as its pins), so that the
lockfile reader may name, in its own error, where a lock and its twin disagree.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.pylock import Package, PackageSdist, PackageWheel, Pylock, PylockValidationError

from kernodeck.errors import LockfileError
from kernodeck.lock.index_client import DistFile

# A pin as the comparison needs it: name -> (version, its sha256 hashes).
Pins = Mapping[str, tuple[str, set[str]]]


def read(pylock_path: Path) -> Pylock:
    """A pylock read and validated by :mod:`packaging.pylock`; raises :class:`LockfileError` naming what is wrong.

    Read once per file state (path, size, mtime): a lock check reads the twin's digest and its packages.
    """
    return read_both(pylock_path)[1]


def read_both(pylock_path: Path) -> tuple[Mapping[str, Any], Pylock]:
    """:func:`read`, with the TOML data as the file holds it (what the lock check holds to the writer's)."""
    try:
        stat = pylock_path.stat()
        key = (str(pylock_path), stat.st_size, stat.st_mtime_ns)
        if key not in _READ:
            _READ.clear()
            raw = tomllib.loads(pylock_path.read_text(encoding="utf-8"))
            _READ[key] = (raw, Pylock.from_dict(raw))
        return _READ[key]
    except (OSError, UnicodeDecodeError) as exc:
        raise LockfileError(pylock_path.name, None, f"cannot be read: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise LockfileError(pylock_path.name, None, f"is not TOML: {exc}") from None
    except PylockValidationError as exc:
        raise LockfileError(pylock_path.name, None, f"is not a valid PEP 751 lock: {exc}") from None


_READ: dict[tuple[str, int, int], tuple[Mapping[str, Any], Pylock]] = {}


def package_files(package: Package) -> list[PackageWheel | PackageSdist]:
    return [*(package.wheels or ()), *([package.sdist] if package.sdist else [])]



def known_files(pylock_file: Path) -> dict[str, DistFile]:
    """The files an existing PEP 751 lock already places, by sha256: a lock made again reuses them unasked.

    A sha256 names one file's content, so the URL it was found at stays right for it; only new hashes are looked up.
    """
    try:
        data = read(pylock_file)
    except LockfileError:
        return {}
    known: dict[str, DistFile] = {}
    for package in data.packages:
        for entry in package_files(package):
            digest = entry.hashes.get("sha256")
            if digest and entry.url and entry.name:
                known[digest] = DistFile(entry.name, entry.url, digest, entry.size, entry.upload_time)
    return known


def recorded_digest(pylock_path: Path) -> str | None:
    """The requirements-lock digest a pylock was written for (None when it records none or cannot be read)."""
    try:
        return digest_of(read(pylock_path))
    except LockfileError:
        return None


def digest_of(data: Pylock) -> str | None:
    """The requirements-lock digest (hex sha256) a pylock already read was written for (None: it records none)."""
    value = (data.tool or {}).get("kernodeck", {}).get("requirements-lock-sha256")
    return value if isinstance(value, str) else None



def disagreements(pylock_path: Path, pins: Pins, lock_name: str, limit: int = 5) -> list[str]:
    """Where the PEP 751 twin and the requirements lock (``lock_name``, its ``pins``) disagree: a package only in
    one, another version, other hashes. Empty when they hold the same pins and hashes."""
    try:
        data = read(pylock_path)
    except LockfileError as exc:
        return [str(exc)]
    return compare(data, pylock_path.name, pins, lock_name, limit)


def compare(data: Pylock, twin_name: str, pins: Pins, lock_name: str, limit: int = 5) -> list[str]:
    """:func:`disagreements` of a pylock already read (``twin_name``: its file's name)."""
    twin: dict[str, tuple[str, set[str]]] = {}
    for package in data.packages:
        hashes = {str(e.hashes.get("sha256", "")) for e in package_files(package)}
        twin[package.name] = (str(package.version or ""), hashes)
    found: list[str] = []
    for name in sorted(set(pins) | set(twin)):
        if name not in twin:
            found.append(f"{name} is pinned in {lock_name} but not in {twin_name}")
        elif name not in pins:
            found.append(f"{name} is in {twin_name} but not pinned in {lock_name}")
        elif pins[name][0] != twin[name][0]:
            found.append(f"{name}: {pins[name][0]} in {lock_name}, {twin[name][0]} in {twin_name}")
        elif pins[name][1] != twin[name][1]:
            found.append(f"{name} {pins[name][0]}: other hashes in {lock_name} than in {twin_name}")
    return found[:limit] + ([f"… and {len(found) - limit} more"] if len(found) > limit else [])
