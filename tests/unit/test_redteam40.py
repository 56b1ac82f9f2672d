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
import gc
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck import outdir
from kernodeck.errors import KernodeckError, LockfileError, UnsafeOut
from kernodeck.inenv import leftover
from kernodeck.lock import check, lockfile, pylock, twin, twinform
from tests.helpers.hookwindow import CALLS, kept_hooks, left
from tests.helpers.standinbisect import finished_bisect
from tests.helpers.twinswap import CP311, CP312, NO_FILE_URLS, PLAT, swapped_twin

CONTENT_ADDRESSED = NO_FILE_URLS["content-addressed"]

# --- TWIN5 -----------------------------------------------------------------------------------------------------------


def _header_swapped(tmp_path: Path) -> tuple[Path, Path]:
    """TWIN4's swapped twin (numpy's cp311 and cp312 wheels at content-addressed URLs, each name over the other's
    bytes) beside its lock whose two ``# file-name`` lines are swapped to match, by hand: the header's lines only, the
    pins and the body digest as they were (no reseal)."""
    target, twin_file = swapped_twin(tmp_path, CONTENT_ADDRESSED)
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
    target, _ = swapped_twin(tmp_path, CONTENT_ADDRESSED)
    assert lockfile.read(target).header[twinform.FILE_NAME]


def test_control1_a_hand_edit_of_the_pins_is_refused_by_the_seal(tmp_path: Path) -> None:
    target, _ = _header_swapped(tmp_path)
    text = target.read_text(encoding="utf-8")
    target.write_text(text.replace("numpy==2.4.6", "numpy==2.4.5"), encoding="utf-8")
    with pytest.raises(LockfileError, match="body-digest"):
        lockfile.read(target)


def test_control1_the_swap_in_the_twin_alone_is_refused_naming_the_recorded_file(tmp_path: Path) -> None:
    target, twin_file = swapped_twin(tmp_path, CONTENT_ADDRESSED)
    found = check.twin_disagreements(target, twin_file, PLAT)
    assert any(f"whose file is {CP312}" in line for line in found), found


# --- WINDOW4 ---------------------------------------------------------------------------------------------------------

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
    with kept_hooks():
        yield


def test_window4_premise_the_standard_library_function_is_trusted_code() -> None:
    assert textwrap.dedent.__code__.co_filename.startswith(sys.base_prefix)
    assert leftover._own_code(textwrap.dedent)


@pytest.mark.parametrize("kind", [SaysFunc, SaysCode])
def test_window4_an_application_object_is_not_library_code_whatever_it_carries(kind: type) -> None:
    assert not leftover._own_code(kind())


@pytest.mark.parametrize("kind", [SaysFunc, SaysCode])
@pytest.mark.usefixtures("hooks_kept")
def test_window4_an_application_object_is_put_back_whatever_it_says_its_function_is(kind: type) -> None:
    hook = left(kind(), as_excepthook=True)
    assert sys.excepthook is not hook and sys.unraisablehook is not hook and hook not in gc.callbacks


@pytest.mark.usefixtures("hooks_kept")
def test_window4_the_applications_call_no_longer_runs_between_windows() -> None:
    left(SaysFunc(), as_excepthook=True)
    gc.collect()
    assert not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_control2_the_same_object_without_the_attribute_is_put_back() -> None:
    hook = left(Plain(), as_excepthook=True)
    assert sys.excepthook is not hook and sys.unraisablehook is not hook and hook not in gc.callbacks
    gc.collect()
    assert not CALLS


# --- OUT7 ------------------------------------------------------------------------------------------------------------


def _notes(folder: Path, trial: Path | None = None) -> None:
    """The user adds their notes to the bisect's folder (while it runs: in each trial; once)."""
    notes = folder / "notes.md"
    if not notes.exists():
        notes.write_text("the user's notes on this bisect\n", encoding="utf-8")


def test_out7_the_users_file_is_left_unsigned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, folder = finished_bisect(tmp_path, monkeypatch, _notes)
    assert (folder / "notes.md").is_file() and outdir.foreign(folder) == ["notes.md"]


def test_out7_the_next_bisect_keeps_a_file_the_user_added_while_it_ran(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = finished_bisect(tmp_path, monkeypatch, _notes)
    with contextlib.suppress(UnsafeOut):  # refused, naming it: kept
        bisecting._folder(project, plat, folder)
    assert (folder / "notes.md").is_file()


def test_control3_a_file_added_after_the_bisect_ended_is_refused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = finished_bisect(tmp_path, monkeypatch)
    _notes(folder)
    with pytest.raises(UnsafeOut, match=r"notes\.md"):
        bisecting._folder(project, plat, folder)
    assert (folder / "notes.md").is_file()
