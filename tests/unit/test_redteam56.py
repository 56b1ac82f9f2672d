"""Red-team pass 56 (notes: /work/notes/redteam56.md): the fixes that just landed (PROC1, THR1, DRIFT1/REFCMP1),
driven the way a real run drives them, and bisect's culprit.

PROC2 (a fix proven at the judging function while the real path never reaches it: the kernel's state the application
reads is still in no record; inenv/seen.py ``_opened``, inenv/paths.judged, inenv/world._stranger,
inenv/systemfiles.is_state): pass 54's PROC1 fix records a read under ``/proc`` or ``/sys`` in ``world._stranger``
(``systemfiles.is_state`` then ``record``), and its test calls ``_stranger`` directly. In a run, the audit hook
(``seen._opened``) asks ``paths.judged(raw)`` first, which returns None for every trusted path (``paths.PSEUDO``:
``/proc``, ``/sys``) and the hook returns before the file reaches ``seen.READ``; ``world.strangers`` judges only
``seen.READ`` and the window's imports, so ``is_state`` never sees a pseudo file (``open()``, ``os.open``, a forked
child alike). Measured in real sessions on a fresh clone: checks/app.py's criterion returns failed unless
``/proc/sys/kernel/domainname`` reads ``(none)``; ``reference -- --new`` (24 s), ``verify -- --no-rebuild``: PASSED
13 + 1 skipped, ``grep -r domainname`` over the run folder and dossier/reference: nothing, no ``system_files`` in
system.json. ``echo rt56 > /proc/sys/kernel/domainname``, the same verify: ``FAILED at criterion (layer:
comparison): criterion failed: rt56: domainname set``, "What differs from the reference": "system chain: the same as
the reference's", **Likely cause**: "the inventory, the system chain and the settings equal the reference's: look at
the code, data or weights": pass 54's outcome, word for word (domainname put back to ``(none)``). In process, a
window that opens ``/proc/sys/kernel/domainname``, ``/proc/cpuinfo``, ``/sys/devices/system/cpu/online`` (and
``os.open`` of the sysctl) and ``/usr/share/zoneinfo/Etc/UTC``: the step's ``system_files`` holds the zone alone.
Second hole of the same rule (reached once the first is fixed): ``is_state`` resolves the path and calls everything
under a process's folder the process's own, but ``/proc/mounts`` and ``/proc/net/*`` are links into
``/proc/self/`` (``mounts``, ``net/dev``): the machine's mount table and network state, not the process's.
Module: inenv/seen.py (``_opened``: the trusted early return), inenv/systemfiles.py (``is_state``). Fix idea by
class: the record is made where the read is seen: the hook notes a read that ``is_state`` calls the kernel's state
before the trusted return (its own record, judged and hashed at the window's end, a forked child's handed to the
parent as its reads are); ``is_state`` judges the path as given under ``/proc`` before resolving ``self`` (the
system's files reached through ``/proc/self``: ``mounts``, ``mountinfo``, ``net/``); and the test of a closed-world
rule drives the real hook (``open()`` inside ``world.window``), never the judging function alone.

ARTIFACT1 (a record's proof kept in a file the documented transport drops: the as-written check of DRIFT1 is void in
CI, and every honest dossier there is said NOT AS WRITTEN; outdir.MARKER, .github/workflows/verify.yml): a run's
folder is signed by ``.kernodeck-folder``, a hidden file; the verify workflow keeps each dossier with
``actions/upload-artifact`` v4.6.2, which since v4.4.0 leaves hidden files out unless ``include-hidden-files: true``
(actions/upload-artifact#598), and the drift job maps the downloaded dossiers (``nox -s drift``). Measured (real
sessions, the artifact's transport simulated by a copy without dotfiles): two copies of one PASSED run, the second's
settings.json edited (``torch.num_threads`` 2 -> 1): ``nox -s drift``: "NOT AS WRITTEN: 1 A ...: no record of its
files (neither a run's signed folder nor a reference's manifest)" for the untouched A as for B, and the pair's cell
"within | threads: 2 vs 1", the edit presented as a real difference; ``nox -s compare`` says the same of both. The
same copies with the marker kept: "NOT AS WRITTEN: 2 B ...: settings.json (changed since Kernodeck wrote it)" and
the cell "NOT AS WRITTEN (B): threads: 2 vs 1". Module: .github/workflows/verify.yml (``include-hidden-files:
true`` on the dossier's upload) or kernodeck/outdir.py (a marker name no transport hides). Fix idea by class: the
proof travels with what it proves: every workflow step that carries a folder Kernodeck signs keeps its marker (a
test reads the workflows' upload steps against ``outdir.MARKER``), and drift/compare say "its marker was not
carried" rather than treat a transported folder like one with no record.

BISECT1 (the premise a culprit rests on, assumed instead of measured; upgrade/bisect_search.search and _found,
upgrade/bisect.py): the search takes the old lock's env as within tolerance ("the reference's env: assumed within
tolerance, never rebuilt"): nothing checks that ``--good`` is the reference's lock, nor that its env is within the
tolerance on this machine (the thread count, the CPU: what THR1 showed moves outputs). The confirmation that catches
a wrong culprit ("the other groups without C") is the empty set when one group changed, and the empty set is
``Outcome.GOOD`` without a trial (``got = sure(subset, repeats) if subset else Outcome.GOOD``). So with one changed
group and an old lock that is out of tolerance too, the bisect names that group, found and confirmed. Measured (real
sessions, tests/e2e/test_bisect_e2e.py's loopback index and fixture: kdfixture-scale 2.0 multiplies by 1.25, alpha,
beta, gamma 2.0 change nothing): lock and reference with the 1.0 wheels, the 2.0 wheels published, ``upgrade``
(max abs 7.56, NO, exit 1); ``--good`` = the reference's lock with kdfixture-scale and gamma already at 2.0 (made by
``bisect.intermediate_lock``), ``--bad`` = the upgraded lock: ``bisect`` exit 0, "2 changed packages in 1 groups; 2
env(s) tried, 0 rebuilt", "**Culprit: kdfixture-alpha 1.0 → 2.0 + kdfixture-beta 1.0 → 2.0** (alone, on the old
lock, it leaves the tolerance)", bisect.json ``verdict: found``: two packages that change nothing, named; the old lock
(out of tolerance by 7.56 itself) never built, and nothing said that ``--good`` is not the reference's lock. The same
holds for the reference's own lock on a machine where it is out of tolerance (the relock workflow bisects on each
platform's runner). Module: upgrade/bisect_search.py
(``_found``), upgrade/bisect.py (``_search``: ``_require_old_lock_runs`` only when the new lock FAILED). Fix idea by
class: a premise the answer rests on is measured: when the answer rests on the old lock's outcome (the rest without
C is empty) the old lock's env is built and must be within tolerance, as it already must run when the new lock's env
fails; or ``--good`` is bound to the reference (its digest the manifest's ``lock_digest``, verify's own premise) and
the old lock's env run once on this machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck import outdir
from kernodeck.dossier.read import UNRECORDED, changed_since_written
from kernodeck.env import rebuild as rebuilding
from kernodeck.errors import KernodeckError
from kernodeck.inenv import paths, steprun, systemfiles, world
from kernodeck.inenv.protocol import SYSTEM_FILES, StepKey
from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade import bisect as bisecting
from kernodeck.upgrade.bisect_search import Verdict
from kernodeck.upgrade.relock import Drift, OutputDrift
from tests.helpers.closedworld import criterion_opening, window_context, without_invariants
from tests.helpers.lockpair import write_lock
from tests.helpers.project import ROOT
from tests.helpers.workflows import WORKFLOWS, job_step, read_yaml

_SYSCTL = "/proc/sys/kernel/domainname"
needs_sysctl = pytest.mark.skipif(not Path(_SYSCTL).is_file(), reason="no /proc/sys/kernel/domainname here")
_UTC = Path("/usr/share/zoneinfo/Etc/UTC")
needs_zone = pytest.mark.skipif(not _UTC.is_file(), reason="no /usr/share/zoneinfo/Etc/UTC on this machine")
PLATFORM = "cp311-linux_x86_64-cpu"


# --- PROC2 ----------------------------------------------------------------------------------------------------------

@pytest.fixture
def bare_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    without_invariants(monkeypatch)


@needs_sysctl
def test_proc2_premise_the_hook_takes_a_sysctl_for_trusted() -> None:
    assert systemfiles.is_state(_SYSCTL)  # the kernel's state ...
    assert paths.judged(_SYSCTL) is None  # ... trusted by the hook's first question: its record is made before it


@needs_sysctl
def test_proc2_a_sysctl_opened_in_a_window_is_in_the_steps_system_files(tmp_path: Path, bare_steps: None) -> None:
    result = criterion_opening(window_context(tmp_path), _SYSCTL)
    assert result[StepKey.STATUS] == "passed"
    with open(_SYSCTL, "rb") as fh:
        value = fh.read()
    assert result[StepKey.DETAILS].get(SYSTEM_FILES, {}).get(_SYSCTL) == hashlib.sha256(value).hexdigest()


@needs_zone
def test_proc2_control_a_zone_file_opened_in_a_window_is_recorded(tmp_path: Path, bare_steps: None) -> None:
    result = criterion_opening(window_context(tmp_path), str(_UTC))
    assert result[StepKey.STATUS] == "passed"
    assert str(_UTC) in result[StepKey.DETAILS][SYSTEM_FILES]  # the same record, reached through the hook


@pytest.mark.skipif(not Path("/proc/mounts").is_file(), reason="no /proc/mounts here")
def test_proc2_premise_the_systems_mount_table_resolves_into_the_process_folder() -> None:
    assert os.path.realpath("/proc/mounts") == f"/proc/{os.getpid()}/mounts"


@pytest.mark.skipif(not Path("/proc/mounts").is_file(), reason="no /proc/mounts here")
def test_proc2_the_mount_table_and_the_network_state_are_the_kernels_state() -> None:
    assert systemfiles.is_state("/proc/mounts")
    if Path("/proc/net/dev").is_file():
        assert systemfiles.is_state("/proc/net/dev")
    # one name in every run: the process's own view of the machine is named under /proc/self, never its pid
    assert systemfiles.state_key(f"/proc/{os.getpid()}/mounts") == "/proc/self/mounts"
    assert systemfiles.state_key("/proc/thread-self/mounts") == "/proc/self/mounts"


@needs_sysctl
def test_proc2_a_sysctl_read_by_a_forked_child_is_recorded_by_the_parent(tmp_path: Path, bare_steps: None) -> None:
    ctx = window_context(tmp_path)

    def criterion() -> dict[str, Any]:
        with world.window(ctx, "the criterion"):
            pid = os.fork()
            if pid == 0:  # the child: reads the sysctl and leaves at once
                with open(_SYSCTL, "rb") as fh:
                    fh.read()
                os._exit(0)
            os.waitpid(pid, 0)
        return {"passed": True}

    result = steprun.run(ctx, "criterion", criterion)
    assert result[StepKey.STATUS] == "passed", result
    assert _SYSCTL in result[StepKey.DETAILS].get(SYSTEM_FILES, {})


def test_proc2_control_the_process_own_files_stay_its_own() -> None:
    assert not systemfiles.is_state("/proc/self/status") and not systemfiles.is_state(f"/proc/{os.getpid()}/maps")
    assert systemfiles.is_state("/proc/cpuinfo")


# --- ARTIFACT1 ------------------------------------------------------------------------------------------------------

def _signed_run(folder: Path, threads: int) -> Path:
    """A run's folder as verify leaves it (its records), signed by Kernodeck's marker."""
    (folder / "outputs").mkdir(parents=True)
    (folder / "outputs" / "emb.ids.json").write_text(json.dumps(["r0", "r1"]), encoding="utf-8")
    (folder / "settings.json").write_text(json.dumps({"torch.num_threads": threads}), encoding="utf-8")
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}),
                                        encoding="utf-8")
    outdir.mark(folder, "verify")
    return folder


def _dossier_upload() -> dict[str, Any]:
    step = job_step(read_yaml(WORKFLOWS / "verify.yml")["jobs"]["verify"], "keep the dossier")
    assert step["uses"].startswith("actions/upload-artifact@")
    with_: dict[str, Any] = step["with"]
    return with_


def _carried(run: Path, to: Path, upload: dict[str, Any]) -> Path:
    """What upload-artifact (v4.4 and later) keeps of ``run``, downloaded into ``to``: hidden files only with
    ``include-hidden-files: true``."""
    hidden = str(upload.get("include-hidden-files", "false")).lower() == "true"
    for path in sorted(run.rglob("*")):
        rel = path.relative_to(run)
        if path.is_file() and (hidden or not any(part.startswith(".") for part in rel.parts)):
            (to / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, to / rel)
    return to


def test_artifact1_premise_the_marker_is_hidden_and_an_upload_by_default_leaves_hidden_files_out(
        tmp_path: Path) -> None:
    assert "v4.6.2" in (WORKFLOWS / "verify.yml").read_text(encoding="utf-8")  # include-hidden-files: since v4.4.0
    assert outdir.MARKER.startswith(".")
    carried = _carried(_signed_run(tmp_path / "run", 2), tmp_path / "ci", {})  # the action's default
    assert not (carried / outdir.MARKER).exists()
    assert changed_since_written(carried) == [UNRECORDED]  # drift and compare: "NOT AS WRITTEN ... no record"


def test_artifact1_a_dossier_carried_by_the_workflow_is_held_to_what_kernodeck_wrote(tmp_path: Path) -> None:
    upload = _dossier_upload()
    run = _signed_run(tmp_path / "run", 2)
    honest = _carried(run, tmp_path / "ci" / "a", upload)
    edited = _carried(run, tmp_path / "ci" / "b", upload)
    (edited / "settings.json").write_text(json.dumps({"torch.num_threads": 1}), encoding="utf-8")
    assert changed_since_written(honest) == []
    assert changed_since_written(edited) == ["settings.json (changed since Kernodeck wrote it)"]


def test_artifact1_control_a_folder_carried_with_its_marker_names_the_edit(tmp_path: Path) -> None:
    run = _signed_run(tmp_path / "run", 2)
    honest = _carried(run, tmp_path / "a", {"include-hidden-files": True})
    edited = _carried(run, tmp_path / "b", {"include-hidden-files": True})
    (edited / "settings.json").write_text(json.dumps({"torch.num_threads": 1}), encoding="utf-8")
    assert changed_since_written(honest) == []
    assert changed_since_written(edited) == ["settings.json (changed since Kernodeck wrote it)"]


# --- BISECT1 --------------------------------------------------------------------------------------------------------

def _bisect_one_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, old_within: bool) -> tuple[Any, list[str]]:
    """bisect_locks from the reference's own lock (lockfiles/, the manifest's lock_digest) to it with one pin moved,
    the env builds and in-env steps stood in for: every env out of tolerance but, ``old_within``, the old lock's.
    The result and the pins of each trial's lock that differ from the old lock's (``""``: the old lock itself)."""
    project = dataclasses.replace(load_project(ROOT), venv_root=tmp_path / "venvs", runs=tmp_path / "runs")
    plat = resolve_platform(project, PLATFORM)
    good_path = ROOT / "lockfiles" / f"{PLATFORM}.txt"
    good = lockfile.read(good_path)
    name = sorted(good.versions())[0]
    moved = lockfile.read(write_lock(tmp_path / "moved.txt", {name: "999.0"}), require_header=False)
    bad_path = tmp_path / "bad.txt"
    bad_path.write_text(bisecting.intermediate_lock(good, moved, {name}, f"{name} moved"), encoding="utf-8")
    tried: list[str] = []

    def envs(project: Any, plat: Any, lock_path: Path, **kw: Any) -> SimpleNamespace:
        env = project.venv_root / "env"
        env.mkdir(parents=True, exist_ok=True)
        return SimpleNamespace(python=env / "bin" / "python", reused=not kw["fresh"])

    def checks(self: Any, python: Path, folder: Path) -> list[dict[str, Any]]:
        trial = folder if (folder / "lockfiles").is_dir() else folder.parent
        versions = lockfile.read(next((trial / "lockfiles").glob("*.txt"))).versions()
        differs = sorted(n for n in {*versions, *good.versions()} if versions.get(n) != good.versions().get(n))
        tried.append(",".join(differs))
        return [{"name": "compare", "old": not differs}]

    def from_steps(cls: Any, steps: list[dict[str, Any]]) -> Drift:
        within = old_within and bool(steps[0]["old"])
        return Drift((OutputDrift("embeddings", "cosine", within, 0.0 if within else 0.5, None, None, "cosine",
                                  "within" if within else "max abs 0.5"),), None, "")

    monkeypatch.setattr(rebuilding, "rebuild", envs)
    monkeypatch.setattr(bisecting._Trials, "checks", checks)
    monkeypatch.setattr(bisecting._Trials, "regroup", lambda self, python: None)
    monkeypatch.setattr(Drift, "from_steps", classmethod(from_steps))
    result = bisecting.bisect_locks(project, plat, good_path, bad_path, out=tmp_path / "runs" / "bisect")
    return result, tried


def test_bisect1_premise_one_changed_group_and_an_old_lock_out_of_tolerance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, tried = _bisect_one_change(tmp_path, monkeypatch, old_within=False)
    assert tried[0] != ""  # the new lock's env is tried first


def test_bisect1_no_culprit_is_named_when_the_old_lock_is_out_of_tolerance_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        result, _ = _bisect_one_change(tmp_path, monkeypatch, old_within=False)
    except KernodeckError:
        return  # refused, naming the old lock's env as out of tolerance: no culprit
    assert result.search.verdict is not Verdict.FOUND


def test_bisect1_control_a_change_the_old_lock_does_not_share_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    result, tried = _bisect_one_change(tmp_path, monkeypatch, old_within=True)
    assert result.search.verdict is Verdict.FOUND and result.search.culprit == (0,)
    assert "" in tried  # the old lock measured within tolerance: the answer's premise


_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@pytest.mark.skipif(not Path(_BOOT_ID).is_file(), reason="no boot id here")
def test_proc2_a_value_of_this_boot_is_recorded_as_read_and_not_compared(tmp_path: Path, bare_steps: None) -> None:
    """filelock's import reads the boot id and the mount table (measured in a real verify): named as read, never a
    difference from a reference made on another boot."""
    result = criterion_opening(window_context(tmp_path), _BOOT_ID, "/proc/mounts")
    read = result[StepKey.DETAILS][SYSTEM_FILES]
    assert read[_BOOT_ID] == systemfiles.INSTANCE and read["/proc/mounts"] == systemfiles.INSTANCE
    if Path(_SYSCTL).is_file():  # control: a configuration value is compared by its bytes
        (tmp_path / "c").mkdir()
        configured = criterion_opening(window_context(tmp_path / "c"), _SYSCTL)[StepKey.DETAILS][SYSTEM_FILES]
        assert configured[_SYSCTL] != systemfiles.INSTANCE and len(configured[_SYSCTL]) == 64
