"""rewritten: the bar on the application's earlier files, decided at the read by what happened to each file."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernodeck.inenv import paths, rewritten


@pytest.fixture(autouse=True)
def _no_bar() -> Iterator[None]:
    yield
    rewritten.bar(())


def _memo(tmp_path: Path) -> str:
    memo = tmp_path / "memo.bin"
    memo.write_bytes(b"earlier results")
    return str(memo)


def test_an_earlier_file_is_refused_until_its_bytes_are_replaced(tmp_path: Path) -> None:
    memo = _memo(tmp_path)
    assert not rewritten.refused(memo)  # no bar: no rerun now
    rewritten.bar([memo])
    assert rewritten.refused(memo)
    rewritten.replacing(memo)  # announced: nothing written yet
    assert rewritten.refused(memo)
    with open(memo, "wb") as f:  # written: the rerun's own, the same size
        f.write(b"rerun's results")
    assert not rewritten.refused(memo)
    rewritten.bar(())
    assert not rewritten.refused(memo)


def test_a_changed_state_is_not_enough(tmp_path: Path) -> None:
    """Moved by a touch, or changed with no replacement announced: its earlier bytes are still there."""
    memo = _memo(tmp_path)
    rewritten.bar([memo])
    with open(memo, "ab") as f:  # appended: not announced as a replacement
        f.write(b"!")
    assert rewritten.refused(memo)
    rewritten.replacing(memo)
    assert not rewritten.refused(memo)  # the control: announced and changed
    rewritten.touched(paths.state(memo))
    assert rewritten.refused(memo)


def test_an_earlier_file_under_another_name_is_refused_and_a_new_one_at_its_name_is_not(tmp_path: Path) -> None:
    memo = _memo(tmp_path)
    rewritten.bar([memo])
    old = str(tmp_path / "old.bin")
    rewritten.replacing(old)
    os.replace(memo, old)  # a rename moves no mtime: the bar follows the inode
    assert rewritten.refused(old)
    rewritten.replacing(memo)
    Path(memo).write_bytes(b"new")
    assert not rewritten.refused(memo)


def test_the_bar_lets_the_file_clock_pass_the_newest_earlier_mtime(tmp_path: Path) -> None:
    """A rewrite in the rerun, however soon and of the same size, leaves another mtime."""
    memo = _memo(tmp_path)
    start = time.monotonic()
    rewritten.bar([memo])
    assert time.clock_gettime_ns(rewritten._COARSE) > os.stat(memo).st_mtime_ns
    assert time.monotonic() - start < 0.5


def test_times_set_after_new_bytes_leave_them_new_and_a_touch_of_the_old_ones_does_not(tmp_path: Path) -> None:
    """shutil.copy2 onto an earlier file's name: its bytes written, then its times set back to the source's (which the
    bar's may equal) and its mode set: new bytes (red-team pass 19 FF4). An announcement that replaced nothing, then
    a touch: the old bytes (pass 18 FP4)."""
    memo = _memo(tmp_path)
    bar_state = paths.state(memo)
    assert bar_state is not None
    rewritten.bar([memo])
    rewritten.replacing(memo)
    Path(memo).write_bytes(b"earlier results")  # the same bytes, copied again: the rerun's own
    rewritten.touched(paths.state(memo))  # copystat: utime back to the source's times
    os.utime(memo, ns=(bar_state[2], bar_state[2]))
    rewritten.touched(paths.state(memo))  # then chmod: size and mtime the bar's again
    os.chmod(memo, 0o644)
    assert not rewritten.refused(memo)
    other = tmp_path / "other.bin"
    other.write_bytes(b"earlier results")
    rewritten.bar([str(other)])
    rewritten.replacing(str(other))  # announced (an opener that opens it to read): nothing replaced
    rewritten.touched(paths.state(str(other)))
    os.utime(other, ns=(1, 1))
    assert rewritten.refused(str(other))
