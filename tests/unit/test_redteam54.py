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

THR1 (the report's "What differs from the reference" blind to the thread count the outputs moved with: a summary that
does not cover what matters; runformat/refdelta.vs_reference, verify/markdown, the reference's records): torch's
intra-op thread count (settings.json ``torch.num_threads``, from the CPUs the process may use) changes the reduction
order, so the outputs' last bits; the reference keeps no settings.json (dossier/reference: manifest, inventory,
system.json) and ``cpu_count`` is outside the chain compare (``refdelta._NOT_CHAIN``). Measured in a real session:
``taskset -c 0 nox -s verify -- --no-rebuild``: ``torch.num_threads: 1`` (the reference ran with 2), embeddings.npy
no longer bitwise the reference's (max abs 1.4e-07, within the declared cosine), PASSED, and "What differs from the
reference": "inventory identical, system chain the same, variables the same". For an output declared ``exact`` (or a
tolerance calibrated on one machine) the same run fails with **Likely cause** "the inventory and the system chain
equal the reference's: look at the code, data or weights": the cause is named nowhere. Fix idea: the reference keeps
the read-back settings it ran with (its settings.json, fingerprinted in the manifest as its other records) and
vs_reference names each setting that differs (thread counts first), so "Likely cause" can say "the thread count".
The test gives the reference a settings.json as such a fix would (adapt it if the fix records them elsewhere).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import paths, steprun, systemfiles
from kernodeck.inenv._common import Context
from kernodeck.inenv.protocol import SYSTEM_FILES, StepKey
from kernodeck.runformat import refdelta
from tests.helpers.closedworld import bare_context, stranger, without_invariants

_SYSCTL = "/proc/sys/kernel/domainname"
needs_sysctl = pytest.mark.skipif(not Path(_SYSCTL).is_file(), reason="no /proc/sys/kernel/domainname here")
_UTC = Path("/usr/share/zoneinfo/Etc/UTC")




@pytest.fixture
def bare_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """steprun.run without the invariants held after a step (libraries, settings: not what is tested here)."""
    without_invariants(monkeypatch)


def _criterion_reading(ctx: Context, path: str) -> dict[str, Any]:
    """The criterion step as the runner runs it, its window reading ``path`` (the judgement world's window makes)."""
    def criterion() -> dict[str, Any]:
        assert stranger(ctx, path) is None  # accepted: trusted or the system's file
        return {"passed": True}

    return steprun.run(ctx, "criterion", criterion)


@needs_sysctl
def test_proc1_premise_a_sysctl_read_by_the_criterion_is_trusted_as_the_systems_state(
        tmp_path: Path, bare_steps: None) -> None:
    assert paths.trusted(_SYSCTL)  # paths.PSEUDO: "the system's state (the system step records it)"
    ctx = bare_context(tmp_path)
    result = _criterion_reading(ctx, _SYSCTL)
    assert result[StepKey.STATUS] == "passed"
    assert _SYSCTL not in ctx.state.get(SYSTEM_FILES, {})  # before a fix: noted nowhere in the process either


@needs_sysctl
@pytest.mark.xfail(strict=True, reason="PROC1: a /proc/sys value the application reads is in no record")
def test_proc1_the_step_whose_window_read_a_sysctl_names_it(tmp_path: Path, bare_steps: None) -> None:
    result = _criterion_reading(bare_context(tmp_path), _SYSCTL)
    assert _SYSCTL in result[StepKey.DETAILS].get(SYSTEM_FILES, {})


@pytest.mark.skipif(not _UTC.is_file(), reason="no /usr/share/zoneinfo/Etc/UTC on this machine")
def test_proc1_control_a_zone_read_by_the_criterion_is_named_and_another_process_is_refused(
        tmp_path: Path, bare_steps: None) -> None:
    # the recording a fix would extend (systemfiles, TZ3)
    result = _criterion_reading(bare_context(tmp_path), str(_UTC))
    assert systemfiles.is_data(str(_UTC))
    assert str(_UTC) in result[StepKey.DETAILS].get(SYSTEM_FILES, {})
    assert not paths.trusted(f"/proc/{os.getppid()}/environ")  # another process's folder: its input, not the system's


# THR1 ----------------------------------------------------------------------------------------------------------------
_SYSTEM = {"os": "Linux", "kernel": "6.1", "cpu_count": 2, "python_version": "3.11.7", "variables": {}}


def _dossier(folder: Path, system: dict[str, Any], threads: int | None) -> Path:
    """A reference's or a run's records: inventory.txt, system.json and (given ``threads``) settings.json."""
    folder.mkdir()
    (folder / "inventory.txt").write_text("torch==2.5.1\n", encoding="utf-8")
    (folder / "system.json").write_text(json.dumps(system), encoding="utf-8")
    if threads is not None:
        (folder / "settings.json").write_text(json.dumps({"torch.num_threads": threads}), encoding="utf-8")
    return folder


def test_thr1_premise_a_run_on_fewer_cpus_reads_the_same_system_chain(tmp_path: Path) -> None:
    reference = _dossier(tmp_path / "reference", _SYSTEM, None)  # as dossier/reference is: no settings.json
    run = _dossier(tmp_path / "run", {**_SYSTEM, "cpu_count": 1}, 1)
    delta = refdelta.vs_reference(reference, run)
    assert delta["system"] == {} and delta["variables"] == {}  # "system chain: the same as the reference's"
    assert "cpu_count" in refdelta._NOT_CHAIN


@pytest.mark.xfail(strict=True, reason="THR1: What differs names no thread count, the reference records none")
def test_thr1_a_run_with_another_thread_count_is_said_to_differ(tmp_path: Path) -> None:
    reference = _dossier(tmp_path / "reference", _SYSTEM, 2)
    run = _dossier(tmp_path / "run", {**_SYSTEM, "cpu_count": 1}, 1)
    assert "num_threads" in json.dumps(refdelta.vs_reference(reference, run))


def test_thr1_control_a_system_field_that_differs_is_named(tmp_path: Path) -> None:
    reference = _dossier(tmp_path / "reference", _SYSTEM, 2)
    run = _dossier(tmp_path / "run", {**_SYSTEM, "kernel": "6.8"}, 2)
    delta = refdelta.vs_reference(reference, run)
    assert delta["system"] == {"kernel": {"reference": "6.1", "this run": "6.8"}}
    assert delta["inventory"] == {"added": {}, "removed": {}, "changed": {}}
