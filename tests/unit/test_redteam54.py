"""Red-team pass 54 (notes: /work/notes/redteam54.md): values the application reads from the kernel's pseudo file
systems, trusted as the system's state and recorded nowhere.

PROC1 (an undeclared input through the pseudo file systems' trust, recorded nowhere: FALSE closed world, verify
PASSED; and a changed one blamed on the code; inenv/paths.trusted, inenv/world._stranger, inenv/system.collect):
``paths.PSEUDO`` trusts every file under ``/proc`` (the own process's and the system's) and ``/sys`` as "the system's
state (the system step records it)", but the system step records a fixed list (kernel release, cpuinfo's identity,
the driver, ...): a value the application reads there itself (``/proc/sys/kernel/domainname``, ``hostname``, any
sysctl, ``/sys/fs/cgroup/cpu.max``, a device's ``/sys/class/...`` attribute) goes into no record. Measured in a real
session: checks/app.py's ``criterion`` fails when ``/proc/sys/kernel/domainname`` is not ``(none)``; ``reference --
--new``, ``verify -- --no-rebuild``: ``PASSED: 13 passed, 1 skipped``, no file of the run or the reference names
domainname (grep). Set to ``rt54`` (root writes the sysctl): ``FAILED at criterion (layer: comparison)``, "What
differs from the reference": "system chain: the same as the reference's", **Likely cause**: "look at the code, data
or weights (reference code: same as the reference's)". Fix idea (by class, as systemfiles does for the zone files): a
read under ``/proc/sys``, ``/sys`` (and ``/proc`` files that are the system's, not the process's own) inside a window
is recorded by the step whose window read it, with its bytes' sha256 (a pseudo file is small: its value read once at
the window's end), gathered into system.json and compared with the reference's as the system chain is; the process's
own ``/proc/self`` files (its status, maps, fds) stay unrecorded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import paths, steprun, systemfiles, world
from kernodeck.inenv._common import Context
from kernodeck.inenv.protocol import SYSTEM_FILES, StepKey

_SYSCTL = "/proc/sys/kernel/domainname"
needs_sysctl = pytest.mark.skipif(not Path(_SYSCTL).is_file(), reason="no /proc/sys/kernel/domainname here")
_UTC = Path("/usr/share/zoneinfo/Etc/UTC")


def _ctx(tmp_path: Path) -> Context:
    root = tmp_path / "project"
    root.mkdir(exist_ok=True)
    return Context(config={"project_root": str(root)}, out=tmp_path / "run")


def _stranger(ctx: Context, path: str) -> dict[str, str] | None:
    """The closed world's judgement of one file read, nothing declared."""
    return world._stranger(ctx, {}, (os.path.realpath(ctx.out) + os.sep,), path)


@pytest.fixture
def bare_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """steprun.run without the invariants held after a step (libraries, settings: not what is tested here)."""
    monkeypatch.setattr(steprun, "held", lambda *_args, **_kwargs: None)


def _criterion_reading(ctx: Context, path: str) -> dict[str, Any]:
    """The criterion step as the runner runs it, its window reading ``path`` (the judgement world's window makes)."""
    def criterion() -> dict[str, Any]:
        assert _stranger(ctx, path) is None  # accepted: trusted or the system's file
        return {"passed": True}

    return steprun.run(ctx, "criterion", criterion)


@needs_sysctl
def test_proc1_premise_a_sysctl_read_by_the_criterion_is_trusted_as_the_systems_state(
        tmp_path: Path, bare_steps: None) -> None:
    assert paths.trusted(_SYSCTL)  # paths.PSEUDO: "the system's state (the system step records it)"
    ctx = _ctx(tmp_path)
    result = _criterion_reading(ctx, _SYSCTL)
    assert result[StepKey.STATUS] == "passed"
    assert _SYSCTL not in ctx.state.get(SYSTEM_FILES, {})  # before a fix: noted nowhere in the process either


@needs_sysctl
@pytest.mark.xfail(strict=True, reason="PROC1: a /proc/sys value the application reads is in no record")
def test_proc1_the_step_whose_window_read_a_sysctl_names_it(tmp_path: Path, bare_steps: None) -> None:
    result = _criterion_reading(_ctx(tmp_path), _SYSCTL)
    assert _SYSCTL in result[StepKey.DETAILS].get(SYSTEM_FILES, {})


@pytest.mark.skipif(not _UTC.is_file(), reason="no /usr/share/zoneinfo/Etc/UTC on this machine")
def test_proc1_control_a_zone_read_by_the_criterion_is_named_and_another_process_is_refused(
        tmp_path: Path, bare_steps: None) -> None:
    result = _criterion_reading(_ctx(tmp_path), str(_UTC))  # the recording a fix would extend (systemfiles, TZ3)
    assert systemfiles.is_data(str(_UTC))
    assert str(_UTC) in result[StepKey.DETAILS].get(SYSTEM_FILES, {})
    assert not paths.trusted(f"/proc/{os.getppid()}/environ")  # another process's folder: its input, not the system's
