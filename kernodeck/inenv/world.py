"""A closed world: every file the application opens or imports is accounted for, or the step that ran it fails.

While the application's own code runs (its files loaded, its entry called, its criterion called: a :func:`window`),
one audit hook (``sys.addaudithook``, installed once) records every file opened for reading (``open``: ``open()``,
``os.open``, ``io.open_code`` of each imported source or bytecode file) and every file written. At the window's end,
each file read is one of:

- in the env (``sys.prefix``: every file there is the lock's, proven by the inventory step),
- in the base interpreter's standard library (never its ``site-packages``: that is no part of a venv),
- Kernodeck's in-env files (verified bytes, ``_package.py``), the system's pseudo-files (``/proc``, ``/sys``, ``/dev``)
  and this run's dossier folder,
- a declared source: ``code`` and ``files`` (globs accepted, each file fingerprinted into the reference), the sample,
  a ``weights`` or ``data.NAME`` source (checked file by file at its own step),
- written by the application in this run before it read it (its outputs, not inputs),

or it is undeclared: the step fails naming the file and the declaration to add (``code`` for Python, ``files`` for
anything else in the project, a ``data.NAME`` source outside it). Modules imported in the window whose file is none of these (a compiled extension in the project) are
named too. Cheap by design: the hook returns at once outside a window and for any event but ``open``/``os.rename``,
and drops a trusted path with one prefix test before anything else.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import verified
from ._common import CheckFailed, Context
from .protocol import Layer

HERE = str(Path(__file__).resolve().parent)
PSEUDO = ("/proc", "/sys", "/dev")  # the system's state (the system step records it), not files of the application

_ON = [False]
_BY = [""]  # who runs now: "the entry", "the criterion"
_READ: dict[str, str] = {}  # this window's files read: path -> who
_WRITTEN: set[str] = set()  # every file written while the application ran, this process
_INSTALLED = [False]
_PENDING: list[CheckFailed] = []  # verdicts raised and not yet settled by the step that ran the application


def _forms(path: str) -> set[str]:
    return {os.path.normpath(os.path.abspath(path)), os.path.realpath(path)}


def _roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(trusted prefixes, untrusted ones inside them): the env, the base stdlib less its site-packages, Kernodeck's
    in-env folder, the pseudo file systems."""
    env = _forms(sys.prefix) | _forms(sys.exec_prefix)
    stdlib: set[str] = set()
    for key in ("stdlib", "platstdlib"):
        stdlib |= _forms(sysconfig.get_path(key))
    trusted = env | stdlib | {HERE, *PSEUDO}
    inside = {
        os.path.join(lib, name)
        for lib in stdlib
        for name in ("site-packages", "dist-packages")
        if not any((lib + os.sep).startswith(e + os.sep) for e in env)  # a venv's base: not the env's own
    }
    return tuple(t.rstrip(os.sep) + os.sep for t in trusted), tuple(u + os.sep for u in inside)


TRUSTED, UNTRUSTED = _roots()


_PSEUDO_SEP = tuple(p + os.sep for p in PSEUDO)


def resolved(path: str) -> str:
    """``path``, resolved when it is under a pseudo file system: ``/proc/self/root/...``, ``/proc/self/cwd/...``,
    ``/proc/<pid>/fd/N`` and ``/dev/fd/N`` are links to ordinary files, never the system's state."""
    return os.path.realpath(path) if path.startswith(_PSEUDO_SEP) else path


def trusted(path: str) -> bool:
    """A normalised absolute path in the env, the base stdlib, Kernodeck's in-env folder or a pseudo file system
    (a pseudo path that links to an ordinary file is judged by that file)."""
    path = resolved(path)
    return path.startswith(TRUSTED) and not path.startswith(UNTRUSTED)


def _path(file: Any) -> str | None:
    try:
        path = os.fsdecode(file)
    except TypeError:
        return None
    return os.path.normpath(path if path.startswith(os.sep) else os.path.join(os.getcwd(), path))


def _opened(file: Any, mode: Any, flags: Any) -> None:
    if isinstance(file, int):
        return  # an open file descriptor: its file was opened (and recorded) before
    path = _path(file)
    if path is None or trusted(path):
        return
    path = resolved(path)
    # Written by the application: a file it creates or truncates. Appending to (or opening for update) a file that
    # was there before leaves its earlier bytes an input: "a+"/"r+" read them, and they are not its output.
    if isinstance(mode, str):
        reads = "r" in mode or "+" in mode
        writes = "w" in mode or "x" in mode or ("a" in mode and not os.path.exists(path))
    else:  # os.open: the flags say
        flags = int(flags or 0)
        access = flags & os.O_ACCMODE
        reads = access != os.O_WRONLY and not flags & os.O_TRUNC
        writes = bool(flags & os.O_TRUNC) or (bool(flags & os.O_CREAT) and not os.path.exists(path))
    if reads and path not in _WRITTEN and path not in _READ and os.path.isfile(path):
        _READ[path] = _BY[0]
        _to_parent({"kind": "read", "path": path, "by": _BY[0]})
    if writes:
        _WRITTEN.add(path)
        _to_parent({"kind": "written", "path": path})


def _open_dirs() -> list[str]:
    """Every folder this process holds open as a descriptor (a ``dir_fd`` it may open relative to)."""
    found = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith(os.sep) and os.path.isdir(target):
            found.append(target)
    return found


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
    for folder in {os.getcwd(), *_open_dirs()}:
        _opened(os.path.join(folder, name), None, flags)


def _refuse(message: str, details: dict[str, Any]) -> None:
    """A verdict at once, raised where the application's call is: the operation does not happen. In a forked child
    (``os.spawnv`` forks then execs; a DataLoader worker) it is also handed to the parent (_from_children)."""
    text = f"{_BY[0] or 'the application'} {message}"
    _to_parent({"kind": "refused", "message": text, "details": details})
    verdict = CheckFailed(text, Layer.APPLICATION, details)
    _PENDING.append(verdict)
    raise verdict


_PID = [0]  # the process the window was opened in
_OUT = [""]  # the run's folder, where forked children leave what they read (CHILDREN)
CHILDREN = ".closed-world-children.jsonl"


def _to_parent(note: dict[str, Any]) -> None:
    """In a process forked during a window (its hook and window inherited): one line for the parent, whose own
    record never sees the child's reads, writes or refusals."""
    if os.getpid() == _PID[0] or not _OUT[0]:
        return
    _ON[0] = False  # this write is Kernodeck's, not the application's
    try:
        fd = os.open(os.path.join(_OUT[0], CHILDREN), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (json.dumps(note) + "\n").encode())
        finally:
            os.close(fd)
    except OSError:
        pass
    finally:
        _ON[0] = True


def _from_children() -> None:
    """What the window's forked children read, wrote and were refused, merged into this window's record."""
    path = os.path.join(_OUT[0], CHILDREN)
    try:
        with open(path, encoding="utf-8") as notes:
            lines = notes.read().splitlines()
        os.unlink(path)
    except OSError:
        return
    for note in map(json.loads, lines):
        if note["kind"] == "written":
            _WRITTEN.add(note["path"])
        elif note["kind"] == "read" and note["path"] not in _WRITTEN:
            _READ.setdefault(note["path"], f"{note['by']} (in a child process)")
        elif note["kind"] == "refused":
            verdict = CheckFailed(f"{note['message']} (in a child process)", Layer.APPLICATION, note["details"])
            _PENDING.append(verdict)
            raise verdict


# The audit events that start another program: whatever it reads, no hook of this process sees (the program's index
# in the event's arguments). multiprocessing (fork, spawn, forkserver: _posixsubprocess.fork_exec) and torch's
# DataLoader workers raise none of these (only ``os.fork``), so they are not refused: docs/application.md.
PROCESS_EVENTS = {"subprocess.Popen": 1, "os.system": 0, "os.exec": 0, "os.posix_spawn": 0, "os.spawn": 1}


def _program(event: str, args: tuple[Any, ...]) -> str:
    value = args[PROCESS_EVENTS[event]]
    if event == "subprocess.Popen" and args[0] is not None:
        value = args[0]  # the executable given
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    try:
        return os.fsdecode(value)
    except TypeError:
        return str(value)


def _started(event: str, args: tuple[Any, ...]) -> None:
    program = _program(event, args)
    _refuse(f"started a process ({program}, {event}): what it reads cannot be checked, so it is refused: do that "
            "work in Python inside the application (what it opens is then judged)",
            {"process": program, "event": event, "tip": "docs/application.md: the closed world's limits"})


def _sqlite(database: Any) -> None:
    """``sqlite3.connect``: the database file is read (and created if missing, then an output) like an open."""
    try:
        name = os.fsdecode(database)
    except TypeError:
        return
    if name.startswith("file:"):  # uri=True: file:PATH?mode=ro
        name = name[len("file:"):].split("?", 1)[0]
    if name and name != ":memory:":
        _opened(name, "a+", None)


def _dlopen(name: Any) -> None:
    """``ctypes.CDLL(path)``: a library loaded by path is judged like a file read (a bare soname is found by the
    dynamic loader, and the library it maps is judged with the others after each step: libraries.py)."""
    if name is None:
        return
    path = os.fsdecode(name)
    if os.sep in path:
        _opened(path, "r", None)


_LISTED: dict[str, str] = {}  # this window's folders listed: folder -> who


def _listed(path: Any) -> None:
    """``os.listdir``/``os.scandir`` (and os.walk, glob, pathlib over them): a folder's names are an input too. The
    import machinery's own listings (FileFinder's cache of a ``sys.path`` folder) serve imports, judged file by file:
    they are not recorded."""
    if isinstance(path, int):
        return
    if sys._getframe(2).f_code.co_filename.startswith("<frozen importlib"):
        return
    folder = _path("." if path is None else path)
    if folder is None or trusted(folder):
        return
    folder = resolved(folder)
    if folder not in _LISTED and folder not in _WRITTEN:
        _LISTED[folder] = _BY[0]


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if not _ON[0]:
        return
    if event == "open":
        if args[1] is None:
            _os_open(args[0], args[2])
        else:
            _opened(*args[:3])
    elif event == "os.rename":  # also os.replace: a file written then moved into place is still an output
        src, dst = _path(args[0]), _path(args[1])
        if src in _WRITTEN and dst is not None:
            _WRITTEN.add(dst)
    elif event in PROCESS_EVENTS:
        _started(event, args)
    elif event in ("os.listdir", "os.scandir"):
        _listed(args[0])
    elif event == "os.mkdir":  # a folder the application made: listing it reads only its own outputs
        made = _path(args[0])
        if made is not None:
            _WRITTEN.add(made)
    elif event == "sqlite3.connect":
        _sqlite(args[0])
    elif event == "ctypes.dlopen":
        _dlopen(args[0])


def _install() -> None:
    if not _INSTALLED[0]:
        sys.addaudithook(_hook)
        _INSTALLED[0] = True


def declared(ctx: Context) -> dict[str, str]:
    """The declared sources as absolute paths: ``code`` and ``files`` files with their sha256, the sample (no digest
    here: load_sample checks it)."""
    if "declared_sources" not in ctx.state:
        root = Path(ctx.config["project_root"])
        app = ctx.config["application"]
        found: dict[str, str] = {}
        for rel, digest in [*(app.get("sources") or {}).items(), (app["sample"], "")]:
            for form in _forms(str(root / rel)):  # as given and resolved: a root reached through a link
                found.setdefault(form, str(digest))
        ctx.state["declared_sources"] = found
    result: dict[str, str] = ctx.state["declared_sources"]
    return result


def _shown(root: Path) -> Any:
    """A path as a message names it: relative to the project root (as given or resolved) when inside it."""
    roots = sorted(_forms(str(root)))

    def shown(path: str) -> str:
        for base in roots:
            rel = os.path.relpath(path, base)
            if not rel.startswith(".."):
                return Path(rel).as_posix()
        return path

    return shown


def finder(ctx: Context) -> verified.ProjectSources:
    """The import finder for the application's own modules, expecting the declared fingerprints."""
    sources = {path: digest for path, digest in declared(ctx).items() if digest}
    return verified.ProjectSources(trusted, sources, _shown(Path(ctx.config["project_root"])), lambda: _ON[0])


@contextmanager
def window(ctx: Context, who: str) -> Iterator[None]:
    """The application's code runs inside: what it reads is recorded; on a normal exit, anything undeclared fails."""
    if _ON[0]:  # nested (the entry's file loaded while its call is recorded): the outer window judges
        yield
        return
    _install()
    verified.install(finder(ctx))
    before = set(sys.modules)
    _READ.clear()
    _LISTED.clear()
    _BY[0], _ON[0] = who, True
    _PID[0], _OUT[0] = os.getpid(), str(ctx.out)
    try:
        yield
    finally:
        _ON[0] = False
    _from_children()
    # a module object already loaded under another name (multiprocessing's ``__mp_main__`` is ``__main__``) is not new
    known = {id(module) for name, module in list(sys.modules.items()) if name in before}
    judge(ctx, who, {name for name, module in list(sys.modules.items()) if name not in before and id(module) not in known})


def _in_sources(ctx: Context, path: str) -> bool:
    """Whether ``path`` is a declared weights or data source's file (``weights`` and ``data.NAME``, resolved and
    checked file by file at their own step before the application runs: ``application.declared_paths``)."""
    found = [ctx.state["weights"]] if ctx.state.get("weights") else []
    found += list(dict(ctx.state.get("data") or {}).values())
    for source in map(str, found):
        for form in _forms(source):
            if path == form or path.startswith(form.rstrip(os.sep) + os.sep):
                return True
    return False


def _declaration(rel: str) -> str:
    return "code" if rel.endswith((".py", ".pyc", ".so", ".pyd")) else "files"


def strangers(ctx: Context, new_modules: set[str]) -> list[dict[str, str]]:
    """Each file read in the window (or imported in it) that is not trusted, declared, written this run or in the
    run's folder: ``{"file", "how", "by", "declare"}``."""
    known = declared(ctx)
    out_dir = str(ctx.out.resolve()) + os.sep
    root = Path(ctx.config["project_root"])
    shown = _shown(root)
    modules = {}
    for name in new_modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str):
            modules[resolved(os.path.normpath(os.path.abspath(file)))] = name
    found: dict[str, dict[str, str]] = {}
    candidates = {**{p: _BY[0] for p in modules}, **_READ}
    for path, by in candidates.items():
        # a file read before the application wrote it was an input (its reads after its own write are not recorded)
        written = path in _WRITTEN and path not in _READ
        if trusted(path) or path in known or written or path.startswith(out_dir):
            continue
        if os.path.realpath(path) in known or trusted(os.path.realpath(path)):
            continue
        if _in_sources(ctx, path):
            continue
        rel = shown(path)
        found[path] = {"file": rel, "how": "imported" if path in modules else "opened", "by": by or "the application",
                       "declare": _declaration(rel) if not os.path.isabs(rel) else "outside the project"}
    found.update(_listings(ctx, known, out_dir))
    return [found[p] for p in sorted(found)]


def _listings(ctx: Context, known: dict[str, str], out_dir: str) -> dict[str, dict[str, str]]:
    """Each folder of the project the window listed whose names are not all accounted for (a declared file, a folder
    holding one, written by the application): its names were an input no fingerprint covers. Folders outside the
    project are not judged by their listing (what is opened there is)."""
    root = Path(ctx.config["project_root"])
    roots = tuple(form.rstrip(os.sep) + os.sep for form in _forms(str(root)))
    shown = _shown(root)
    found: dict[str, dict[str, str]] = {}
    for folder, by in _LISTED.items():
        if not (folder + os.sep).startswith(roots) or (folder + os.sep).startswith(out_dir) or _in_sources(ctx, folder):
            continue
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        strange = [name for name in names if name != "__pycache__" and not _accounted(ctx, known, os.path.join(folder, name))]
        if strange:
            rel = shown(folder)
            glob = "*" if rel == "." else f"{rel}/*"
            found[folder] = {"file": f"{rel}/", "how": f"listed: {', '.join(strange[:4])}{' ...' if len(strange) > 4 else ''}",
                             "by": by or "the application", "declare": "files", "glob": glob}
    return found


def _accounted(ctx: Context, known: dict[str, str], path: str) -> bool:
    """A name in a listed folder the declarations cover: a declared file, a folder holding one, or an output."""
    if path in known or path in _WRITTEN or trusted(path) or _in_sources(ctx, path):
        return True
    inside = path.rstrip(os.sep) + os.sep
    return any(k.startswith(inside) for k in known)


def _advice(files: list[dict[str, str]]) -> str:
    asks = [f"{key} = {json_list([f.get('glob', f['file']) for f in files if f['declare'] == key])}"
            for key in ("code", "files") if any(f["declare"] == key for f in files)]
    advice = []
    if asks:
        advice.append(f"declare {' and '.join(asks)} in [tool.kernodeck.application] "
                      '(globs accepted, e.g. "src/mypkg/**/*.py")')
    if any(f["declare"] == "outside the project" for f in files):
        advice.append("a file outside the project and the env is declared as a source: "
                      '[tool.kernodeck.application.data.NAME] path = "${VAR}/..." (or url, hf; docs/application.md)')
    return "; ".join(advice)


def json_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def judge(ctx: Context, who: str, new_modules: set[str]) -> None:
    """The window's verdict: CheckFailed naming every undeclared file and the declaration to add."""
    files = strangers(ctx, new_modules)
    if not files:
        return
    named = ", ".join(f"{f['file']} ({f['how']})" for f in files[:8]) + (" ..." if len(files) > 8 else "")
    tip = "nox -s reference -- --new   (after declaring them: the reference then fingerprints them)"
    verdict = CheckFailed(
        f"{who} read files that are not declared sources: {named}: {_advice(files)}",
        Layer.APPLICATION,
        {"undeclared": files, "tip": tip},
    )
    pending(verdict)
    raise verdict


def pending(verdict: CheckFailed) -> None:
    """A verdict on the application's call that fails its step even if the step's own code catches it (settle)."""
    _PENDING.append(verdict)


def settle() -> None:
    """Called by the step loop when a step's code returned: a verdict of this step that its own code swallowed (a
    control that counts any error of the criterion as a rejection, the margin search) still fails the step."""
    pending = list(_PENDING)
    _PENDING.clear()
    if pending:
        raise pending[0]


def forget() -> None:
    """Called by the step loop before a step: the verdicts of an earlier step were reported with it."""
    _PENDING.clear()
