"""Output folders and files Kernodeck may replace: the one rule every writer calls, so nothing it did not make is lost.

A folder Kernodeck makes and may later replace (a dossier, a replay's dossier, a wheelhouse, compare's output) holds
the marker file ``.kernodeck-folder``, written last (atomically) when the folder is complete: a JSON record of the
folder's kind and of every file Kernodeck put there, by relative path with its sha256. An ``--out`` is accepted only
when

- it does not exist yet, or is an empty folder, or holds exactly the files its marker lists, each unchanged: a file
  added (a notebook, figures), or a listed file edited since, refuses the ``--out`` with one ERROR naming them, and
  nothing is removed. A marker that is not such a record (made by hand, or by a Kernodeck from before the list) is
  not trusted: the folder is treated as the user's;
- it is not a file;
- it is outside the project, or inside one of the folders the project gives to outputs (``runs/`` and, for a
  wheelhouse, ``.wheelhouse/``): never the project root, a parent of it, ``.git``, the reference or the sources.

A single file ``--out`` (the matrix, an export, an SBOM, the pull request body) is replaced only when Kernodeck
wrote it: beside it, the sidecar ``.NAME.kernodeck-file`` records its kind and sha256; a file without that record, or
changed since, is refused, and so is a file inside a folder Kernodeck wrote whole (a marked one: the file would be
an entry its marker does not list).

A folder is replaced by building it in a sibling staging folder ``.NAME.staging-<pid>`` (:func:`staged`) and swapping
it in by two renames (the previous one parked as ``.NAME.old-<pid>`` for that instant, checked once more before it
is removed). Leftovers of a killed run are recognised by that pattern and removed on the next run of the same
``--out`` only when their process is gone; a parked previous folder whose run died between the two renames is put
back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kernodeck._fs import sha256_file, sha256_text, write_atomic
from kernodeck._proc import log
from kernodeck.errors import UnsafeOut

MARKER = ".kernodeck-folder"
MARKER_VERSION = 2
FILE_SUFFIX = ".kernodeck-file"  # the sidecar of a single file Kernodeck wrote: ``.NAME.kernodeck-file``
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<what>staging|old)-(?P<pid>[0-9]+)$")
_SHOWN = 5  # files named in a refusal; the rest are counted
# The marked folders this process is filling (:func:`filling`: an upgrade's, whose verify writes its dossier inside).
_FILLING: set[Path] = set()


@dataclass(frozen=True)
class Listing:
    """What a marker says Kernodeck wrote into its folder: the kind and each file's sha256 by relative path."""

    kind: str
    files: dict[str, str]
    folders: frozenset[str] = frozenset()  # the folders Kernodeck made there, empty ones included


def _read_listing(folder: Path) -> Listing | None:
    """The folder's marker as Kernodeck writes it, or None (absent, unreadable, hand-made, or without a file list)."""
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("made_by") != "kernodeck" or data.get("version") != MARKER_VERSION:
        return None
    files, kind = data.get("files"), data.get("kind")
    if not isinstance(kind, str) or not isinstance(files, dict):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) and _safe_rel(k) for k, v in files.items()):
        return None
    folders = data.get("folders", [])
    if not isinstance(folders, list) or not all(isinstance(f, str) and _safe_rel(f) for f in folders):
        return None
    return Listing(kind, dict(files), frozenset(folders))


def _safe_rel(rel: str) -> bool:
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts and rel != MARKER


def _walk(folder: Path, keep: frozenset[str] | None = None) -> Iterator[tuple[str, Path]]:
    """Every entry under ``folder`` (files, links, folders), by relative POSIX path; links are never followed.

    With ``keep``, a folder whose path is not in it is yielded but not entered: named once, it stands for all it
    holds.
    """
    for here, dirs, files in os.walk(folder):
        base = Path(here)
        for name in sorted(dirs):
            rel = (base / name).relative_to(folder).as_posix()
            yield rel, base / name
        if keep is not None:
            dirs[:] = [d for d in dirs if (base / d).relative_to(folder).as_posix() in keep]
        for name in sorted(files):
            yield (base / name).relative_to(folder).as_posix(), base / name


def foreign(folder: Path) -> list[str]:
    """What in ``folder`` Kernodeck did not write or that changed since: empty when Kernodeck may replace it.

    Each entry is a relative path (a folder Kernodeck made none of: once, ``NAME/``), with `` (changed since
    Kernodeck wrote it)`` or `` (missing)`` where it applies. A folder with no trusted marker is all foreign (its
    marker included), unless it is empty.
    """
    if not folder.is_dir():
        return []
    listing = _read_listing(folder)
    files = listing.files if listing is not None else {}
    parents = frozenset(p.as_posix() for rel in files for p in Path(rel).parents if p != Path("."))
    parents |= listing.folders if listing is not None else frozenset()  # an empty one it made (a failed run's)
    found: list[str] = []
    for rel, path in _walk(folder, parents):
        if rel == MARKER and listing is not None and path.is_file() and not path.is_symlink():
            continue
        if path.is_dir() and not path.is_symlink():
            if rel not in parents:
                found.append(rel + "/")
            continue
        if rel not in files or path.is_symlink() or not path.is_file():
            found.append(rel)
        elif "sha256:" + sha256_file(path) != files[rel]:
            found.append(f"{rel} (changed since Kernodeck wrote it)")
    found += [f"{rel} (missing)" for rel in sorted(files) if not (folder / rel).is_file()]
    return found


def _name_some(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def _refuse_foreign(out: Path, final: Path, what: str, tip: str) -> None:
    """Refuse ``final`` when replacing it would lose what Kernodeck did not write (a listed file gone loses nothing)."""
    kept = [f for f in foreign(final) if not f.endswith(" (missing)")]
    if not kept:
        return
    if _read_listing(final) is not None:
        why = "Kernodeck did not write, or changed since it wrote them"
    elif (final / MARKER).exists():
        why = f"Kernodeck did not write (its {MARKER} is not one Kernodeck wrote: no list of its files)"
    else:
        why = f"Kernodeck did not write (no {MARKER} lists them)"
    count = f"{len(kept)} {'entry' if len(kept) == 1 else 'entries'}"
    raise UnsafeOut(
        f"--out {out} holds {count} {why}: {_name_some(kept)}; {what} would replace them, so nothing was written "
        "and nothing removed",
        tip=f"{tip}; or move those files out of {out} first",
    )


def mark(folder: Path, kind: str, written: Mapping[str, str | None] | None = None) -> None:
    """Sign ``folder`` as Kernodeck's: list every file in it with its sha256, and every folder (an empty one a failed
    run left is Kernodeck's too), in a marker written last, atomically; with ``written``, only the entries it holds, as
    the caller took them when it wrote them (:func:`entries`: a file the user added, or edited, meanwhile stays the
    user's: red-team passes 40 and 41, OUT7 and OUT8)."""
    if written is None:
        written = entries(folder, folder)
    files = {rel: digest for rel, digest in written.items() if digest is not None}
    folders = sorted(rel for rel, digest in written.items() if digest is None and rel)
    record = {"made_by": "kernodeck", "version": MARKER_VERSION, "kind": kind, "files": files, "folders": folders}
    write_atomic(folder / MARKER, json.dumps(record, indent=1, sort_keys=True) + "\n")


def entries(folder: Path, under: Path, skip: str = "") -> dict[str, str | None]:
    """``under`` (a file or a folder) and every entry below it but a ``skip`` folder directly in it, by paths relative
    to ``folder``: each file with its sha256 now, each folder with None (links, the marker and what is not there left
    out)."""
    top = under.relative_to(folder).as_posix()
    found = [(top, under)] if top != "." else []
    found += [(f"{top}/{rel}" if top != "." else rel, path) for rel, path in _walk(under) if rel.split("/")[0] != skip]
    return {rel: None if path.is_dir() else "sha256:" + sha256_file(path) for rel, path in found
            if rel != MARKER and not path.is_symlink() and (path.is_dir() or path.is_file())}


@contextmanager
def filling(folder: Path) -> Iterator[None]:
    """While this runs, ``folder`` (marked, and signed again by its caller when complete) takes this process's own
    outputs inside it: the one exception to :func:`_refuse_inside_marked`."""
    final = folder.resolve()
    _FILLING.add(final)
    try:
        yield
    finally:
        _FILLING.discard(final)


def _refuse_inside_marked(out: Path, final: Path, what: str, tip: str) -> None:
    """Refuse ``final`` inside a folder Kernodeck wrote whole (its marker lists every entry) but one this process fills:
    an entry added there makes its next run refuse it (red-team passes 38 and 39, OUT4 and OUT6)."""
    for parent in (p for p in final.parents if p not in _FILLING):
        if (listing := _read_listing(parent)) is not None:
            raise UnsafeOut(
                f"--out {out} is inside {parent}, a {listing.kind} Kernodeck wrote whole (its {MARKER} lists every "
                f"entry); {what} added there would make its next run refuse {parent}, so nothing was written",
                tip=f"{tip}; or give a place outside {parent}",
            )


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_place(out: Path, final: Path, what: str, tip: str, root: Path | None, allowed: tuple[Path, ...]) -> None:
    if root is not None:
        root = root.resolve()
        if _within(root, final):
            raise UnsafeOut(f"--out {out} is the project folder or a parent of it; {what} would replace the project",
                            tip=tip)
        if _within(final, root) and not any(_within(final, a.resolve()) and final != a.resolve() for a in allowed):
            places = " or ".join(f"{os.path.relpath(a, root)}/" for a in allowed) or "outside the project"
            raise UnsafeOut(f"--out {out} is inside the project ({os.path.relpath(final, root)}), where {what} would "
                            f"replace project files; outputs go under {places}", tip=tip)


def check(out: Path, *, what: str, tip: str, root: Path | None = None, allowed: tuple[Path, ...] = ()) -> Path:
    """Resolve ``out`` and refuse it unless Kernodeck may write (and later replace) a folder there.

    ``root`` is the project (None when the command needs none); ``allowed`` are the project's own output folders,
    under which an ``--out`` may sit (never one of them itself). An existing folder is accepted when empty or when it
    holds exactly what its marker lists, unchanged (:func:`foreign`).
    """
    final = out.expanduser().resolve()
    _check_place(out, final, what, tip, root, allowed)
    if final.exists() and not final.is_dir():
        raise UnsafeOut(f"--out {out} is an existing file, not a folder; {what} is a folder", tip=tip)
    _refuse_inside_marked(out, final, what, tip)
    _refuse_foreign(out, final, what, tip)
    return final


def _sidecar(final: Path) -> Path:
    return final.with_name(f".{final.name}{FILE_SUFFIX}")


def _file_record(final: Path) -> dict[str, str] | None:
    """The sidecar record of a file Kernodeck wrote, or None (absent, or not one Kernodeck writes)."""
    try:
        data = json.loads(_sidecar(final).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("made_by") != "kernodeck" or not isinstance(data.get("sha256"), str):
        return None
    return {k: v for k, v in data.items() if isinstance(v, str)}


def file_is_ours(final: Path) -> bool:
    """``final`` is a file Kernodeck wrote and nobody changed since (its sidecar names its content)."""
    record = _file_record(final)
    if record is None or not final.is_file() or final.is_symlink():
        return False
    digest = "sha256:" + sha256_file(final)
    # the previous digest too: a run killed between writing the sidecar and the file leaves the earlier file
    return digest in (record["sha256"], record.get("previous"))


def check_file(out: Path, *, what: str, tip: str, root: Path | None = None, allowed: tuple[Path, ...] = ()) -> Path:
    """Resolve ``out`` for a single file Kernodeck writes: never a folder, never a project file, never a file it did
    not write (or that changed since it wrote it)."""
    final = out.expanduser().resolve()
    _check_place(out, final, what, tip, root, allowed)
    if final.is_dir():
        raise UnsafeOut(f"--out {out} is a folder; {what} is one file", tip=tip)
    _refuse_inside_marked(out, final, what, tip)
    side = _sidecar(final)
    if (final.exists() or final.is_symlink()) and not file_is_ours(final):
        why = "changed since Kernodeck wrote it" if _file_record(final) else f"no {side.name} record beside it"
        raise UnsafeOut(
            f"--out {out} is a file Kernodeck did not write ({why}); {what} would replace it, so nothing was written",
            tip=f"{tip}; or move {out} away first",
        )
    if not final.exists() and side.exists() and _file_record(final) is None:
        raise UnsafeOut(f"--out {out}: {side} exists and is not a record Kernodeck wrote; it would be replaced",
                        tip=f"{tip}; or move {side} away first")
    return final


def write_file(final: Path, data: str, kind: str) -> None:
    """Write ``final`` atomically with its sidecar record (so a later run may replace it: :func:`check_file`)."""
    previous = _file_record(final)
    record = {"made_by": "kernodeck", "kind": kind, "sha256": "sha256:" + sha256_text(data)}
    if previous is not None and file_is_ours(final):
        record["previous"] = "sha256:" + sha256_file(final)
    write_atomic(_sidecar(final), json.dumps(record, sort_keys=True) + "\n")
    write_atomic(final, data)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    except OSError:
        return True
    return True


def clean_leftovers(final: Path) -> list[str]:
    """Remove ``.NAME.staging-<pid>`` / ``.NAME.old-<pid>`` beside ``final`` whose process is gone.

    A parked previous folder (``.old``) whose run died before the second rename is put back when ``final`` is
    missing. Nothing else is touched: not another name, not a live run's folders.
    """
    removed: list[str] = []
    if not final.parent.is_dir():
        return removed
    for child in sorted(final.parent.iterdir()):
        match = _LEFTOVER.match(child.name)
        if not match or match["name"] != final.name or not child.is_dir() or child.is_symlink():
            continue
        if _alive(int(match["pid"])):
            continue
        if match["what"] == "old" and not final.exists():
            os.replace(child, final)
            log(f"kernodeck: put back {final.name}, parked by a run that was killed while replacing it")
            continue
        shutil.rmtree(child, ignore_errors=True)
        removed.append(child.name)
    if removed:
        log(f"kernodeck: removed leftovers of killed runs beside {final}: {', '.join(removed)}")
    return removed


def staging_for(final: Path) -> Path:
    """A fresh staging folder beside ``final`` (after removing dead runs' leftovers)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(final)
    staging = final.parent / f".{final.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)  # our own pid: a folder only this process can have made
    staging.mkdir()
    return staging


def swap_into_place(staging: Path, out: Path, *, guard: bool = True) -> None:
    """Replace ``out`` with the completed ``staging`` folder; the earlier one survives any failure before this.

    ``guard``: the earlier folder, once parked, is checked again (:func:`foreign`): a file put there since the run
    began is not lost, the folder goes back and the swap is refused. Off only for a writer that carries the
    earlier folder's other files over itself (the reference).
    """
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        try:
            if guard:
                _refuse_foreign(out, old, "the new folder", "rerun with another --out")
            os.replace(staging, out)
        except (OSError, UnsafeOut):
            os.replace(old, out)  # put the earlier folder back before reporting the failure
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out)


@dataclass
class Staged:
    """A folder being written beside its final place: :meth:`commit` signs it and swaps it in whole.

    What :func:`staged` drives; a writer stages through :func:`staged` (commit on success, abandon on any error),
    not by calling these itself."""

    final: Path
    kind: str  # "" writes no marker (the reference, a project folder with its own manifest)
    path: Path

    @classmethod
    def begin(cls, final: Path, kind: str) -> Staged:
        return cls(final, kind, staging_for(final))

    def commit(self) -> None:
        if self.kind:
            mark(self.path, self.kind)  # last, over the finished content
        swap_into_place(self.path, self.final, guard=bool(self.kind))

    def abandon(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


@contextmanager
def staged(final: Path, kind: str) -> Iterator[Path]:
    """Yield a staging folder for ``final``; at the end, sign it as ``kind`` and swap it in whole; on error, remove
    it and leave ``final`` as it was."""
    stage = Staged.begin(final, kind)
    try:
        yield stage.path
        stage.commit()
    except BaseException:
        stage.abandon()
        raise
