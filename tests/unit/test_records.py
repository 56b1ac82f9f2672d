"""kernodeck/env/records.py: what the env's RECORDs list, every line of a path held; one dist-info per distribution."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import pytest

from kernodeck.env.envfiles import Findings, proven_digests
from kernodeck.env.records import require_one_each, sha256_of
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


def _record(site: Path, lines: list[str]) -> None:
    _dist_info(site, "tinyw-1.0.dist-info")
    (site / "tinyw-1.0.dist-info" / "RECORD").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_sha256_of_gives_the_record_digest_as_hex_under_a_folder_and_none_a_second_line_contradicts(
        tmp_path: Path) -> None:
    """The digests the in-env side may take for a package's files (kernodeck/inenv/locate.py): sha256 lines only,
    under the folder asked for, and none for a path two lines give different digests."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    digest = hashlib.sha256(b"weights").digest()
    other = hashlib.sha256(b"other").digest()
    b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    _record(site, [f"tinyw/model/w.bin,sha256={b64},7", f"tinyw/other.py,sha256={b64},7",
                   "tinyw/model/md5.bin,md5=abc,1", "tinyw/model/none.bin,,",
                   f"tinyw/model/twice.bin,sha256={b64},7",
                   f"tinyw/model/twice.bin,sha256={base64.urlsafe_b64encode(other).rstrip(b'=').decode()},5"])
    found = sha256_of(tmp_path, "lib/python3.11/site-packages", "TinyW", "lib/python3.11/site-packages/tinyw/model/")
    assert found == {"lib/python3.11/site-packages/tinyw/model/w.bin": digest.hex()}
    assert sha256_of(tmp_path, "lib/python3.11/site-packages", "tinyx", "lib/") == {}  # another distribution's: none


def test_proven_digests_are_given_only_for_an_env_whose_every_file_was_shown_the_builds(tmp_path: Path) -> None:
    """envfiles.proven_digests: each regular file's stat as the check saw it and its RECORD digest; nothing when the
    check found any file not the build's (the in-env side then hashes every file)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    digest = hashlib.sha256(b"weights").digest()
    _record(site, [f"tinyw/model/w.bin,sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},7",
                   f"tinyw/model/link.bin,sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()},7"])
    rel = "lib/python3.11/site-packages/tinyw/model/w.bin"
    stats = {rel: ["f", 7, 1, 2, 3, 0o100644, 1, ""],
             "lib/python3.11/site-packages/tinyw/model/link.bin": ["l", 5, 1, 2, 4, 0o120777, 1, "w.bin"]}
    clean = Findings(site="lib/python3.11/site-packages", stats=stats)
    folder = "lib/python3.11/site-packages/tinyw/"
    assert proven_digests(tmp_path, clean, "tinyw", folder) == {rel: [7, 1, 2, 3, digest.hex()]}  # no link's
    for problem in ({"foreign": ["x"]}, {"changed": {rel: "ctime_ns"}}, {"added": ["y"]}, {"snapshot": "missing"}):
        found = Findings(site="lib/python3.11/site-packages", stats=stats, **problem)  # type: ignore[arg-type]
        assert proven_digests(tmp_path, found, "tinyw", folder) == {}, problem
