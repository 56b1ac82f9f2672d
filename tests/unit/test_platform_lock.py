"""kernodeck.platform_lock: one run (or lock) of a platform at a time; a second says once that it waits."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from filelock import FileLock

from kernodeck.errors import Busy
from kernodeck.platform_lock import acquire
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.project import ROOT

CPU = parse_platform_id(load_project(ROOT), "cp311-linux_x86_64-cpu")


def test_a_free_lock_is_taken_without_a_word(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    guard = FileLock(str(tmp_path / ".compiling.lock"), timeout=1)
    acquire(guard, CPU, who="lock")
    try:
        assert guard.is_locked
    finally:
        guard.release()
    assert capsys.readouterr().err == ""


def test_a_held_lock_is_waited_for_then_refused_past_the_limit(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / ".compiling.lock")
    held = FileLock(path)
    held.acquire()
    try:
        with pytest.raises(Busy, match=f"another lock of {CPU.id} kept it busy"):
            acquire(FileLock(path, timeout=0.3), CPU, who="lock")
    finally:
        held.release()
    assert capsys.readouterr().err.count(f"another lock of {CPU.id} is running; waiting for it") == 1


def test_a_held_lock_released_meanwhile_is_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(tmp_path / ".compiling.lock")
    taken = threading.Event()

    def other_run() -> None:  # holds the lock for half a second in a thread of its own (file locks are per thread)
        with FileLock(path):
            taken.set()
            threading.Event().wait(0.5)

    thread = threading.Thread(target=other_run)
    thread.start()
    assert taken.wait(30)
    waiting = FileLock(path, timeout=30)
    try:
        acquire(waiting, CPU)
        assert waiting.is_locked
    finally:
        thread.join()
        waiting.release()
    assert "another run of" in capsys.readouterr().err
