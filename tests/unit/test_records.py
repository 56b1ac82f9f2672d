"""kernodeck/env/records.py: what the env's RECORDs list, every line of a path held; one dist-info per distribution."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernodeck.env.records import require_one_each
from kernodeck.errors import RebuildFailed

PINS = ["tinyc", "tinyd"]


def _dist_info(site: Path, folder: str, name: str = "") -> None:
    (site / folder).mkdir(parents=True)
    name = name or folder.split("-")[0]
    (site / folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n", encoding="utf-8")


def test_one_dist_info_per_distribution_passes_and_a_second_of_a_name_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    _dist_info(site, "tinyc-1.0.dist-info")
    _dist_info(site, "tinyd-1.0.dist-info")
    require_one_each(tmp_path, PINS)  # control: one each
    _dist_info(site, "TinyC-1.0.dist-info")  # another spelling of the same name: pip would read one of the two
    with pytest.raises(RebuildFailed, match=re.escape("tinyc: TinyC-1.0.dist-info, tinyc-1.0.dist-info (one")):
        require_one_each(tmp_path, PINS)


@pytest.mark.parametrize("folder", ["TINYC-1.0.DIST-INFO", "tinyc-1.0.Dist-Info", "tinyc-1.0.egg-info"])
def test_a_metadata_folder_no_wheel_install_writes_is_refused_alone(tmp_path: Path, folder: str) -> None:
    """importlib.metadata (pip's reader) finds a dist-info whatever the case of its suffix, and .egg-info: alone, such
    a folder is still no wheel's install (pass 77, CASESUFFIX1)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    _dist_info(site, folder)
    with pytest.raises(RebuildFailed, match=re.escape(folder)):
        require_one_each(tmp_path, PINS)


def test_a_folder_of_a_name_the_lock_does_not_pin_or_whose_metadata_says_another_is_refused(tmp_path: Path) -> None:
    """pip check names a distribution by its folder, freeze by its METADATA: a folder tinymissing-1.0.dist-info saying
    Name: tinyc satisfied tinyc's requirement and froze as tinyc (pass 78, NAMEFOLD1)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    _dist_info(site, "tinyc-1.0.dist-info")
    _dist_info(site, "tinymissing-1.0.dist-info", name="tinyc")
    with pytest.raises(RebuildFailed, match=re.escape("tinymissing-1.0.dist-info (not a pin of the lock)")):
        require_one_each(tmp_path, PINS)
    (site / "tinymissing-1.0.dist-info" / "METADATA").unlink()
    (site / "tinymissing-1.0.dist-info").rmdir()
    _dist_info(site, "tinyd-1.0.dist-info", name="tinyc")  # a pin's folder whose METADATA names another
    with pytest.raises(RebuildFailed, match=re.escape("tinyd-1.0.dist-info (its METADATA says tinyc 1.0)")):
        require_one_each(tmp_path, PINS)
