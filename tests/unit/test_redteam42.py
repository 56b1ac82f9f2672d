"""Red-team pass 42 (9e3aea1: pass 41's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside premises (passing today: the setup reaches the vulnerable path) and controls.

WINDOW7 (fixed: the module must be sys.modules' entry under the name its file's place gives it; FALSE claim of the
closed world; WINDOW5's fix, leftover._own_code): the globals' module must be "that file's own" (docs/application.md),
but what is checked is that module's ``__file__``, an attribute the application sets: a module object of the
application's (``types.ModuleType("app")``, ``__file__ = textwrap.__file__``, put in sys.modules) whose ``__dict__``
holds the application's ``TextWrapper`` passes, with ``types.FunctionType(textwrap.wrap.__code__, vars(that_module))``
counted as the standard library's own. It is left in ``gc.callbacks`` (or as an exception hook) after its window, and
the application's class runs on Kernodeck's thread on every gc collection. No default, closure, ``__self__`` or library
wrapper is involved (the stated limits). CONTROL1: the real ``textwrap.wrap`` is kept, the same code with the
application's plain module's globals (no ``__file__``) is put back.

WINDOW8 (a stated limit now, docs/application.md; statement gap, the closed world; leftover._own_code): the real
standard library function, left as a gc callback, is kept (the library's own, by design), but the names its code looks
up are its module's globals, which the application may replace (``textwrap.TextWrapper = AppClass``): the application's
code runs on Kernodeck's thread on every gc collection between windows. The stated limit covers "replacing a function of
the standard library … that Kernodeck's own code calls between calls" (``hashlib.sha256``); Kernodeck's code never calls
``textwrap.wrap``: the interpreter calls the hook the application left, so the statement does not cover it. CONTROL2:
with the library's globals left alone, the kept ``textwrap.wrap`` looks up only the library's own code.

END1 (fixed: end() reaches os._exit whatever the flush raised; FALSE claim of the closed world, WINDOW6's fix defeated;
_common.end): ``end`` flushes the interpreter's own streams through ``io.TextIOWrapper.flush``, which RAISES on a stream
the application detached or closed (the common ``sys.stdout = io.TextIOWrapper(sys.stdout.detach(), encoding="utf-8")``,
here under a logger's tee). ``os._exit`` is then never reached: the ValueError ends the process the ordinary way, whose
finalisation writes the traceback to, and flushes, the application's ``sys.stdout``/``sys.stderr`` after the last
window, unwatched (exactly what WINDOW6's fix was to stop), along with ``atexit`` and every finalizer; the exit status 1
is not read once every step reported (in_env.run_checks reads only the steps' files). CONTROL3: the same tee over an
intact stream is never called. LOCK1 (fixed: such a line is refused; installer reads other pins than the check;
lockfile._logical_lines vs pip's req_file.join_lines): Kernodeck strips a comment (from " #") BEFORE it looks for a
continuation backslash, pip joins a raw line ending in a backslash first and strips the comment after: a body line
``a==1.0 --hash=sha256:… # note <backslash>`` is a whole pin to Kernodeck and the next line its own pin ``b==2.0 …``,
while pip (``pip install --require-hashes -r``, the command the lock's header, export and procedure.md name, and
pip-audit's reader) joins the next line into the comment and never sees ``b``. The seal (recomputed, as any writer of
the lock does) and the twin are held to Kernodeck's reading, so the check passes two pins and the installer reads one
(newlines aside: the form feed, U+2028 and the rest split the same for both, ``str.splitlines``). CONTROL4: the same
lock without the trailing backslash is read the same by both.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import leftover
from tests.helpers.hookwindow import CALLS, TextWrapper, kept_hooks, left
from tests.helpers.project import ROOT

# --- WINDOW7, WINDOW8 ------------------------------------------------------------------------------------------------


def _module(name: str, file: str | None) -> types.ModuleType:
    """A module object of the application's, in sys.modules, holding its ``TextWrapper`` (and ``__file__`` if given)."""
    module = types.ModuleType(name)
    if file is not None:
        module.__file__ = file
    module.TextWrapper = TextWrapper  # type: ignore[attr-defined]
    sys.modules[name] = module
    return module


def _posing(file: str | None = textwrap.__file__) -> Any:
    """The standard library's code, run with the globals of the application's module posing as the library's file."""
    return types.FunctionType(textwrap.wrap.__code__, vars(_module("rt42_app_module", file)))


@pytest.fixture
def hooks_kept() -> Iterator[None]:
    """The hooks and textwrap.TextWrapper as they were (hookwindow.kept_hooks), and the application's module gone."""
    with kept_hooks():
        yield
    sys.modules.pop("rt42_app_module", None)


@pytest.mark.usefixtures("hooks_kept")
def test_window7_premise_the_globals_are_the_applications_modules_not_the_librarys() -> None:
    hook = _posing()
    assert hook.__code__ is textwrap.wrap.__code__ and hook.__globals__ is not vars(textwrap)
    assert hook.__globals__["TextWrapper"] is TextWrapper and hook.__globals__["__name__"] == "rt42_app_module"
    assert hook.__defaults__ is None and hook.__closure__ is None


@pytest.mark.usefixtures("hooks_kept")
def test_window7_a_module_posing_as_the_librarys_file_is_not_its_own() -> None:
    assert not leftover._own_code(_posing())


@pytest.mark.usefixtures("hooks_kept")
def test_window7_the_applications_globals_do_not_run_between_windows() -> None:
    hook = left(_posing())
    gc.collect()
    assert hook not in gc.callbacks and not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_control1_the_librarys_own_kept_the_same_code_under_a_plain_module_put_back() -> None:
    assert leftover._own_code(textwrap.wrap)
    hook = left(_posing(file=None))
    assert hook not in gc.callbacks
    gc.collect()
    assert not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_window8_premise_the_librarys_own_function_is_kept_its_global_replaced() -> None:
    textwrap.TextWrapper = TextWrapper  # type: ignore[misc]
    left(textwrap.wrap)
    assert textwrap.wrap in gc.callbacks and leftover._own_code(textwrap.wrap)


@pytest.mark.usefixtures("hooks_kept")
@pytest.mark.xfail(strict=True, reason="WINDOW8, a stated limit (docs/application.md): a library's own hook, kept, "
                                       "runs what the application put in that library's module")
def test_window8_a_kept_library_hook_runs_none_of_the_applications_code() -> None:
    textwrap.TextWrapper = TextWrapper  # type: ignore[misc]
    left(textwrap.wrap)
    gc.collect()
    assert not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_control2_with_the_librarys_globals_left_alone_the_kept_hook_reaches_only_the_librarys_code() -> None:
    """Kept, and every global its code looks up is the library's own (not called here: gc's arguments are not its)."""
    left(textwrap.wrap)
    assert textwrap.wrap in gc.callbacks
    looked_up = [vars(textwrap)[name] for name in textwrap.wrap.__code__.co_names if name in vars(textwrap)]
    assert looked_up and all(getattr(value, "__module__", None) == "textwrap" for value in looked_up)
    gc.callbacks.remove(textwrap.wrap)
    assert not CALLS


# --- END1 ------------------------------------------------------------------------------------------------------------

# The application, in its last window: the interpreter's own stdout detached into a new wrapper (or left intact), a
# logger's tee over it left as sys.stdout; then the in-env process's end (_common.end, as runner.py's __main__).
ENDING = '''
import io, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from kernodeck.inenv import _common  # as the runner imports it, before any of the application's code
done = Path(sys.argv[1])

class Tee(io.TextIOBase):
    def __init__(self, real):
        self.real = real
    def write(self, text):
        with done.open("a", encoding="utf-8") as note:
            note.write("write\\n")
        return self.real.write(text)
    def flush(self):
        with done.open("a", encoding="utf-8") as note:
            note.write("flush\\n")
        self.real.flush()

if sys.argv[2] == "detached":
    sys.stdout = Tee(io.TextIOWrapper(sys.stdout.detach(), encoding="utf-8"))
else:
    sys.stdout = Tee(sys.stdout)
_common.end(0)
'''


def _ending(tmp_path: Path, stream: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    done = tmp_path / "ran.txt"
    proc = subprocess.run([sys.executable, "-c", ENDING, str(done), stream, str(ROOT)], timeout=60,
                          capture_output=True, text=True, check=False)
    return proc, done


def test_end1_a_detached_stream_still_ends_the_process_at_once(tmp_path: Path) -> None:
    proc, _ = _ending(tmp_path, "detached")
    assert "Traceback" not in proc.stderr, proc.stderr


def test_end1_the_applications_stream_is_not_called_after_the_last_window(tmp_path: Path) -> None:
    proc, done = _ending(tmp_path, "detached")
    assert proc.returncode == 0 and not done.exists()


def test_control3_over_an_intact_stream_the_tee_is_never_called(tmp_path: Path) -> None:
    proc, done = _ending(tmp_path, "intact")
    assert proc.returncode == 0 and not done.exists()


# --- LOCK1 -----------------------------------------------------------------------------------------------------------


def _lock_text(note: str) -> str:
    """A sealed lock of two pins, the first line ending in a comment ``note``."""
    from kernodeck.lock import lockfile

    body = (f"a==1.0 --hash=sha256:{'a' * 64} {note}\n"
            f"b==2.0 --hash=sha256:{'b' * 64}\n")
    header = [("kernodeck-lock-version", lockfile.FORMAT_VERSION), ("platform", "cp311-linux_x86_64-cpu"),
              ("packages", "2")]
    return lockfile.seal(lockfile.render(header, body))


def _readings(tmp_path: Path, note: str) -> tuple[list[str], list[str]]:
    """(Kernodeck's pins, pip's requirements) of the same file."""
    from pip._internal.network.session import PipSession
    from pip._internal.req.req_file import parse_requirements

    from kernodeck.lock import lockfile

    path = tmp_path / "cp311-linux_x86_64-cpu.txt"
    path.write_text(_lock_text(note), encoding="utf-8")
    ours = [f"{pin.name}=={pin.version}" for pin in lockfile.read(path).pins]  # its seal checked
    theirs = [str(req.requirement) for req in parse_requirements(str(path), session=PipSession())]
    return ours, theirs


def test_lock1_a_comment_before_a_continuation_is_refused(tmp_path: Path) -> None:
    """pip would join the next line into the comment: the lock is refused, naming the line, before anything reads it
    as two pins."""
    from kernodeck.errors import LockfileError

    with pytest.raises(LockfileError, match="a comment before a line continuation"):
        _readings(tmp_path, "# the index's note \\")


def test_control4_without_the_trailing_backslash_both_read_the_same_pins(tmp_path: Path) -> None:
    ours, theirs = _readings(tmp_path, "# the index's note")
    assert ours == theirs == ["a==1.0", "b==2.0"]
