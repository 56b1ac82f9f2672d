"""A run against its reference (:func:`vs_reference`, the report's "What differs from the reference"): the
inventory, the system chain and the settings read back, as verify writes them into every run's folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernodeck.inenv.protocol import SYSTEM_FILES  # the system's files and kernel state the windows read

if TYPE_CHECKING:
    from kernodeck.env.inventory import InventoryDiff


def flat(data: dict[str, Any]) -> dict[str, Any]:
    """One level of nesting flattened (``cpu.isa_flags``), so a delta names the field that differs, not the record."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and "unavailable" not in value:
            out.update({f"{key}.{sub}": inner for sub, inner in value.items()})
        else:
            out[key] = value
    return out


# System fields that name this run, not the chain it ran on.
_NOT_CHAIN = ("python_executable", "loaded_libraries", "python_build", "cpu_count")
VARIABLES = "variables"  # the in-env processes' variables (kernodeck/env/start.py), compared by name on their own
UNSET = "(unset)"


def _variables(ref: dict[str, Any], run: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each variable set differently here and in the reference (one side unset included), by name."""
    a, b = ref.get(VARIABLES), run.get(VARIABLES)
    if not isinstance(a, dict) or not isinstance(b, dict):
        return {}
    return {name: {"reference": a.get(name, UNSET), "this run": b.get(name, UNSET)}
            for name in sorted({*a, *b}) if a.get(name, UNSET) != b.get(name, UNSET)}


READ_BY_ONE = "system_files_read_by_one"  # read in one of the two runs only: named, not compared


def _system_files(ref: dict[str, Any], run: dict[str, Any], out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The system's files both runs read whose values differ (red-team pass 57, NOISE1: a file one run never read, a
    run stopped before its windows say, is no changed value; a value recorded as read and not compared, a boot id,
    is never one either: it reads the same on both sides). Those read by one side only go to ``out[READ_BY_ONE]``."""
    a, b = ref.get(SYSTEM_FILES), run.get(SYSTEM_FILES)
    a, b = (a if isinstance(a, dict) else {}), (b if isinstance(b, dict) else {})
    one = {"the reference": sorted(set(a) - set(b)), "this run": sorted(set(b) - set(a))}
    if any(one.values()):
        out[READ_BY_ONE] = one
    return {f"{SYSTEM_FILES}.{k}": {"reference": a[k], "this run": b[k]} for k in sorted(set(a) & set(b))
            if a[k] != b[k]}


UNFINGERPRINTED = "records_without_digest"
SETTINGS = "settings"  # the settings read back in effect (settings.json): torch's thread counts first
_SETTINGS_FIRST = ("torch.num_threads", "torch.num_interop_threads")


def _unfingerprinted(reference: Path, manifest: dict[str, Any]) -> list[str]:
    """The reference's records (inventory.txt, system.json, settings.json) its manifest holds no digest of: one made
    before they were fingerprinted (manifest.RECORDS), whose records no id covers."""
    from kernodeck.runformat.manifest import RECORD_FILES, record_files

    covered = record_files(manifest)
    return [name for name in RECORD_FILES.values() if (reference / name).is_file() and name not in covered]


def _settings(reference: Path, run: Path) -> dict[str, dict[str, Any]] | None:
    """Each setting read back differently here and in the reference (red-team pass 54, THR1: a run on fewer CPUs
    computes with another thread count, so other last bits); None when the reference kept no settings."""
    ref_file, run_file = reference / "settings.json", run / "settings.json"
    if not ref_file.is_file() or not run_file.is_file():
        return None
    a = json.loads(ref_file.read_text(encoding="utf-8"))
    b = json.loads(run_file.read_text(encoding="utf-8"))
    names = sorted({*a, *b}, key=lambda n: (n not in _SETTINGS_FIRST, n))
    return {n: {"reference": a.get(n, UNSET), "this run": b.get(n, UNSET)} for n in names
            if a.get(n, UNSET) != b.get(n, UNSET)}


def vs_reference(
    reference: Path, run: Path, *, inventory_delta: InventoryDiff | None = None, system: dict[str, Any] | None = None,
    manifest: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """This run's inventory and system chain against the reference's (as recorded beside the reference).

    A caller that already has them passes the run's ``inventory_delta`` against the reference's inventory and its
    ``system`` record (the system step's details): neither is then computed or read again from ``run``. The
    reference's ``manifest`` as the run read it says which of its records it fingerprints (none given: not said).
    """
    from kernodeck.env.inventory import diff, parse_freeze

    out: dict[str, Any] = {}
    unproven = _unfingerprinted(reference, manifest) if manifest is not None else []
    if unproven:  # read below all the same, and said so (red-team pass 52, REFREC2)
        out[UNFINGERPRINTED] = unproven
    ref_inv, inv = reference / "inventory.txt", run / "inventory.txt"
    if inventory_delta is not None:
        out["inventory"] = inventory_delta.as_dict()
    elif ref_inv.exists() and inv.exists():
        out["inventory"] = diff(
            parse_freeze(ref_inv.read_text(encoding="utf-8")), parse_freeze(inv.read_text(encoding="utf-8"))
        ).as_dict()
    ref_sys, sys_ = reference / "system.json", run / "system.json"
    if ref_sys.exists() and (system is not None or sys_.exists()):
        raw_a = json.loads(ref_sys.read_text(encoding="utf-8"))
        raw_b = system if system is not None else json.loads(sys_.read_text(encoding="utf-8"))
        a = {k: v for k, v in flat(raw_a).items() if k.split(".", 1)[0] not in (VARIABLES, SYSTEM_FILES)}
        b = {k: v for k, v in flat(raw_b).items() if k.split(".", 1)[0] not in (VARIABLES, SYSTEM_FILES)}
        out["system"] = {
            k: {"reference": a[k], "this run": b.get(k)}
            for k in a
            if k not in _NOT_CHAIN and a[k] != b.get(k)
        }
        out["system"].update(_system_files(raw_a, raw_b, out))
        out["not_in_reference"] = sorted(k for k in b if k not in a and k not in _NOT_CHAIN)
        if isinstance(raw_a.get(VARIABLES), dict) and isinstance(raw_b.get(VARIABLES), dict):
            out[VARIABLES] = _variables(raw_a, raw_b)
        elif isinstance(raw_b.get(VARIABLES), dict):
            out["not_in_reference"].append(VARIABLES)
    settings = _settings(reference, run)
    if settings is not None:
        out[SETTINGS] = settings
    elif (run / "settings.json").is_file():
        out.setdefault("not_in_reference", []).append(SETTINGS)
    return out
