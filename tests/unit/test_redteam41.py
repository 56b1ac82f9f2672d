"""Red-team pass 41 (dde643b: pass 40's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside premises (passing today: the setup reaches the vulnerable path) and controls.

MSG5 (fixed: the twin is held to the digest of the lock's text, newlines as the reader takes them; WRONG TIP, a loop;
the lock check's twin digest against the lock's raw bytes, check._held_to_writer): the lock is read with its newlines
normalised (check.read_lock, lockfile.read: a CRLF checkout, git's ``core.autocrlf`` on Windows, a platform the project
locks for, and the repository has no .gitattributes), and its seal holds; but the twin is held to the sha256 of the
lock's RAW bytes, while its writer (pylock.build, twinform.expected) records the sha256 of the normalised text. So a
CRLF checkout of a committed, current pair fails ``lock --check``/rebuild/verify with "was not written for this …txt",
and the TIP ``lock --pylock-only`` ("writes the twin of the lock as it is") writes a twin that fails the same way:
following the TIP never ends it. CONTROL1: the same pair with LF newlines passes; the TIP's rewrite of an LF lock
passes.

WINDOW5 (fixed: the globals' module's own file must be the code's; FALSE claim of the closed world; WINDOW2/4's fix,
leftover._own_code): the hook's code must be one a trusted file defines, "run with its module's own globals"
(docs/application.md), but the check takes the module named by the globals' own ``__name__`` (any module in sys.modules
whose ``__dict__`` they are), never that module's file: a function made by the application from a standard library
function's code object and the APPLICATION's module globals (``types.FunctionType(textwrap.wrap.__code__, globals())``)
counts as the standard library's own, is left in ``gc.callbacks`` (or as an exception hook) after its window, and every
global name the library's code looks up (``TextWrapper`` here) is the application's: its code runs on Kernodeck's thread
between windows, on every gc collection. No default, closure, ``__self__`` or standard library wrapper is involved (the
stated limits). CONTROL2: the standard library's own ``textwrap.wrap`` is kept; the application's plain function is put
back.

OUT8 (fixed: each trial's files hashed as it ends, outdir.entries; LOST EDIT; OUT7's fix, bisect signs the entries its
trials wrote, taken as each trial ended: _Trials.probe, outdir.mark keep=): the entries are taken as each trial ends,
but their CONTENT only when the bisect ends (``mark`` hashes each kept entry then). A user who, while later trials run
(hours), adds a note to a finished trial's file (``try-01/steps/…``) has their bytes signed as Kernodeck's: the next
``bisect --out SAME`` removes the folder without a word (``_folder``'s rmtree, "one Kernodeck made"). CONTROL3: the same
edit made after the bisect ended is refused, named "(changed since Kernodeck wrote it)".

WINDOW6 (fixed: every in-env process ends by _common.end, the interpreter's own streams; FALSE claim of the closed
world, a route to a FALSE PASSED not run end to end; the class of pass 31's fix that took Kernodeck's own stderr,
_common._own_stderr): nothing puts back ``sys.stdout``/``sys.stderr`` at a window's end (leftover.taken lists hooks
only), and the runner's ``__main__`` block calls ``sys.stdout.flush()`` and ``sys.stderr.flush()`` after ``main()``
returned, every step's result written (so do calibrate.py, resume.py and resume_app.py): an application that left a
logger's tee there has its ``flush`` run on Kernodeck's thread after its last window, unwatched, before ``os._exit``,
free to rewrite the run's ``steps/*.json`` that in_env.run_checks then reads for the verdict. Near the stated limit of
"replacing a function of the standard library … that Kernodeck's own code calls", but a stream object, the one pass 31
stopped writing Kernodeck's lines into. CONTROL4: with the interpreter's own streams nothing of the application runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import shutil
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck import outdir
from kernodeck.errors import UnsafeOut
from kernodeck.inenv import leftover
from kernodeck.lock import check, write
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.hookwindow import CALLS, TextWrapper, kept_hooks, left
from tests.helpers.project import ROOT
from tests.helpers.standinbisect import finished_bisect

PLATFORM = "cp311-linux_x86_64-cpu"

# --- MSG5 ------------------------------------------------------------------------------------------------------------


@pytest.fixture
def pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any, Path]:
    """(project, platform, lock): the committed lock and twin copied into a project rooted in ``tmp_path``; no pip
    configuration and no index (the twin's files are all reused: nothing is asked)."""
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    for var in ("UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_DEFAULT_INDEX"):
        monkeypatch.delenv(var, raising=False)
    project = dataclasses.replace(load_project(ROOT), root=tmp_path, lockfiles=tmp_path / "lockfiles")
    plat = parse_platform_id(project, PLATFORM)
    (tmp_path / "lockfiles").mkdir()
    for name in (plat.lock_name, plat.pylock_name):
        shutil.copy2(ROOT / "lockfiles" / name, tmp_path / "lockfiles" / name)
    return project, plat, tmp_path / "lockfiles" / plat.lock_name


def _crlf(lock: Path) -> None:
    """The lock as a CRLF checkout holds it (git's core.autocrlf=true)."""
    lock.write_bytes(lock.read_bytes().replace(b"\n", b"\r\n"))


def test_msg5_a_crlf_checkout_of_a_current_pair_passes(pair: tuple[Any, Any, Path]) -> None:
    project, plat, lock = pair
    _crlf(lock)
    read = check.read_lock(project, plat)
    assert read.error is None and read.parsed is not None and read.parsed.pins  # read, its seal holds
    assert check.check_twin(project, plat) == [] and check.check_twin(project, plat, read=read) == []


def test_msg5_a_crlf_lock_whose_pins_changed_is_still_refused(pair: tuple[Any, Any, Path]) -> None:
    """The twin is held to the lock's text, newlines aside: another text is still another lock."""
    project, plat, lock = pair
    lock.write_text(lock.read_text(encoding="utf-8").replace("# packages:", "# packages:  "), encoding="utf-8")
    _crlf(lock)
    assert check.check_twin(project, plat) == [f"{plat.pylock_name} was not written for this {plat.lock_name}"]


def test_msg5_the_tips_rewrite_ends_the_refusal_of_a_crlf_lock(pair: tuple[Any, Any, Path]) -> None:
    project, plat, lock = pair
    _crlf(lock)
    write.write_pylock_only(project, plat)  # what the refusal's TIP runs
    assert check.check_twin(project, plat) == []


def test_control1_the_lf_pair_passes_and_the_tips_rewrite_of_it_too(pair: tuple[Any, Any, Path]) -> None:
    project, plat, _ = pair
    assert check.check_twin(project, plat) == []
    write.write_pylock_only(project, plat)
    assert check.check_twin(project, plat) == []


# --- WINDOW5 ---------------------------------------------------------------------------------------------------------


def _borrowed() -> Any:
    """A function of the application: the standard library's code, run with the application's module's globals (its
    ``TextWrapper`` the application's class, hookwindow's, imported here by that name)."""
    return types.FunctionType(textwrap.wrap.__code__, globals())


def _plain(phase: Any, info: Any) -> None:
    CALLS.append((phase, info))


@pytest.fixture
def hooks_kept() -> Iterator[None]:
    with kept_hooks():
        yield


def test_window5_premise_the_code_is_the_standard_librarys_and_the_globals_the_applications() -> None:
    hook = _borrowed()
    assert hook.__code__ is textwrap.wrap.__code__ and hook.__code__.co_filename.startswith(sys.base_prefix)
    assert hook.__globals__ is globals() and hook.__globals__ is not vars(textwrap)
    assert hook.__globals__["TextWrapper"] is TextWrapper and TextWrapper is not textwrap.TextWrapper
    assert hook.__defaults__ is None and hook.__closure__ is None


def test_window5_premise_the_application_module_is_one_in_sys_modules() -> None:
    assert vars(sys.modules[__name__]) is globals()


def test_window5_the_standard_librarys_code_with_the_applications_globals_is_not_its_own() -> None:
    assert not leftover._own_code(_borrowed())


@pytest.mark.usefixtures("hooks_kept")
def test_window5_the_applications_globals_no_longer_run_between_windows() -> None:
    hook = left(_borrowed())
    gc.collect()
    assert hook not in gc.callbacks and not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_control2_the_standard_librarys_own_function_is_kept_the_applications_put_back() -> None:
    left(textwrap.wrap)
    assert textwrap.wrap in gc.callbacks
    gc.callbacks.remove(textwrap.wrap)  # kept: the library's own (not called here: gc's arguments are not its)
    left(_plain)
    assert _plain not in gc.callbacks
    gc.collect()
    assert not CALLS


# --- OUT8 ------------------------------------------------------------------------------------------------------------


NOTE = "\nthe user's note: try-01's numbers match the cluster run of 3 May\n"


def _annotate_try01(folder: Path, trial: Path) -> None:
    """The user, while a later trial runs, adds a note to the first trial's record (finished, its entries taken)."""
    if trial.name != "try-01":
        record = folder / "try-01" / "steps" / "record.md"
        if NOTE not in record.read_text(encoding="utf-8"):
            record.write_text(record.read_text(encoding="utf-8") + NOTE, encoding="utf-8")


def test_out8_premise_a_later_trial_runs_after_try01_ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, folder = finished_bisect(tmp_path, monkeypatch, _annotate_try01, record_steps=True)
    assert (folder / "try-02").is_dir()
    assert NOTE in (folder / "try-01" / "steps" / "record.md").read_text(encoding="utf-8")


def test_out8_an_edit_made_after_its_trial_ended_is_left_unsigned(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, folder = finished_bisect(tmp_path, monkeypatch, _annotate_try01, record_steps=True)
    assert outdir.foreign(folder) == ["try-01/steps/record.md (changed since Kernodeck wrote it)"]


def test_out8_the_next_bisect_keeps_the_users_edit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = finished_bisect(tmp_path, monkeypatch, _annotate_try01, record_steps=True)
    with contextlib.suppress(UnsafeOut):  # refused, naming it: kept
        bisecting._folder(project, plat, folder)
    assert NOTE in (folder / "try-01" / "steps" / "record.md").read_text(encoding="utf-8")


def test_control3_the_same_edit_after_the_bisect_ended_is_refused(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kernodeck.upgrade import bisect as bisecting

    project, plat, folder = finished_bisect(tmp_path, monkeypatch, record_steps=True)
    assert outdir.foreign(folder) == []
    _annotate_try01(folder, folder / "try-02")
    with pytest.raises(UnsafeOut, match=r"try-01/steps/record\.md \(changed since Kernodeck wrote it\)"):
        bisecting._folder(project, plat, folder)
    assert NOTE in (folder / "try-01" / "steps" / "record.md").read_text(encoding="utf-8")


# --- WINDOW6 ---------------------------------------------------------------------------------------------------------

RUNNER = ROOT / "kernodeck" / "inenv" / "runner.py"
# The application, in its last window: a logger's tee left as sys.stdout and sys.stderr (nothing puts them back),
# whose flush writes (here a file beside the run's; it could be the run's own steps/*.json, the results verify reads).
EXIT = '''
import ast, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from kernodeck.inenv import _common  # as the runner imports it, before any of the application's code
done = Path(sys.argv[2])

class Tee:
    def __init__(self, real):
        self.real = real
    def write(self, text):
        return self.real.write(text)
    def flush(self):
        done.write_text("the application's flush ran after the last window", encoding="utf-8")
        self.real.flush()

if sys.argv[3] == "tee":
    sys.stdout, sys.stderr = Tee(sys.stdout), Tee(sys.stderr)
tree = ast.parse(Path(sys.argv[1]).read_text(encoding="utf-8"))
(block,) = [n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)]
code = compile(ast.Module(body=block.body, type_ignores=[]), sys.argv[1], "exec")
exec(code, {"__name__": "__main__", "main": lambda: 0, "sys": sys, "os": os, "end": _common.end})  # its end

'''


def _runner_exit(tmp_path: Path, left: str) -> Path:
    import subprocess

    done = tmp_path / "ran.txt"
    subprocess.run([sys.executable, "-c", EXIT, str(RUNNER), str(done), left, str(ROOT)], check=True, timeout=60,
                   capture_output=True)
    return done


def test_window6_every_in_env_process_ends_through_its_own_streams() -> None:
    """The runner, calibrate's variation, the resume worker and the application's resume process end by
    _common.end (the interpreter's own streams, taken before the application's code); none flushes sys.stdout."""
    for script in sorted((ROOT / "kernodeck" / "inenv").glob("*.py")):
        source = script.read_text(encoding="utf-8")
        assert "sys.stdout.flush()" not in source and "sys.stderr.flush()" not in source, script
        # exits.py names os._exit only to guard the application's calls of it (red-team pass 58, EXIT2)
        assert "os._exit(" not in source or script.name in ("_common.py", "exits.py"), script
    assert not any(held is sys.stdout or held is sys.stderr for held in leftover.taken())  # never put back


def test_window6_the_applications_stream_is_not_called_after_the_last_window(tmp_path: Path) -> None:
    assert not _runner_exit(tmp_path, "tee").exists()


def test_control4_with_the_interpreters_own_streams_nothing_of_the_application_runs(tmp_path: Path) -> None:
    assert not _runner_exit(tmp_path, "none").exists()
