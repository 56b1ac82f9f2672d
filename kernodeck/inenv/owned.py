"""Which files are the application's own in this run (its outputs, not inputs): seen.py notes each write and touch,
world.py asks :func:`written` before it judges a read.
"""

from __future__ import annotations

from . import children, paths

# every file (or folder) the application opened to write (truncating or creating), made, moved or linked into place
# while it ran, this process: its state just before (None: nothing was there). It is the application's own
# (written()) when it made it, or when a file that was there changed since that open and nothing but such an open
# touched it: an open that failed ("x" on a file that is there, a read-only file) leaves the file as it was, and what
# else changes a file's state without replacing its bytes (appending, "r+", a truncate to a length, a touch, a chmod)
# marks it TOUCHED: an input still, its reads counted. A folder that was there is never the application's own.
WRITTEN: dict[str, tuple[int, int, int, int, bool, int] | None] = {}
# Why a read of a file written earlier is refused where the application must compute afresh (rewritten.py)
EARLIER_READ = ("read {path} where it must compute afresh (a determinism rerun, the criterion's first sight), a "
                "file the application wrote earlier in this run: its earlier results would be read there, not "
                "recomputed")
TOUCHED: set[str] = set()
TOUCHED_FILES: set[tuple[int, int]] = set()  # (inode, device) of each file touched: by any of its names

state = paths.state
def written(path: str) -> bool:
    """The application's own: made by it in this run (nothing there at its first write), or a file that was there
    whose bytes it replaced (changed since that write, and touched by nothing else). See :data:`WRITTEN`."""
    if path not in WRITTEN:
        return False
    before, now = WRITTEN[path], state(path)
    if now is None:
        return False
    if before is None:
        return True
    # a forked child's record is a copy frozen at the fork: a file that was there is its own only if it was at the
    # fork and has not changed since (the parent may have touched it after)
    return AT_FORK.get(path) == now if children.forked() else _replaced(path, before, now)


State = tuple[int, int, int, int, bool, int]  # inode, size, mtime, ctime, a folder, device (paths.state)


def _replaced(path: str, before: State, now: State) -> bool:
    """A file that was there, its data moved since the application's truncating open (inode, size, mtime: a ctime
    alone, an xattr, is no bytes replaced), and touched by nothing, through any of its names (a hard link)."""
    if (now[0], now[5]) in TOUCHED_FILES:
        return False
    return not before[4] and path not in TOUCHED and now[:3] != before[:3]


AT_FORK: dict[str, tuple[int, int, int, int, bool, int]] = {}


def at_fork() -> None:
    """Just before a fork (in the parent; the child inherits it): the files that were there and were the
    application's own then, with their state."""
    AT_FORK.clear()
    for path, before in list(WRITTEN.items()):
        now = state(path)
        if before is not None and now is not None and _replaced(path, before, now):
            AT_FORK[path] = now
