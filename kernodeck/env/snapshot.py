"""The build's snapshot of a rebuilt env: every entry's ``lstat``, written once the install is proven, compared on
every verify.

Each entry under the env's prefix (links not followed) is kept as kind, size, mtime_ns, ctime_ns, inode, mode, link
count and a link's target. Any write, ``chmod``, ``rename`` or ``touch`` sets the ctime to the clock's now (a write
through a shared mapping only as a clean page first becomes writable), and no user-space call can set it back:
docs/env-integrity.md says why this is sound and what it does not cover.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from kernodeck._fs import sha256_text

SNAPSHOT = "kernodeck-files.json"
SNAPSHOT_VERSION = 1
# Bytecode the interpreter wrote after the build (no bytecode is compiled at install), each file checked once
# against what this interpreter compiles from its unchanged source, then kept here with its stat.
BYTECODE = "kernodeck-bytecode.json"
# Kernodeck's own records at the env's root, written after the snapshot, not listed in it: the snapshot is held by its
# digest in the completion record; the bytecode list is trusted as it lies (docs/env-integrity.md, "What it does not
# cover": each is as writable as the env).
OWN_RECORDS = frozenset({"kernodeck-complete.json", "kernodeck-inventory.txt", SNAPSHOT, BYTECODE})

# An entry as stat saw it: kind (f file, d folder, l link, o other), size, mtime_ns, ctime_ns, inode, mode, links,
# a link's target ("" otherwise). A list, not a record: 40k of them are read and compared on every verify.
Entry = list[object]
FIELDS = ("kind", "size", "mtime_ns", "ctime_ns", "inode", "mode", "links", "target")


def scan(env: Path, within: frozenset[str] | None = None) -> dict[str, Entry]:
    """Every entry under ``env`` (links not followed), by its path relative to ``env`` ('/'-separated); with
    ``within``, only the entries of those folders ("" is ``env`` itself), none deeper (env/startfiles.py)."""
    out: dict[str, Entry] = {}
    stack = [("", str(env))]
    while stack:
        rel, folder = stack.pop()
        with os.scandir(folder) as entries:
            for item in entries:
                name = rel + item.name
                if not rel and item.name in OWN_RECORDS:
                    continue
                st = item.stat(follow_symlinks=False)
                mode = st.st_mode
                target = ""
                if stat.S_ISDIR(mode):
                    kind = "d"
                    if within is None or name in within:
                        stack.append((name + "/", item.path))
                elif stat.S_ISREG(mode):
                    kind = "f"
                elif stat.S_ISLNK(mode):
                    kind, target = "l", os.readlink(item.path)
                else:
                    kind = "o"
                out[name] = [kind, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, mode, st.st_nlink, target]
    return out


def same(old: Entry | None, new: Entry) -> bool:
    """Equal entries; for folders only kind, inode and mode: their size and times move with what they list, and
    every entry they list is compared itself."""
    if old is None:
        return False
    if old[0] == "d" and new[0] == "d":
        return (old[4], old[5]) == (new[4], new[5])
    return old == new


def compare(before: dict[str, Entry], now: dict[str, Entry]) -> tuple[list[str], list[str], dict[str, str]]:
    """Added, removed and changed entries between the build's snapshot and now (changed: path -> fields moved)."""
    changed: dict[str, str] = {}
    for rel, old in before.items():
        new = now.get(rel)
        if new is None or new == old or same(old, new):
            continue
        moved = [f for f, a, b in zip(FIELDS, old, new, strict=True) if a != b]
        if "size" in moved:
            moved[moved.index("size")] = f"size {old[1]} -> {new[1]}"
        changed[rel] = ", ".join(moved)
    return sorted(set(now) - set(before)), sorted(set(before) - set(now)), changed


def write_snapshot(env: Path, entries: dict[str, Entry], extra: dict[str, object]) -> str:
    """Write :data:`SNAPSHOT` atomically; returns its sha256 (the completion record holds it)."""
    from kernodeck._fs import write_atomic

    text = json.dumps({"version": SNAPSHOT_VERSION, **extra, "entries": entries}, separators=(",", ":")) + "\n"
    write_atomic(env / SNAPSHOT, text)
    return sha256_text(text)


def read_snapshot(env: Path, digest: str | None) -> tuple[dict[str, object] | None, str]:
    """The build's snapshot, or None and why not (missing, unreadable, not the one the completion record names)."""
    try:
        raw = (env / SNAPSHOT).read_bytes()
    except OSError:
        return None, f"the env lacks {SNAPSHOT}, written when it was built: its files cannot be held to the build"
    if digest is not None and hashlib.sha256(raw).hexdigest() != digest:
        return None, f"{SNAPSHOT} is not the one written at the build (its digest differs from the completion record)"
    try:
        data = json.loads(raw)
        if data.get("version") != SNAPSHOT_VERSION or not well_formed(data.get("entries")):
            raise ValueError
    except (ValueError, AttributeError):
        return None, f"{SNAPSHOT} is unreadable"
    return data, ""


def well_formed(entries: object) -> bool:
    """Entries as :func:`scan` writes them: a mapping of paths to lists of :data:`FIELDS`' length (one another writer
    left, or a rewrite of the records, raised out of the comparisons: red-team pass 89, SNAP-MALFORMED1)."""
    return isinstance(entries, dict) and all(type(entry) is list and len(entry) == len(FIELDS)
                                             for entry in entries.values())


