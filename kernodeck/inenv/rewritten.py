"""The bar on the application's earlier files where it must compute afresh (a determinism rerun, the criterion's first
sight), decided at each read by what happened to the file, not by what the application announced.

Such a read is refused when the file read is one the application wrote before the bar was set (by its inode and
device, whatever its name now) and its bytes are still those: unchanged since the bar (size, mtime), or changed by
nothing but a touch (appending, ``"r+"``, a truncate to a length, ``os.utime``: its earlier bytes are still there), or
never replaced through its name or its inode (a truncating or creating open, a file moved or linked onto the name).
A write that is announced but replaces nothing, ``os.replace(memo, memo)`` or ``open(memo, "wb", opener=...)`` whose
opener opens the memo read-only, so no longer lifts the bar (red-team pass 18 FP4; pass 17 had closed ``"x"`` only,
the bar then being lifted at the announcement). A ctime is not compared: a rename, a link or a chmod moves it with no
byte replaced. As the bar is set, the clock file times come from is let pass the newest earlier file's mtime, so a
rewrite in the rerun, however soon, leaves another mtime even when it leaves the same size.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable

from . import paths

Key = tuple[int, int]  # (inode, device)
BAR: dict[Key, tuple[int, int]] = {}  # each earlier file -> its (size, mtime_ns) as the bar was set
RENEWED: set[str] = set()  # names whose file was replaced since the bar (announced: seen._will_write)
RENEWED_FILES: set[Key] = set()  # the files those names held then (a truncating open keeps the inode)
TOUCHED: set[Key] = set()  # files whose state the application changed since the bar without replacing their bytes
ANNOUNCED: dict[Key, tuple[int, int]] = {}  # each file at a renewed name -> its (size, mtime_ns) as that was announced
NEW: set[Key] = set()  # renewed files whose bytes changed after the announcement, before any touch: new bytes
# the clock Linux stamps file times from (a tick of a few ms; newer kernels stamp finer once a time was read)
_COARSE = getattr(time, "CLOCK_REALTIME_COARSE", 5 if sys.platform.startswith("linux") else time.CLOCK_REALTIME)


def bar(files: Iterable[str]) -> None:
    """The files the application wrote before the rerun now starting (none: the rerun is over)."""
    BAR.clear()
    RENEWED.clear()
    RENEWED_FILES.clear()
    TOUCHED.clear()
    ANNOUNCED.clear()
    NEW.clear()
    for path in files:
        st = paths.state(path)
        if st is not None and not st[4]:
            BAR[(st[0], st[5])] = (st[1], st[2])
    _past(max((mtime for _, mtime in BAR.values()), default=0))


def _past(newest: int) -> None:
    """Wait (a few ms at most; a second on a file system that keeps whole seconds) until a file written now gets
    another mtime than ``newest``."""
    whole = newest % 1_000_000_000 == 0  # most likely a file system that keeps whole seconds
    until, give_up = newest + (999_999_999 if whole else 0), time.monotonic() + 2.0
    while newest and time.clock_gettime_ns(_COARSE) <= until and time.monotonic() < give_up:
        time.sleep(0.001)


def replacing(path: str) -> None:
    """The application is about to replace ``path``'s bytes (a truncating or creating open, a move or link onto it)."""
    if BAR:
        RENEWED.add(path)
        st = paths.state(path)
        if st is not None:
            RENEWED_FILES.add((st[0], st[5]))
            ANNOUNCED.setdefault((st[0], st[5]), (st[1], st[2]))


def touched(st: tuple[int, int, int, int, bool, int] | None) -> None:
    """The application is about to change this file's state (``st``: as it is now) without replacing its bytes.

    Decided as the touch arrives: a file whose replacement was announced since the bar, and whose size or mtime has
    changed since that announcement with no touch before, holds new bytes, and a mode or times set after them
    (``shutil.copy``, ``copy2``, ``copytree`` onto an earlier file's name: red-team pass 19 FF4) leave them new; a
    touch of bytes unchanged since the announcement keeps them the bar's (an announced write that replaced nothing,
    then ``os.utime``: pass 18 FP4)."""
    if BAR and st is not None:
        key = (st[0], st[5])
        if key in NEW:
            return
        if key in ANNOUNCED and key not in TOUCHED and (st[1], st[2]) != ANNOUNCED[key]:
            NEW.add(key)  # written since its replacement was announced, and nothing touched it before: new bytes
            return
        TOUCHED.add(key)


def refused(path: str) -> bool:
    """Reading ``path`` now would read an earlier file's bytes (see the module's docstring)."""
    if not BAR:
        return False
    st = paths.state(path)
    if st is None or st[4]:
        return False
    key = (st[0], st[5])
    if key not in BAR:
        return False  # not an earlier file: a new one made since (or an input, judged as one)
    if key in NEW:
        return False
    if key in TOUCHED or (path not in RENEWED and key not in RENEWED_FILES):
        return True
    return (st[1], st[2]) == BAR[key]
