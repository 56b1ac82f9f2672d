"""Red-team pass 38 (d861563: pass 37's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside controls that pass today.

TWIN3 (fixed: a URL that names no distribution file leaves the name to the index, which packaging.pylock holds to the
package's name and version; TWIN2's fix, FALSE FAIL of the one lock check): a twin file's ``name`` must be its URL's
last path segment, "as the writer takes both from the index". The writer does not: from a PEP 691 JSON page it takes
``filename`` and ``url`` as two fields (index_client._page_files), and an index may serve a file at a URL that does not
end in its name (content-addressed ``/api/files/<sha256>``, a download endpoint). The twin Kernodeck's own writer
renders for such an index (pylock.render) is refused by ``check.twin_disagreements`` (lock --check, rebuild, verify's
lock-check), and the TIP (``lock --pylock-only``) writes the same twin again. CONTROL1: the same writer with the URLs
ending in the name passes.

OUT4 (fixed: a single file is never written inside a folder Kernodeck marked; OUT1's fix, WRONG words and a FALSE FAIL):
``export --out DOSSIER`` writes its files with their sidecar records into a finished dossier (check_file sees no user
file there); the next ``verify -- --out DOSSIER`` refuses "6 entries Kernodeck did not write" (the three files and their
three records). CONTROL5: a user's file in a dossier is named.

OUT3 (fixed: both doors check each file and write its record; OUT1's class, the --out rule's other doors): ``sbom --out
DIR`` writes ``DIR/PLATFORM.cdx.json`` and ``upgrade --pr-body DIR`` writes ``DIR/pr-body.md`` with write_atomic, no
check, no record: a user's file of that name is replaced (rc 0), anywhere (the project root with ``--out .``, a dossier,
outside the project). CONTROL2: export (the fixed door) refuses the user's file.

WINDOW1 (fixed: extensions.plain makes the answer plain data inside the window; FF4's class, values leaving an
application window; FALSE claim of the closed world): an extension's smoke check runs inside its window, but its answer
is read after the window closed: ``extensions.compare`` calls the answer's methods (a dict subclass's ``get``, an
output's ``detach``/``__array__``) on Kernodeck's thread, unwatched: what they read is neither recorded nor judged (the
application's ``_recorded`` copies its answer to plain data inside the window for this very reason). CONTROL3: the smoke
call itself runs inside the window.

CAL3 (fixed: RUN_NEEDS keeps them; CAL2's fix, the keep-list): ``start.RUN_NEEDS`` is "what a run needs to start and to
find its inputs ... the caches", yet recorded variables a run needs to start on some machines, and caches, are left out
of every calibrate variation: ``HSA_OVERRIDE_GFX_VERSION`` (ROCm on a consumer GPU), ``NCCL_P2P_DISABLE`` /
``NCCL_SOCKET_IFNAME`` (multi-GPU start), ``PYTORCH_CUDA_ALLOC_CONF`` (a model that fits only with it),
``KMP_DUPLICATE_LIB_OK`` (two OpenMP runtimes), ``TORCH_HOME`` / ``CUDA_CACHE_PATH`` (caches). CONTROL4: HF_HOME and
CUDA_VISIBLE_DEVICES stay.

MSG3 (fixed: the runner configuration names the session, Context.again; MSG2's class, a TIP of a shared check): the
foreign-library refusal (inenv/libraries.py, reached by reference and calibrate runs) tips ``then: nox -s verify``
whatever session ran it (premise: the refusal and its TIP).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck.env import start
from kernodeck.lock import check, index_client, lockfile, pylock, twin, twinform
from kernodeck.lock.index_client import DistFile
from tests.helpers.outfolders import finished_dossier
from tests.helpers.project import ROOT, kd
from tests.helpers.smokewindow import smoke_in_window
from tests.helpers.twinswap import CP311, PLAT, PLATFORM

# --- TWIN3 -----------------------------------------------------------------------------------------------------------


def _written_twin(tmp_path: Path, url_of: str) -> tuple[Path, Path]:
    """The committed lock and the twin Kernodeck's writer (pylock.render) makes for it, numpy's cp311 wheel listed by
    a PEP 691 index at ``url_of`` (``{sha256}`` filled in) as index_client reads that page."""
    lock_path = ROOT / "lockfiles" / f"{PLATFORM}.txt"
    lock = lockfile.read(lock_path)
    known = twin.known_files(ROOT / "lockfiles" / f"pylock.{PLATFORM}.toml")
    mine = next(f for f in known.values() if f.filename == CP311)
    page = {"meta": {"api-version": "1.1"}, "name": "numpy", "files": [
        {"filename": CP311, "url": url_of.format(sha256=mine.sha256), "hashes": {"sha256": mine.sha256},
         "size": mine.size}]}
    (listed,) = index_client._page_files("https://pypi.internal.example/simple/numpy/", json.dumps(page).encode(),
                                         "application/vnd.pypi.simple.v1+json")
    assert listed.filename == CP311
    known[mine.sha256] = listed
    files: dict[str, list[DistFile]] = {
        pin.name: sorted((known[h] for h in pin.hashes if h in known), key=lambda f: f.filename) for pin in lock.pins}
    target, twin_file = tmp_path / lock_path.name, tmp_path / f"pylock.{PLATFORM}.toml"
    # the lock as the writer leaves it: the names of the files at URLs that name none recorded (pass 39, TWIN4)
    text = lockfile.with_header(lock_path.read_text(encoding="utf-8"), twinform.FILE_NAME, twinform.file_names(files))
    target.write_text(text, encoding="utf-8")
    twin_file.write_text(pylock.render(lockfile.parse_text(text, target), PLAT, files, text), encoding="utf-8")
    return target, twin_file


def test_twin3_the_writers_twin_for_a_pep691_index_passes_its_check(tmp_path: Path) -> None:
    target, twin_file = _written_twin(tmp_path, "/api/files/{sha256}")
    assert check.twin_disagreements(target, twin_file, PLAT) == []


@pytest.mark.parametrize("name", ["scipy-1.16.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                                  "numpy-2.4.5-cp311-cp311-manylinux_2_28_x86_64.whl", "numpy-readme.txt"])
def test_twin3_at_a_url_naming_no_file_a_name_of_another_package_or_version_is_refused(tmp_path: Path,
                                                                                      name: str) -> None:
    target, twin_file = _written_twin(tmp_path, "/api/files/{sha256}")
    twin_file.write_text(twin_file.read_text(encoding="utf-8").replace(f'name = "{CP311}"', f'name = "{name}"'),
                         encoding="utf-8")
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any(f"'{name}'" in line and "is not" in line for line in found), found


def test_twin3_a_url_naming_another_file_is_still_named(tmp_path: Path) -> None:
    other = CP311.replace("cp311-cp311", "cp312-cp312")
    target, twin_file = _written_twin(tmp_path, "/api/files/{sha256}/" + other)
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any(f"whose file is {other}" in line for line in found), found


def test_twin3_premise_the_writer_keeps_the_indexs_filename_and_url_apart(tmp_path: Path) -> None:
    _, twin_file = _written_twin(tmp_path, "/api/files/{sha256}")
    text = twin_file.read_text(encoding="utf-8")
    assert f'name = "{CP311}", url = "https://pypi.internal.example/api/files/' in text


def test_control1_the_writers_twin_with_urls_ending_in_the_name_passes(tmp_path: Path) -> None:
    target, twin_file = _written_twin(tmp_path, "../../files/{sha256}/" + CP311)
    assert check.twin_disagreements(target, twin_file, PLAT) == []


# --- OUT3 ------------------------------------------------------------------------------------------------------------


DOORS = {"sbom": (f"{PLATFORM}.cdx.json", ("sbom", "--out")),
         "pr-body": ("pr-body.md", ("upgrade", "--pr-body"))}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_out3_a_file_kernodeck_did_not_write_is_kept(tmp_path: Path, door: str) -> None:
    name, argv = DOORS[door]
    mine = tmp_path / name
    mine.write_text("my own, signed\n", encoding="utf-8")
    proc = kd(ROOT, *argv, str(tmp_path), timeout=120)
    assert mine.read_text(encoding="utf-8") == "my own, signed\n", proc.stdout + proc.stderr


@pytest.mark.parametrize("door", sorted(DOORS))
def test_out3_the_refusal_names_the_users_file(tmp_path: Path, door: str) -> None:
    name, argv = DOORS[door]
    (tmp_path / name).write_text("my own, signed\n", encoding="utf-8")
    proc = kd(ROOT, *argv, str(tmp_path), timeout=120)
    assert proc.returncode == 2 and "is a file Kernodeck did not write" in proc.stderr and name in proc.stderr, (
        proc.stderr)


@pytest.mark.parametrize("door", sorted(DOORS))
def test_out3_control_a_second_run_replaces_its_own_file(tmp_path: Path, door: str) -> None:
    name, argv = DOORS[door]
    first, second = kd(ROOT, *argv, str(tmp_path), timeout=120), kd(ROOT, *argv, str(tmp_path), timeout=120)
    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert (tmp_path / f".{name}.kernodeck-file").is_file()


def test_control2_export_keeps_the_users_file(tmp_path: Path) -> None:
    mine = tmp_path / "kernodeck.def"
    mine.write_text("my own\n", encoding="utf-8")
    proc = kd(ROOT, "export", "--format", "apptainer", "--out", str(tmp_path), timeout=120)
    assert proc.returncode == 2 and mine.read_text(encoding="utf-8") == "my own\n", proc.stderr


def test_out4_export_into_a_dossier_leaves_nothing_called_foreign(tmp_path: Path) -> None:
    from kernodeck import outdir

    dossier = finished_dossier(tmp_path / "base")
    proc = kd(ROOT, "export", "--format", "apptainer", "--out", str(dossier), timeout=120)
    assert proc.returncode == 2 or outdir.foreign(dossier) == [], outdir.foreign(dossier)


def test_out4_the_refusal_names_the_dossier(tmp_path: Path) -> None:
    dossier = finished_dossier(tmp_path / "base")
    proc = kd(ROOT, "export", "--format", "apptainer", "--out", str(dossier), timeout=120)
    assert proc.returncode == 2 and f"is inside {dossier}, a dossier Kernodeck wrote whole" in proc.stderr, proc.stderr
    assert not (dossier / "kernodeck.def").exists()


def test_control5_a_users_file_in_a_dossier_is_named(tmp_path: Path) -> None:
    from kernodeck import outdir

    dossier = finished_dossier(tmp_path / "base")
    (dossier / "mine.txt").write_text("notes\n", encoding="utf-8")
    assert outdir.foreign(dossier) == ["mine.txt"]


# --- WINDOW1 ---------------------------------------------------------------------------------------------------------

SMOKE = '''
import numpy as np
from kernodeck.inenv import seen

CALLS = []


class Output:
    """An output that converts itself on demand (a lazy tensor): its code runs where Kernodeck reads it."""

    def __array__(self, dtype=None, copy=None):
        CALLS.append(("__array__", seen.ON[0]))
        return np.zeros(3)


class Answer(dict):
    def get(self, key, default=None):
        CALLS.append(("get", seen.ON[0]))
        return super().get(key, default)


def smoke(module, device):
    CALLS.append(("smoke", seen.ON[0]))
    return Answer(output=Output(), reference=np.zeros(3), path="compiled")
'''


def _smoke_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """The extensions step's smoke check of a project's ``checks/smoke.py`` (the window stubbed as world.window marks
    it: seen.ON[0] True inside), passed: each call of the project's code and whether a window was open."""
    record, calls = smoke_in_window(tmp_path, monkeypatch, SMOKE, "kdext")
    assert record is not None  # the declared path taken: not refused
    return calls


def test_window1_no_code_of_the_smoke_answer_runs_outside_its_window(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _smoke_calls(tmp_path, monkeypatch)
    assert all(inside for _, inside in calls), calls


def test_control3_the_smoke_call_itself_runs_inside_its_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _smoke_calls(tmp_path, monkeypatch)
    assert calls[0] == ("smoke", True) and {name for name, _ in calls} >= {"get", "__array__"}, calls


# --- CAL3 ------------------------------------------------------------------------------------------------------------

# Each is read by a library under a recorded prefix, and needed for a run to start (or to find its cache) on some
# machines; none picks a kernel's code path or precision.
NEEDED = ["HSA_OVERRIDE_GFX_VERSION", "NCCL_P2P_DISABLE", "NCCL_SOCKET_IFNAME", "PYTORCH_CUDA_ALLOC_CONF",
          "KMP_DUPLICATE_LIB_OK", "TORCH_HOME", "CUDA_CACHE_PATH"]


@pytest.mark.parametrize("name", NEEDED)
def test_cal3_what_a_run_needs_to_start_stays_in_the_variations(name: str) -> None:
    assert not start.numerics(name)


@pytest.mark.parametrize("name", NEEDED)
def test_cal3_premise_each_is_recorded(name: str) -> None:
    assert name.startswith(start.RECORDED_PREFIXES)


@pytest.mark.parametrize("name", ["HF_HOME", "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH"])
def test_control4_the_listed_needs_stay(name: str) -> None:
    assert not start.numerics(name)


@pytest.mark.parametrize("name", ["NCCL_ALGO", "NCCL_PROTO", "MKL_CBWR", "PYTORCH_TUNABLEOP_ENABLED", "OMP_NUM_THREADS",
                                  "NVIDIA_TF32_OVERRIDE", "HSA_XNACK", "TORCHINDUCTOR_CACHE_DIR"])
def test_cal3_what_picks_a_kernel_is_still_left_out(name: str) -> None:
    assert start.numerics(name)


# --- MSG3 ------------------------------------------------------------------------------------------------------------


def _foreign_library_tip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> str:
    """The TIP of the foreign-library refusal (inenv/libraries.py) in a run of ``mode``."""
    from kernodeck.inenv import _common, libraries

    lib = tmp_path / "libfoo.so"
    lib.write_bytes(b"")
    monkeypatch.setattr(libraries, "foreign", lambda *args: [{"library": "libfoo.so", "folder": str(tmp_path),
                                                               "variable": "LD_LIBRARY_PATH"}])
    monkeypatch.setattr(libraries, "mapped", lambda: [str(lib)])
    ctx = _common.Context(config={"mode": mode}, out=tmp_path)
    with pytest.raises(_common.CheckFailed) as failed:
        libraries.check(ctx)
    details: dict[str, str] = failed.value.details
    return details["tip"]


def test_msg3_the_foreign_library_refusal_tips_the_session_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "nox -s reference" in _foreign_library_tip(tmp_path, monkeypatch, "reference")


@pytest.mark.parametrize("config", [{"mode": "verify", "session": "calibrate"}, {"mode": "verify", "session": "bisect"},
                                    {"mode": "verify", "session": "upgrade"}])
def test_msg3_each_session_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, str]) -> None:
    from kernodeck.inenv import _common

    assert _common.Context(config=config, out=tmp_path).again == f"nox -s {config['session']}"


def test_msg3_control_a_verify_run_tips_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _foreign_library_tip(tmp_path, monkeypatch, "verify").endswith("then: nox -s verify")
