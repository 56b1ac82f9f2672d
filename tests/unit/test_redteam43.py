"""Red-team pass 43 (5f936c3: pass 42's fixes attacked by class): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands, beside premises (passing today: the setup reaches the vulnerable path) and controls.

LOCK2 (fixed: text after the --hash options is refused; installer reads other requirements than the check;
lockfile.parse_text vs pip's req_file.break_args_options): Kernodeck takes every token of a logical line that is not
``--hash…`` as the requirement, wherever it stands, so a marker written AFTER the hash option (``a==1.0 --hash=sha256:…
; sys_platform == "win32"``, on one line or continued) is the pin's marker to Kernodeck (the wheelhouse skips the pin
here, the twin records the marker). pip splits the line at its first token starting with ``-``: everything after is
options, and optparse drops the leftover ``; …`` words silently, so pip reads ``a==1.0`` with NO marker and installs it
on every platform. The seal (recomputed, as any writer of the lock does) holds. CONTROL1: the same marker before the
hash is read the same by both.

LOCK3 (fixed: ${ is refused; installer reads other requirements than the check; pip's req_file.expand_env_variables):
pip replaces ``${NAME}`` (upper-case letters, digits, ``_``) in every line of a requirements file by the installer's
environment variable before it parses the line; Kernodeck reads the text as written. A marker ``sys_platform ==
"${SOME_VAR}"`` is false everywhere to Kernodeck's reading (the pin skipped by the wheelhouse, written so in the twin)
and, with ``SOME_VAR=linux`` in the environment of ``pip install -r`` (rebuild's, export's procedure, pip-audit), true
to pip's: the package is installed. The same holds for any quoted marker value. CONTROL2: the same marker with the value
written out is read the same by both.

WINDOW9 (fixed: the name below the most specific sys.path folder the process started with; FALSE claim of the closed
world; WINDOW7's fix bypassed; leftover._imported_as): the module whose globals a kept hook runs with must be
sys.modules' entry under "the dotted name its file's place below sys.path gives it", but sys.path is the application's
to extend (a ``src/`` folder is ordinary; a project root holds the env's folder): with a folder above a trusted file on
sys.path (here the standard library folder's parent), that file has a SECOND dotted name (``python3.11.textwrap``; under
a project root on sys.path, ``.venv-rebuild.….site-packages.six`` for every env file), which no module holds, so the
application registers its own module there (a new name: no module in sys.modules replaced, no library module's name
changed: neither stated limit) and ``types.FunctionType(textwrap.wrap.__code__, vars(that_module))`` passes
``_own_code``: kept in gc.callbacks, the application's ``TextWrapper`` runs on Kernodeck's thread on every collection.
Fix idea: the identity map of trusted file -> module taken by Kernodeck's own import (or before the application's code),
never derived from sys.path/sys.modules as they are at the window's end. CONTROL3: the same module without the folder on
sys.path is put back.

WINDOW10 (fixed: _own_code never raises, and a non-text entry is none; FALSE claim of the closed world; put_back and
world.window): ``_imported_as`` does ``os.path.abspath(entry)`` for each sys.path entry, which raises TypeError on an
entry that is not a str (``1``: the import system skips such entries silently). With a library's own hook
(``typing.cast``) among the gc callbacks the application leaves, put_back raises inside its gc.callbacks comprehension:
NOTHING is put back (the application's gc callback and excepthook stay set), and world.window's ``finally`` never
reaches ``seen.ON[0] = False``. The TypeError leaves the window as the criterion's own error, which margin's ``fails``
and power's ``judged`` take as a rejection: the run goes on with seen.ON stuck True, so every later window takes itself
for a nested one (no leftover.taken or put_back, no judging of the modules it imported) and the application's hooks run
on Kernodeck's thread between windows. Fix idea: skip non-str entries in _imported_as (as the import system does), and
in the window put back inside a try whose finally clears seen.ON. CONTROL4: without the entry, the window closes and
puts the application's hooks back, keeping the library's.

END2 (fixed: in-env processes run with -u and end() flushes nothing; FALSE claim of the closed world; END1's fix class;
_common.end): end flushes only the interpreter's own streams, taken before the application's code, and only while
``type(stream) is io.TextIOWrapper``, through that type's own ``flush``. But a TextIOWrapper may be initialised again:
``sys.stdout.__init__(AppBuffer(sys.stdout.buffer), encoding="utf-8")`` (no detach, no replaced sys.stdout, no standard
library function replaced) leaves the same object, of the same type, whose buffer is now the application's;
io.TextIOWrapper.flush writes the pending text to it and calls its ``flush``: the application's code runs after the last
window, unwatched. CONTROL5: the same program without the re-initialisation runs none of the application's code at the
end.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.markers import Marker

from kernodeck.errors import LockfileError
from kernodeck.inenv import leftover, seen, verified, world
from kernodeck.inenv._common import Context
from kernodeck.lock import lockfile
from tests.helpers.hookwindow import CALLS, TextWrapper, kept_hooks, left
from tests.helpers.project import ROOT

# --- LOCK2, LOCK3 ----------------------------------------------------------------------------------------------------

HASH = "a" * 64


def _sealed(body: str) -> str:
    header = [("kernodeck-lock-version", lockfile.FORMAT_VERSION), ("platform", "cp311-linux_x86_64-cpu"),
              ("packages", "2")]
    return lockfile.seal(lockfile.render(header, body + f"b==2.0 --hash=sha256:{'b' * 64}\n"))


def _applying(tmp_path: Path, first: str) -> tuple[list[str], list[str]]:
    """(the pins Kernodeck's reading applies here, the requirements pip installs here) of one sealed lock."""
    from pip._internal.network.session import PipSession
    from pip._internal.req.constructors import install_req_from_parsed_requirement
    from pip._internal.req.req_file import parse_requirements

    path = tmp_path / "cp311-linux_x86_64-cpu.txt"
    path.write_text(_sealed(first), encoding="utf-8")
    ours = [pin.spec for pin in lockfile.read(path).pins  # its seal checked
            if not pin.marker or Marker(pin.marker).evaluate()]
    reqs = [install_req_from_parsed_requirement(req) for req in parse_requirements(str(path), session=PipSession())]
    theirs = [f"{req.name}=={next(iter(req.specifier)).version}" for req in reqs if req.match_markers()]
    return ours, theirs


OTHER = "win32" if sys.platform != "win32" else "linux"
AFTER = f'a==1.0 --hash=sha256:{HASH} ; sys_platform == "{OTHER}"\n'
AFTER_CONTINUED = f'a==1.0 \\\n    --hash=sha256:{HASH} \\\n    ; sys_platform == "{OTHER}"\n'
BEFORE = f'a==1.0 ; sys_platform == "{OTHER}" \\\n    --hash=sha256:{HASH}\n'


@pytest.mark.parametrize("first", [AFTER, AFTER_CONTINUED], ids=["one-line", "continued"])
def test_lock2_a_marker_after_the_hash_is_refused(tmp_path: Path, first: str) -> None:
    path = tmp_path / "lock.txt"
    path.write_text(_sealed(first), encoding="utf-8")
    with pytest.raises(LockfileError, match="text after the --hash options"):
        lockfile.read(path)


def test_control1_a_marker_before_the_hash_is_read_the_same_by_both(tmp_path: Path) -> None:
    ours, theirs = _applying(tmp_path, BEFORE)
    assert ours == theirs == ["b==2.0"]


VARIABLE = f'a==1.0 ; sys_platform == "${{RT43_PLATFORM}}" \\\n    --hash=sha256:{HASH}\n'


def test_lock3_an_environment_variable_reference_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "lock.txt"
    path.write_text(_sealed(VARIABLE), encoding="utf-8")
    with pytest.raises(LockfileError, match="an environment variable reference"):
        lockfile.read(path)


def test_control2_the_value_written_out_is_read_the_same_by_both(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RT43_PLATFORM", sys.platform)
    ours, theirs = _applying(tmp_path, VARIABLE.replace("${RT43_PLATFORM}", sys.platform))
    assert ours == theirs == ["a==1.0", "b==2.0"]


# --- WINDOW9, WINDOW10 -----------------------------------------------------------------------------------------------


def app_hook(*args: Any) -> None:
    """The application's own hook (a plain function of its module: never the library's)."""
    CALLS.append(args)


@pytest.fixture
def hooks_kept() -> Iterator[None]:
    """The hooks as they were (hookwindow.kept_hooks), sys.path too, and the modules the application registered gone."""
    with kept_hooks(imports=True):
        yield


def _the_librarys_place() -> tuple[str, str]:
    """(a folder above the standard library's folder, the dotted name textwrap.py has below it)."""
    folder = os.path.dirname(os.path.normpath(textwrap.__file__))
    parent, last = os.path.split(folder)
    return parent, f"{last}.textwrap"


def _registered(*, on_path: bool) -> Any:
    """textwrap.wrap's code with the globals of the application's module, registered in sys.modules under the dotted
    name textwrap.py has below its folder's parent (which the application puts on sys.path when ``on_path``)."""
    parent, dotted = _the_librarys_place()
    module = types.ModuleType(dotted)
    module.TextWrapper = TextWrapper  # type: ignore[attr-defined]
    sys.modules[dotted] = module  # a new name: no module in sys.modules replaced
    if on_path:
        sys.path.append(parent)
    return types.FunctionType(textwrap.wrap.__code__, vars(module))


@pytest.mark.usefixtures("hooks_kept")
def test_window9_premise_nothing_of_the_librarys_is_replaced() -> None:
    hook = _registered(on_path=True)
    assert sys.modules["textwrap"] is textwrap and textwrap.TextWrapper is not TextWrapper
    assert hook.__code__ is textwrap.wrap.__code__ and hook.__globals__["TextWrapper"] is TextWrapper
    assert hook.__defaults__ is None and hook.__closure__ is None


@pytest.mark.usefixtures("hooks_kept")
def test_window9_a_module_under_a_second_dotted_name_is_not_the_librarys_own() -> None:
    hook = left(_registered(on_path=True))
    gc.collect()
    assert hook not in gc.callbacks and not CALLS


@pytest.mark.usefixtures("hooks_kept")
def test_control3_without_the_folder_on_sys_path_the_same_module_is_put_back() -> None:
    hook = _registered(on_path=False)
    assert not leftover._own_code(hook) and leftover._own_code(textwrap.wrap)
    left(hook)
    gc.collect()
    assert hook not in gc.callbacks and not CALLS


def _window_end(junk: bool) -> BaseException | None:
    """The application's window's end: a library hook (``typing.cast``, harmless to gc's arguments) and its own set
    (a non-str sys.path entry added with ``junk``: the import system skips it), put back as world.window does; what
    put_back raised."""
    before = leftover.taken()
    if junk:
        sys.path.insert(0, 1)  # type: ignore[arg-type]
    gc.callbacks.extend([typing.cast, app_hook])
    sys.excepthook = app_hook
    try:
        leftover.put_back(before)
    except Exception as exc:  # what the caller of the window then sees
        return exc
    return None


@pytest.mark.usefixtures("hooks_kept")
def test_window10_put_back_does_not_raise_on_a_non_str_sys_path_entry() -> None:
    assert not isinstance(_window_end(junk=True), Exception)
    import importlib

    importlib.invalidate_caches()
    assert importlib.import_module("json") is sys.modules["json"]  # the import system skips the entry


@pytest.mark.usefixtures("hooks_kept")
def test_window10_the_applications_hooks_are_put_back_whatever_sys_path_holds() -> None:
    _window_end(junk=True)
    assert app_hook not in gc.callbacks and sys.excepthook is not app_hook


@pytest.fixture
def bare_window(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Context]:
    """world.window with its hook, finders and judging left out (they are not what is attacked here); the records it
    sets restored after."""
    from kernodeck.inenv import children, guard

    for target, name in ((seen, "install"), (world, "_taken"), (verified, "install"), (children, "open_notes"),
                         (world, "_judge_window"), (seen, "from_children"), (world, "finder")):
        monkeypatch.setattr(target, name, lambda *args, **kwargs: None)
    records: list[list[Any]] = [seen.ON, seen.BY, seen.JUDGE, guard.GUARD, guard.GUARD_ROOTS, children.PID]
    saved = [record[0] for record in records]
    yield Context(config={"project_root": str(tmp_path)}, out=tmp_path)
    for record, value in zip(records, saved, strict=True):
        record[0] = value


@pytest.mark.usefixtures("hooks_kept")
def test_window10_a_window_whose_put_back_raised_is_closed(bare_window: Context) -> None:
    try:
        with world.window(bare_window, "the criterion"):
            sys.path.insert(0, 1)  # type: ignore[arg-type]
            gc.callbacks.extend([typing.cast, app_hook])
    except Exception:  # as margin's fails() takes a criterion's error: it rejected
        pass
    assert not seen.ON[0]


@pytest.mark.usefixtures("hooks_kept")
def test_control4_without_the_entry_the_window_closes_and_puts_back(bare_window: Context) -> None:
    with world.window(bare_window, "the criterion"):
        gc.callbacks.extend([typing.cast, app_hook])
        sys.excepthook = app_hook
    assert not seen.ON[0] and app_hook not in gc.callbacks and sys.excepthook is not app_hook
    assert typing.cast in gc.callbacks


# --- END2 ------------------------------------------------------------------------------------------------------------

# The application, in its last window: the interpreter's own sys.stdout initialised again over a buffer of its own (or
# left alone), a line printed; then the in-env process's end (_common.end, as runner.py's __main__).
ENDING = '''
import io, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from kernodeck.inenv import _common  # as the runner imports it, before any of the application's code
done = Path(sys.argv[1])

def note(what):
    with done.open("a", encoding="utf-8") as handle:
        handle.write(what + "\\n")

class Buffer(io.BufferedIOBase):
    def __init__(self, real):
        self.real = real
    def writable(self):
        return True
    def write(self, data):
        note("write")
        return self.real.write(data)
    def flush(self):
        note("flush")
        self.real.flush()

own = sys.stdout
if sys.argv[2] == "again":
    sys.stdout.__init__(Buffer(sys.stdout.buffer), encoding="utf-8")
assert sys.stdout is own and type(sys.stdout) is io.TextIOWrapper
print("the last window's line")
note("end")
_common.end(0)
'''


def _ending(tmp_path: Path, how: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    done = tmp_path / "ran.txt"
    proc = subprocess.run([sys.executable, "-u", "-c", ENDING, str(done), how, str(ROOT)], timeout=60,
                          capture_output=True, text=True, check=False)
    return proc, done.read_text(encoding="utf-8").splitlines() if done.exists() else []


def test_end2_premise_the_stream_is_the_interpreters_own_of_its_own_type(tmp_path: Path) -> None:
    proc, ran = _ending(tmp_path, "again")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert ran[:1] == ["end"]  # nothing of the application's buffer ran inside the window


def test_end2_the_applications_buffer_is_not_called_after_the_last_window(tmp_path: Path) -> None:
    _, ran = _ending(tmp_path, "again")
    assert ran == ["end"]


def test_control5_left_alone_the_stream_runs_nothing_of_the_applications_at_the_end(tmp_path: Path) -> None:
    proc, ran = _ending(tmp_path, "alone")
    assert proc.returncode == 0 and ran == ["end"]
    assert proc.stdout == "the last window's line\n"
