"""Every file of a rebuilt env, held to the lock: owned by a locked distribution's RECORD, unchanged since the build.

Runs on the orchestrator's side (``os.scandir`` and ``stat`` only; nothing of the env is imported or executed), so a
``.pth`` or ``sitecustomize.py`` dropped into the env cannot change what it reports. Three checks:

The env's interpreter is started (to check bytecode written since the build, :func:`check`) only once every other
file is known to be the build's.

- **ownership**: each file under the env's prefix is listed by the ``RECORD`` of a locked distribution, or is one of
  the few things the venv tool or the interpreter writes (:func:`allowed`); anything else is named. A locked
  distribution without a ``RECORD`` is named too (its files could not be held to anything).
- **snapshot** (:mod:`kernodeck.env.snapshot`): at build time every entry's ``lstat`` is written; every verify
  stats the env again and names what was added, removed or changed.
- **no shared file**: a regular file with more than one link shares its content with another place (the installer's
  cache, another env): editing one edits the other, so it is refused.

At build time (:func:`kernodeck.env.records.check_record_digests`) every file a RECORD lists with a digest is hashed
once against it, in parallel, before the snapshot is taken. The names of both modules are re-exported here.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from kernodeck.env.records import Records, read_records, site_dirs
from kernodeck.env.snapshot import (
    BYTECODE,
    Entry,
    compare,
    read_snapshot,
    same,
    scan,
    well_formed,
)

# What the venv tools write that no RECORD lists (python -m venv, uv venv), by exact path under the prefix.
VENV_FILES = frozenset({
    "pyvenv.cfg",
    # uv venv: a .gitignore ("*"), a cache-directory tag and its (empty) lock file
    ".gitignore", "CACHEDIR.TAG", ".lock",
    # activation scripts of both tools (POSIX)
    "bin/activate", "bin/activate.csh", "bin/activate.fish", "bin/Activate.ps1", "bin/activate.ps1",
    "bin/activate.nu", "bin/activate.xsh", "bin/activate.bat", "bin/activate_this.py", "bin/deactivate.bat",
    "bin/pydoc.bat",
    # Windows
    "Scripts/python.exe", "Scripts/pythonw.exe", "Scripts/activate", "Scripts/activate.bat", "Scripts/Activate.ps1",
    "Scripts/deactivate.bat",
})
# Kernodeck's in-env files compiled by the base interpreter at the build (kernodeck/inenv/compiled.py), written into
# the env before its snapshot: held to the build like any file of it, and by its digest (sealing.COMPILED_KEY); the
# runner reads it only where it is proven.
COMPILED = "kernodeck-inenv-code.marshal"
# Folders the venv tools or pip make even when empty (pip's headers folder of a venv: include/site/python3.X).
VENV_DIRS = frozenset({"bin", "include", "lib", "Scripts", "Lib", "Include", "include/site"})
_VENV_DIR = re.compile(r"include/(site/)?python\d+\.\d+")
# The interpreter links a POSIX venv holds (bin/python, bin/python3, bin/python3.11).
_PYTHON_LINK = re.compile(r"bin/python(3(\.\d+)?)?")

# At most this many paths per list in report.json (the counts say how many there are).
DETAILS_LIMIT = 200


def _bytecode_tag(env: Path) -> str:
    """The interpreter's cache tag (``cpython-311``), read from the env's pyvenv.cfg."""
    try:
        text = (env / "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return "cpython-3"
    match = re.search(r"^\s*version(?:_info)?\s*=\s*(\d+)\.(\d+)", text, re.MULTILINE)
    impl = re.search(r"^\s*implementation\s*=\s*(\w+)", text, re.MULTILINE)
    name = (impl.group(1) if impl else "CPython").lower()
    return f"{name}-{match.group(1)}{match.group(2)}" if match else f"{name}-3"


def allowed(rel: str, entry: Entry, owned: dict[str, str], tag: str) -> bool:
    """Whether a path no RECORD lists is something the venv tool or the interpreter writes.

    Exactly: :data:`VENV_FILES` and :data:`COMPILED`; ``bin/python``, ``bin/python3``, ``bin/python3.X`` as links;
    ``lib64`` as a link to ``lib``; bytecode ``__pycache__/<stem>.<tag>.pyc`` (or ``.opt-1.pyc``/``.opt-2.pyc``) of an
    OWNED ``<stem>.py`` in the folder above, for this interpreter's tag only.
    """
    kind = entry[0]
    if rel in VENV_FILES or rel == COMPILED:
        return kind == "f"
    if _PYTHON_LINK.fullmatch(rel):
        return kind in ("l", "f")
    if rel == "lib64":
        return kind == "l" and entry[7] == "lib"
    source = source_of(rel, tag)
    return kind == "f" and source is not None and source in owned


def source_of(pyc: str, tag: str) -> str | None:
    """The source ``<folder>/<stem>.py`` whose bytecode ``<folder>/__pycache__/<stem>.<tag>[.opt-N].pyc`` is, as
    importlib's cache_from_source names it (the stem is everything before the suffix: ``x.y.py`` has ``x.y.<tag>.pyc``,
    red-team pass 51, PYC3); None for any other name. The one rule the allow-list and the check both read."""
    folder, _, name = pyc.rpartition("/")
    if not (folder == "__pycache__" or folder.endswith("/__pycache__")):
        return None
    for suffix in (f".{tag}.pyc", f".{tag}.opt-1.pyc", f".{tag}.opt-2.pyc"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{folder[: -len('__pycache__')]}{name[: -len(suffix)]}.py"
    return None


@dataclass
class Findings:
    """What the every-file checks found; empty lists mean the env is the lock's, file by file."""

    entries: int = 0
    owned: int = 0
    foreign: list[str] = field(default_factory=list)  # not owned by a locked RECORD nor allowed
    without_record: list[str] = field(default_factory=list)
    missing: dict[str, list[str]] = field(default_factory=dict)  # dist -> RECORD files not in the env
    wrong_size: dict[str, list[str]] = field(default_factory=dict)  # dist -> "path (size N, RECORD says M)"
    shared: list[str] = field(default_factory=list)  # regular files with more than one link
    bytecode_later: int = 0  # bytecode files written since the build, each checked against its source
    bytecode_checked_now: int = 0  # of those, checked by this run (the others were checked by an earlier one)
    bad_bytecode: list[str] = field(default_factory=list)  # "path (why)": not what the interpreter compiles
    bytecode_unchecked: int = 0  # written since the build, not checked: the env's other files were not the build's
    added: list[str] = field(default_factory=list)  # vs the snapshot
    removed: list[str] = field(default_factory=list)
    changed: dict[str, str] = field(default_factory=dict)  # path -> which fields moved
    snapshot: str = ""  # "" when compared; else why not (missing, unreadable)
    seconds: float = 0.0
    site: str = ""  # the site-packages folder under the env: paths in it are named as their RECORD names them
    # every entry as this check saw it (path under the env -> its stat: snapshot.Entry); not part of the record
    stats: dict[str, Entry] = field(default_factory=dict, repr=False)

    def short(self, rel: str) -> str:
        return rel[len(self.site) + 1:] if self.site and rel.startswith(self.site + "/") else rel

    @property
    def damaged(self) -> dict[str, list[str]]:
        """RECORD files missing or of another size, by distribution (the inventory's ``damaged``)."""
        out: dict[str, list[str]] = {}
        for source in (self.missing, self.wrong_size):
            for name, files in source.items():
                out.setdefault(name, []).extend(self.short(f) for f in files)
        return {k: sorted(v) for k, v in sorted(out.items())}

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed or self.snapshot or self.bad_bytecode
                    or self.bytecode_unchecked)

    @property
    def trusted(self) -> bool:
        """Every file but the bytecode written since the build is the build's: owned, intact, unshared, unchanged;
        only then may the env's interpreter start (to check that bytecode against its sources)."""
        return not (self.foreign or self.without_record or self.missing or self.wrong_size or self.shared
                    or self.added or self.removed or self.changed or self.snapshot)

    @property
    def clean(self) -> bool:
        return not (self.foreign or self.without_record or self.missing or self.wrong_size or self.shared) and (
            self.unchanged
        )

    def problems(self, limit: int = 3) -> list[str]:
        """One phrase per kind of problem, naming the first files."""
        def few(items: list[str]) -> str:
            more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
            return ", ".join(self.short(i) for i in items[:limit]) + more

        out = []
        if self.without_record:
            out.append(f"locked distribution(s) without a RECORD: {few(self.without_record)}")
        if self.damaged:
            out.append("installed files do not match their RECORD: " + "; ".join(
                f"{name}: {few(files)}" for name, files in self.damaged.items()))
        if self.foreign:
            out.append(f"{len(self.foreign)} file(s) no locked distribution owns: {few(self.foreign)}")
        if self.shared:
            out.append(f"{len(self.shared)} file(s) shared with another place (hard links): {few(self.shared)}")
        if self.snapshot:
            out.append(self.snapshot)
        if self.bad_bytecode:
            out.append(f"bytecode written since the build that is not its source's: {few(self.bad_bytecode)}")
        if self.bytecode_unchecked:
            out.append(f"{self.bytecode_unchecked} bytecode file(s) written since the build not checked against their "
                       "source (the env's interpreter is not started over files that are not the build's)")
        if self.added:
            out.append(f"added since the build: {few(self.added)}")
        if self.removed:
            out.append(f"removed since the build: {few(self.removed)}")
        if self.changed:
            out.append("changed since the build: " + few([f"{p} ({w})" for p, w in sorted(self.changed.items())]))
        return out

    def as_dict(self, limit: int = DETAILS_LIMIT) -> dict[str, object]:
        """The report's record; each list cut at ``limit`` entries (its full length in ``counts``)."""
        lists = {"foreign": self.foreign, "shared": self.shared, "added": self.added, "removed": self.removed}
        return {
            "entries": self.entries,
            "owned_by_record": self.owned,
            **{key: value[:limit] for key, value in lists.items()},
            "without_record": self.without_record,
            "damaged": {name: files[:limit] for name, files in self.damaged.items()},
            "snapshot": self.snapshot or "compared",
            "changed": dict(sorted(self.changed.items())[:limit]),
            "counts": {**{key: len(value) for key, value in lists.items()}, "changed": len(self.changed)},
            "bytecode_since_build": {"files": self.bytecode_later, "checked_now": self.bytecode_checked_now,
                                     "not_checked": self.bytecode_unchecked,
                                     "not_its_source": self.bad_bytecode[:limit]},
            "seconds": round(self.seconds, 3),
        }


def _fold(paths: list[str], entries: dict[str, Entry]) -> list[str]:
    """Name a foreign folder once (``evil/``), not each file in it."""
    folders = {p for p in paths if entries.get(p, ["?"])[0] == "d"}
    out = []
    for path in sorted(paths):
        parts = path.split("/")
        if any("/".join(parts[:i]) in folders for i in range(1, len(parts))):
            continue
        out.append(path + "/" if path in folders else path)
    return out


def ownership(env: Path, entries: dict[str, Entry], records: Records, into: Findings) -> None:
    """Fill ``into`` with the foreign, missing, wrong-size and hard-linked files of ``entries``."""
    owned, tag = records.owned, _bytecode_tag(env)
    into.site = next(iter(site_dirs(env)), "")
    keep: set[str] = set(VENV_DIRS) | {s for site in site_dirs(env) for s in _ancestors(site + "/x")}
    foreign: list[str] = []
    parents: set[str] = set()
    for rel, entry in entries.items():
        kind = entry[0]
        if kind == "d":
            continue
        if kind == "f" and int(entry[6]) > 1:  # type: ignore[call-overload]
            into.shared.append(rel)
        if rel in owned or allowed(rel, entry, owned, tag):
            parents.add(rel.rpartition("/")[0])
        else:
            foreign.append(rel)
    for parent in parents:
        keep.update(_ancestors(parent + "/x"))
    foreign += [rel for rel, entry in entries.items()
                if entry[0] == "d" and rel not in keep and not _VENV_DIR.fullmatch(rel)]
    into.foreign = _fold(foreign, entries)
    into.shared.sort()
    into.owned = sum(1 for rel in owned if rel in entries)
    for rel, name in owned.items():
        if rel not in entries:
            into.missing.setdefault(name, []).append(f"{rel} (missing)")
    for rel, (_, size) in records.lines():  # every RECORD's line for a path (Records.again)
        seen = entries.get(rel)
        if size is not None and seen is not None and seen[0] == "f" and seen[1] != size:
            into.wrong_size.setdefault(owned[rel], []).append(f"{rel} (size {seen[1]}, RECORD says {size})")
    into.without_record = list(records.without_record)


def _ancestors(rel: str) -> list[str]:
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


Validator = Callable[[list[tuple[str, str]]], list[tuple[str, str]]]


def check(env: Path, locked: Iterable[str], snapshot_digest: str | None, validate: Validator | None,
          snapshot: tuple[dict[str, object] | None, str] | None = None) -> Findings:
    """Every file of a rebuilt env: owned, not shared, unchanged since its build's snapshot.

    Bytecode the interpreter wrote since the build (``__pycache__/<stem>.<tag>.pyc`` of an owned ``<stem>.py`` that
    did not change) is the one addition accepted, once ``validate`` (run by the env's interpreter) found each file to
    be what that interpreter compiles from its source; such files are then kept in :data:`BYTECODE` with their stat, so
    a later run checks only what is new or moved. ``validate`` is called only when every other file is the build's
    (:meth:`Findings.trusted`): over a foreign or changed file the env's interpreter is not started at all, and the
    pending bytecode is counted as not checked.

    When nothing but such kept bytecode differs from the snapshot, the ownership the build proved still holds (the same
    paths, the same RECORD files, the same locked names): it is not worked out again, which keeps a verify cheap.
    ``snapshot``: :func:`read_snapshot`'s answer where the caller read it already (the start files' proof).
    """
    start = time.perf_counter()
    found = Findings()
    locked = sorted(set(locked))
    entries = found.stats = scan(env)
    found.entries = len(entries)
    found.site = next(iter(site_dirs(env)), "")
    snap, why = snapshot if snapshot is not None else read_snapshot(env, snapshot_digest)
    if snap is None:
        found.snapshot = why
    else:
        before: dict[str, Entry] = snap["entries"]  # type: ignore[assignment]
        found.added, found.removed, found.changed = compare(before, entries)
        kept = _read_kept(env)
        found.bytecode_later = sum(1 for p in found.added if p.endswith(".pyc") and p in kept)
        unexplained = [p for p in found.added if not same(kept.get(p), entries[p])]
        if not (unexplained or found.removed or found.changed) and snap.get("locked") == locked:
            found.owned = int(snap.get("owned_by_record", 0))  # type: ignore[call-overload]
            found.added = []
            found.seconds = time.perf_counter() - start
            return found
    records = read_records(env, locked)
    ownership(env, entries, records, found)
    if snap is not None:
        _later_bytecode(env, entries, records, found, validate)
    found.seconds = time.perf_counter() - start
    return found


def _read_kept(env: Path) -> dict[str, Entry]:
    try:
        kept = json.loads((env / BYTECODE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return kept if well_formed(kept) else {}  # else every later bytecode file is checked again


def _later_bytecode(
    env: Path, entries: dict[str, Entry], records: Records, found: Findings, validate: Validator | None
) -> None:
    """Take out of ``found.added`` the bytecode written since the build, each checked against its source."""
    tag = _bytecode_tag(env)
    changed_sources = {p for p in (*found.changed, *found.removed) if p.endswith(".py")}
    later = {
        p for p in found.added
        if p.endswith(".pyc") and allowed(p, entries[p], records.owned, tag)
        and source_of(p, tag) not in changed_sources
    }
    # a __pycache__ folder made since the build that holds only such bytecode goes with it
    folders = {p for p in found.added if entries[p][0] == "d" and p.rpartition("/")[2] == "__pycache__"}
    for path in found.added:
        if path not in later and path not in folders:
            folders.discard(path.rpartition("/")[0])
    kept = _read_kept(env)
    pending = sorted(p for p in later if kept.get(p) != entries[p])
    found.bytecode_later = len(later)
    found.added = [p for p in found.added if p not in later and p not in folders]
    if pending and (validate is None or not found.trusted):
        found.bytecode_unchecked = len(pending)  # named once, by count: a first verify writes thousands
    elif pending and validate is not None:
        bad = validate([(str(env / p), str(env / str(source_of(p, tag)))) for p in pending])
        root = str(env) + os.sep
        found.bad_bytecode = sorted(f"{p.removeprefix(root)} ({why})" for p, why in bad)
        found.bytecode_checked_now = len(pending)
    if later and not found.bad_bytecode and not found.bytecode_unchecked:
        from kernodeck._fs import write_atomic

        keep = {p: entries[p] for p in sorted(later | folders)}
        if keep != kept:
            write_atomic(env / BYTECODE, json.dumps(keep, separators=(",", ":")) + "\n")


