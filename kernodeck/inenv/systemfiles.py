"""The system's own files that the standard library and common libraries read by name: part of the system chain,
recorded and compared with the reference's, not inputs a project declares.

Found on a lent H200 (Python 3.12 with pandas): pandas' import asks dateutil for UTC, which reads the system's time
zone database first (``/usr/share/zoneinfo/UTC``), and every verify of a project whose env holds pandas failed its
application step naming that file. Red-team pass 53 found the rest of the class: the machine's zone setting where an
image copies it (``/etc/localtime`` a regular file, ``/etc/timezone``: dateutil, tzlocal), ``mimetypes``' tables
(``mimetypes.knownfiles``: ``guess_type``'s first call), ``/etc/os-release`` (``platform.freedesktop_os_release``),
and the Hugging Face login a hub call reads even offline (``$HF_HOME/token``). Pass 54 (PROC1) found the kernel's
state the application reads itself: a sysctl under ``/proc/sys`` (``kernel.domainname``), a ``/sys`` attribute (the
cgroup's ``cpu.max`` a thread pool sizes itself by, a device's), ``/proc/cpuinfo``: the pseudo file systems are trusted
(paths.PSEUDO: no declaration can name them) but were in no record, so a verdict hung on one passed as a closed
world and its change was blamed on the code.

A file read is one of these by the file a path opens: a compiled zone (``TZif`` magic) in one of the database's
folders or its index files at a folder's top (any other file there is no zone: an input to declare, red-team pass
52, TZ1), the machine's zone setting (``/etc/localtime`` holding a compiled zone, ``/etc/timezone``), a table of
``mimetypes.knownfiles``, the os-release file. Each read, by whichever step's window, is recorded with its sha256 in
that step's details (``system_files``, steprun.py; pass 53, TZ3: a zone read by the criterion was in no record) and
the orchestrator writes them all into system.json, compared with the reference's file by file. The hub's login is
a credential: recorded as read, never hashed. The system step records the zone itself (:func:`chain`). The kernel's
state (:func:`is_state`: a file under ``/sys`` or under ``/proc`` outside any process's folder) is recorded the same
way, by the sha256 of its value read once when the window ends (pass 56, PROC2: noted by the hook before its trusted
return, a forked child's handed to the parent); a process's own ``/proc/<pid>`` files (its status, maps,
descriptors) describe the process, not the machine, and stay unrecorded, but its view of the machine (mounts,
cgroup, network) is the kernel's state, named under ``/proc/self``. A value that names this boot or instance (the boot
id, the mount table, the counters) is recorded as read, never compared by its bytes.
"""

from __future__ import annotations

import hashlib
import mimetypes
import os
from typing import Any

from ._common import Context
from .protocol import SYSTEM_FILES

# Where CPython's zoneinfo (its compiled-in TZPATH) and dateutil.tz look first; the same four folders on Linux.
_DEFAULT = ("/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo")
LOCALTIME = "/etc/localtime"
TIMEZONE = "/etc/timezone"  # Debian's and Ubuntu's zone name (tzlocal reads it first)
OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
FILES = SYSTEM_FILES  # ctx.state and each step's details: {real path: sha256, or the credential note} of what was read
CREDENTIAL = "a credential: read, not hashed"
# The database's own index files beside its zones (what zoneinfo.available_timezones and tzdata's tools read).
INDEXES = frozenset({"tzdata.zi", "zone.tab", "zone1970.tab", "zonenow.tab", "iso3166.tab", "leapseconds",
                     "leap-seconds.list"})
MAGIC = b"TZif"  # RFC 8536: every compiled zone file starts so


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


def _zone(real: str) -> bool:
    try:
        with open(real, "rb") as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _named() -> set[str]:
    """The system's configuration files read by name (zone setting, mime tables, os-release), as real paths."""
    return {os.path.realpath(p) for p in (TIMEZONE, *mimetypes.knownfiles, *OS_RELEASE)}


def _hub_login() -> set[str]:
    """Where huggingface_hub keeps the login it reads (``HF_TOKEN_PATH``, else ``$HF_HOME/token`` and its
    ``stored_tokens``), as real paths."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return {os.path.realpath(p) for p in (os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token"),
                                          os.path.join(home, "stored_tokens"))}


def is_data(path: str) -> bool:
    """One of the system's files above, by the file ``path`` opens."""
    real = os.path.realpath(path)
    if not os.path.isfile(real):
        return False
    folder = next((f for f in FOLDERS if real.startswith(f)), None)
    if folder is not None:
        if os.path.dirname(real) + os.sep == folder and os.path.basename(real) in INDEXES:
            return True
        return _zone(real)
    if real == os.path.realpath(LOCALTIME):
        return _zone(real)  # a copied zone; a text file at its place is an input like any other
    return real in _named() or real in _hub_login()


STATE = ("/proc" + os.sep, "/sys" + os.sep)
_STATE_MAX = 1 << 20  # a pseudo file's value is small; the cap bounds a file such as /proc/kcore
_NOT_READ = frozenset({"/proc/kmsg"})  # reading it again would block and take the kernel's messages from their reader
# A process's own entries that show the machine (red-team pass 56, PROC2: /proc/mounts and /proc/net are links here)
_MACHINE_VIEW = frozenset({"mounts", "mountinfo", "cgroup", "cpuset", "net"})
_SELF = ("self", "thread-self")
SEEN: dict[str, None] = {}  # the kernel's state opened in this window as named (seen._opened; world.judge records it)
# What names this boot or this machine's instance rather than configures it: a value of its own in every run (filelock's
# import reads the boot id and the mount table, transformers' loading the mount table, measured), recorded as read,
# never compared by its bytes (each run would differ from the reference for no cause).
INSTANCE = "this boot's or instance's own value: read, not compared"
_PER_INSTANCE = frozenset({
    "/proc/sys/kernel/random/boot_id", "/proc/sys/kernel/random/uuid", "/proc/sys/kernel/random/entropy_avail",
    "/proc/sys/kernel/hostname", "/proc/mounts", "/proc/self/mounts", "/proc/self/mountinfo", "/proc/self/cgroup",
    "/proc/uptime", "/proc/loadavg", "/proc/stat", "/proc/meminfo", "/proc/vmstat", "/proc/interrupts",
    "/proc/softirqs", "/proc/diskstats", "/proc/pressure/cpu", "/proc/pressure/memory", "/proc/pressure/io"})
_NETWORK = ("/proc/net/", "/proc/self/net/")  # this instance's interfaces, sockets and counters


def state_key(path: str) -> str | None:
    """The name of the kernel's state ``path`` reads, the same in every run, or None: a file under ``/sys``; under
    ``/proc`` one outside any process's folder (``/proc/sys``'s sysctls, ``/proc/cpuinfo``, ``/proc/mounts``) or one
    of a process's own entries that show the machine (its mount table, cgroup, network: named under
    ``/proc/self``); judged as given, before ``self`` resolves to this run's pid, else by the file it opens (a link to
    a sysctl, ``/proc/self/root/proc/...``: red-team pass 57, PROC3)."""
    path = os.path.normpath(path)
    key = _as_named(path)
    if key is None and (real := os.path.realpath(path)) != path:
        key = _as_named(real)
    return key


def _as_named(path: str) -> str | None:
    if path.startswith(STATE[1]):
        real = os.path.realpath(path)
        return real if real.startswith(STATE[1]) and os.path.isfile(real) else None
    if not path.startswith(STATE[0]):
        return None
    top, _, rest = path[len(STATE[0]):].partition(os.sep)
    if top in _SELF or top == str(os.getpid()):
        if rest.split(os.sep, 1)[0] == "task":  # a thread's view (task/<tid>/...): the process's
            rest = rest.split(os.sep, 2)[-1]
        if rest.split(os.sep, 1)[0] not in _MACHINE_VIEW:
            return None  # its status, maps, descriptors: the process, not the machine
        path = STATE[0] + "self" + os.sep + rest
    elif top.isdigit():
        return None  # another process's folder: its input, refused (paths._own_process)
    return path if os.path.isfile(path) else None


def is_state(path: str) -> bool:
    """The kernel's state (:func:`state_key`)."""
    return path.startswith(STATE) and state_key(path) is not None


def record_state(ctx: Context, path: str) -> None:
    """Note the kernel's state ``path`` reads by its :func:`state_key`, with the sha256 of its value now (a value of
    this boot or instance: only that it was read); nothing for any other path."""
    key = state_key(path) if path.startswith(STATE) else None  # a forked child's other reads come here too
    if key is not None and key not in (files := ctx.state.setdefault(FILES, {})):
        files[key] = INSTANCE if key in _PER_INSTANCE or key.startswith(_NETWORK) else _digest(path)


def record(ctx: Context, path: str) -> None:
    """Note the system file ``path`` opens, with its sha256 (a login: only that it was read), for the step's details."""
    real = os.path.realpath(path)
    files = ctx.state.setdefault(FILES, {})
    if real not in files:
        files[real] = CREDENTIAL if real in _hub_login() else _digest(real)


def _digest(path: str) -> str:
    if path in _NOT_READ:
        return "not read again (reading it takes what it holds)"
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read(_STATE_MAX) if path.startswith(STATE) else fh.read()).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.strerror}"


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


def chain() -> dict[str, Any]:
    """The system step's record: the zone this process runs in (``TZ``; ``/etc/localtime``, where it leads and its
    bytes: a copied zone file is named by what it holds, red-team pass 52, TZ2; a ``TZ`` naming a file, its bytes
    too) and the database's version."""
    tz = os.environ.get("TZ", "(unset)")
    record: dict[str, Any] = {"TZ": tz}
    if os.path.lexists(LOCALTIME):  # its bytes only where it is a regular file (a FIFO there would block the step)
        record.update(localtime=os.path.realpath(LOCALTIME),
                      localtime_sha256=_digest(LOCALTIME) if os.path.isfile(LOCALTIME) else "not a regular file")
    else:
        record["localtime"] = "(none)"
    zone_file = tz.removeprefix(":")
    if os.path.isabs(zone_file) and os.path.isfile(zone_file):
        record["TZ_sha256"] = _digest(zone_file)
    record["database_version"] = _version()
    return record


def read_in(ctx: Context, before: set[str]) -> dict[str, str]:
    """The system files read since ``before`` (the names recorded when a step started): that step's record."""
    files = ctx.state.get(FILES) or {}
    return {path: files[path] for path in sorted(files) if path not in before}
