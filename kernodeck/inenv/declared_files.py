"""Whether a file the application read is a declared source (world.py judges the closed world's record with it).

A declared source is a ``code`` or ``files`` file (fingerprinted into the reference), the sample, or a file of a
``weights`` or ``data.NAME`` source (checked file by file at its own step, :func:`in_sources`). One more place holds
declared bytes: the Hugging Face modules cache. A model with its own code (transformers' ``trust_remote_code=True``)
has its module, a declared file, copied there (``HF_MODULES_CACHE``, default ``$HF_HOME/modules``:
``transformers_modules/<name>/<hash>/``, each folder with an empty ``__init__.py`` it makes) and imported from the
copy. The first run writes the copy (its own output); a later run finds it there. The cache is located from the
environment the process started with (leftover.kernodecks_start: an ``os.environ`` edit by the application does not
move it), and a cache inside the project or a declared source's folder is none. A file there counts as the declared
source whose bytes it holds, or as an empty ``__init__.py``, judged by its bytes hashed at the judgement (as the
declared files are, world.moved), and only if the file is unchanged since each read and compile of it in this
process (the same inode, size, mtime and ctime: :func:`seen_now`), and every compile of it (the ``compile`` audit
event's bytes, :func:`compiled`) was of those very bytes: a compile under its name of other bytes (the builtin
``compile``, not the import system) makes it undeclared. A module only read (transformers hashes every relative
import's file, one imported lazily is never compiled) counts by the bytes read. Any other file there (one byte
changed, a non-empty ``__init__.py`` that is no declared file, a file changed after it was read) stays undeclared.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import leftover, paths, verified
from ._common import Context, sha256_file

EMPTY = hashlib.sha256(b"").hexdigest()
COMPILED: dict[str, set[str]] = {}  # a file in the modules cache compiled in this process -> the sha256 of each
SEEN: dict[str, set[Any]] = {}  # a file (not the env's) read or compiled in this process -> its stat at each
# a file hashed, by its identity (device, inode) -> (its stat then, the sha256 of its bytes): world.moved's too; one
# file reached by several names (a link, a linked folder, an hf snapshot's link to its blob) is hashed once
HASHED: dict[tuple[int, int], tuple[Any, str]] = {}
_ROOTS: list[Any] = [None, ()]  # the start environment taken the cache was located from, its folder in both forms


def declared(ctx: Context) -> dict[str, str]:
    """The declared sources as absolute paths: ``code`` and ``files`` files with their sha256, the sample (no digest
    here: load_sample checks it)."""
    if "declared_sources" not in ctx.state:
        root = Path(ctx.config["project_root"])
        app = ctx.config["application"]
        found: dict[str, str] = {}
        for rel, digest in [*(app.get("sources") or {}).items(), (app["sample"], "")]:
            for form in paths.forms(str(root / rel)):  # as given and resolved: a root reached through a link
                found.setdefault(form, str(digest))
        ctx.state["declared_sources"] = found
    result: dict[str, str] = ctx.state["declared_sources"]
    return result


def finder(ctx: Context, active: Callable[[], bool]) -> verified.ProjectSources:
    """The import finder for the application's own modules, expecting the declared fingerprints, importing while
    ``active()`` (a window is open): a new one for each window, as before, what it is made of worked out once a run
    (the declared sources' digests, the project's folders resolved: a dict copied into each finder, a tuple), so that
    nothing the application changes in one window's finder (its digests, its namer's folders: red-team pass 87,
    SHOWN1) reaches the next."""
    if "project_finder" not in ctx.state:
        ctx.state["project_finder"] = ({path: digest for path, digest in declared(ctx).items() if digest},
                                       tuple(sorted(paths.forms(str(ctx.config["project_root"])))))
    sources, roots = ctx.state["project_finder"]
    return verified.ProjectSources(paths.trusted, dict(sources), _shown(roots), active)


def shown_in(root: Path) -> Any:
    """A path as a message names it: relative to the project root (as given or resolved) when inside it."""
    return _shown(tuple(sorted(paths.forms(str(root)))))


def _shown(roots: tuple[str, ...]) -> Any:
    """:func:`shown_in`'s namer for the project's folders ``roots`` (as given and resolved, sorted)."""

    def shown(path: str) -> str:
        for base in roots:
            rel = os.path.relpath(path, base)
            if not rel.startswith(".."):
                return Path(rel).as_posix()
        return path

    return shown


def in_sources(ctx: Context, path: str) -> bool:
    """Whether ``path`` is a declared weights or data source's file (``weights`` and ``data.NAME``, resolved and
    checked file by file at their own step before the application runs: ``application.declared_paths``)."""
    found = _sources(ctx)
    # a read is recorded by the file it opens: a fingerprinted file reached through a link (an hf snapshot's file is a
    # link to its blob) is that link's target (resolved once per set of sources: a write in a window asks too)
    key = (ctx.state.get("weights"), id(ctx.state.get("weights_fingerprint")), id(ctx.state.get("data_fingerprint")),
           id(ctx.state.get("data")))
    if ctx.state.get("source_files", (None,))[0] != key:
        ctx.state["source_files"] = (key, {os.path.realpath(os.path.join(form, rel)) for source, files in found
                                           if isinstance(files, dict) for rel in files
                                           for form in paths.forms(str(source))})
    if path in ctx.state["source_files"][1]:
        return True
    for source, files in found:
        for form in paths.forms(str(source)):
            if path == form:
                return True
            if path.startswith(form.rstrip(os.sep) + os.sep):
                # only what the source's fingerprint covers: an hf source's ``files`` globs leave the rest of its
                # snapshot unchecked, so reading such a file is reading an undeclared one
                return not isinstance(files, dict) or _fingerprinted(os.path.relpath(path, form), files)
    return False


def source_place(ctx: Context, path: str) -> dict[str, str] | None:
    """The declared ``weights`` or ``data.NAME`` source a file read (``path``: the file it opens) belongs to, though
    its fingerprint leaves the file out, by the name the application opened it under: inside the source's folder, or
    the file a name there links to (an hf snapshot's ``snapshots/<rev>/NAME`` is a link into ``blobs/``).
    ``{"source", "name", "path", "kind"}``, or None (a blob no name of a declared source links to is no source's)."""
    app = dict(ctx.config.get("application") or {})
    named = [("weights", ctx.state["weights"], app.get("weights"))] if ctx.state.get("weights") else []
    named += [(f"data.{name}", where, (app.get("data") or {}).get(name))
              for name, where in sorted(dict(ctx.state.get("data") or {}).items())]
    for source, where, cfg in named:
        rel = _place(str(where), path)
        if rel is not None:
            kind = str((cfg or {}).get("kind", "package"))
            return {"source": source, "name": rel, "path": os.path.join(str(where), rel), "kind": kind}
    return None


def _place(where: str, path: str) -> str | None:
    """``path``'s name relative to the source folder ``where``: inside it (as given or resolved), else the first name
    (sorted) in it whose file is ``path``. Walked only for a file already refused (a verdict's naming, never a read's
    judgement)."""
    for form in paths.forms(where):
        if path.startswith(form.rstrip(os.sep) + os.sep):
            return Path(os.path.relpath(path, form)).as_posix()
    names, walked = [], set()
    for top, dirs, files in os.walk(where, followlinks=True) if os.path.isdir(where) else ():
        if os.path.realpath(top) in walked:  # a link back to a folder already walked
            dirs[:] = []
            continue
        walked.add(os.path.realpath(top))
        names += [Path(os.path.relpath(os.path.join(top, name), where)).as_posix() for name in files
                  if os.path.realpath(os.path.join(top, name)) == path]
    return min(names) if names else None


def source_names(ctx: Context) -> dict[str, str]:
    """Each file of a ``weights`` or ``data.NAME`` source by the name locate.py hashed it under (the source's path as
    it resolved it, joined with the file's: never normalised again, a ``..`` after a link stays the system's to
    follow), with the sha256 its fingerprint found at its own step. Every name is held to its digest after each step
    (world.sources_held): a link in the source retargeted meanwhile is seen by its own name (red-team pass 23, FP1)."""
    return _source_digests(ctx)[0]


def source_files(ctx: Context) -> dict[str, str]:
    """The same files by every path a read is recorded by too (a read is recorded by the file it opens: a link's
    target, an hf snapshot's blob), with their digests: held as the declared files are (world.moved)."""
    return _source_digests(ctx)[1]


def _source_digests(ctx: Context) -> tuple[dict[str, str], dict[str, str]]:
    key = (ctx.state.get("weights"), id(ctx.state.get("weights_fingerprint")), id(ctx.state.get("data_fingerprint")),
           id(ctx.state.get("data")))
    if ctx.state.get("source_digests", (None,))[0] != key:
        names: dict[str, str] = {}
        for source, files in _sources(ctx):
            where = str(source)
            one_file = os.path.isfile(where)  # a source of one file: its fingerprint names it alone
            for rel, digest in (files.items() if isinstance(files, dict) else ()):
                names[where if one_file else os.path.join(where, rel)] = str(digest)
        found = dict(names)
        for name, digest in names.items():
            found.setdefault(os.path.realpath(name), digest)
        ctx.state["source_digests"] = (key, (names, found))
    digests: tuple[dict[str, str], dict[str, str]] = ctx.state["source_digests"][1]
    return digests


def _sources(ctx: Context) -> list[tuple[Any, Any]]:
    """The weights and data sources: (folder, its fingerprint ``{rel: sha256}`` when known)."""
    found = [(ctx.state["weights"], ctx.state.get("weights_fingerprint"))] if ctx.state.get("weights") else []
    prints = dict(ctx.state.get("data_fingerprint") or {})
    return found + [(where, prints.get(name)) for name, where in dict(ctx.state.get("data") or {}).items()]


def _fingerprinted(rel: str, files: dict[str, str]) -> bool:
    """A file (or a folder holding one) of a source's fingerprint. What the fingerprint leaves out (``__pycache__``,
    ``.gitattributes``: locate.py) is no part of the source: bytes no fingerprint covers (seventh red-team pass)."""
    rel = Path(rel).as_posix()
    if rel in files:
        return True
    return any(f.startswith(rel + "/") for f in files)


def modules_cache() -> tuple[str, ...]:
    """The Hugging Face modules cache, located as transformers locates it (``transformers/utils/hub.py``, with
    ``huggingface_hub/constants.py``'s ``HF_HOME``): ``HF_MODULES_CACHE``, else ``$HF_HOME/modules``, ``HF_HOME``
    defaulting to ``$XDG_CACHE_HOME/huggingface`` or ``~/.cache/huggingface``; as given and resolved, each with a
    trailing separator. From the environment the process started with (leftover.kernodecks_start, taken before the
    project's code ran), never ``os.environ`` now: the application cannot move the cache onto its own files."""
    if leftover.BEFORE_APPLICATION[0] is None:
        leftover.at_start()
    start = leftover.BEFORE_APPLICATION[0]
    if _ROOTS[0] is not start:  # located once per start environment taken (a hot path: every open and compile)
        env = start[0]
        key = (env.get("HF_MODULES_CACHE"), env.get("HF_HOME"), env.get("XDG_CACHE_HOME"), env.get("HOME"))
        folder = key[0]
        if folder is None:
            home = key[3] if key[3] is not None else os.path.expanduser("~")
            base = os.path.join(key[2] if key[2] is not None else os.path.join(home, ".cache"), "huggingface")
            hf_home = key[1] if key[1] is not None else base
            folder = os.path.join(os.path.expandvars(hf_home.replace("~", home, 1) if hf_home.startswith("~")
                                                     else hf_home), "modules")
        _ROOTS[:] = [start, tuple(sorted(form.rstrip(os.sep) + os.sep for form in paths.forms(folder)))]
    roots: tuple[str, ...] = _ROOTS[1]
    return roots


def in_modules_cache(path: str) -> bool:
    return path.startswith(modules_cache())


def in_cache_here(ctx: Context, path: str) -> bool:
    """A file of the modules cache as the judgement takes it: never one inside the project or a declared source's
    folder (a cache placed there would make the project's own files "copies")."""
    if not in_modules_cache(path):
        return False
    folders = [str(Path(ctx.config["project_root"])), *(str(source) for source, _ in _sources(ctx))]
    inside = tuple(form.rstrip(os.sep) + os.sep for folder in folders for form in paths.forms(folder))
    return not (path + os.sep).startswith(inside)


def stat_key(path: str) -> Any:
    """The file's identity and state (inode, device, size, mtime, ctime), or None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def sha256_at(path: str, key: Any) -> str:
    """The sha256 of the file's bytes (``key``: its :func:`stat_key` now), hashed again only when the stat of that
    file (its device and inode, under whatever name) moved since it was last hashed."""
    identity = (key[1], key[0])
    held = HASHED.get(identity)
    if held is None or held[0] != key:
        HASHED[identity] = held = (key, sha256_file(Path(path)))
    return held[1]


def hold(key: Any, digest: str) -> None:
    """``digest`` is the bytes of the file whose stat ``key`` was taken before they were hashed (locate.py): what
    :func:`sha256_at` returns for that file, under any name, until its stat moves."""
    if key is not None:
        HASHED[(key[1], key[0])] = (key, digest)


def seen_now(path: str) -> dict[str, Any] | None:
    """A file read (seen's ``open`` event, before its bytes are read; not the env's) or compiled: its stat now, which
    the judgement requires unchanged (the bytes it hashes then are the bytes read; world.moved, :func:`_bytes_held`):
    a file changed before a read and put back before the call ends is still seen (red-team pass 23, FP3). Returns the
    record when it is new in this process (a forked child hands it to the parent: :func:`take`), else None."""
    real = os.path.realpath(path)
    key = stat_key(path)
    stats = SEEN.setdefault(real, set())
    if key in stats:
        return None
    stats.add(key)
    return {"path": real, "stat": key}


def take(note: dict[str, Any]) -> None:
    """A forked child's record of one read (its :func:`seen_now`, handed on as a signed note: children.py), kept as
    the parent's own: a child's read is judged as the parent's (red-team pass 24, FP2)."""
    SEEN.setdefault(str(note["path"]), set()).add(tuple(note["stat"]) if note.get("stat") is not None else None)


def seen_files() -> list[str]:
    """The files read or compiled in this process so far (each by the file it opened)."""
    return list(SEEN)


def read_since(path: str, key: Any) -> bool:
    """Whether the file was read or compiled in this process with another stat than ``key`` (its stat now)."""
    return bool(SEEN.get(path, set()) - {key})


def compiled(source: Any, filename: Any) -> None:
    """The ``compile`` audit event (seen's hook): for a file in the modules cache, the sha256 of the bytes compiled
    (a text or tree compiled under its name is no file's bytes: never a match) and the file's stat now."""
    if not isinstance(filename, str) or filename.startswith("<"):  # "<string>": exec's, namedtuple's
        return
    filename = os.path.normpath(os.path.abspath(filename))
    if filename.startswith(modules_cache()):
        digest = hashlib.sha256(source).hexdigest() if isinstance(source, (bytes, bytearray, memoryview)) else ""
        COMPILED.setdefault(os.path.realpath(filename), set()).add(digest)
        seen_now(filename)


def _bytes_held(path: str) -> str | None:
    """The sha256 of the file's bytes now, if it is unchanged since every read and compile of it (one stat, the same
    before and after hashing); None otherwise."""
    stats = SEEN.get(path, set())
    before = stat_key(path)
    if before is None or stats - {before}:
        return None
    digest = sha256_at(path, before)
    return digest if stat_key(path) == before else None


def cache_copy(ctx: Context, path: str) -> str | None:
    """The declared file a file of the modules cache is a copy of (``path`` as a read is recorded: the file it opens):
    its bytes hashed now (unchanged since each read and compile) a declared file's, and every compile of it those
    bytes; "an empty __init__.py" for one; None for any other file. The match is recorded in
    ``ctx.state["cached_code"]`` (the entry step's details)."""
    if not in_cache_here(ctx, path) or (path not in SEEN and path not in COMPILED):
        return None
    digest = _bytes_held(path)
    if digest is None or COMPILED.get(path, {digest}) != {digest}:
        return None
    shown = shown_in(Path(ctx.config["project_root"]))
    known = {sha: shown(where) for where, sha in declared(ctx).items() if sha}
    for source, files in _sources(ctx):
        if isinstance(files, dict):
            known.update({sha: shown(os.path.join(str(source), rel)) for rel, sha in files.items()})
    if os.path.basename(path) == "__init__.py":
        known.setdefault(EMPTY, "an empty __init__.py")
    if digest not in known:
        return None
    ctx.state.setdefault("cached_code", {})[path] = known[digest]
    return known[digest]
