"""The lock diff on synthetic locks: every kind of change, the stack first, digests before and after."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernodeck.errors import LockfileError
from kernodeck.lock import lockdiff, lockfile
from kernodeck.lock.lockdiff import Kind
from tests.helpers.lockpair import NEW, OLD, write_lock


def test_each_kind_with_old_and_new_versions_and_the_stack_first(tmp_path: Path) -> None:
    old = write_lock(tmp_path / "old.txt", OLD, as_of="2026-01-01T00:00:00Z")
    new = write_lock(tmp_path / "new.txt", NEW, as_of="2026-06-01T00:00:00Z", salt={"filelock": "reupload"})
    d = lockdiff.diff_files(old, new)
    got = [(c.name, c.kind, c.old, c.new) for c in d.changes]
    assert got == [
        ("torch", Kind.UPGRADED, "2.12.0", "2.13.0"),
        ("triton", Kind.ADDED, None, "3.5.0"),
        ("filelock", Kind.REFILED, "3.20.0", "3.20.0"),
        ("numpy", Kind.UPGRADED, "2.3.5", "2.4.0"),
        ("scipy", Kind.DOWNGRADED, "1.16.0", "1.15.3"),
        ("six", Kind.REMOVED, "1.16.0", None),
    ]
    assert d.unchanged == 2  # nvidia-cublas, idna
    assert d.old.as_of == "2026-01-01T00:00:00Z" and d.new.as_of == "2026-06-01T00:00:00Z"
    assert d.old.body_digest == lockfile.read(old).first("body-digest") != d.new.body_digest
    text = lockdiff.render_markdown(d)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "→" in line][1:]
    assert rows[0] == "| **torch** | upgraded | 2.12.0 → 2.13.0 |"
    assert rows[1] == "| **triton** | added | — → 3.5.0 |"
    assert "| scipy | downgraded | 1.16.0 → 1.15.3 |" in rows
    assert "| six | removed | 1.16.0 → — |" in rows
    assert d.old.body_digest in text and d.new.body_digest in text
    assert "1 added, 1 removed, 2 upgraded, 1 downgraded, 1 same version, other files, 2 unchanged" in text


def test_version_order_is_pep440_not_text(tmp_path: Path) -> None:
    d = lockdiff.diff_files(write_lock(tmp_path / "a.txt", {"numpy": "2.9.0", "torch": "2.13.0+cpu"}),
                            write_lock(tmp_path / "b.txt", {"numpy": "2.10.0", "torch": "2.13.0rc1"}))
    assert {c.name: c.kind for c in d.changes} == {"numpy": Kind.UPGRADED, "torch": Kind.DOWNGRADED}


def test_the_same_lock_gives_an_empty_diff(tmp_path: Path) -> None:
    d = lockdiff.diff_files(write_lock(tmp_path / "a.txt", OLD), write_lock(tmp_path / "b.txt", OLD))
    assert d.empty and d.unchanged == len(OLD)
    assert "No package changed (7 unchanged)." in lockdiff.render_markdown(d)


def test_a_hand_edited_lock_is_refused_not_diffed(tmp_path: Path) -> None:
    good = write_lock(tmp_path / "a.txt", OLD)
    bad = write_lock(tmp_path / "b.txt", OLD)
    bad.write_text(bad.read_text(encoding="utf-8").replace("numpy==2.3.5", "numpy==2.3.6"), encoding="utf-8")
    with pytest.raises(LockfileError, match="body-digest"):
        lockdiff.diff_files(good, bad)


@pytest.mark.parametrize("name", ["torch", "torchvision", "triton", "pytorch-triton-rocm", "nvidia-cudnn-cu13",
                                  "cuda-bindings"])
def test_the_stack_names(name: str) -> None:
    assert lockdiff.is_stack(name)


@pytest.mark.parametrize("name", ["numpy", "scipy", "sentence-transformers", "pytest"])
def test_other_names_are_not_the_stack(name: str) -> None:
    assert not lockdiff.is_stack(name)
