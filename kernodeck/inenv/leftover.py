"""What the application's code leaves set for the interpreter to call later, put back at each window's end.

A function the application sets for the interpreter to call (a trace or profile function, a ``gc.callbacks`` entry,
``sys.excepthook``/``sys.unraisablehook``/``threading.excepthook``, a signal handler) would otherwise run on Kernodeck's
own thread between windows, where the hook does not watch it (seen.py: between windows only the application's threads
are). At a window's end each is put back as it was when the window opened, unless what is set now is the env's or the
standard library's own code (a library that registers a gc callback as it is imported keeps it): code a trusted file
defines, with its module's globals, not merely code under a trusted file's name (:func:`_own_code`). What remains, a
stated limit (docs/application.md): ``atexit``, finalizers of objects Kernodeck drops later, finders on
``sys.meta_path`` and codec search functions (the application's own imports need them in later windows). The environment
is not put back (the application's later calls may need what it set), but the processes Kernodeck starts get the one it
had before the project's code ran (:func:`kernodecks_start`).
"""

from __future__ import annotations

import gc
import importlib
import os
import signal
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from . import paths, stackhooks

_SETTERS = (sys.settrace, sys.setprofile, threading.settrace, threading.setprofile)
# ... and what reads them back, taken too as this module loads (before any of the project's code): an application
# that replaces ``sys.gettrace`` or ``signal.getsignal``, or rebinds ``gc.callbacks`` (the collector keeps calling
# the list it was), hides nothing it set from the window's end
_GETTERS = (sys.gettrace, sys.getprofile, threading.gettrace, threading.getprofile)
# signal.getsignal's own answer before it wraps SIG_DFL and SIG_IGN in the Handlers enum (62 handlers read in 5 us
# against 80 us, twice per judged call): the same handlers, those two as their ints, each compared by identity
_GETSIGNAL: Callable[[int], Any] = importlib.import_module("_signal").getsignal
_SETSIGNAL = signal.signal
# the signals this system has, as numbers (two windows per judged call each read every handler, and valid_signals()
# makes a set of 62 enum members each time)
_SIGNALS = tuple(sorted(int(s) for s in signal.valid_signals()))
_CALLBACKS = gc.callbacks


def _own_code(func: Any) -> bool:
    """Whether ``func`` is trusted code (:func:`_trusted_code`); never raises (an error in the judgement: not trusted,
    so put back; red-team pass 43, WINDOW10: it raised inside put_back, and nothing was put back)."""
    try:
        return _trusted_code(func)
    except Exception:
        return False


def _trusted_code(func: Any) -> bool:
    """A function of the env or the standard library (or Kernodeck's): trusted code, not the application's.

    Its code's file name is the application's to choose (``compile(src, os.__file__, "exec")``: red-team pass 39,
    WINDOW2), so the name alone proves nothing: the code must be one the trusted file itself defines (equal to a code
    object compiled from that file's bytes), run with that file's module's own globals."""
    # a bound method's function, never an object's own ``__func__`` or ``__code__`` attribute (pass 40, WINDOW4: an
    # application object carrying a standard library function's ``__func__`` kept its own ``__call__`` as the hook)
    function = func.__func__ if type(func) is types.MethodType else func
    if type(function) is not types.FunctionType:
        return False
    code, spaces = function.__code__, function.__globals__
    name = getattr(code, "co_filename", "")
    if not (isinstance(name, str) and os.path.isabs(name) and paths.trusted(os.path.normpath(name))):
        return False
    module_name = dict.get(spaces, "__name__")  # dict's own get: the globals may be a dict of the application's class
    module = sys.modules.get(module_name) if type(module_name) is str else None
    if module is None or getattr(module, "__dict__", None) is not spaces:
        return False
    # the module whose globals they are is the one the import system holds under the name the trusted file's place
    # gives it, not any module (the application's module's globals, or a module of its own claiming that file's
    # ``__file__``, under a library function's code: red-team passes 41 and 42, WINDOW5 and WINDOW7)
    return _imported_as(module, os.path.normpath(name)) and any(
        code == defined for defined in _defined_in(os.path.normpath(name)))


def _imported_as(module: Any, filename: str) -> bool:
    """``module`` is ``sys.modules``' entry under the one dotted name ``filename`` has: below the most specific of the
    ``sys.path`` folders the process started with (one the application adds gives a trusted file a second name, under
    which a module of its own would pass: red-team pass 43, WINDOW9; an entry that is not text is none: WINDOW10)."""
    stem, ext = os.path.splitext(filename)
    bases = [os.path.join(os.path.normpath(os.path.abspath(entry or os.curdir)), "") for entry in _PATH_AT_START
             if type(entry) is str]
    base = max((b for b in bases if stem.startswith(b)), key=len, default=None)
    if ext != ".py" or base is None:
        return False
    parts = stem[len(base):].split(os.sep)
    parts = parts[:-1] if parts[-1:] == ["__init__"] else parts
    return bool(parts) and sys.modules.get(".".join(parts)) is module


_DEFINED: dict[str, list[Any]] = {}


def _defined_in(filename: str) -> list[Any]:
    """Every code object the trusted file ``filename`` defines, compiled from its bytes (once per run); none when it is
    not Python source that compiles."""
    if filename not in _DEFINED:
        found: list[Any] = []
        try:
            with open(filename, "rb") as handle:
                pending = [compile(handle.read(), filename, "exec", dont_inherit=True)]
        except (OSError, SyntaxError, ValueError):
            pending = []
        while pending:
            code = pending.pop()
            found.append(code)
            pending += [c for c in code.co_consts if isinstance(c, type(code))]
        _DEFINED[filename] = found
    return _DEFINED[filename]


def _handlers() -> dict[int, Any]:
    """The signal handlers set from Python, in the main thread (the only one that may set them)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {number: _GETSIGNAL(number) for number in _SIGNALS}


# The environment and the interpreter as Kernodeck set them before any of the project's code ran (at_start, which
# runner.py calls at its start: a smoke check runs outside the windows; else the first window): what the in-env
# processes Kernodeck starts later get (resume.Worker), so a variable the project sets in its own process
# (LD_PRELOAD, say), or sys.executable pointed at a wrapper, never reaches them (red-team passes 10, 11). Within its
# windows the application keeps what it set.
BEFORE_APPLICATION: list[tuple[dict[str, str], str] | None] = [None]
_PATH_AT_START: list[str] = list(sys.path)  # as this module loads (before the project's code); again at at_start


def at_start() -> None:
    """Take the environment and the interpreter Kernodeck's own processes start with, and the import path, now."""
    BEFORE_APPLICATION[0] = (dict(os.environ), sys.executable)
    _PATH_AT_START[:] = list(sys.path)


def kernodecks_start() -> tuple[dict[str, str], str]:
    """The environment and interpreter for a process Kernodeck starts: as they were before the project's code ran."""
    if BEFORE_APPLICATION[0] is None:
        at_start()
    assert BEFORE_APPLICATION[0] is not None
    return dict(BEFORE_APPLICATION[0][0]), BEFORE_APPLICATION[0][1]


def taken() -> tuple[Any, ...]:
    """What is set now: the trace and profile functions, gc's callbacks, the exception hooks, the signal handlers
    (and, at the first window if not earlier, the environment: :data:`BEFORE_APPLICATION`)."""
    if BEFORE_APPLICATION[0] is None:
        at_start()
    return (*(get() for get in _GETTERS), list(_CALLBACKS), sys.excepthook, sys.unraisablehook, threading.excepthook,
            _handlers())


def put_back(before: tuple[Any, ...]) -> None:
    """Each as it was at ``before`` (:func:`taken`), unless what is set now is trusted code. The trace and profile
    functions always (a debugger's or a coverage tool's, set before the window, is what ``before`` holds)."""
    now = taken()
    for was, is_now, put in zip(before[:4], now[:4], _SETTERS, strict=True):
        if is_now is not was:
            put(was)
    _CALLBACKS[:] = [cb for cb in _CALLBACKS if any(cb is old for old in before[4]) or _own_code(cb)]
    for index, (module, name) in enumerate(((sys, "excepthook"), (sys, "unraisablehook"), (threading, "excepthook")),
                                           start=5):
        if now[index] is not before[index] and not _own_code(now[index]):
            setattr(module, name, before[index])
    for signum, was in before[8].items():
        handler = now[8].get(signum)
        if handler is not was and was is not None and callable(handler) and not _own_code(handler):
            _SETSIGNAL(signum, was)
            stackhooks.reinstate(signum)
