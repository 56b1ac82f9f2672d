"""Red-team pass 40 (7a2f80b: pass 39's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside premises (passing today: the setup reaches the vulnerable path) and controls.

TWIN5 (fixed: the record is sealed with the pins, lockfile.body_digest; a lock resealed by hand is the lock's word, as
its pins are; TWIN4's fix, the lock's ``# file-name`` record; FALSE PASS of the lock check, and the refusal's TIP
launders the swap): the record that binds a file's name to its sha256 at a URL naming no file is a header line of the
requirements lock, outside its body digest (check_seal covers the pins only) and checked against nothing but the twin it
binds. A change that swaps numpy's cp311 and cp312 wheels' names in the twin AND in those two header lines (the pins,
the body digest untouched) is refused only as "not written for this lock" (the twin's requirements-lock-sha256), and the
TIP ``lock --pylock-only`` then takes the lock's lines as the index's word: ``twinform.reusable`` keeps every swapped
entry (bound by the record), the index is never asked, and the twin written passes ``check.twin_disagreements``: an
installer of the pylock installs the cp312 wheel's bytes in the cp311 env, hash-checked (setting the twin's
requirements-lock-sha256 by hand passes the check without the TIP). CONTROL1: a hand edit of the pins is refused by the
seal; the swap in the twin alone is refused naming the recorded file (TWIN4's fix).

WINDOW4 (fixed: only a real function, or a bound method's, is read; WINDOW2's fix, leftover._own_code; FALSE claim of
the closed world): ``_own_code`` reads the hook's function as ``getattr(func, "__func__", func)``, then its ``__code__``
and ``__globals__``: an application object whose class has a ``__func__`` attribute naming a standard library function
(``textwrap.dedent``), or ``__code__`` and ``__globals__`` of one, counts as that library's own code, and is left set as
sys.excepthook, sys.unraisablehook or a gc callback after the window: its OWN ``__call__`` (no standard library code
involved, so not the stated limit of a callback wrapped in the standard library's code) then runs on Kernodeck's thread
between windows, unwatched (on every gc collection). CONTROL2: the same object without the attribute is put back.

OUT7 (fixed: bisect signs only what its trials and report wrote, taken as each trial ended; OUT5's fix, bisect signs its
folder again at its end; LOST FILE): ``outdir.mark`` signs every entry found in the folder when the bisect ends, so a
file the user puts there while the bisect runs (hours of trials: notes, a log copied in) is listed as Kernodeck's, and
the next ``bisect --out SAME`` removes it without a word (``_folder``'s rmtree, the folder "one Kernodeck made").
CONTROL3: the same file added after the bisect ended is refused, named.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck import outdir
from kernodeck.errors import KernodeckError, LockfileError, UnsafeOut
from kernodeck.inenv import leftover
from kernodeck.lock import check, lockfile, pylock, twin, twinform
from kernodeck.lock.index_client import DistFile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.project import ROOT

PLATFORM = "cp311-linux_x86_64-cpu"
PLAT = parse_platform_id(load_project(ROOT), PLATFORM)
CP311 = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
CP312 = CP311.replace("cp311-cp311", "cp312-cp312")
CONTENT_ADDRESSED = "https://pypi.internal.example/api/files/{sha}"

# --- TWIN5 -----------------------------------------------------------------------------------------------------------


def _swapped_twin(tmp_path: Path, url_of: str) -> tuple[Path, Path]:
    """(test_redteam39's, TWIN4) The committed lock with the ``# file-name`` lines the writer records for numpy's
    cp311 and cp312 manylinux wheels served at URLs naming no file (``url_of``), and the twin the writer makes for it
    with those two wheels' hashes swapped under their names."""
    lock_path = ROOT / "lockfiles" / f"{PLATFORM}.txt"
    lock = lockfile.read(lock_path)
    known = twin.known_files(ROOT / "lockfiles" / f"pylock.{PLATFORM}.toml")
    a = next(f for f in known.values() if f.filename == CP311)
    b = next(f for f in known.values() if f.filename == CP312)
    served = dict(known)
    served[a.sha256] = DistFile(CP311, url_of.format(sha=a.sha256), a.sha256, a.size, a.upload_time)
    served[b.sha256] = DistFile(CP312, url_of.format(sha=b.sha256), b.sha256, b.size, b.upload_time)
    known[a.sha256] = DistFile(CP312, url_of.format(sha=a.sha256), a.sha256, a.size, a.upload_time)
    known[b.sha256] = DistFile(CP311, url_of.format(sha=b.sha256), b.sha256, b.size, b.upload_time)

    def per_pin(table: dict[str, DistFile]) -> dict[str, list[DistFile]]:
        return {pin.name: sorted((table[h] for h in pin.hashes if h in table), key=lambda f: f.filename)
                for pin in lock.pins}

    target, twin_file = tmp_path / lock_path.name, tmp_path / f"pylock.{PLATFORM}.toml"
    text = lockfile.with_header(lock_path.read_text(encoding="utf-8"), twinform.FILE_NAME,
                                twinform.file_names(per_pin(served)))
    target.write_text(text, encoding="utf-8")
    twin_file.write_text(pylock.render(lockfile.parse_text(text, target), PLAT, per_pin(known), text),
                         encoding="utf-8")
    return target, twin_file


def _header_swapped(tmp_path: Path) -> tuple[Path, Path]:
    """TWIN4's swapped twin (numpy's cp311 and cp312 wheels at content-addressed URLs, each name over the other's
    bytes) beside its lock whose two ``# file-name`` lines are swapped to match, by hand: the header's lines only, the
    pins and the body digest as they were (no reseal)."""
    target, twin_file = _swapped_twin(tmp_path, CONTENT_ADDRESSED)
    text = target.read_text(encoding="utf-8")
    recorded = lockfile.parse_text(text, target).header[twinform.FILE_NAME]
    swapped = {line: line.replace(CP311, "@").replace(CP312, CP311).replace("@", CP312) for line in recorded}
    prefix = f"# {twinform.FILE_NAME}: "
    edited = "\n".join(prefix + swapped[line[len(prefix):]] if line.startswith(prefix) else line
                       for line in text.split("\n"))
    assert edited != text and lockfile.split(edited)[1] == lockfile.split(text)[1]
    target.write_text(edited, encoding="utf-8")
    return target, twin_file


def _the_tips_rewrite(target: Path, twin_file: Path) -> None:
    """What ``lock --pylock-only`` (write.write_pylock_only) does with the pair, the index unreachable (no_index): the
    twin's files its lock binds reused unasked, the lock's record rewritten from them."""
    text = target.read_text(encoding="utf-8")
    named, pylock_text = pylock.build(text, target, PLAT, [], no_index=True,
                                      known=twinform.reusable(twin.known_files(twin_file), lockfile.read(target)))
    target.write_text(named, encoding="utf-8")
    twin_file.write_text(pylock_text, encoding="utf-8")


def _sha_named(twin_file: Path, name: str) -> str:
    (entry,) = [f for f in twin.known_files(twin_file).values() if f.filename == name]
    return entry.sha256


def test_twin5_a_hand_edit_of_the_record_is_refused_by_the_seal(tmp_path: Path) -> None:
    """The record is sealed with the pins (lockfile.body_digest): an edit of it is one of the lock, named as such,
    before the twin is read; the TIP's rewrite (write_pylock_only reads the lock first) is refused with it."""
    target, _ = _header_swapped(tmp_path)
    with pytest.raises(LockfileError, match=r"the file names it records\) no longer match the header's body-digest"):
        lockfile.read(target)


def test_twin5_the_tips_rewrite_never_leaves_a_wheels_name_over_another_wheels_bytes(tmp_path: Path) -> None:
    target, twin_file = _header_swapped(tmp_path)
    cp311_bytes = _sha_named(twin_file, CP312)  # the swap: the entry named cp312 holds the cp311 wheel's sha256
    try:
        _the_tips_rewrite(target, twin_file)
    except KernodeckError:  # refused (the index asked and unreachable): nothing false written
        return
    assert (_sha_named(twin_file, CP311) == cp311_bytes
            or check.twin_disagreements(target, twin_file, PLAT) != [])


def test_twin5_a_swap_recorded_by_hand_in_the_lock_and_twin_is_refused(tmp_path: Path) -> None:
    target, twin_file = _header_swapped(tmp_path)
    text = target.read_text(encoding="utf-8")
    lock = lockfile.parse_text(text, target)
    files = {pin.name: sorted((f for f in twin.known_files(twin_file).values() if f.sha256 in pin.hashes),
                              key=lambda f: f.filename) for pin in lock.pins}
    twin_file.write_text(pylock.render(lock, PLAT, files, text), encoding="utf-8")  # its lock-sha256 set to the edit
    with pytest.raises(LockfileError, match="body-digest"):
        check.twin_disagreements(target, twin_file, PLAT)


def test_twin5_control_the_writers_own_record_passes_its_seal(tmp_path: Path) -> None:
    target, _ = _swapped_twin(tmp_path, CONTENT_ADDRESSED)
    assert lockfile.read(target).header[twinform.FILE_NAME]


def test_control1_a_hand_edit_of_the_pins_is_refused_by_the_seal(tmp_path: Path) -> None:
    target, _ = _header_swapped(tmp_path)
    text = target.read_text(encoding="utf-8")
    target.write_text(text.replace("numpy==2.4.6", "numpy==2.4.5"), encoding="utf-8")
    with pytest.raises(LockfileError, match="body-digest"):
        lockfile.read(target)


def test_control1_the_swap_in_the_twin_alone_is_refused_naming_the_recorded_file(tmp_path: Path) -> None:
    target, twin_file = _swapped_twin(tmp_path, CONTENT_ADDRESSED)
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any(f"whose file is {CP312}" in line for line in found), found


# --- WINDOW4 ---------------------------------------------------------------------------------------------------------

CALLS: list[Any] = []


class SaysFunc:
    """The application's hook: its own ``__call__``, and a ``__func__`` naming a standard library function."""

    __func__ = staticmethod(textwrap.dedent)

    def __call__(self, *args: Any) -> None:
        CALLS.append(args)


class SaysCode:
    """The application's hook: its own ``__call__``, and a standard library function's code and module globals."""

    __code__ = textwrap.dedent.__code__
    __globals__ = vars(textwrap)

    def __call__(self, *args: Any) -> None:
        CALLS.append(args)


class Plain:
    def __call__(self, *args: Any) -> None:
        CALLS.append(args)


@pytest.fixture
def hooks_kept() -> Iterator[None]:
    saved = (sys.excepthook, sys.unraisablehook, list(gc.callbacks))
    CALLS.clear()
    yield
    sys.excepthook, sys.unraisablehook = saved[:2]
    gc.callbacks[:] = saved[2]


def _left(hook: Any) -> Any:
    """Set ``hook`` inside a window (leftover.taken, put_back: as world.window does); the gc callbacks after it."""
    before = leftover.taken()
    sys.excepthook = hook
    sys.unraisablehook = hook
    gc.callbacks.append(hook)
    leftover.put_back(before)
    return hook


def test_window4_premise_the_standard_library_function_is_trusted_code() -> None:
    assert textwrap.dedent.__code__.co_filename.startswith(sys.base_prefix)
    assert leftover._own_code(textwrap.dedent)


@pytest.mark.parametrize("kind", [SaysFunc, SaysCode])
def test_window4_an_application_object_is_not_library_code_whatever_it_carries(kind: type) -> None:
    assert not leftover._own_code(kind())


@pytest.mark.parametrize("kind", [SaysFunc, SaysCode])
@pytest.mark.usefixtures("hooks_kept")
def test_window4_an_application_object_is_put_back_whatever_it_says_its_function_is(kind: type) -> None:
    hook = _left(kind())
    assert sys.excepthook is not hook and sys.unraisablehook is not hook and hook not in gc.callbacks


@pytest.mark.usefixtures("hooks_kept")
def test_window4_the_applications_call_no_longer_runs_between_windows() -> None:
    _left(SaysFunc())
    gc.collect()
    assert not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_control2_the_same_object_without_the_attribute_is_put_back() -> None:
    hook = _left(Plain())
    assert sys.excepthook is not hook and sys.unraisablehook is not hook and hook not in gc.callbacks
    gc.collect()
    assert not CALLS


# --- OUT7 ------------------------------------------------------------------------------------------------------------


def _lock(tmp: Path, name: str, versions: dict[str, str]) -> lockfile.Lockfile:
    body = "".join(f"{n}=={v} \\\n    --hash=sha256:{v.replace('.', '') * 32}\n" for n, v in sorted(versions.items()))
    path = tmp / name
    path.write_text(lockfile.render([("platform", PLATFORM)], body), encoding="utf-8")
    return lockfile.read(path, require_header=False)


def _bisect_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, during: Any) -> tuple[Any, Any, Path]:
    """A bisect run to its end in its --out folder (as test_redteam39's finished_bisect), ``during(folder)`` called in
    its first trial's checks (the user, while it runs)."""
    from kernodeck.env import rebuild as rebuilding
    from kernodeck.lock import lockdiff
    from kernodeck.project.platforms import resolve_platform
    from kernodeck.upgrade import bisect as bisecting
    from kernodeck.upgrade.relock import Drift

    project = dataclasses.replace(load_project(ROOT), venv_root=tmp_path / "venvs", runs=tmp_path / "runs")
    plat = resolve_platform(project, PLATFORM)
    good = _lock(tmp_path, "good.txt", {"a": "1.0", "b": "1.0"})
    bad = _lock(tmp_path, "bad.txt", {"a": "2.0", "b": "2.0"})
    d = lockdiff.diff(good, bad)

    def envs(project: Any, plat: Any, lock_path: Path, **kw: Any) -> SimpleNamespace:
        env = project.venv_root / "env"
        env.mkdir(parents=True, exist_ok=True)
        return SimpleNamespace(python=env / "bin" / "python", reused=not kw["fresh"])

    def checks(self: Any, python: Path, folder: Path) -> list[Any]:
        during(self.folder)
        return []

    monkeypatch.setattr(rebuilding, "rebuild", envs)
    monkeypatch.setattr(bisecting._Trials, "checks", checks)
    monkeypatch.setattr(bisecting._Trials, "regroup", lambda self, python: None)
    monkeypatch.setattr(Drift, "from_steps", classmethod(lambda cls, steps: SimpleNamespace(
        holds=True, failure="", outputs=())))
    folder = bisecting._folder(project, plat, tmp_path / "runs" / "bisect")
    trials = bisecting._Trials(project, plat, good, bad, d.changes, "sha256:none", folder, {}, None)
    try:
        bisecting._bisect(trials, d, plat, folder)
    finally:
        trials.close()
    return project, plat, folder


def _notes(folder: Path) -> None:
    notes = folder / "notes.md"
    if not notes.exists():
        notes.write_text("the user's notes on this bisect\n", encoding="utf-8")


def test_out7_the_users_file_is_left_unsigned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, folder = _bisect_with(tmp_path, monkeypatch, _notes)
    assert (folder / "notes.md").is_file() and outdir.foreign(folder) == ["notes.md"]


def test_out7_the_next_bisect_keeps_a_file_the_user_added_while_it_ran(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = _bisect_with(tmp_path, monkeypatch, _notes)
    with contextlib.suppress(UnsafeOut):  # refused, naming it: kept
        bisecting._folder(project, plat, folder)
    assert (folder / "notes.md").is_file()


def test_control3_a_file_added_after_the_bisect_ended_is_refused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = _bisect_with(tmp_path, monkeypatch, lambda folder: None)
    _notes(folder)
    with pytest.raises(UnsafeOut, match=r"notes\.md"):
        bisecting._folder(project, plat, folder)
    assert (folder / "notes.md").is_file()
