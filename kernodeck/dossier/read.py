"""Reading a dossier folder another run wrote: its report, records, inventory and embeddings, each checked to be what
Kernodeck writes; a file that is not is a :class:`DamagedDossier` (an error naming it), never a number. What in it is
not as Kernodeck wrote it (:func:`changed_since_written`) is the one rule every command reading dossiers after the
fact states (compare, drift: red-team pass 55, DRIFT1)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from kernodeck import outdir, tips
from kernodeck.dossier.compare import reference_report
from kernodeck.errors import DamagedDossier, KernodeckError
from kernodeck.runformat.manifest import inconsistency

UNRECORDED = "no record of its files (neither a run's signed folder nor a reference's manifest): read as it is"


# What the commands reading a run's folder after the fact read (compare, drift): a file of these its run did not write
# (a record copied in from another run, beside one that stopped early) is named as not written by it (red-team pass
# 46, COMP1); any other added file is the user's, beside the run's, and read by nothing here.
READ = ("report.json", "system.json", "settings.json", "inventory.txt", "run-config.json", "noise.json")
READ_UNDER = ("outputs/", "resume-application/", "steps/")
_CHANGED = (" (changed since Kernodeck wrote it)", " (missing)")
_UP = 3  # how far above a dossier a signed folder holding it is looked for (calibrate's variations/NAME/)


def _read_here(entry: str) -> str:
    """``entry`` of outdir.foreign (a file the marker does not list), named as added when a reader reads it."""
    return f"{entry} (added since Kernodeck wrote the folder)" if entry in READ or entry.startswith(READ_UNDER) else ""


def _against(signed: Path, folder: Path) -> list[str]:
    """What in ``folder`` (``signed`` or a folder inside it) is not as ``signed``'s marker lists it."""
    found = outdir.foreign(signed)
    if outdir.MARKER in found:  # a marker Kernodeck did not write (or damaged): no record to hold the files to
        return [f"its {outdir.MARKER} is not one Kernodeck wrote: {UNRECORDED}"]
    prefix = "" if signed == folder else folder.relative_to(signed).as_posix() + "/"
    inside = [e[len(prefix):] for e in found if e.startswith(prefix)]
    return [e if e.endswith(_CHANGED) else _read_here(e) for e in inside if e.endswith(_CHANGED) or _read_here(e)]


def changed_since_written(folder: Path) -> list[str]:
    """What in a dossier is not as Kernodeck wrote it: a run's folder against the sha256 of each file its marker lists
    (a file changed or missing since; a file added beside them is no change to what the run wrote), a dossier inside a
    signed folder (a calibration's variation) against that folder's marker, a reference against its manifest (its id,
    each output's, ids' and record's sha256); ``[UNRECORDED]`` when it has none of these records."""
    if (folder / outdir.MARKER).is_file():
        return _against(folder, folder)
    if (folder / "manifest.toml").is_file():
        why = inconsistency(folder)
        return [why] if why else []
    for above in list(folder.resolve().parents)[:_UP]:
        if (above / outdir.MARKER).is_file():
            return _against(above, folder.resolve())
    return [UNRECORDED]


def file_as_written(signed: Path, rel: str) -> str:
    """What is wrong with one file ``rel`` of a signed folder for a reader of that file alone (the relock pull
    request's body reads ``upgrade.json`` and ``bisect.json`` from downloaded artifacts): "" when its marker lists it
    with its bytes now; else why it is not as Kernodeck wrote it."""
    if not (signed / outdir.MARKER).is_file():
        return f"its folder has no {outdir.MARKER}: no record of what Kernodeck wrote there"
    for entry in outdir.foreign(signed):
        if entry == outdir.MARKER:
            return f"its folder's {outdir.MARKER} is not one Kernodeck wrote"
        if entry == rel:
            return "Kernodeck did not write it (its folder's marker does not list it)"
        if entry.startswith(rel + " ("):
            return entry[len(rel) + 2:-1]  # "changed since Kernodeck wrote it", "missing"
    return ""


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedDossier(f"{path} is not UTF-8 text (byte {exc.start}): damaged or not Kernodeck's") from None
    except OSError as exc:
        raise DamagedDossier(f"{path} cannot be read: {exc.strerror or exc}") from None


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise DamagedDossier(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}): truncated?") from None
    if not isinstance(data, dict):
        raise DamagedDossier(f"{path} holds a JSON {type(data).__name__}, not the object Kernodeck writes") from None
    return data


def load(folder: Path) -> dict[str, Any]:
    """A dossier's report (or a reference's, from its manifest), system and settings records and inventory, each
    checked to be what Kernodeck writes (:class:`DamagedDossier` otherwise)."""
    report = folder / "report.json"
    as_reference = None if report.exists() else reference_report(folder)  # dossier/reference: its manifest
    if not report.exists() and as_reference is None:
        raise KernodeckError(
            f"{folder} holds no report.json: not a Kernodeck dossier", tip=tips.nox("verify", "--out", "DIR")
        )
    data: dict[str, Any] = {"report": as_reference if as_reference is not None else _json_object(report)}
    steps = data["report"].get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "name" in s for s in steps):
        raise DamagedDossier(f"{report} has no list of steps with names: not a Kernodeck report")
    for name in ("system.json", "settings.json"):
        if (folder / name).exists():
            data[name] = _json_object(folder / name)
    inv = folder / "inventory.txt"
    data["inventory"] = _text(inv) if inv.exists() else ""
    return data


def read_embeddings(folder: Path) -> tuple[list[str], list[list[float]]] | None:
    """A run's float32 embeddings and ids, read without numpy; None when absent or not float32 C-order.

    A file that is there but empty, truncated or not a .npy is a :class:`DamagedDossier` (an error), never a number.
    """
    from array import array

    npy, ids = folder / "embeddings.npy", folder / "embeddings.ids.json"
    if not ids.exists():
        ids = folder / "ids.json"  # a dossier from before the application contract (one ids file)
    if not npy.exists() or not ids.exists():
        return None
    raw = npy.read_bytes()
    if len(raw) < 10 or not raw.startswith(b"\x93NUMPY") or raw[6] not in (1, 2, 3):
        raise DamagedDossier(f"{npy} is empty or not a .npy file ({len(raw)} bytes)")
    size = 2 if raw[6] == 1 else 4
    header_len = int.from_bytes(raw[8 : 8 + size], "little")
    start = 8 + size + header_len
    if len(raw) < start:
        raise DamagedDossier(f"{npy} is truncated inside its header ({len(raw)} of {start} header bytes)")
    header = raw[8 + size : start].decode("latin1")
    if "'<f4'" not in header or "'fortran_order': False" not in header:
        return None
    shape = re.search(r"'shape':\s*\(([0-9,\s]*)\)", header)
    dims = [int(d) for d in shape.group(1).replace(" ", "").split(",") if d] if shape else []
    expected = math.prod(dims) * 4 if dims else None
    if expected is None or len(raw) - start != expected:
        raise DamagedDossier(
            f"{npy} is truncated: {len(raw) - start} data bytes where its header's shape "
            f"{tuple(dims)} needs {expected}"
        )
    values = array("f")
    values.frombytes(raw[start:])
    names = json.loads(_text(ids))
    if not isinstance(names, list) or len(names) != (dims[0] if dims else 0):
        raise DamagedDossier(f"{ids} does not list one id per row of {npy.name} ({dims[0] if dims else 0} rows)")
    dim = len(values) // max(len(names), 1)
    return [str(n) for n in names], [list(values[i * dim : (i + 1) * dim]) for i in range(len(names))]

