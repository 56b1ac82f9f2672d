"""Red-team pass 37 (11aeb3f: pass 36's fixes attacked by class): each finding reproduced, marked
``xfail(strict=True)`` with its id while it stands, beside controls that pass today (notes: /work/notes/redteam37.md).

TWIN2 (the twin's file names are taken from the twin itself; FALSE PASS of the one lock check, TWIN1's class): the
twin is held to what Kernodeck's writer makes for the lock, "each file's URL, size and upload time taken from the
twin" and placed by its sha256, the file's ``name`` too. So the pairing of a file's name (what a PEP 751 installer
selects by: its wheel tags) with its bytes (URL and sha256) is never held: numpy's cp311 manylinux entry given the
URL, size, upload time and sha256 of the cp312 wheel (and the cp312 entry the cp311 one's) keeps the same names, the
same set of hashes, the same order, and ``nox -s lock -- --check`` says ``ok`` (real session, rc 0); rebuild and
verify's lock-check pass it too. ``Pylock.select()`` on linux x86_64 CPython 3.11 then takes the entry named
``numpy-2.4.6-cp311-…`` whose URL is the cp312 wheel: an installer of the twin installs another Python's binary
(whose hash the lock allows, so its hash check passes). Two wheels both fit for the platform (regex ships two
cp311 x86_64 wheels) swap silently. CONTROL1: a hash of another package put in numpy's entry is refused.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from kernodeck.lock import check
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.project import ROOT

PLATFORM = "cp311-linux_x86_64-cpu"
PLAT = parse_platform_id(load_project(ROOT), PLATFORM)
CP311 = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
CP312 = "numpy-2.4.6-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
REGEX = "regex-2026.11.19-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"


def _bytes_of(text: str, name: str) -> str:
    """The part of a file entry that says which bytes it is (url, upload time, size, hashes), by the file's name."""
    found = re.search(r'\{name = "' + re.escape(name) + r'", (url = .*?\}\})', text)
    assert found is not None, name
    return found.group(1)


def _twin(tmp_path: Path, edit: str) -> tuple[Path, Path]:
    """The committed lock and its twin, copied, the twin edited as ``edit`` says."""
    target = tmp_path / f"{PLATFORM}.txt"
    twin = tmp_path / f"pylock.{PLATFORM}.toml"
    shutil.copy2(ROOT / "lockfiles" / target.name, target)
    original = (ROOT / "lockfiles" / twin.name).read_text(encoding="utf-8")
    mine, other = _bytes_of(original, CP311), _bytes_of(original, CP312 if edit == "swapped" else REGEX)
    if edit == "swapped":  # the two entries keep their names and places, each given the other's bytes
        text = original.replace(mine, "\0").replace(other, mine).replace("\0", other)
    else:  # control: numpy's cp311 entry given regex's bytes (a hash the lock does not allow numpy)
        text = original.replace(mine, other, 1)
    assert text != original, edit
    twin.write_text(text, encoding="utf-8")
    return target, twin


def _taken(twin: Path) -> tuple[str, str]:
    """The numpy file a PEP 751 installer takes from the twin on this machine (linux x86_64, CPython 3.11): its name
    and its URL."""
    data = Pylock.from_dict(tomllib.loads(twin.read_text(encoding="utf-8")))
    ((name, url),) = [(str(f.name), str(f.url)) for package, f in data.select() if package.name == "numpy"]
    return name, url


def test_twin2_premise_the_installer_takes_the_cp312_bytes_under_the_cp311_name(tmp_path: Path) -> None:
    _, twin = _twin(tmp_path, "swapped")
    name, url = _taken(twin)
    assert name == CP311 and url.endswith("/" + CP312), (name, url)


@pytest.mark.xfail(strict=True, reason="TWIN2: a file's name is taken from the twin, never held to its bytes")
def test_twin2_a_file_named_for_other_bytes_is_refused(tmp_path: Path) -> None:
    target, twin = _twin(tmp_path, "swapped")
    assert check.twin_disagreements(target, twin, PLAT) != []


def test_control1_a_hash_of_another_package_in_numpys_entry_is_refused(tmp_path: Path) -> None:
    target, twin = _twin(tmp_path, "foreign")
    found = check.twin_disagreements(target, twin, PLAT)
    assert any("other hashes" in line for line in found), found
