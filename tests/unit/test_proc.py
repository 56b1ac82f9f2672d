"""kernodeck/_proc.py: the sweep of a command's marked processes (``stop_carrying``): each held by a pidfd, nothing
left stopped whatever interrupts it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernodeck import _proc

_MARK = "KERNODECK_TEST_SWEEP"


def _marked(tmp_path: Path, value: str) -> subprocess.Popen[bytes]:
    """A process carrying ``_MARK=value`` that says when it is up."""
    up = tmp_path / f"up-{value}"
    proc = subprocess.Popen([sys.executable, "-c", f"open({str(up)!r}, 'w').close()\nimport time\ntime.sleep(60)"],
                            env={"PATH": "/usr/bin:/bin", _MARK: value})
    for _ in range(200):
        if up.exists():
            return proc
        time.sleep(0.02)
    raise AssertionError("the marked process did not start")


def _state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    return text[text.rindex(")") + 2]


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_a_marked_process_is_stopped_then_killed_and_another_mark_is_left(tmp_path: Path) -> None:
    proc, other = _marked(tmp_path, "a"), _marked(tmp_path, "b")
    try:
        assert _proc.stop_carrying(_MARK, "a") == (proc.pid,)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None and _state(other.pid) in "SR"  # control: another value's process runs on
    finally:
        other.kill()
        other.wait()


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc")
def test_an_interrupt_during_the_sweep_leaves_nothing_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C after the first process was stopped (the next scan interrupted): what was stopped is killed, not left
    stopped forever."""
    proc = _marked(tmp_path, "a")
    real, real_send, sent = _proc._carries, _proc.send, list[int]()

    def interrupted(pid: int, needle: bytes) -> bool:
        if signal.SIGSTOP in sent:  # it was stopped (sent: on a loaded machine its state says T only later)
            raise KeyboardInterrupt
        return real(pid, needle)

    def send(pid: int, fd: int | None, sig: int) -> bool:
        sent.extend([sig] if pid == proc.pid else [])
        return real_send(pid, fd, sig)

    monkeypatch.setattr(_proc, "_carries", interrupted)
    monkeypatch.setattr(_proc, "send", send)
    try:
        with pytest.raises(KeyboardInterrupt):
            _proc.stop_carrying(_MARK, "a")
        assert proc.wait(timeout=10) == -signal.SIGKILL  # killed; without the finally it stayed stopped (T)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="pidfd (Linux 5.3+)")
def test_a_held_process_that_ended_gets_no_signal_whoever_takes_its_pid() -> None:
    """The pidfd refers to the process it was opened for: once that one is reaped, a signal through it reaches none
    (a process given the same pid after is never stopped in its place); control: while it lives, it does."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    fd = _proc.hold(proc.pid)
    assert fd is not None
    try:
        assert _proc.send(proc.pid, fd, 0)
        proc.kill()
        proc.wait()
        assert not _proc.send(proc.pid, fd, 0) and not _proc.send(proc.pid, fd, signal.SIGSTOP)
    finally:
        os.close(fd)
