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

import hashlib
import json
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import paths, steprun, systemfiles
from kernodeck.inenv._common import Context
from kernodeck.inenv.protocol import SYSTEM_FILES, Status, StepKey
from kernodeck.runformat import refdelta
from kernodeck.runformat.manifest import inconsistency, record_files
from kernodeck.verify import markdown
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report
from tests.helpers.closedworld import bare_context, criterion_opening, stranger, window_context, without_invariants

_SYSCTL = "/proc/sys/kernel/domainname"
needs_sysctl = pytest.mark.skipif(not Path(_SYSCTL).is_file(), reason="no /proc/sys/kernel/domainname here")
_UTC = Path("/usr/share/zoneinfo/Etc/UTC")
ROOT = Path(__file__).resolve().parents[2]




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
    assert paths.trusted(_SYSCTL)  # paths.PSEUDO: no declaration can name it
    result = _criterion_reading(bare_context(tmp_path), _SYSCTL)
    assert result[StepKey.STATUS] == "passed"  # accepted: what the fix adds is its record


@needs_sysctl
def test_proc1_the_step_whose_window_read_a_sysctl_names_it(tmp_path: Path, bare_steps: None) -> None:
    result = criterion_opening(window_context(tmp_path), _SYSCTL)  # the real hook (pass 56, PROC2)
    with open(_SYSCTL, "rb") as fh:
        value = fh.read()
    assert result[StepKey.DETAILS][SYSTEM_FILES][_SYSCTL] == hashlib.sha256(value).hexdigest()


def test_proc1_a_sys_attribute_is_the_kernels_state_and_the_own_process_files_are_not() -> None:
    own = f"/proc/{os.getpid()}/status"
    assert not systemfiles.is_state(own) and not systemfiles.is_state("/proc/self/status")  # the process's own
    assert systemfiles.is_state("/proc/cpuinfo")
    online = "/sys/devices/system/cpu/online"
    if Path(online).is_file():
        assert systemfiles.is_state(online)
    assert not systemfiles.is_state("/proc/self/root/etc/hostname")  # a link out: the file it opens is judged
    assert not systemfiles.is_state("/proc/sys/kernel")  # a folder: no value


@needs_sysctl
def test_proc1_a_sysctl_that_differs_from_the_references_is_named(tmp_path: Path) -> None:
    reference = _dossier(tmp_path / "reference", {**_SYSTEM, SYSTEM_FILES: {_SYSCTL: "a" * 64}}, 2)
    run = _dossier(tmp_path / "run", {**_SYSTEM, SYSTEM_FILES: {_SYSCTL: "b" * 64}}, 2)
    assert list(refdelta.vs_reference(reference, run)["system"]) == [f"{SYSTEM_FILES}.{_SYSCTL}"]


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
    reference = _dossier(tmp_path / "reference", _SYSTEM, None)  # a reference made before it kept its settings
    run = _dossier(tmp_path / "run", {**_SYSTEM, "cpu_count": 1}, 1)
    delta = refdelta.vs_reference(reference, run)
    assert delta["system"] == {} and delta["variables"] == {}  # "system chain: the same as the reference's"
    assert "cpu_count" in refdelta._NOT_CHAIN
    assert refdelta.SETTINGS in delta["not_in_reference"]  # said: cannot compare


def test_thr1_a_run_with_another_thread_count_is_said_to_differ(tmp_path: Path) -> None:
    reference = _dossier(tmp_path / "reference", _SYSTEM, 2)
    run = _dossier(tmp_path / "run", {**_SYSTEM, "cpu_count": 1}, 1)
    delta = refdelta.vs_reference(reference, run)
    assert delta[refdelta.SETTINGS] == {"torch.num_threads": {"reference": 2, "this run": 1}}
    report = Report(platform="p", steps=[], meta={"vs_reference": delta})
    failure = Step("application", Status.FAILED, error="outputs differ", layer="comparison")
    assert "- setting `torch.num_threads`: 2 → 1" in markdown._differences(report)
    assert "settings read back differ from the reference's (torch.num_threads)" in markdown.likely_cause(
        report, failure)


def test_thr1_control_the_same_settings_are_said_the_same(tmp_path: Path) -> None:
    delta = refdelta.vs_reference(_dossier(tmp_path / "reference", _SYSTEM, 2), _dossier(tmp_path / "run", _SYSTEM, 2))
    assert delta[refdelta.SETTINGS] == {}
    report = Report(platform="p", steps=[], meta={"vs_reference": delta})
    assert any("settings read back" in line and "the same" in line for line in markdown._differences(report))


def test_thr1_control_a_system_field_that_differs_is_named(tmp_path: Path) -> None:
    reference = _dossier(tmp_path / "reference", _SYSTEM, 2)
    run = _dossier(tmp_path / "run", {**_SYSTEM, "kernel": "6.8"}, 2)
    delta = refdelta.vs_reference(reference, run)
    assert delta["system"] == {"kernel": {"reference": "6.1", "this run": "6.8"}}
    assert delta["inventory"] == {"added": {}, "removed": {}, "changed": {}}


def test_thr1_the_reference_keeps_its_settings_fingerprinted_and_an_edit_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "reference"
    folder.mkdir()
    for path in (ROOT / "dossier" / "reference").iterdir():
        if path.is_file():
            (folder / path.name).write_bytes(path.read_bytes())
    manifest = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    assert "settings.json" in record_files(manifest)  # inside the id, as the inventory and system records
    assert inconsistency(folder) == ""  # control: as made
    settings = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
    settings["torch.num_threads"] = 1  # as if the reference had run with this run's count
    (folder / "settings.json").write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
    assert "settings.json" in inconsistency(folder)
