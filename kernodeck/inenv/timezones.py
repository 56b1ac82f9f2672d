"""The system's time zone database: part of the system chain, read by libraries as they import, not an input a
project declares.

pandas imports dateutil and asks it for UTC at import time; dateutil (like the standard library's ``zoneinfo``) reads
the zone from the system's database first (``/usr/share/zoneinfo/UTC``). Found on a lent H200 (Python 3.12 with
pandas): every verify of a project whose env holds pandas failed its application step, "the entry read files that are
not declared sources: /usr/share/zoneinfo/UTC". The closed world accounts for a file read there as the system's, like
the other parts of the chain the system step records: which zone the process runs in (``TZ``, ``/etc/localtime``)
and the database's version go into system.json (compared with the reference's as every system field is), and each
file the application read there, with its sha256, into the step's details (``time_zone_files``). Only regular files
whose real path lies in one of the database's folders (a link out of them is judged by the file it opens).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from ._common import Context
from .protocol import TIME_ZONE_FILES

# Where CPython's zoneinfo (its compiled-in TZPATH) and dateutil.tz look first; the same four folders on Linux.
_DEFAULT = ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo")
LOCALTIME = "/etc/localtime"
FILES = TIME_ZONE_FILES  # ctx.state and the application step's details: {real path: sha256} of what was read


def _folders() -> tuple[str, ...]:
    try:
        import zoneinfo

        compiled_in: tuple[str, ...] = tuple(zoneinfo.TZPATH)
    except ImportError:  # an interpreter built without it: dateutil's list still holds
        compiled_in = ()
    found: list[str] = []
    for folder in (*compiled_in, *_DEFAULT):
        if os.path.isabs(folder):
            real = os.path.realpath(folder).rstrip(os.sep) + os.sep
            if real not in found:
                found.append(real)
    return tuple(found)


FOLDERS = _folders()


# The database's own index files beside its zones (what zoneinfo.available_timezones and tzdata's tools read).
INDEXES = frozenset({"tzdata.zi", "zone.tab", "zone1970.tab", "zonenow.tab", "iso3166.tab", "leapseconds",
                     "leap-seconds.list"})
MAGIC = b"TZif"  # RFC 8536: every compiled zone file starts so


def is_data(path: str) -> bool:
    """A file of the time zone database, by the file ``path`` opens: a compiled zone (its magic) in one of the
    database's folders, or one of its index files at a folder's top. Any other file there is no zone: it stays an
    input to declare (red-team pass 52, TZ1: a number in /etc/zoneinfo/offset was read as the system's)."""
    real = os.path.realpath(path)
    folder = next((f for f in FOLDERS if real.startswith(f)), None)
    if folder is None or not os.path.isfile(real):
        return False
    if os.path.dirname(real) + os.sep == folder and os.path.basename(real) in INDEXES:
        return True
    try:
        with open(real, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def record(ctx: Context, path: str) -> None:
    """Note the database file ``path`` opens, with its sha256, for the step's details."""
    real = os.path.realpath(path)
    files = ctx.state.setdefault(FILES, {})
    if real not in files:
        files[real] = _digest(real)


def _version() -> str:
    """The database's version as its ``tzdata.zi`` states it (``# version 2025b``), from the first folder with one."""
    for folder in FOLDERS:
        try:
            with open(os.path.join(folder, "tzdata.zi"), encoding="utf-8") as fh:
                first = fh.readline().strip()
        except OSError:
            continue
        if first.startswith("# version "):
            return first.removeprefix("# version ")
    return "unknown (no tzdata.zi in the database's folders)"


def _digest(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


def chain() -> dict[str, Any]:
    """The system step's record: the zone this process runs in (``TZ``; ``/etc/localtime``, where it leads and its
    bytes: a copied zone file is named by what it holds, red-team pass 52, TZ2; a ``TZ`` naming a file, its bytes
    too) and the database's version."""
    tz = os.environ.get("TZ", "(unset)")
    record: dict[str, Any] = {"TZ": tz}
    if os.path.lexists(LOCALTIME):
        record.update(localtime=os.path.realpath(LOCALTIME), localtime_sha256=_digest(LOCALTIME))
    else:
        record["localtime"] = "(none)"
    zone_file = tz.removeprefix(":")
    if os.path.isabs(zone_file) and os.path.isfile(zone_file):
        record["TZ_sha256"] = _digest(zone_file)
    record["database_version"] = _version()
    return record
