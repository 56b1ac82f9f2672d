"""A process the application forks while its code runs (a DataLoader worker): its notes to the parent.

The child keeps the hook (seen.py), and what it reads is judged at once in it, a read of an undeclared file refused
there (world.py registers the judge): no verdict waits for a record the application could reach. What it writes is
handed to the parent, whose later reads of those files are then the application's own: through a file with no name
(made and unlinked at once when the first window opens), held by a descriptor every child inherits, each line signed
with a key made then (HMAC-SHA256). The application can find that descriptor through ``/proc/self/fd``; a line it
forges or alters fails its signature, a file put in the descriptor's place fails its identity (device, inode), both
refused; a line it removes only loses a child's output, whose reads in the parent are then judged as inputs (a false
failure, never a false pass). A child that cannot write its note is refused the write. What it reads is handed on
too (judged in it, then kept in :data:`READ`): an output must not be a declared file's content even when a worker
loaded it (cached.py); a child that cannot write that note is refused the read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

NOTES = [-1]  # the descriptor
IDENTITY = [(0, 0)]  # the file it held when made: (device, inode)
KEY = [b""]
DONE = [0]  # how far the parent has read
PID = [0]  # the process the window was opened in
FORKS = [False]  # whether the application has forked (the parent then reads the notes as it reads a file)
READ: set[str] = set()  # in the parent: the files its children read in the window (a cache a worker loads: cached.py)


class Altered(Exception):
    """The notes are not what the children wrote."""


def open_notes() -> None:
    """The children's notes, once per process (the first window); what an earlier window's children read, forgotten."""
    READ.clear()
    if NOTES[0] >= 0:
        return
    import tempfile

    with tempfile.TemporaryFile() as made:  # unlinked at once (O_TMPFILE where there is one)
        NOTES[0] = os.dup(made.fileno())
    st = os.fstat(NOTES[0])
    IDENTITY[0], KEY[0], DONE[0] = (st.st_dev, st.st_ino), os.urandom(32), 0
    try:
        import fcntl  # each child's line appended whole, whatever the others wrote
    except ImportError:  # no fork there either (Windows)
        return
    fcntl.fcntl(NOTES[0], fcntl.F_SETFL, fcntl.fcntl(NOTES[0], fcntl.F_GETFL) | os.O_APPEND)


def forked() -> bool:
    """Whether this process is a child forked from the one whose window is open (or was)."""
    return PID[0] != 0 and os.getpid() != PID[0] and NOTES[0] >= 0


def _same_file() -> bool:
    try:
        st = os.fstat(NOTES[0])
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == IDENTITY[0]


def _signed(note: dict[str, Any]) -> bytes:
    body = json.dumps(note, sort_keys=True)
    return f"{body}\t{hmac.new(KEY[0], body.encode(), hashlib.sha256).hexdigest()}\n".encode()


def send(note: dict[str, Any]) -> None:
    """In a forked child: one signed line for the parent. OSError when it cannot be written to the notes' own file."""
    if not _same_file():
        raise OSError("the notes' descriptor no longer holds the notes")
    line = _signed(note)
    if os.write(NOTES[0], line) != len(line):
        raise OSError("the note was cut short")


def receive() -> list[dict[str, Any]]:
    """In the parent: the children's notes written since the last call. :class:`Altered` when a line is not a child's
    or the file is not the one the children were given."""
    if NOTES[0] < 0:
        return []
    if not _same_file():
        raise Altered("the descriptor of the children's notes holds another file")
    size = os.fstat(NOTES[0]).st_size
    if size < DONE[0]:
        raise Altered("the children's notes were cut short")
    data = os.pread(NOTES[0], size - DONE[0], DONE[0])
    whole = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
    DONE[0] += len(whole)
    notes = []
    for line in whole.decode("utf-8", "replace").splitlines():
        body, _, sig = line.rpartition("\t")
        if not hmac.compare_digest(sig, hmac.new(KEY[0], body.encode(), hashlib.sha256).hexdigest()):
            raise Altered(f"a line of the children's notes is not signed by Kernodeck: {line[:120]}")
        notes.append(json.loads(body))
    return notes
