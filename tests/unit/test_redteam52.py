"""Red-team pass 52 (notes: /work/notes/redteam52.md): the fixes of passes 50 and 51 attacked as a class through real
sessions (measured there; these tests reproduce each finding without a built env).

TZ1 (an undeclared input read through the time zone exemption: FALSE closed world, verify PASSED; and a changed one
blamed on "the code, data or weights"; inenv/systemfiles.is_data and record, inenv/world._stranger): any regular file
whose real path lies in a folder of the database (``/usr/share/zoneinfo``, ``/etc/zoneinfo``, ...) is the system's,
whatever it holds, however it got there: not only the TZif zones dateutil and zoneinfo read, but a text file planted
there (``/etc/zoneinfo`` does not exist on this machine: the folder is made by anyone with root, which the sessions
have), a hard link to a file elsewhere, the tables (tzdata.zi, zone1970.tab) read as data. Its sha256 goes into the
application step's ``system_files``, and nothing compares that with the reference's record: only ``TZ``,
``/etc/localtime``'s target and the database's version (system.json's ``time_zone``) are compared. Measured in a
real session: checks/app.py's ``run`` adds ``float(open("/etc/zoneinfo/rt52-offset").read())`` to its embeddings
(the file holding ``0.0``), ``reference -- --new``, ``verify -- --no-rebuild``: ``PASSED: 13 passed, 1 skipped``,
the file in the step's ``system_files``; with ``0.01`` written there: ``FAILED at compare`` and "What differs from
the reference": "system chain: the same as the reference's", **Likely cause**: "look at the code, data or weights
(reference code: same as the reference's)" (the two records hold different sha256 for the file; never compared). A
hard link ``/etc/zoneinfo/rt52-offset`` -> ``/opt/rt52/offset``: PASSED too. CONTROL (measured): a symbolic link
there to ``/opt/rt52/offset``: "FAILED at application: the entry read files that are not declared sources:
/opt/rt52/offset". Fix idea (by class: an exemption names what it exempts, and the exempted is compared like the
rest of the chain): a file of the database only when it is one (TZif magic, a zone name under the folder; the tables
by name), and the {file: sha256} it read compared with the reference's record (a named difference, in "What differs"
and the likely cause); a file there that is no zone stays undeclared.

TZ2 (a zone change unnamed: "the same as the reference's" where the zone differs; inenv/systemfiles.chain): the system
record names ``/etc/localtime`` by the file it links to. Where it is a regular file (a copy of the zone: some images
``cp`` the zone there instead of linking it), the record holds "/etc/localtime" whatever zone it holds, and glibc reads
its bytes natively (``time.localtime``, ``time.strftime``, dateutil's ``tzlocal``): two machines in different zones
have the same ``time_zone``. Measured here by the record only (this machine's /etc/localtime is a link; changing it
would touch other sessions). Fix idea: record the sha256 of /etc/localtime's bytes (and of ``TZ``'s file when ``TZ``
names one) beside its target. CONTROL: two links to different zones are named apart.

REFREC2 (REFREC1's fix stops at references made after it, and says nothing where it stops; runformat/manifest
.record_files, inconsistency, refdelta.vs_reference): a reference whose manifest holds no ``inventory_sha256`` /
``system_sha256`` (every history entry of this repository, every user's reference made before a0ab098) has its records
checked by nothing, and nothing says so. Measured in a real session: the history entry sha256-05c1... (with variables
and time_zone) copied over dossier/reference, its system.json given ATEN_CPU_CAPABILITY=default, OMP_NUM_THREADS=1
and torch_cpu_capability DEFAULT, ``ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 verify -- --no-rebuild``: PASSED,
"system chain: the same as the reference's", "variables ...: the same as the reference's" (the same run against the
entry as committed named ``torch_cpu_capability: AVX512 -> DEFAULT`` and both variables). The rollback is named; that
its records are unfingerprinted is not. Fix idea: where a reference's manifest holds no digest of a record it names,
"What differs" (and the reference step's details) says so ("system.json: not fingerprinted: a reference made before
its records were"), and a history entry or a compare between references reports the same.

NPY2 (an honest output refused by its byte order: a named false failure; inenv/arrays.check_structure): the declared
dtype is compared with ``str(arr.dtype)``, which is ``'>f4'`` for a big-endian float32 (``np.frombuffer(buf, '>f4')``
of a network or FITS format, saved as is): "dtype >f4, expected float32". Measured by the unit only. Fix idea: compare
``arr.dtype.name`` (or refuse a non-native order by name, with a TIP ``astype``), the same rule in every reader;
"bitwise" (tolerance.same_bits) already tells the orders apart. CONTROL: native float32 passes, float64 is refused.

Fixed: TZ1 (only a compiled zone, by its magic, or the database's index files at a folder's top are the system's;
the files the application read there go into system.json, compared with the reference's file by file), TZ2
(/etc/localtime and a TZ naming a file recorded by their bytes), REFREC2 (a reference whose records carry no digest
is said so in "What differs from the reference"), NPY2 (the dtype by name; an output read in the machine's order).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import systemfiles
from kernodeck.inenv._common import CheckFailed
from kernodeck.inenv.arrays import check_structure
from kernodeck.runformat.manifest import inconsistency, record_files
from kernodeck.runformat.refdelta import vs_reference

# A TZif file's first bytes (RFC 8536): the version 2 header of a zone with no transitions.
_TZIF = b"TZif2" + b"\0" * 15 + b"\0\0\0\0" * 6
_UTC = Path("/usr/share/zoneinfo/UTC")


def _zone_bytes(name: str) -> bytes:
    path = Path("/usr/share/zoneinfo") / name
    return path.read_bytes() if path.is_file() else _TZIF + name.encode()


# TZ1 -----------------------------------------------------------------------------------------------------------------
@pytest.fixture
def zone_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of the database as systemfiles.FOLDERS holds them (a real path ending in os.sep)."""
    folder = tmp_path / "zoneinfo"
    folder.mkdir()
    monkeypatch.setattr(systemfiles, "FOLDERS", (os.path.realpath(folder) + os.sep,))
    return folder


def test_tz1_premise_a_planted_text_file_and_a_hard_link_there_are_the_systems(tmp_path: Path,
                                                                                zone_folder: Path) -> None:
    planted = zone_folder / "rt52-offset"
    planted.write_text("0.0\n", encoding="utf-8")
    assert os.path.realpath(planted).startswith(systemfiles.FOLDERS)  # in the database's folder: the old rule's test
    outside = tmp_path / "project" / "offset"
    outside.parent.mkdir()
    outside.write_text("0.01\n", encoding="utf-8")
    os.link(outside, zone_folder / "rt52-linked")
    assert os.path.realpath(zone_folder / "rt52-linked").startswith(systemfiles.FOLDERS)  # a project file, renamed
    assert not systemfiles.is_data(str(planted)) and not systemfiles.is_data(str(zone_folder / "rt52-linked"))  # fixed


def test_tz1_a_file_there_that_is_no_zone_is_not_the_systems(zone_folder: Path) -> None:
    planted = zone_folder / "rt52-offset"
    planted.write_text("0.0\n", encoding="utf-8")
    assert not systemfiles.is_data(str(planted))


def test_tz1_control_a_zone_is_the_systems_and_a_link_out_is_not(tmp_path: Path, zone_folder: Path) -> None:
    (zone_folder / "UTC").write_bytes(_zone_bytes("UTC"))
    assert systemfiles.is_data(str(zone_folder / "UTC"))
    outside = tmp_path / "offset"
    outside.write_text("0.0\n", encoding="utf-8")
    (zone_folder / "rt52-link").symlink_to(outside)
    assert not systemfiles.is_data(str(zone_folder / "rt52-link"))  # judged by the file it opens


# TZ2 -----------------------------------------------------------------------------------------------------------------
def _chain_with(monkeypatch: pytest.MonkeyPatch, localtime: Path) -> dict[str, object]:
    monkeypatch.setattr(systemfiles, "LOCALTIME", str(localtime))
    monkeypatch.delenv("TZ", raising=False)
    return systemfiles.chain()


def test_tz2_premise_two_zones_copied_to_localtime_are_one_record(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert _zone_bytes("UTC") != _zone_bytes("Europe/Berlin")  # two zones, as glibc reads them
    localtime = tmp_path / "localtime"
    localtime.write_bytes(_zone_bytes("UTC"))
    here = _chain_with(monkeypatch, localtime)
    localtime.write_bytes(_zone_bytes("Europe/Berlin"))
    there = _chain_with(monkeypatch, localtime)
    assert there["localtime"] == here["localtime"]  # the name alone: "the same as the reference's" before the fix


def test_tz2_a_copied_zone_is_named_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    localtime = tmp_path / "localtime"
    localtime.write_bytes(_zone_bytes("UTC"))
    here = _chain_with(monkeypatch, localtime)
    localtime.write_bytes(_zone_bytes("Europe/Berlin"))
    assert _chain_with(monkeypatch, localtime) != here


def test_tz2_control_two_links_to_different_zones_are_named_apart(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("UTC", "Berlin"):
        (tmp_path / name).write_bytes(_zone_bytes(name if name == "UTC" else "Europe/Berlin"))
    localtime = tmp_path / "localtime"
    localtime.symlink_to(tmp_path / "UTC")
    here = _chain_with(monkeypatch, localtime)
    localtime.unlink()
    localtime.symlink_to(tmp_path / "Berlin")
    assert _chain_with(monkeypatch, localtime) != here


# REFREC2 -------------------------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "dossier" / "reference"


def _copy(source: Path, folder: Path) -> Path:
    folder.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copyfile(path, folder / path.name)
    return folder


def _old_reference(tmp_path: Path) -> Path:
    """A history entry made before the records were fingerprinted, holding variables (as this repository's are)."""
    for entry in sorted((REFERENCE / "history").iterdir()):
        manifest = tomllib.loads((entry / "manifest.toml").read_text(encoding="utf-8"))
        system = json.loads((entry / "system.json").read_text(encoding="utf-8"))
        if not record_files(manifest) and isinstance(system.get("variables"), dict):
            return _copy(entry, tmp_path / "old")
    pytest.skip("no history entry without record digests and with variables")


def _edit_variables(folder: Path) -> Path:
    system = json.loads((folder / "system.json").read_text(encoding="utf-8"))
    system["variables"] = {**system["variables"], "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    (folder / "system.json").write_text(json.dumps(system, indent=2) + "\n", encoding="utf-8")
    return folder


def _run_of(tmp_path: Path, reference: Path) -> Path:
    """A run folder whose system record is ``reference``'s, run with the two variables set."""
    run = tmp_path / "run"
    run.mkdir()
    system = json.loads((reference / "system.json").read_text(encoding="utf-8"))
    system["variables"] = {**system["variables"], "ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
    (run / "system.json").write_text(json.dumps(system), encoding="utf-8")
    shutil.copyfile(reference / "inventory.txt", run / "inventory.txt")
    return run


def test_refrec2_premise_an_old_references_edited_record_passes_every_check(tmp_path: Path) -> None:
    old = _old_reference(tmp_path)
    run = _run_of(tmp_path, old)
    assert set(vs_reference(old, run)["variables"]) == {"ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS"}  # named
    _edit_variables(old)
    assert inconsistency(old) == ""  # no digest to miss
    assert vs_reference(old, run)["variables"] == {}  # "the same as the reference's"


def test_refrec2_an_unfingerprinted_record_is_named_where_it_is_read(tmp_path: Path) -> None:
    old = _edit_variables(_old_reference(tmp_path))
    manifest = tomllib.loads((old / "manifest.toml").read_text(encoding="utf-8"))  # as the run read it
    assert "system.json" in json.dumps(vs_reference(old, _run_of(tmp_path, old), manifest=manifest))


def test_refrec2_control_the_current_reference_names_its_edited_record(tmp_path: Path) -> None:
    current = _copy(REFERENCE, tmp_path / "current")
    assert set(record_files(tomllib.loads((current / "manifest.toml").read_text(encoding="utf-8")))) == {
        "inventory.txt", "system.json", "settings.json"}
    assert inconsistency(current) == ""
    assert "system.json" in inconsistency(_edit_variables(current))


# NPY2 ----------------------------------------------------------------------------------------------------------------
def _float32(order: str) -> object:
    import numpy as np

    return np.arange(6, dtype=f"{order}f4").reshape(3, 2)


def test_npy2_premise_a_big_endian_float32_is_float32_by_name_not_by_str() -> None:
    arr: Any = _float32(">")
    assert arr.dtype.name == "float32" and str(arr.dtype) == ">f4"


def test_npy2_a_big_endian_float32_output_is_float32() -> None:
    check_structure(_float32(">"), dtype="float32", rows=3, shape=(3, 2), what="embeddings", layer="output")


def test_npy2_control_native_float32_passes_and_float64_is_refused() -> None:
    import numpy as np

    check_structure(_float32("<"), dtype="float32", rows=3, shape=(3, 2), what="embeddings", layer="output")
    with pytest.raises(CheckFailed, match="dtype float64, expected float32"):
        check_structure(np.zeros((3, 2)), dtype="float32", rows=3, shape=(3, 2), what="embeddings", layer="output")


def test_npy2_an_output_file_is_read_in_the_machines_byte_order_with_its_values(tmp_path: Path) -> None:
    import numpy as np

    from kernodeck.inenv.arrays import read_npy

    arr: Any = _float32(">")
    np.save(tmp_path / "x.npy", arr)
    back = read_npy(tmp_path / "x.npy")
    assert back.dtype.isnative and str(back.dtype) == "float32" and np.array_equal(back, arr)
