"""A closed world: every file the application opens or imports is accounted for, or the step that ran it fails.

While the application's own code runs (its files loaded, its entry called, its criterion called: a :func:`window`),
one audit hook (``sys.addaudithook``, installed once) records every file opened for reading (``open``: ``open()``,
``os.open``, ``io.open_code`` of each imported source or bytecode file) and every file written. At the window's end,
each file read is one of:

- in the env (``sys.prefix``: every file there is the lock's, proven by the inventory step),
- in the base interpreter's standard library (never its ``site-packages``: that is no part of a venv),
- Kernodeck's in-env files (verified bytes, ``_package.py``), the system's pseudo-files (``/proc``, ``/sys``, ``/dev``'s
  devices: an ordinary file under ``/dev``, in ``/dev/shm`` say, is not one) and this run's dossier folder (judged by
  the file a path there opens: a link out of it is not the run's; a file moved or linked into it was read),
- a declared source: ``code`` and ``files`` (globs accepted, each file fingerprinted into the reference), the sample,
  a ``weights`` or ``data.NAME`` source (checked file by file at its own step),
- a file in the Hugging Face modules cache (``HF_MODULES_CACHE`` as the process started: transformers' copy of a
  ``trust_remote_code`` model's own code) holding a declared file's bytes, or an empty ``__init__.py``, unchanged
  since read, every compile of it those bytes (declared_files.py, which also holds the other sources' judgement;
  the step's ``cached_code`` names the file matched),
- written by the application in this run before it read it (its outputs, not inputs: created by it, or a file that
  was there whose bytes a truncating open replaced, nothing else having touched it: owned.written),

or it is undeclared: the step fails naming the file and the declaration to add (``code`` for Python, ``files`` for
anything else in the project, a ``data.NAME`` source outside it). Modules imported in the window whose file is none
of these (a compiled extension in the project) are named too. Beyond ``open``: ``sqlite3.connect`` and
``ctypes.dlopen`` by path are judged like an open, a relative ``os.open`` against every folder held open (its
``dir_fd``), a listing of a project folder as a read of its names, a forked child's record is handed to the parent,
a thread the application left running is watched between windows (its reads judged by the next), and a process the
application starts is refused at once (what it reads
cannot be seen). What no audit event shows (native ``fopen``, ``torch.from_file``) is the closed world's stated limit
(docs/application.md). The hook and its record live in seen.py; this module judges the record. Cheap by design: the
hook returns at once outside a window and for any event it does not judge, and drops a trusted path with one prefix
test before anything else.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import children, exits, guard, leftover, links, locate, owned, paths, seen, systemfiles, verified
from ._common import CheckFailed, Context, as_failure
from .advice import RUN_RECORD, SOURCE, advice, declaration, tip
from .declared_files import (
    cache_copy,
    declared,
    finder,
    in_cache_here,
    in_sources,
    read_since,
    seen_files,
    sha256_at,
    shown_in,
    source_files,
    source_names,
    source_place,
    stat_key,
)
from .protocol import COLLECT_ENV, RUN_CONFIG, STEPS_DIR, Layer


@contextmanager
def window(ctx: Context, who: str) -> Iterator[None]:
    """The application's code runs inside: what it reads is recorded; on a normal exit, anything undeclared fails."""
    if seen.ON[0]:  # nested (the entry's file loaded while its call is recorded): the outer window judges
        yield
        return
    seen.install()
    exits.install()  # os._exit and a signal sent to itself: the call's failure, as sys.exit is (EXIT2)
    _taken(ctx)
    verified.install(finder(ctx, lambda: seen.ON[0]))
    # the names (and modules) at its start: a copy costs a fifth of a set of the names (dict's own methods: none of an
    # object the application may have put in sys.modules' place runs here)
    before = dict.copy(sys.modules)
    for record in (seen.READ, seen.LISTED):  # what a lingering thread read since the last window is judged now
        for path in [p for p, by in record.items() if by != seen.LATE]:
            del record[path]
    children.PID[0] = os.getpid()
    children.open_notes()
    seen.JUDGE[0] = functools.partial(_at_once, ctx, who)
    guard.GUARD[0] = functools.partial(_guarded, ctx)
    guard.GUARD_ROOTS[0] = functools.partial(_guarded_roots, ctx)
    traces, refused = leftover.taken(), len(seen.PENDING)
    seen.BY[0], seen.ON[0] = who, True
    raised: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        raised = as_failure(exc)  # sys.exit in the application's code is its failure, as an exception is
        if raised is exc:
            raise
        raise raised from exc
    finally:
        leftover.put_back(traces)  # nothing of the application's left for the interpreter to call later
        seen.ON[0] = False
        seen.from_children()  # a forked child's refusal is the first error, whatever the call raised after it
        if len(seen.PENDING) > refused:  # a refusal the application caught (or CPython swallowed: addaudithook's)
            raise seen.PENDING[refused]
        if raised is None or isinstance(raised, Exception):  # a call that raised (a control, the margin search
            # count it as a rejection) read what it read too: judged, its verdict pending (judge) and the first error
            try:  # unless the call's own error is a verdict already (the finder's "not the file fingerprinted")
                _judge_window(ctx, who, before)
            except CheckFailed:
                if not isinstance(raised, CheckFailed):
                    raise


def _judge_window(ctx: Context, who: str, before: dict[str, Any]) -> None:
    # the names added in the window (most windows, a criterion's call, add none: the names compared as sets first),
    # less a module object already loaded under another name (multiprocessing's ``__mp_main__`` is ``__main__``)
    same = dict.keys(sys.modules) == before.keys()
    added: set[str] = set() if same else set(dict.keys(sys.modules)) - before.keys()
    if added:
        modules = dict(sys.modules)
        known = {id(module) for name, module in modules.items() if name in before}
        added = {name for name in added if name in modules and id(modules[name]) not in known}
    judge(ctx, who, added)


def _guarded(ctx: Context, path: str) -> str | None:
    """guard.GUARD: what a change at ``path`` would change that the run relies on as checked before it ran: the env,
    Kernodeck's in-env folder (paths.guarded), a declared source (its fingerprint taken when the run started), and
    Kernodeck's cache (a forged stat record there would pass a changed source's file at the next run's check)."""
    where = paths.guarded(path)
    if where is None and (path in declared(ctx) or in_sources(ctx, path)):
        where = f"a declared source, {shown_in(Path(ctx.config['project_root']))(path)}"
    cache, steps, config, report = _kernodecks(ctx)
    if where is None and path.startswith(cache + os.sep):  # the stat records a check reuses, the fetched sources
        where = "Kernodeck's cache"
    if where is None and (path in (steps, config, report) or path.startswith(steps + os.sep)):
        where = "Kernodeck's record of this run"
    return where


def _kernodecks(ctx: Context) -> tuple[str, str, str, str]:
    """Kernodeck's own places a window may not change, resolved once per run (every write asks): its cache, the
    step results the orchestrator reads, the run's configuration and torch's report of the env (torch_report.py)."""
    if "kernodecks_places" not in ctx.state:
        record = os.path.realpath(ctx.out)
        ctx.state["kernodecks_places"] = (os.path.realpath(locate.cache_root()), os.path.join(record, STEPS_DIR),
                                          os.path.join(record, RUN_CONFIG), os.path.join(record, COLLECT_ENV))
    places: tuple[str, str, str, str] = ctx.state["kernodecks_places"]
    return places


def _guarded_roots(ctx: Context) -> list[str]:
    """guard.GUARD_ROOTS: what :func:`_guarded` protects, by path (a folder moved that holds one is refused)."""
    sources = [str(ctx.state[key]) for key in ("weights",) if ctx.state.get(key)]
    sources += [str(where) for where in dict(ctx.state.get("data") or {}).values()]
    roots = [sys.prefix, paths.HERE, *_kernodecks(ctx), *declared(ctx), *sources]
    return sorted({form for root in roots for form in (os.path.normpath(root), os.path.realpath(root))})




def moved(ctx: Context, files: Iterable[str]) -> list[str]:
    """The declared files among ``files`` whose bytes are not those the run's fingerprints name (fingerprinted when
    the run started, compared with the reference): edited since, by the user or another process. A file is hashed
    again only when its stat (inode, size, mtime, ctime) moved since it was last hashed, as locate's sources are."""
    if not (files := list(files)):  # most windows (a criterion's call) read nothing
        return []
    declared_ones, sources, found = declared(ctx), source_files(ctx), []
    for path in files:
        # a read is recorded by the file it opens: the declared form resolved is known too (looked up, never merged:
        # a forked child asks for every file it opens, pass 24's COST1)
        digest = declared_ones.get(path) or sources.get(path)
        if not digest:
            continue
        try:
            key = stat_key(path)
            now = sha256_at(path, key) if key is not None else ""
        except OSError:
            now = ""
        # read with another stat than it has now: changed before a read and put back since (pass 23, FP3)
        if now != digest or read_since(path, key):
            found.append(shown_in(Path(ctx.config["project_root"]))(path))
    return sorted(set(found))


def _taken(ctx: Context) -> None:
    """Every link on the way to a declared name, before the application's code runs with it (links.py)."""
    links.take(ctx, lambda: [*declared(ctx), *source_names(ctx)])


def replaced_links(ctx: Context) -> list[str]:
    """The links on the way to a declared name replaced since they were taken (retargeted, even if put back: red-team
    passes 24 and 25, FP3 and FP1-FP3), as a verdict names them."""
    _taken(ctx)  # a source first located after the last window opened: its links as they are now
    shown = shown_in(Path(ctx.config["project_root"]))
    return [f"{shown(link)} (a link on the way to a declared name, replaced)" for link in links.replaced(ctx)]


def _changed_verdict(who: str, files: list[str]) -> CheckFailed:
    return CheckFailed(
        f"{who} read declared sources whose bytes are not those fingerprinted when the run started: "
        f"{', '.join(files)} changed during the run (edited meanwhile?)", Layer.APPLICATION,
        {"changed": files, "tip": "leave the declared files as they are while a run reads them, then run it again"})


def sources_held(ctx: Context) -> None:
    """After each step (runner.py): every declared file, and every file of a weights or data source, still the bytes
    the run fingerprinted (when it started; a source's at its own step), as the reference's run requires of its
    sources; one edited meanwhile fails the step that was running."""
    # every name as declared or hashed, none folded into another by what it resolves to now: a link retargeted onto
    # another file of the source is held by its own name (red-team pass 23, FP1); one stat a name, bytes hashed only
    # where the file's stat moved (declared_files.sha256_at)
    # and every file read so far by the file it opened (a name that links to it never finds those reads; a mapped
    # file read between windows has no open of its own: pass 24, FP1)
    known = {**declared(ctx), **source_files(ctx)}
    seen.from_children()  # what a forked child still running read since its window (its stat, the name it used)
    changed = moved(ctx, sorted({*declared(ctx), *source_names(ctx), *(p for p in seen_files() if p in known)}))
    changed += replaced_links(ctx)
    if changed:
        raise CheckFailed(
            f"the declared sources changed while this step ran: {', '.join(changed)}: the run's fingerprints (its "
            "record, compared with the reference) no longer describe the files it used", Layer.APPLICATION,
            {"changed": changed, "tip": "leave the declared files as they are while verify runs, then run it again"})


def _imported(new_modules: set[str]) -> dict[str, str]:
    """The files of the modules imported in the window: path -> module name."""
    modules = {}
    for name in new_modules:
        file = getattr(sys.modules.get(name), "__file__", None)
        if isinstance(file, str):
            path = os.path.normpath(os.path.abspath(file))
            modules[path if paths.trusted(path) else paths.real(path)] = name  # the env's thousands: no link resolved
    return modules


def strangers(ctx: Context, new_modules: set[str]) -> list[dict[str, str]]:
    """Each file read in the window (or imported in it) that is not trusted, declared, written this run or in the
    run's folder: ``{"file", "how", "by", "declare"}``."""
    modules = _imported(new_modules)
    candidates = {**{p: seen.BY[0] for p in modules}, **seen.READ}
    if not candidates and not seen.LISTED:  # most windows (a criterion's call) read and list nothing
        return []
    known = declared(ctx)
    out_dir = _run_folders(ctx)
    found: dict[str, dict[str, str]] = {}
    for path, by in candidates.items():
        # a file read before the application wrote it was an input (its reads after its own write are not recorded)
        if owned.written(path) and path not in seen.READ:
            continue
        stranger = _stranger(ctx, known, out_dir, path)
        if stranger is not None:
            found[path] = {**stranger, "how": "imported" if path in modules else "opened",
                           "by": by or "the application"}
    found.update(_listings(ctx, known, out_dir))
    return [found[p] for p in sorted(found)]


RUN_READS = "run_reads"  # ctx.state: the folders of the run's record a process may read (default: the whole record)


def _run_folders(ctx: Context) -> tuple[str, ...]:
    """Where in the run's record (its folder: Kernodeck's and the application's own files) a read is accounted for:
    the whole folder, or in a process that must not see the rest of it (the resumed run's: its checkpoint and its
    own folder, never the uninterrupted call's record it is compared with; red-team pass 28, FP1) only those."""
    folders = ctx.state[RUN_READS] if RUN_READS in ctx.state else (str(ctx.out),)
    return tuple(os.path.realpath(folder) + os.sep for folder in folders)


def _stranger(ctx: Context, known: dict[str, str], out_dir: str | tuple[str, ...], path: str) -> dict[str, str] | None:
    """A file read that is not trusted, declared or in the run's folder (judged by the file a path there opens:
    paths.real, a link out of it is not the run's): its name as shown and the declaration to add. The kernel's state
    never gets here: trusted, the hook notes it before its record of reads (seen._opened, judge below)."""
    if paths.trusted(path) or path in known or paths.real(path).startswith(out_dir):
        return None
    if os.path.realpath(path) in known or paths.trusted(os.path.realpath(path)) or in_sources(ctx, path):
        return None
    if systemfiles.is_data(path):  # the system's own files read by name, recorded as the chain's (systemfiles.py)
        systemfiles.record(ctx, path)
        return None
    if in_cache_here(ctx, path):  # a model's own code copied by transformers (declared_files.py)
        return None if cache_copy(ctx, path) is not None else {"file": path, "declare": "modules cache"}
    rel = shown_in(Path(ctx.config["project_root"]))(path)
    if paths.real(path).startswith(os.path.realpath(ctx.out) + os.sep):  # of the run's record, outside RUN_READS
        return {"file": rel, "declare": RUN_RECORD}
    place = source_place(ctx, path)  # named as the application opened it (a snapshot's name, not its blob)
    if place is not None:
        return {"file": f"{place['source']}: {place['name']}", "declare": SOURCE, **place}
    return {"file": rel, "declare": declaration(rel) if not os.path.isabs(rel) else "outside the project"}


def _at_once(ctx: Context, who: str, path: str, how: str) -> tuple[str, dict[str, Any]] | None:
    """In a forked child (seen.JUDGE): a file read, or a folder listed, judged as the window's end would; the
    verdict's message (after who) and details, or None when it is accounted for."""
    known, out_dir = declared(ctx), _run_folders(ctx)
    changed = moved(ctx, [path]) if how != "listed" else []
    if changed:
        return (f"read declared sources whose bytes are not those fingerprinted when the run started: {changed[0]}",
                {"changed": changed, "tip": "leave the declared files as they are while a run reads them"})
    if how == "listed":
        found = _listings(ctx, known, out_dir, {path: who}).get(path)
    else:
        stranger = _stranger(ctx, known, out_dir, path)
        found = None if stranger is None else {**stranger, "how": how, "by": who}
    if found is None:
        return None
    return (f"read files that are not declared sources: {found['file']} ({found['how']}): {advice([found])}",
            {"undeclared": [found], "tip": tip([found])})


def _listings(ctx: Context, known: dict[str, str], out_dir: str | tuple[str, ...],
              listed: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """Each folder of the project the window listed whose names are not all accounted for (a declared file, a folder
    holding one, written by the application): its names were an input no fingerprint covers. Folders outside the
    project are not judged by their listing (what is opened there is)."""
    if not (listings := seen.LISTED if listed is None else listed):
        return {}
    root = Path(ctx.config["project_root"])
    roots = tuple(form.rstrip(os.sep) + os.sep for form in paths.forms(str(root)))
    shown = shown_in(root)
    found: dict[str, dict[str, str]] = {}
    for folder, by in listings.items():
        if not (folder + os.sep).startswith(roots) or (folder + os.sep).startswith(out_dir) or in_sources(ctx, folder):
            continue
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        strange = [name for name in names
                   if name != "__pycache__" and not _accounted(ctx, known, os.path.join(folder, name))]
        if strange:
            rel = shown(folder)
            glob = "*" if rel == "." else f"{rel}/*"
            listed = ", ".join(strange[:4]) + (" ..." if len(strange) > 4 else "")
            found[folder] = {"file": f"{rel}/", "how": f"listed: {listed}",
                             "by": by or "the application", "declare": "files", "glob": glob}
    return found


def _accounted(ctx: Context, known: dict[str, str], path: str) -> bool:
    """A name in a listed folder the declarations cover: a declared file, a folder holding one, or an output."""
    if path in known or owned.written(path) or paths.trusted(path) or in_sources(ctx, path):
        return True
    inside = path.rstrip(os.sep) + os.sep
    return any(k.startswith(inside) for k in known)


def judge(ctx: Context, who: str, new_modules: set[str]) -> None:
    """The window's verdict: CheckFailed naming every declared file read that changed since the run's fingerprints
    (:func:`moved`), else every undeclared file and the declaration to add."""
    for path in [*systemfiles.SEEN, *children.READ]:  # the kernel's state read, trusted: recorded (pass 56, PROC2)
        systemfiles.record_state(ctx, path)
    systemfiles.SEEN.clear()
    # a forked child's reads too (their stats and names handed on: seen.from_children ran as the window closed)
    changed = moved(ctx, {*seen.READ, *children.READ, *_imported(new_modules)})
    if changed:
        verdict = _changed_verdict(who, changed)
        pending(verdict)
        raise verdict
    files = strangers(ctx, new_modules)
    if not files:
        return
    named = ", ".join(f"{f['file']} ({f['how']})" for f in files[:8]) + (" ..." if len(files) > 8 else "")
    verdict = CheckFailed(
        f"{who} read files that are not declared sources: {named}: {advice(files)}",
        Layer.APPLICATION,
        {"undeclared": files, "tip": tip(files)},
    )
    pending(verdict)
    raise verdict


def late(ctx: Context) -> None:
    """What a thread the application left running read since the last window closed (seen.LATE), judged now as a
    window's end judges it: at each step's end (steprun.held), so that a process's last window is not the last word
    (the resumed run's process opens none after train's: red-team pass 30, FP4)."""
    if any(by == seen.LATE for record in (seen.READ, seen.LISTED) for by in record.values()):
        judge(ctx, seen.LATE, set())


def pending(verdict: CheckFailed) -> None:
    """A verdict on the application's call that fails its step even if the step's own code catches it (settle)."""
    seen.PENDING.append(verdict)


def settle() -> None:
    """Called by the step loop when a step's code returned: a verdict of this step that its own code swallowed (a
    control that counts any error of the criterion as a rejection, the margin search) still fails the step."""
    pending = list(seen.PENDING)
    seen.PENDING.clear()
    if pending:
        raise pending[0]


def forget() -> None:
    """Called by the step loop before a step: the verdicts of an earlier step were reported with it."""
    seen.PENDING.clear()
