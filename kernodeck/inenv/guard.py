"""What the application may not change while it runs: the places the run relies on as they were checked before it
ran (the env, Kernodeck's in-env folder, the declared sources, Kernodeck's cache and its record of the run). seen.py's
hook asks here at each write, move, removal or touch; world.py sets what is guarded as a window opens."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from . import paths

# a path -> what a change there changes that the run relies on as checked, or None (world._guarded)
GUARD: list[Any] = [None]
GUARD_ROOTS: list[Any] = [lambda: ()]  # what the run relies on as checked, by path (world._guarded_roots)


# What a change under /dev may land on: the sinks and the terminal, and this process's own descriptors; any other device
# (the kernel log, a disk) is the system's state, trusted when read (red-team pass 35, FP2 and FP4)
DEV_WRITABLE = ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/stdout", "/dev/stderr")
DEV_FOLDERS = ("/dev/pts/", "/dev/fd/", "/dev/shm/")  # /dev/shm: ordinary files, judged when read


def _own_process(entry: str) -> bool:
    """A /proc entry of this process: ``self``, ``thread-self``, its pid or one of its threads' ids."""
    if entry in ("self", "thread-self") or entry == str(os.getpid()):
        return True
    if not entry.isdigit():
        return False
    try:
        with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
            return any(line.split() == ["Tgid:", str(os.getpid())] for line in status)
    except OSError:
        return False


def _others(raw: str) -> str | None:
    """``raw`` when it names the kernel's or another process's state: anything under ``/sys``, anything under
    ``/proc`` but this process's own entries, a device under ``/dev`` but the sinks, the terminal and this process's
    descriptors. What a change there would hand on reaches a later call unseen, since reads there are trusted as system
    state (red-team passes 34 and 35: a stash in a sysctl, in an IRQ's affinity, in the kernel log; a forged line in
    another process's stdin through ``/proc/PID/fd/0``)."""
    path = os.path.normpath(os.path.abspath(raw))
    path = "/" + path.lstrip("/")  # "//proc" is "/proc" to the system (normpath keeps two leading slashes)
    parts = path.split(os.sep)
    if parts[1:2] == ["sys"]:
        return path
    if parts[1:2] == ["proc"]:
        return None if len(parts) > 2 and _own_process(parts[2]) else path
    if parts[1:2] == ["dev"] and path != "/dev":
        return None if path in DEV_WRITABLE or path.startswith(DEV_FOLDERS) else path
    return None


def _written_and_landing(raw: str, follows: bool) -> Iterator[str]:
    yield raw
    try:
        yield from paths.places(raw, follows)
    except OSError:  # not resolvable here (another user's /proc entry): judged as written
        return


def changed(raw: str | None, how: str, follows: bool = True) -> tuple[str, dict[str, Any]] | None:
    """A change through ``raw`` (as written) that lands on what the run relies on as it was checked (:data:`GUARD`),
    except the import machinery's own bytecode for an env module (paths.interpreters_bytecode): the refusal's
    message and details. ``follows``: whether the change goes through a link the name ends in (a write does; a
    removal, a move away or onto replaces the name itself, never what a link there names)."""
    # as written, then where it lands (a link the application made to /proc/sys, /proc/self/root/...)
    for candidate in _written_and_landing(raw, follows) if raw is not None else ():
        other = _others(candidate)
        if other is not None:
            return (f"changed {other} ({how}): the kernel's or another process's state, which a later call would "
                    "read unseen: refused", {"file": other, "tip": "write the application's outputs into the run's "
                                                               "folder"})
    for place in paths.places(raw, follows) if raw is not None and GUARD[0] is not None else ():
        what = GUARD[0](place)
        if what is not None and not paths.interpreters_bytecode(place):
            return (f"changed {what} ({place}, {how}) while the run relies on it as it was checked: refused",
                    {"file": place, "tip": "write the application's outputs into the run's folder (its working "
                                           "folder) or elsewhere outside the env and the declared sources"})
    return None


def moved_tree(raw: str) -> tuple[str, dict[str, Any]] | None:
    """A folder moved that holds what the run relies on as checked (:data:`GUARD_ROOTS`): the refusal."""
    # the name moved, its folder resolved: a link moved is the link, never the folder it names (red-team pass 26, FF1)
    inside = tuple(place + os.sep for place in paths.places(raw, follows=False))
    for root in GUARD_ROOTS[0]():
        if root.startswith(inside):
            return (f"moved {raw}, which holds {root}, while the run relies on it as it was checked: refused",
                    {"file": raw, "tip": "move only the application's own files"})
    return None
