"""What the application's code touches while it runs: one audit hook and its record (world.py judges the record).

Installed once (``sys.addaudithook``), the hook returns at once outside a window (``ON``) and for any event it does not
record. It records every file opened for reading (``open()``, ``os.open`` (a relative name against the working folder
and every folder held open), ``io.open_code``), ``sqlite3.connect``'s database, a library ``ctypes`` loads by path;
every file written or folder made; project folders listed outside the import machinery; the bytes compiled from, and
the stat at each read of, a file in the Hugging Face modules cache (declared_files.py); a read of the kernel's state
(systemfiles.SEEN). It refuses at once a process the application starts (a spawned interpreter too: channels.py), an
audit hook it adds, and a change to what was checked before the run (guard.py). A process forked in a window keeps the
hook: its reads are judged at once in it, its writes and reads handed to the parent (children.py). Between windows,
every thread but Kernodeck's own is watched."""

from __future__ import annotations

import contextlib
import importlib.machinery
import os
import sys
import threading
from typing import Any, NoReturn

from . import channels, children, declared_files, guard, libraries, natives, owned, paths, rewritten, systemfiles
from ._common import CheckFailed, made
from .protocol import Layer

ON, BY = [False], [""]  # in a window; who runs now: "the entry", "the criterion"
LATE = "a thread the application left running (after its call returned)"
MINE = threading.local()  # Kernodeck's threads (own_thread), ``quiet`` while the hook walks a folder; not a new one
IN_ENV = __package__ == "kernodeck_inenv"  # loaded by _package.py (the runner, the resume worker), not as a library
READ: dict[str, str] = {}  # this window's files read: path -> who
WRITTEN, TOUCHED, TOUCHED_FILES, written = owned.WRITTEN, owned.TOUCHED, owned.TOUCHED_FILES, owned.written
earlier = rewritten.bar  # a rerun's bar on the application's earlier files, decided at each read (rewritten.py)
INSTALLED = [False]
FORKS_ENDED = [False]  # a resume call's processes ended (resume_calls.end_descendants): no fork from then on
TIP_LIMITS = "docs/application.md: the resume contract"
PENDING: list[CheckFailed] = []  # verdicts raised and not yet settled by the step that ran the application
# the events _hook judges; any other (builtins.id, exec, import: ~60 000 as sentence-transformers loads) returns at once
JUDGED = frozenset({"open", "os.rename", "os.link", "os.symlink", "os.truncate", "os.utime", "os.chmod", "os.chown",
                    "os.setxattr", "os.removexattr", "socket.__new__", "os.chdir", "os.listdir", "os.scandir",
                    "os.mkdir", "os.fork", "os.forkpty", "os.remove", "os.rmdir", "socket.sethostname",
                    "resource.prlimit", "sys.addaudithook", "sqlite3.connect", "ctypes.dlopen", "compile",
                    *channels.PROCESS_EVENTS, *channels.ADDRESSED, *channels.LOOKUPS})

_state = owned.state


def _will_write(path: str) -> None:
    """The application is about to replace ``path``'s bytes (a truncating or creating open; or make it, or move or
    link a file onto it): its state now, noted at its first such write in the run."""
    rewritten.replacing(path)  # announced only: a read of it after is judged by what happened (rewritten.refused)
    if path not in WRITTEN:
        WRITTEN[path] = _state(path)
        _to_parent({"kind": "written", "path": path, "before": WRITTEN[path]})


def _by() -> str:
    """Who reads now: the window's caller, or, between windows, a thread the application left running."""
    return BY[0] if ON[0] else LATE


def _touched(path: str) -> None:
    """The application changes ``path``'s state without replacing its bytes: a file that was there stays an input."""
    if path not in TOUCHED:
        if children.forked() and WRITTEN.get(path, ()) is not None:
            # a touch handed on as a note could be lost (the notes are in the application's reach), and the parent
            # would then take a moved mtime for bytes replaced: a forked child changes only files it made
            _refuse(f"changed the state of {path} in a forked process, a file it did not make: refused",
                    {"file": path, "tip": "change files in the process that runs the application's call"})
        TOUCHED.add(path)
    state = _state(path)
    if state is not None:
        TOUCHED_FILES.add((state[0], state[5]))
    rewritten.touched(state)


def _guard(raw: str | None, how: str, follows: bool = True) -> None:
    """A change through ``raw`` refused where it lands on what the run relies on as checked (guard.py)."""
    refusal = guard.changed(raw, how, follows)
    if refusal is not None:
        _refuse(*refusal)


def _opened(file: Any, mode: Any, flags: Any, *, guarded: bool = True) -> None:
    if isinstance(file, int):
        return  # an open file descriptor: its file was opened (and recorded) before
    raw = paths.given(file)
    bits = 0 if isinstance(mode, str) else int(flags or 0)
    changes = any(c in mode for c in "wxa+") if isinstance(mode, str) else bool(
        bits & (os.O_ACCMODE | os.O_TRUNC | os.O_CREAT) and not bits & getattr(os, "O_PATH", 0))
    if changes and guarded:
        _guard(raw, "opened to write")
    resolved = None if raw is None else paths.opened(raw)  # the file it opens: links followed, ``..`` after its link
    path = None if resolved is None or paths.trusted(resolved) else resolved
    if raw is not None and path is None and (resolved or raw).startswith(systemfiles.STATE):  # PROC2, PROC3
        systemfiles.SEEN.setdefault(resolved or raw)  # the kernel's state, trusted: recorded by the file it opens
        _to_parent({"kind": "read", "path": resolved or raw})  # a forked child's: the parent records it (world.judge)
    if raw is None or path is None:
        return
    # Written by the application: a file it creates or truncates. Appending to (or opening for update) a file that
    # was there before leaves its earlier bytes an input: "a+"/"r+" read them, and they are not its output.
    if isinstance(mode, str):
        reads = "r" in mode or "+" in mode
        # "x" on a path already there fails (FileExistsError): no write, the file stays what it was (pass 17, FP3)
        writes = "w" in mode or ("x" in mode and not os.path.lexists(path)) or (
            "a" in mode and not os.path.exists(path))
        touches = ("a" in mode or "+" in mode) and "w" not in mode
    else:  # os.open: the flags say
        flags = int(flags or 0)
        if flags & getattr(os, "O_PATH", 0):
            return  # a handle on the path, no access to its bytes (O_TRUNC is ignored with it)
        access = flags & os.O_ACCMODE
        reads = access != os.O_WRONLY and not flags & os.O_TRUNC
        fails = bool(flags & os.O_CREAT and flags & os.O_EXCL) and os.path.lexists(path)  # O_EXCL: it is there
        writes = not fails and (bool(flags & os.O_TRUNC) or (bool(flags & os.O_CREAT) and not os.path.exists(path)))
        touches = access != os.O_RDONLY and not flags & os.O_TRUNC
    if reads and path.endswith(" (deleted)") and raw.startswith(("/proc/", "/dev/fd/")):
        _refuse(f"read a file that is no longer there through {raw} ({path}): what it held cannot be judged",
                {"file": path, "tip": "read the application's inputs by their declared paths"})
    if reads and children.FORKS[0] and not children.forked():
        from_children()  # a file a child wrote is the application's own when the parent reads it, not only later
    if reads and not writes and rewritten.refused(path):  # a file it wrote before a rerun, its bytes still those
        _refuse(owned.EARLIER_READ.format(path=path), {"file": path, "tip": "keep no results across calls"})
    if reads and not paths.trusted(path):
        # its stat as read: the judgement hashes it, unchanged since (declared_files.py); a forked child hands that
        # record to the parent, judged there as its own
        record = declared_files.seen_now(path)
        if record is not None and children.forked():
            _to_parent({"kind": "seen", **record})
    if reads and path not in READ and not written(path) and os.path.isfile(path):
        READ[path] = _by()
        if children.forked():
            _judged_now(path, "opened")
            _to_parent({"kind": "read", "path": path})
    if writes:
        _will_write(path)
    if touches and os.path.lexists(path):
        _touched(path)


def _os_open(file: Any, flags: Any) -> None:
    """``os.open``: its audit event carries no ``dir_fd``, so a relative name is judged against the working folder
    AND every folder the process holds open (``os.open(name, O_RDONLY, dir_fd=d)`` reads ``d``'s file, never the
    working folder's): wherever the name could resolve to an undeclared file, that file is named."""
    if isinstance(file, int):
        return
    try:
        name = os.fsdecode(file)
    except TypeError:
        return
    if name.startswith(os.sep):
        _opened(name, None, flags)
        return
    for folder in {os.getcwd(), *paths.open_folders()}:
        _opened(os.path.join(folder, name), None, flags)


def _refuse(message: str, details: dict[str, Any]) -> NoReturn:
    """A verdict at once, raised where the application's call is: the operation does not happen. In a forked child
    (``os.spawnv`` forks then execs; a DataLoader worker) it is also handed to the parent (from_children)."""
    text = f"{_by() or 'the application'} {message}"
    if children.forked():  # refused whether or not the parent hears of it
        with contextlib.suppress(OSError):
            children.send({"kind": "refused", "message": text, "details": details})
    verdict = CheckFailed(text, Layer.APPLICATION, details)
    if not PENDING:  # the step's first, recorded where it is made: a stall may never raise it (HANG2)
        made(verdict, MINE)
    PENDING.append(verdict)
    raise verdict


# In a forked child, a read is judged at once (world.py sets it when a window opens: the path and how it was read ->
# the verdict's message and details, or None when the file is accounted for), never handed on for the parent to judge.
JUDGE: list[Any] = [None]


def _judged_now(path: str, how: str) -> None:
    verdict = JUDGE[0](path, how) if JUDGE[0] is not None else None
    if verdict is not None:
        _refuse(*verdict)


def _to_parent(note: dict[str, Any]) -> None:
    """In a forked process: a write or read the parent must know of; a note not written refuses the operation."""
    if not children.forked():
        return
    try:
        children.send(note)
    except OSError as exc:
        done = "wrote" if note["kind"] == "written" else "read"
        _refuse(f"{done} {note.get('path')} in a forked process whose notes to the parent cannot be written ({exc})",
                {"file": note.get("path"), "tip": "leave the descriptors a forked process inherits open"})


def from_children() -> None:
    """What the window's forked children wrote and were refused, merged into this window's record."""
    try:
        notes = children.receive()
    except children.Altered as exc:
        _refuse(f"altered what its forked processes handed on: {exc}",
                {"tip": "leave the descriptors a process holds alone"})
    for note in notes:
        if note["kind"] == "written":
            before = note["before"]
            WRITTEN.setdefault(note["path"], tuple(before) if before else None)  # type: ignore[arg-type]
            rewritten.replacing(note["path"])
        elif note["kind"] == "read":
            children.READ.add(note["path"])
        elif note["kind"] == "seen":
            declared_files.take(note)
        elif note["kind"] == "refused":
            verdict = CheckFailed(f"{note['message']} (in a child process)", Layer.APPLICATION, note["details"])
            PENDING.append(verdict)
            raise verdict


def _sqlite(database: Any) -> None:
    """``sqlite3.connect``: the database file is read (and created if missing, then an output) like an open."""
    name = channels.sqlite_file(database)
    if name is not None:
        if not os.path.exists(name) or paths.guarded(paths.real(name)) is not None:  # sqlite may write it
            _guard(paths.given(name), "a database made or opened")
        _opened(name, "a+", None, guarded=False)  # an existing database is read (sqlite may write its journal)


def _dlopen(name: Any) -> None:
    """``ctypes.CDLL(path)``: a library loaded by path is judged like a file read (a bare soname is found by the
    dynamic loader, and the library it maps is judged with the others after each step: libraries.py)."""
    if name is None:
        return
    path = os.fsdecode(name)
    if os.sep in path and not libraries.accounted(os.path.abspath(path)):  # the system's libm by path is the system's
        _opened(path, "r", None)


def _moved(src_arg: Any, dst_arg: Any, how: str = "moved") -> None:
    """``os.rename``/``os.replace`` (and ``os.link``): the destination is a new name for the source's bytes. A
    source the application did not write is an input, read as it is moved or linked (into the run's folder, say); the
    destination is then the application's own."""
    src, dst = paths.given(src_arg), paths.given(dst_arg)
    if src is None or dst is None:
        return
    _guard(dst, f"{how} onto", follows=False)
    if how == "moved":  # the folder that holds what was checked, moved away (and back, changed): any of them
        _guard(src, "moved away", follows=False)
        if (refusal := guard.moved_tree(src)) is not None:
            _refuse(*refusal)
    elif how == "hard-linked":  # a new name for checked bytes: written through it, they change
        _guard(src, "given another name")
    source = paths.real(src)
    # a symbolic link made moves no bytes: each read through it is judged by the file it opens (paths.judged follows
    # links), so what it names is not walked as read (a data set linked into a working folder: 42 µs a file, red-team
    # pass 26 COST2); a move or a hard link puts the bytes under the application's own name, so they are read here
    if how != "linked" and not paths.trusted(source) and not written(source):
        if os.path.isdir(source):  # a folder moved: each file in it, read as it moves
            MINE.quiet = True  # the walk is Kernodeck's, not the application's
            try:
                found = [os.path.join(top, name) for top, _, names in os.walk(source) for name in names]
            finally:
                MINE.quiet = False
            for file in found:
                _opened(file, "r", None)
        else:
            _opened(source, "r", None)
    _will_write(paths.real(dst))


def _at(name: Any, dir_fd: Any) -> Any:
    """A name given relative to a folder descriptor (``dir_fd``, ``src_dir_fd``, ``dst_dir_fd``; -1 or None: none):
    that folder's path joined to it. A descriptor that names no folder is refused: the file cannot be known."""
    if dir_fd is None or int(dir_fd) < 0:
        return name
    try:
        raw = os.fsdecode(name)
    except TypeError:
        return name
    if raw.startswith(os.sep):
        return name
    folder = paths.of_descriptor(dir_fd) or ""
    if not folder.startswith(os.sep):
        _refuse(f"named {raw} relative to a folder descriptor ({dir_fd}) that names no folder: the file cannot be "
                "judged", {"file": raw, "tip": "name the application's files by their paths"})
    return os.path.join(folder, raw)


def _touched_by(file: Any) -> None:
    """A path or a descriptor (its file: ``/proc/self/fd``) whose state the application changes in place."""
    if isinstance(file, int):
        file = paths.of_descriptor(file)
    raw = paths.given(file)
    _guard(raw, "its state changed")
    path = None if raw is None else paths.judged(raw)
    if path is not None:
        _touched(path)


def _linked(target_arg: Any, link_arg: Any) -> None:
    """``os.symlink(target, link)``: a relative target is relative to the link's folder."""
    target, link = paths.given(target_arg), paths.given(link_arg)
    if target is None or link is None:
        return
    try:
        raw = os.fsdecode(target_arg)
    except TypeError:
        return
    if not raw.startswith(os.sep):
        target = os.path.join(os.path.dirname(link), raw)
    _moved(target, link, "linked")


LISTED: dict[str, str] = {}  # this window's folders listed: folder -> who
_FILL_CACHE = getattr(getattr(importlib.machinery.FileFinder, "_fill_cache", None), "__code__", None)


def _listed(path: Any) -> None:
    """``os.listdir``/``os.scandir`` (and os.walk, glob, pathlib over them): a folder's names are an input too. The
    import machinery's own listings (FileFinder's cache of a ``sys.path`` folder) serve imports, judged file by file:
    they are not recorded."""
    if isinstance(path, int):  # a folder opened as a descriptor: the folder it is
        path = paths.of_descriptor(path)
        if path is None:
            return
    if sys._getframe(2).f_code is _FILL_CACHE:  # the code object itself: a name anyone can compile under
        return
    raw = paths.given("." if path is None else path)
    folder = None if raw is None else paths.judged(raw)
    if folder is not None and folder not in LISTED and not written(folder):
        LISTED[folder] = _by()
        if children.forked():
            _judged_now(folder, "listed")


def own_thread() -> None:
    """This thread is Kernodeck's: between windows, its events are not the application's."""
    MINE.own = True


def _hook(event: str, args: tuple[Any, ...]) -> None:
    # ON is None: teardown cleared this module's names (a library's process, where only the windows are watched).
    # Between windows, in an in-env process, any thread but Kernodeck's own is the application's: its reads are LATE
    if ON is None or event not in JUDGED:
        return
    if (not ON[0] and (not IN_ENV or getattr(MINE, "own", False))) or getattr(MINE, "quiet", False):
        return
    if event == "open":
        if args[1] is None:
            _os_open(args[0], args[2])
        else:
            _opened(*args[:3])
    elif event in ("os.rename", "os.link"):  # also os.replace; a file written then moved into place is still an
        # output, and a hard link is a new name for the file's bytes, read through it
        _moved(_at(args[0], args[2]), _at(args[1], args[3]), "moved" if event == "os.rename" else "hard-linked")
    elif event == "os.symlink":  # a link made (in the env, say, which is trusted by its path): what it names is read
        _linked(args[0], _at(args[1], args[2]))
    elif event in ("os.truncate", "os.utime", "os.chmod", "os.chown", "os.setxattr", "os.removexattr"):
        _touched_by(args[0])  # a state changed, the bytes not replaced
    elif event in channels.PROCESS_EVENTS:
        _refuse(*channels.started(event, args))
    elif event == "socket.__new__" or event in channels.ADDRESSED:
        refusal = channels.network(args) if event == "socket.__new__" else channels.addressed(event, args)
        if refusal is not None:
            _refuse(*refusal)
    elif event in channels.LOOKUPS:
        _refuse(*channels.lookup(event, args))
    elif event == "os.chdir":  # the working folder every relative name was judged against stays as judged
        _refuse(f"changed the working folder ({args[0]!r}) while its code runs: a relative name would open another "
                "file than the one judged", {"tip": "open the application's files by absolute paths (app.root)"})
    elif event in ("os.listdir", "os.scandir"):
        _listed(args[0])
    elif event == "os.mkdir":  # a folder the application made (not one already there): its listing is its own
        made = paths.given(_at(args[0], args[2]))
        _guard(made, "a folder made")
        if made is not None:
            _will_write(paths.real(made))
    elif event in ("os.fork", "os.forkpty"):  # pty.fork too
        if FORKS_ENDED[0]:  # a thread a resume call left running, after the call's processes were ended
            _refuse("forked after its call ended: what it would run outlives the call", {"tip": TIP_LIMITS})
        children.FORKS[0] = True
    elif event in ("os.remove", "os.rmdir"):
        _guard(paths.given(_at(*args[:2])), "removed", follows=False)
    elif event in ("socket.sethostname", "resource.prlimit") and (event == "socket.sethostname" or args[0] not in (
            0, os.getpid())):  # the machine's name, another process's limits: state a later call reads unseen (pass 35)
        _refuse(f"changed the machine's or another process's state ({event}): refused", {"tip": TIP_LIMITS})
    elif event == "sys.addaudithook":  # it would run on every event, Kernodeck's own between windows included
        _refuse("added an audit hook (sys.addaudithook): refused", {"tip": "docs/application.md"})
    elif event == "sqlite3.connect":
        _sqlite(args[0])
    elif event == "ctypes.dlopen":
        _dlopen(args[0])
    elif event == "compile":  # the bytes compiled from a file of the modules cache (declared_files.py judges them)
        declared_files.compiled(*args[:2])


def install() -> None:
    if not INSTALLED[0]:
        own_thread()
        os.register_at_fork(before=owned.at_fork)  # in the parent, as it forks: no change after it can slip in
        sys.addaudithook(_hook)
        natives.install()  # the env's native readers (safetensors, tokenizers, torch loaders) report files too
        channels.hold_spawns()  # and multiprocessing's spawn/forkserver starts raise an event
        INSTALLED[0] = True
