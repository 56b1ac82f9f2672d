"""What the audit events of the closed world's other channels say (seen.py records and refuses by them): the program
a process event starts, a network socket, the file a sqlite database name opens.

A process the application starts (multiprocessing's spawn and forkserver children included), and a socket that is not a
local one, bring bytes no hook of this process sees: each is refused where the call is. A sqlite database is a file
read, by its name as sqlite reads it (a ``file:`` URI is percent-decoded). A database a statement ATTACHes is opened
inside sqlite with no event (its authorizer cannot be set from the connect events: the connection is not made yet): a
stated limit, docs/application.md.
"""

from __future__ import annotations

import os
import socket
import sys
import urllib.parse
from typing import Any

# multiprocessing's spawn and forkserver start methods start a new interpreter (multiprocessing.util.spawnv_passfds,
# then _posixsubprocess.fork_exec, which raises no audit event): it has no hook, loads the application's code from its
# files (their bytecode cache included) instead of the verified bytes, and computes without the run's settings
# (deterministic algorithms off, its own threads). :func:`hold_spawns` makes that start raise this event. Its fork
# method (a DataLoader's workers by default on Linux) forks this process, hook and settings included.
SPAWN_EVENT = "kernodeck.multiprocessing.spawn"
# The audit events that start another program: whatever it reads, no hook of this process sees (the program's index
# in the event's arguments). multiprocessing's fork method raises none of these (only ``os.fork``): not refused.
PROCESS_EVENTS = {"subprocess.Popen": 1, "os.system": 0, "os.exec": 0, "os.posix_spawn": 0, "os.spawn": 1,
                  SPAWN_EVENT: 0}
TIP = "docs/application.md: the closed world's limits"


def hold_spawns() -> None:
    """multiprocessing's spawn and forkserver starts raise :data:`SPAWN_EVENT` (once per process). Its resource
    tracker (a shared memory block's, a semaphore's) runs none of the application's code and starts as before."""
    import multiprocessing.util as util

    started_by = util.spawnv_passfds
    if getattr(started_by, "__module__", "") == __name__:
        return

    def spawnv_passfds(path: Any, args: Any, passfds: Any) -> Any:
        if not any("multiprocessing.resource_tracker" in str(arg) for arg in args):
            sys.audit(SPAWN_EVENT, path, args)
        return started_by(path, args, passfds)

    util.spawnv_passfds = spawnv_passfds


def _program(event: str, args: tuple[Any, ...]) -> str:
    if event == SPAWN_EVENT:
        method = "forkserver" if any("forkserver" in str(arg) for arg in args[1]) else "spawn"
        return f"a new Python interpreter, multiprocessing's {method} start method"
    value = args[PROCESS_EVENTS[event]]
    if event == "subprocess.Popen" and args[0] is not None:
        value = args[0]  # the executable given
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    try:
        return os.fsdecode(value)
    except TypeError:
        return str(value)


def started(event: str, args: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """The refusal of a process start: its message (after who) and details."""
    program = _program(event, args)
    if event == SPAWN_EVENT:
        return (f"started a process ({program}): what it reads cannot be checked, and it would run the "
                "application's code from its files, without the run's settings, so it is refused: use the fork start "
                "method "
                "(multiprocessing.get_context(\"fork\"), DataLoader(multiprocessing_context=\"fork\"))",
                {"process": program, "event": event, "tip": TIP})
    return (f"started a process ({program}, {event}): what it reads cannot be checked, so it is refused: do that "
            "work in Python inside the application (what it opens is then judged)",
            {"process": program, "event": event, "tip": TIP})


def network(args: tuple[Any, ...]) -> tuple[str, dict[str, Any]] | None:
    """``socket.__new__`` (self, family, type, proto): a socket that is not a local (``AF_UNIX``) one receives bytes
    from another machine or service, an input no fingerprint covers: its refusal, or None. A family of -1 is not
    yet known (``_socket.socket()`` picks AF_INET after the event; ``fileno=`` reads it from the descriptor):
    refused too."""
    family = args[1] if len(args) > 1 else None
    if family == getattr(socket, "AF_UNIX", object()):
        return None
    try:
        name = socket.AddressFamily(family).name
    except (TypeError, ValueError):
        name = "family not known yet" if family == -1 else str(family)
    return _refused(f"opened a network socket ({name})", name)


def addressed(event: str, args: tuple[Any, ...]) -> tuple[str, dict[str, Any]] | None:
    """``socket.connect``/``bind``/``sendto``/``sendmsg`` (self, address): an address that is not a local socket's
    path (a host and port tuple) is the network, however the socket came in (inherited, passed by descriptor)."""
    address = args[-1] if args else None
    if address is None or isinstance(address, (str, bytes, bytearray)):
        return None
    return _refused(f"used a network socket ({event} {address!r})", event)


def lookup(event: str, args: tuple[Any, ...]) -> tuple[str, dict[str, Any]]:
    """A name resolved by the system's resolver (DNS, or /etc/hosts read natively): the answer is bytes from outside."""
    return _refused(f"resolved a name ({event} {args[0]!r})" if args else f"resolved a name ({event})", event)


LOOKUPS = frozenset({"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"})
ADDRESSED = frozenset({"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"})


def _refused(what: str, name: str) -> tuple[str, dict[str, Any]]:
    return (f"{what}: what it receives is an input no fingerprint covers, so it is refused: declare the data as a "
            "source ([tool.kernodeck.application.data.NAME] url = ..., fetched and checked before the application "
            "runs)", {"socket": name, "tip": TIP})


def sqlite_file(database: Any) -> str | None:
    """The file a sqlite database name opens (None: in memory, or no name): a ``file:`` URI's path, percent-decoded
    as sqlite decodes it (``file:%65xtra.db`` is ``extra.db``), its ``//localhost`` authority dropped."""
    try:
        name = os.fsdecode(database)
    except TypeError:
        return None
    if name.startswith("file:"):
        name = name[len("file:"):].split("?", 1)[0].split("#", 1)[0]
        if name.startswith("//"):
            name = "/" + name[2:].split("/", 1)[1] if "/" in name[2:] else ""
        name = os.fsdecode(urllib.parse.unquote_to_bytes(name))  # %E9 is the byte sqlite opens, not U+FFFD
    return name if name and name != ":memory:" else None
