"""Output folders Kernodeck may replace: the one rule every writer calls, so that nothing it did not make is removed.

A folder Kernodeck makes and may later replace (a dossier, a replay's dossier, a wheelhouse, compare's output) holds
the marker file ``.kernodeck-folder``. An ``--out`` is accepted only when

- it does not exist yet, or is an empty folder, or holds that marker (or, for dossiers written before the marker, a
  ``report.json`` with Kernodeck's report fields beside a ``report.md``);
- it is not a file;
- it is outside the project, or inside one of the folders the project gives to outputs (``runs/`` and, for a
  wheelhouse, ``.wheelhouse/``): never the project root, a parent of it, ``.git``, the reference or the sources.

A folder is replaced by building it in a sibling staging folder ``.NAME.staging-<pid>`` and swapping it in by two
renames (the previous one parked as ``.NAME.old-<pid>`` for that instant). Leftovers of a killed run are recognised
by that pattern and removed on the next run of the same ``--out`` only when their process is gone; a parked
previous folder whose run died between the two renames is put back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ._proc import log
from .errors import KernodeckError

MARKER = ".kernodeck-folder"
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<what>staging|old)-(?P<pid>[0-9]+)$")


class UnsafeOut(KernodeckError):
    """An output path Kernodeck would have to destroy something it did not make to use."""


def _signed(folder: Path) -> bool:
    """A folder Kernodeck made: its marker, or a report.json with Kernodeck's report fields beside report.md."""
    if (folder / MARKER).is_file():
        return True
    report = folder / "report.json"
    if not report.is_file() or not (folder / "report.md").is_file():
        return False
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and {"version", "status", "platform", "steps"} <= set(data)


def mark(folder: Path, kind: str) -> None:
    """Sign ``folder`` as one Kernodeck made (and so may replace)."""
    (folder / MARKER).write_text(json.dumps({"made_by": "kernodeck", "kind": kind}) + "\n", encoding="utf-8")


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _check_place(out: Path, final: Path, what: str, tip: str, root: Path | None, allowed: tuple[Path, ...]) -> None:
    if root is not None:
        root = root.resolve()
        if _within(root, final):
            raise UnsafeOut(
                f"--out {out} is the project folder or a parent of it; {what} would replace the project",
                tip=tip,
            )
        if _within(final, root) and not any(_within(final, a.resolve()) and final != a.resolve() for a in allowed):
            places = " or ".join(f"{os.path.relpath(a, root)}/" for a in allowed) or "outside the project"
            raise UnsafeOut(
                f"--out {out} is inside the project ({os.path.relpath(final, root)}), where {what} would "
                f"replace project files; outputs go under {places}",
                tip=tip,
            )


def check(
    out: Path,
    *,
    what: str,
    tip: str,
    root: Path | None = None,
    allowed: tuple[Path, ...] = (),
    signs: tuple[str, ...] = (),
) -> Path:
    """Resolve ``out`` and refuse it unless Kernodeck may write (and later replace) a folder there.

    ``root`` is the project (None when the command needs none); ``allowed`` are the project's own output folders,
    under which an ``--out`` may sit (never one of them itself); ``signs`` are other file names that show a folder
    is one this writer made (a wheelhouse's manifest).
    """
    final = out.expanduser().resolve()
    _check_place(out, final, what, tip, root, allowed)
    if final.exists() and not final.is_dir():
        raise UnsafeOut(f"--out {out} is an existing file, not a folder; {what} is a folder", tip=tip)
    signed = _signed(final) or any((final / name).is_file() for name in signs)
    if final.is_dir() and any(final.iterdir()) and not signed:
        raise UnsafeOut(
            f"--out {out} is a folder Kernodeck did not make (not empty, no {MARKER} or Kernodeck report.json); "
            f"{what} would replace what it holds",
            tip=tip,
        )
    return final


def check_file(out: Path, *, what: str, tip: str, root: Path | None = None, allowed: tuple[Path, ...] = ()) -> Path:
    """Resolve ``out`` for a single file Kernodeck writes (atomically): never a folder, never a project file."""
    final = out.expanduser().resolve()
    _check_place(out, final, what, tip, root, allowed)
    if final.is_dir():
        raise UnsafeOut(f"--out {out} is a folder; {what} is one file", tip=tip)
    return final


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


def staging_for(final: Path, kind: str) -> Path:
    """A fresh staging folder beside ``final``, signed as ``kind`` (after removing dead runs' leftovers)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_leftovers(final)
    staging = final.parent / f".{final.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)  # our own pid: a folder only this process can have made
    staging.mkdir()
    if kind:
        mark(staging, kind)
    return staging


def swap_into_place(staging: Path, out: Path) -> None:
    """Replace ``out`` with the completed ``staging`` folder; the earlier one survives any failure before this."""
    if out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out, old)
        try:
            os.replace(staging, out)
        except OSError:
            os.replace(old, out)  # put the earlier folder back before reporting the failure
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out)
