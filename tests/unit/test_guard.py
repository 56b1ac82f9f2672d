"""guard.py: what a change is refused at once on, here the kernel's and other processes' state."""

from __future__ import annotations

import os

import pytest

from kernodeck.inenv import guard


@pytest.mark.parametrize("raw", ["/proc/sys/kernel/domainname", "//proc/sys/kernel/domainname", "/proc/./sys/kernel/x",
                                 "/proc/self/root/proc/sys/kernel/domainname", "/sys/kernel/x", "/proc/1/fd/0"])
def test_a_change_to_the_kernels_or_another_processs_state_is_refused_however_spelled(raw: str) -> None:
    """Reads under /proc and /sys are trusted as the system's state: a change there would reach a later call unseen
    (red-team pass 34, FP1 and FP2a); the path as written and where it lands are both judged."""
    refusal = guard.changed(raw, "opened to write")
    assert refusal is not None and "the kernel's or another process's state" in refusal[0]


@pytest.mark.parametrize("raw", ["/proc/self/comm", "/proc/thread-self/comm", "/tmp/kernodeck-guard-control"])
def test_a_change_to_this_processs_own_state_or_an_ordinary_file_is_not(raw: str) -> None:
    assert guard.changed(raw, "opened to write") is None
    assert guard.changed(f"/proc/{os.getpid()}/comm", "opened to write") is None
