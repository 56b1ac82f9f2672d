"""Red-team pass 39 (9fbf3b5: pass 38's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside premises (passing today: the setup reaches the vulnerable path) and controls.

TWIN4 (fixed: the writer records in the lock the name of each file at a URL naming none, # file-name, and the twin's
name is held to it; TWIN3's fix, the twin check; FALSE PASS of the lock check): at a URL that names no distribution file
(a PEP 691 index's ``/api/files/<sha256>``, a download endpoint ``/download?file=…``, a file's URL with a trailing slash
or ``;params``) the check leaves the file's ``name`` to the index's word, held only to the package's name and version.
Nothing then holds the NAME to the HASH: a twin whose cp311 wheel entry carries the cp312 wheel's sha256 (and URL), and
the cp312 entry the cp311 one's, passes ``check.twin_disagreements`` (lock --check, rebuild, verify's lock-check): the
same hashes per pin, each name a valid file of numpy 2.4.6. An installer of the pylock (uv reads ``name`` for a wheel's
tags) picks the entry named for cp311 and installs the cp312 wheel's bytes, hash-checked. CONTROL1: the same swap at
URLs that name their files is refused (TWIN2).

OUT5 (fixed: bisect signs its folder again when it ends, finished or stopped; the --out rule's folder doors; WRONG
words, FALSE FAIL): ``bisect`` marks its folder once, empty, before the trials (bisect._folder), and never again: its
finished folder (try-NN/, bisect.md, bisect.json) is refused by the next ``bisect --out SAME`` as "4 entries Kernodeck
did not write", though Kernodeck wrote every one (the docstring: "new, or one Kernodeck made before, emptied").
CONTROL2: the upgrade's folder is signed again at its end.

OUT6 (fixed: outdir.check refuses a folder inside a marked one, but the one this process is filling; OUT4's fix covered
single files only; WRONG words and a FALSE FAIL at the next run): a FOLDER ``--out`` inside a folder Kernodeck wrote
whole is accepted (outdir.check looks at the --out itself, never at a marked folder above it, as check_file does since
OUT4): ``compare A B --out DOSSIER/cmp`` writes rc 0, and the dossier's next run refuses ``cmp/`` as an entry Kernodeck
did not write. CONTROL3: a single file there (export) is refused, naming the dossier.

WINDOW2 (fixed: leftover._own_code holds the code to the trusted file's own code objects and module globals; the closed
world's leftovers, leftover.put_back; FALSE claim of the closed world): what the application sets for the interpreter to
call later (sys.excepthook, sys.unraisablehook, threading.excepthook, a gc callback, a signal handler) is put back at
the window's end "unless what is set now is the env's or the standard library's own code", judged by the function's
``__code__.co_filename``, a name the application chooses (``compile(src, os.__file__, "exec")``,
``code.replace(co_filename=…)``): its function under a standard library file's name stays, and runs on Kernodeck's
thread between windows, unwatched (a gc callback on every collection). CONTROL4: the same function under its own file's
name is put back.

WINDOW3 (fixed: the path is an exact str, str.__str__; WINDOW1's fix, extensions.plain; FALSE claim of the closed
world): the smoke answer's path is made "plain" by ``str(path)``, which returns the project's own str subclass as it is
(``__str__`` returning ``self``): the record keeps the project's object, and extensions.compare's ``result.get("path")
!= expected`` runs its ``__ne__`` after the window closed, on Kernodeck's thread, unwatched (its answer, False, passes a
"fallback" path as the declared "compiled"; the path is the project's own word either way, the unwatched call is the
finding). CONTROL5: the smoke call itself runs inside its window.

CAL4 (fixed: start.declared_loaders, kept as the declared variables; CAL3's fix, the keep-list; a variable a run needs
to start dropped): a library the project DECLARES for its in-env processes (``[tool.kernodeck.environment] ld-preload``:
LD_PRELOAD's libgomp on aarch64, an allocator, NCCL's network plugin; verify passes it, recorded, and refuses it
undeclared) is left out of every calibrate variation: the loaders' variables are recorded (``LD_``, ``NCCL_``) and not
in RUN_NEEDS, and the keep-list knows only ``variables`` as declared (the configuration's ``libraries`` names it). The
declared run then is not verify's run (a run that needs the library fails to start; one it changes numbers in measures
other noise). CONTROL6: LD_LIBRARY_PATH stays.

MSG4 (fixed: the TIP names calibrate; MSG3's class, a TIP of calibrate): when calibrate's declared variation fails
before its margin search ended, the ERROR names that failure and the TIP says ``nox -s verify (its report names the
failing step)``: verify runs another process (the caller's variables kept, CAL4's preload among them; no margin search)
that may pass, naming nothing, and the failed variation's own record went with the staging folder (CONTROL7:
outdir.staged removes it on the error).
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck import outdir
from kernodeck.errors import UnsafeOut
from kernodeck.lock import check, lockfile, pylock, twin, twinform
from kernodeck.lock.index_client import DistFile
from tests.helpers import standinbisect
from tests.helpers.hookwindow import kept_hooks, left
from tests.helpers.outfolders import finished_dossier
from tests.helpers.project import ROOT, kd
from tests.helpers.smokewindow import smoke_in_window
from tests.helpers.twinswap import CP311, CP312, NO_FILE_URLS, PLAT, PLATFORM, swapped_twin
from tests.helpers.variationenv import AVX512, variation_env

# --- TWIN4 -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(NO_FILE_URLS))
def test_twin4_a_wheels_name_carrying_another_wheels_hash_is_refused(tmp_path: Path, kind: str) -> None:
    target, twin_file = swapped_twin(tmp_path, NO_FILE_URLS[kind])
    assert check.twin_disagreements(target, twin_file, PLAT) != []


@pytest.mark.parametrize("kind", sorted(NO_FILE_URLS))
def test_twin4_the_refusal_names_the_name_the_lock_records(tmp_path: Path, kind: str) -> None:
    target, twin_file = swapped_twin(tmp_path, NO_FILE_URLS[kind])
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any(f"the file {CP311} in" in line and f"whose file is {CP312}" in line for line in found), found


def test_twin4_a_lock_recording_no_name_for_such_a_file_is_named(tmp_path: Path) -> None:
    """A twin at a URL naming no file beside a lock that records no name for it (written by hand, or by a Kernodeck
    from before the record): its name is the twin's word alone, refused."""
    lock_path = ROOT / "lockfiles" / f"{PLATFORM}.txt"
    text = lock_path.read_text(encoding="utf-8")  # records no name
    lock = lockfile.parse_text(text, lock_path)
    known = twin.known_files(ROOT / "lockfiles" / f"pylock.{PLATFORM}.toml")
    a = next(f for f in known.values() if f.filename == CP311)
    known[a.sha256] = DistFile(CP311, f"https://pypi.internal.example/api/files/{a.sha256}", a.sha256, a.size,
                               a.upload_time)
    files = {pin.name: sorted((known[h] for h in pin.hashes if h in known), key=lambda f: f.filename)
             for pin in lock.pins}
    target, twin_file = tmp_path / lock_path.name, tmp_path / f"pylock.{PLATFORM}.toml"
    shutil.copy2(lock_path, target)
    twin_file.write_text(pylock.render(lock, PLAT, files, text), encoding="utf-8")
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any("records no name for its sha256" in line for line in found), found


def test_twin4_the_writer_records_names_only_for_files_at_urls_naming_none() -> None:
    """PyPI's and the PyTorch index's files are at URLs naming them: the committed locks record none."""
    for lock_path in sorted((ROOT / "lockfiles").glob("cp3*.txt")):
        assert twinform.FILE_NAME not in lockfile.read(lock_path).header, lock_path


def test_twin4_the_writer_records_the_names_and_its_twin_passes(tmp_path: Path) -> None:
    """pylock.build (lock and lock --pylock-only) over an index serving numpy's wheels at content-addressed URLs: the
    lock's text comes back with their names recorded, its body unchanged, and the twin written with it passes."""
    lock_path = ROOT / "lockfiles" / f"{PLATFORM}.txt"
    text = lock_path.read_text(encoding="utf-8")
    known = twin.known_files(ROOT / "lockfiles" / f"pylock.{PLATFORM}.toml")
    for digest, entry in list(known.items()):
        if entry.filename.startswith("numpy-"):
            known[digest] = DistFile(entry.filename, f"https://pypi.internal.example/api/files/{digest}", digest,
                                     entry.size, entry.upload_time)
    named, pylock_text = pylock.build(text, lock_path, PLAT, [], no_index=True, known=known)
    recorded = lockfile.parse_text(named, lock_path).header[twinform.FILE_NAME]
    assert recorded and all(line.split(" ", 1)[1].startswith("numpy-2.4.6") for line in recorded), recorded
    assert lockfile.split(named)[1] == lockfile.split(text)[1]  # the pins as they were
    target, twin_file = tmp_path / lock_path.name, tmp_path / f"pylock.{PLATFORM}.toml"
    target.write_text(named, encoding="utf-8")
    twin_file.write_text(pylock_text, encoding="utf-8")
    assert check.twin_disagreements(target, twin_file, PLAT) == []


def test_twin4_a_rewrite_never_takes_a_twins_unbound_name_again(tmp_path: Path) -> None:
    """What lock --pylock-only (the refusal's TIP) and a relock reuse of the twin unasked: a name bound to its file,
    by its URL or by the lock's record; a swapped name is asked of the index again, never recorded from the twin."""
    target, twin_file = swapped_twin(tmp_path, NO_FILE_URLS["content-addressed"])
    known = twin.known_files(twin_file)
    kept = twinform.reusable(known, lockfile.read(target))
    swapped = {f.sha256 for f in known.values() if f.filename in (CP311, CP312)}
    assert swapped and not swapped & set(kept) and len(kept) == len(known) - 2
    assert not {f.sha256 for f in known.values() if f.filename == CP311} & set(twinform.reusable(known, None))
    (tmp_path / "named").mkdir()
    named_twin = swapped_twin(tmp_path / "named", "https://pypi.internal.example/packages/{file}")[1]
    assert len(twinform.reusable(twin.known_files(named_twin), None)) == len(known) - 2  # TWIN2's swap too


def test_control1_the_swap_at_urls_that_name_their_files_is_refused(tmp_path: Path) -> None:
    target, twin_file = swapped_twin(tmp_path, "https://pypi.internal.example/packages/{file}")
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any(f"whose file is {CP311}" in line for line in found), found


# --- OUT5 ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def finished_bisect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Path]:
    """A bisect run to its end in its --out folder, the env builds and the in-env steps stood in for (as
    test_bisect.py does): its project, platform and folder."""
    return standinbisect.finished_bisect(tmp_path, monkeypatch)


def test_out5_a_finished_bisect_folder_is_kernodecks(finished_bisect: tuple[Any, Any, Path]) -> None:
    _, _, folder = finished_bisect
    assert outdir.foreign(folder) == []


def test_out5_the_next_bisect_replaces_its_own_folder(finished_bisect: tuple[Any, Any, Path]) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = finished_bisect
    assert bisecting._folder(project, plat, folder) == folder


def test_out5_a_user_file_added_to_a_finished_bisect_folder_is_still_refused(
        finished_bisect: tuple[Any, Any, Path]) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = finished_bisect
    (folder / "notes.md").write_text("mine\n", encoding="utf-8")
    with pytest.raises(UnsafeOut, match=r"entry Kernodeck did not write.*notes\.md"):
        bisecting._folder(project, plat, folder)


def test_control2_a_finished_upgrade_folder_is_signed_at_its_end(tmp_path: Path) -> None:
    """relock.upgrade marks its folder again after writing upgrade.md and upgrade.json (the mark bisect lacks)."""
    import inspect

    from kernodeck.upgrade import relock

    source = inspect.getsource(relock.upgrade)
    assert source.rindex('outdir.mark(folder, "upgrade")') > source.index('"upgrade.json"')


# --- OUT6 ------------------------------------------------------------------------------------------------------------


def test_out6_compare_into_a_dossier_leaves_nothing_called_foreign(tmp_path: Path) -> None:
    dossier = finished_dossier(tmp_path / "base")
    proc = kd(ROOT, "compare", "dossier/reference", "dossier/reference", "--out", str(dossier / "cmp"), timeout=120)
    assert proc.returncode == 2 or outdir.foreign(dossier) == [], (proc.returncode, outdir.foreign(dossier))


def test_out6_a_folder_out_inside_a_dossier_is_refused_naming_it(tmp_path: Path) -> None:
    dossier = finished_dossier(tmp_path / "base")
    with pytest.raises(UnsafeOut, match="a dossier Kernodeck wrote whole"):
        outdir.check(dossier / "cmp", what="compare's output", tip="nox -s compare -- A B --out NEW-FOLDER")


def test_out6_compare_into_a_dossier_is_refused_naming_it(tmp_path: Path) -> None:
    dossier = finished_dossier(tmp_path / "base")
    proc = kd(ROOT, "compare", "dossier/reference", "dossier/reference", "--out", str(dossier / "cmp"), timeout=120)
    assert proc.returncode == 2 and f"is inside {dossier}, a dossier Kernodeck wrote whole" in proc.stderr, proc.stderr
    assert not (dossier / "cmp").exists() and outdir.foreign(dossier) == []


def test_out6_control_a_folder_this_process_is_filling_takes_its_outputs(tmp_path: Path) -> None:
    """An upgrade's verify writes its dossier inside the upgrade's folder, signed first (outdir.filling)."""
    dossier = finished_dossier(tmp_path / "upgrade")
    with outdir.filling(dossier):
        assert outdir.check(dossier / "verify", what="the dossier", tip="t") == (dossier / "verify").resolve()
    with pytest.raises(UnsafeOut):
        outdir.check(dossier / "verify", what="the dossier", tip="t")


def test_control3_a_single_file_in_a_dossier_is_refused_naming_it(tmp_path: Path) -> None:
    dossier = finished_dossier(tmp_path / "base")
    with pytest.raises(UnsafeOut, match=f"is inside {dossier}, a dossier Kernodeck wrote whole"):
        outdir.check_file(dossier / "matrix.json", what="the matrix", tip="nox -s matrix")


# --- WINDOW2 ---------------------------------------------------------------------------------------------------------

HOOK = "def hook(*args):\n    CALLS.append(args)\n"


def _hook(filename: str) -> tuple[Any, list[Any]]:
    """The application's function (appending its calls to a list), compiled under ``filename``."""
    calls: list[Any] = []
    space: dict[str, Any] = {"CALLS": calls}
    exec(compile(HOOK, filename, "exec"), space)  # the application's code, as it may compile it
    return space["hook"], calls


@pytest.fixture
def hooks_kept() -> Iterator[None]:
    """sys.excepthook, sys.unraisablehook and gc.callbacks as they were, whatever a test leaves."""
    with kept_hooks():
        yield


def _left_after_window(filename: str) -> tuple[Any, list[Any]]:
    """The hooks set inside a window (leftover.taken at its start, put_back at its end, as world.window does), by a
    function compiled under ``filename``: what is set after the window, and the function's calls."""
    hook, calls = _hook(filename)
    return left(hook, as_excepthook=True), calls


@pytest.mark.usefixtures("hooks_kept")
def test_window2_the_applications_hooks_are_put_back_whatever_their_code_is_named() -> None:
    hook, _ = _left_after_window(os.__file__)
    assert sys.excepthook is not hook and sys.unraisablehook is not hook and hook not in gc.callbacks


@pytest.mark.usefixtures("hooks_kept")
def test_window2_the_applications_gc_callback_no_longer_runs_between_windows() -> None:
    from kernodeck.inenv import leftover

    hook, calls = _left_after_window(os.__file__)
    assert not leftover._own_code(hook) and hook not in gc.callbacks
    gc.collect()
    assert not calls


@pytest.mark.usefixtures("hooks_kept")
def test_control4_the_same_function_under_its_own_name_is_put_back(tmp_path: Path) -> None:
    hook, _ = _left_after_window(str(tmp_path / "app.py"))
    assert sys.excepthook is not hook and sys.unraisablehook is not hook and hook not in gc.callbacks


def test_window2_premise_the_window_puts_back_through_leftover() -> None:
    import inspect

    from kernodeck.inenv import world

    assert "leftover.put_back(traces)" in inspect.getsource(world.window)


# --- WINDOW3 ---------------------------------------------------------------------------------------------------------

SMOKE = '''
import numpy as np
from kernodeck.inenv import seen

CALLS = []


class Path(str):
    """The path the call took, as the extension names it: a str of its own (its comparison is its code)."""

    def __str__(self):
        return self

    def __eq__(self, other):
        CALLS.append(("__eq__", seen.ON[0]))
        return True

    def __ne__(self, other):
        CALLS.append(("__ne__", seen.ON[0]))
        return False

    __hash__ = str.__hash__


def smoke(module, device):
    CALLS.append(("smoke", seen.ON[0]))
    return {"output": np.zeros(3), "reference": np.zeros(3), "path": Path("fallback")}
'''


def _smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any] | None, list[tuple[str, bool]]]:
    """The extensions step's smoke check of a project's ``checks/smoke.py`` (declared path "compiled"; the window
    stubbed as world.window marks it: seen.ON[0] True inside): its record (None: refused) and each call of the
    project's code with whether a window was open."""
    return smoke_in_window(tmp_path, monkeypatch, SMOKE, "kdext39")


def test_window3_no_code_of_the_smoke_answers_path_runs_outside_its_window(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _, calls = _smoke(tmp_path, monkeypatch)
    assert all(inside for _, inside in calls), calls


def test_window3_a_fallback_path_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    record, _ = _smoke(tmp_path, monkeypatch)
    assert record is None


def test_window3_plain_keeps_an_exact_str(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The path is the call's own word, made an exact str inside the window: no code of the answer's runs later."""
    from kernodeck.inenv import extensions

    class Mine(str):
        def __str__(self) -> str:
            return self

    made = extensions.plain("x", {"output": [1.0], "reference": [1.0], "path": Mine("compiled")})
    assert type(made["path"]) is str and made["path"] == "compiled"


def test_control5_the_smoke_call_itself_runs_inside_its_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, calls = _smoke(tmp_path, monkeypatch)
    assert calls[0] == ("smoke", True)


# --- CAL4 ------------------------------------------------------------------------------------------------------------

# a library the project declares ([tool.kernodeck.environment] ld-preload) for its run to start at all: libgomp on
# aarch64 ("cannot allocate memory in static TLS block"), an allocator a model fits with, NCCL's network plugin
PRELOADS = [("LD_PRELOAD", "libgomp.so.1"), ("LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
            ("NCCL_NET_PLUGIN", "libnccl-net-ofi.so")]


def _variation_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> dict[str, str]:
    """The environment calibrate's declared variation starts with, the caller's ``name`` set to ``value`` and
    declared in ld-preload (the runner configuration's libraries, as runbuild puts them)."""
    return variation_env(tmp_path, monkeypatch, {name: value}, libraries=[os.path.basename(value)])


@pytest.mark.parametrize("name,value", PRELOADS)
def test_cal4_a_declared_preload_stays_in_the_variations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                         value: str) -> None:
    assert _variation_env(tmp_path, monkeypatch, name, value).get(name) == value


@pytest.mark.parametrize("name,value", PRELOADS)
def test_cal4_verify_passes_it_declared_and_calibrate_shows_it_kept(monkeypatch: pytest.MonkeyPatch, name: str,
                                                                    value: str) -> None:
    from kernodeck.env import start
    from kernodeck.inenv.protocol import ConfigKey
    from kernodeck.measure import variations
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    monkeypatch.setenv(name, value)
    env = start.environ(RUNNER_ENV, [])
    assert env.get(name) == value and start.undeclared_preload(env, [os.path.basename(value)]) == []
    assert name not in variations.callers_numerics({ConfigKey.LIBRARIES: [os.path.basename(value)]})


@pytest.mark.parametrize("name,value", PRELOADS)
def test_cal4_an_undeclared_preload_is_still_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                                      value: str) -> None:
    from kernodeck.measure import variations

    monkeypatch.setenv(name, value + ":libother.so")  # one library no declaration names
    assert name not in _variation_env(tmp_path, monkeypatch, name, value + ":libother.so")
    assert name in variations.callers_numerics({"libraries": [os.path.basename(value)]})


def test_control6_the_loaders_path_stays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _variation_env(tmp_path, monkeypatch, "LD_LIBRARY_PATH", "/opt/lib").get("LD_LIBRARY_PATH") == "/opt/lib"


# --- MSG4 ------------------------------------------------------------------------------------------------------------


def _declared_run_failed(tmp_path: Path) -> Any:
    """calibrate's error when its declared variation failed before its margin search ended (tolerance_search)."""
    from kernodeck.errors import KernodeckError
    from kernodeck.measure import tolerance_search, variations

    (declared,) = [v for v in variations.plan(AVX512, 2, "cpu", "x86_64") if v.name == "declared"]
    failed = variations.VariationRun(declared, "declared", "failed",
                                     error="libgomp.so.1: cannot allocate memory in static TLS block")
    with pytest.raises(KernodeckError) as raised:
        tolerance_search._margins(tmp_path / "margins.json", [failed])
    return raised.value


def test_msg4_the_declared_runs_failure_tips_calibrate(tmp_path: Path) -> None:
    assert "nox -s calibrate" in str(_declared_run_failed(tmp_path).tip)


def test_msg4_the_error_names_the_variation_and_its_first_error(tmp_path: Path) -> None:
    error = _declared_run_failed(tmp_path)
    assert "calibrate's declared run failed" in str(error) and "static TLS block" in str(error)
    assert "nox -s verify" not in str(error.tip)


def test_control7_the_staged_calibration_folder_is_removed_on_an_error(tmp_path: Path) -> None:
    """The failed variation's own record goes with the staging folder (outdir.staged): only the TIP is left."""
    final = tmp_path / "calibration"
    with pytest.raises(RuntimeError), outdir.staged(final, "calibration") as staging:
        (staging / "declared").mkdir()
        raise RuntimeError("margins")
    assert not final.exists() and not list(tmp_path.iterdir())
