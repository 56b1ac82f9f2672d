"""Where a path lies for the closed world, the one place it is said: trusted (the interpreter's homes, Kernodeck's
in-env folder by its real files, the system's pseudo file systems less an ordinary file under /dev), and the file a
path opens (its links and each ``..`` after a link resolved). seen.py records by these, world.py judges by them.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

from . import homes

HERE = str(Path(__file__).resolve().parent)
PSEUDO = ("/proc", "/sys", "/dev")  # the system's state (read under /proc, /sys: seen notes it, systemfiles records it)
# ... except an ordinary file under /dev: /dev/shm (and /dev/mqueue) are folders anyone may write files into (tmpfs),
# read like any other file; /dev's devices (/dev/null, /dev/urandom) stay the system's
DEVICES = "/dev" + os.sep

forms = homes.forms  # a path as given and resolved (world.py, resume_app.py)
# Trusted: the interpreter's homes (the env, the base stdlib: homes.py, the list _package.py's bytecode rule reads too),
# Kernodeck's in-env folder and the pseudo file systems (their ordinary files under /dev excepted: trusted()); not the
# base's own site-packages inside them.
TRUSTED = homes.READ_HOMES + tuple(t.rstrip(os.sep) + os.sep for t in (HERE, *PSEUDO))
HERE_SEP = HERE.rstrip(os.sep) + os.sep
TRUSTED_ELSEWHERE = tuple(t for t in TRUSTED if t != HERE_SEP)
UNTRUSTED = homes.NOT_HOMES


_PSEUDO_SEP = tuple(p + os.sep for p in PSEUDO)


def resolved(path: str) -> str:
    """``path``, resolved when it is under a pseudo file system: ``/proc/self/root/...``, ``/proc/self/cwd/...``,
    ``/proc/<pid>/fd/N`` and ``/dev/fd/N`` are links to ordinary files, never the system's state."""
    return os.path.realpath(path) if path.startswith(_PSEUDO_SEP) else path


def trusted(path: str) -> bool:
    """A normalised absolute path in the env, the base stdlib, Kernodeck's in-env folder or a pseudo file system
    (a pseudo path that links to an ordinary file is judged by that file, and an ordinary file under /dev is one; a
    path in Kernodeck's in-env folder, which no env check covers, by the file it opens: :func:`kernodecks`)."""
    path = resolved(path)
    if path.startswith(homes.THROUGH_LINKS):  # by the file the path opens now (HOMELINK1, ENVLINK1)
        path = os.path.realpath(path)
    if homes.interpreter(path):  # the running interpreter's own file, by the path it runs from
        return True
    if path.startswith(DEVICES):  # a device is the system's; an ordinary file there (/dev/shm) is judged by where it
        if not _ordinary(path):  # is, as any other: an env or project kept in a tmpfs under /dev is the env
            return True
        return path.startswith(homes.READ_HOMES) and not path.startswith(UNTRUSTED)
    if path.startswith(PROCESSES) and not _own_process(path):
        return False
    if path.startswith(HERE_SEP):
        path = real(path)
        if path.startswith(HERE_SEP):
            return kernodecks(path)
    return path.startswith(TRUSTED_ELSEWHERE) and not path.startswith(UNTRUSTED)


PROCESSES = "/proc" + os.sep


def _own_process(path: str) -> bool:
    """A /proc path that is the system's or this process's own: another process's folder (``/proc/<pid>/``: its
    ``environ`` holds the caller's whole environment, its ``cmdline`` its arguments) is that process's input, not
    the system's state (eighth red-team pass: the orchestrator's variables read back through its ``environ``)."""
    part = path[len(PROCESSES):].split(os.sep, 1)[0]
    return (not part.isdigit() or int(part) == os.getpid()) and not _memory(path)


def _memory(path: str) -> bool:
    """A process's memory (``/proc/<pid>/mem``, ``/proc/self/mem``): Kernodeck's own record and marks are there."""
    return path.startswith(PROCESSES) and os.path.basename(path) == "mem"


def kernodecks(path: str) -> bool:
    """A real path in Kernodeck's in-env folder that is Kernodeck's: the folder, and the files the run fingerprints
    there (the loader's ``inenv_sha256`` names, _package.py; its ``*.py`` where it was given none). Anything else
    there (a file dropped beside them: the folder is an install the user writes) is judged as any other file."""
    folder, name = os.path.split(path)
    if path == HERE or folder != HERE:
        return path == HERE
    expected = getattr(getattr(sys.modules.get(__package__ or ""), "__loader__", None), "expected", None)
    return name in expected if isinstance(expected, dict) else name.endswith(".py")


def _ordinary(path: str) -> bool:
    """A regular file, or a folder that may hold them (a tmpfs under /dev): anything but a device, pipe or socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # nothing there: nothing is read
    return stat.S_ISREG(mode) or stat.S_ISDIR(mode)


def real(path: str) -> str:
    """The file a path opens: its links resolved, each ``..`` after the link it follows (``a/link/../x`` is the file
    beside the link's target, never ``a/x``)."""
    return os.path.realpath(path)


def given(file: Any) -> str | None:
    """The absolute path a name opens, as written: links and ``..`` left as they are (folded as text, ``..`` would
    name another file than the one opened after a link: :func:`real` says which file it is)."""
    try:
        path = os.fsdecode(file)
    except TypeError:
        return None
    return path if path.startswith(os.sep) else os.path.join(os.getcwd(), path)


def dotdot(path: str) -> bool:
    return f"{os.sep}..{os.sep}" in path or path.endswith(f"{os.sep}..")


def opened(raw: str) -> str | None:
    """The file an absolute path as written (:func:`given`) opens, resolved; None when it is trusted as written. A path
    with no ``..`` that lies in a trusted prefix as written is trusted at once (the env's and the stdlib's thousands:
    one prefix test); any other is resolved."""
    if not dotdot(raw) and trusted(os.path.normpath(raw)):
        return None
    return real(raw)


def judged(raw: str) -> str | None:
    """The file an absolute path as written opens (:func:`opened`), to be judged; None when it is trusted."""
    path = opened(raw)
    return None if path is None or trusted(path) else path


# The import machinery's cache of a source beside it: ``__pycache__/<stem>.<tag>[.opt-N].pyc``, written as
# ``<that>.<number>`` first and moved into place (importlib's _write_atomic)
_BYTECODE = re.compile(rf"(?P<stem>[^{re.escape(os.sep)}]+)\.{re.escape(str(sys.implementation.cache_tag))}"
                       r"(\.opt-[12])?\.pyc(\.\d+)?")


def guarded(path: str) -> str | None:
    """What a change at ``path`` changes that was checked before the run: the env (a home: proven by the env
    check), Kernodeck's in-env folder (its files fingerprinted), or None."""
    if path == HERE or path.startswith(HERE_SEP):
        return "Kernodeck's in-env folder"
    if _memory(path):
        return "a process's memory"
    return "the env" if homes.home(path) else None


def places(raw: str, follows: bool = True) -> set[str]:
    """Where a change through a path as written lands: the path as written, the name in its resolved folder and,
    ``follows``, the file it opens (links followed: a write through it; a move, a link or a removal replaces the name,
    not what a link there names)."""
    # the folder resolved as the system resolves it (each ``..`` after the link it follows: ``own_link/../x`` is the
    # file beside the link's target, never folded as text first: red-team pass 25, FP4)
    folder, name = os.path.split(raw.rstrip(os.sep) or os.sep)
    found = {os.path.normpath(raw), os.path.join(real(folder), name) if name not in ("", ".", "..") else real(raw)}
    return found | {real(raw)} if follows else found


def interpreters_bytecode(path: str) -> bool:
    """The import machinery's own write of an env module's bytecode (its ``__pycache__`` folder, or the cache of a
    ``<stem>.py`` beside it, envfiles.allowed's rule), made by importlib's frozen code itself (torch imported inside
    the entry writes these). Calling importlib's private writers directly is tampering (docs/application.md)."""
    if not homes.home(path):
        return False
    folder, name = os.path.split(path)
    if name != "__pycache__":
        match = _BYTECODE.fullmatch(name)
        if match is None or os.path.basename(folder) != "__pycache__" or not os.path.isfile(
                os.path.join(os.path.dirname(folder), match["stem"] + ".py")):
            return False
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(HERE_SEP):
        frame = frame.f_back  # the hook's own frames: the first other one made the change
    return frame.f_code.co_filename.startswith("<frozen importlib._bootstrap_external")


def open_folders() -> list[str]:
    """Every folder this process holds open as a descriptor (a ``dir_fd`` it may open relative to)."""
    found: list[str] = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        target = of_descriptor(int(name))
        if target is not None and target.startswith(os.sep) and os.path.isdir(target):
            found.append(target)
    return found


def state(path: str) -> tuple[int, int, int, int, bool, int] | None:
    """A file's state as seen.py notes it before a write (inode, size, mtime, ctime, a folder, device), or None:
    nothing."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, stat.S_ISDIR(st.st_mode), st.st_dev)


def of_descriptor(fd: int) -> str | None:
    """The path an open descriptor names (``/proc/self/fd``), or None."""
    try:
        return os.readlink(f"/proc/self/fd/{int(fd)}")
    except (OSError, ValueError):
        return None
