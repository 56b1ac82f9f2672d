"""kernodeck/inenv/leftover.py: what the application leaves set for the interpreter to call later is put back at its
window's end; a library's own hook stays. "A library's own" is proven by the code, not by the name the code carries
(red-team pass 39, WINDOW2: a function compiled under ``os.__file__`` was taken for the standard library's)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import traceback
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv import leftover
from tests.helpers.hookwindow import kept_hooks, left


@pytest.fixture(autouse=True)
def hooks_kept() -> Iterator[None]:
    """sys.excepthook, sys.unraisablehook and gc.callbacks as they were, whatever a test leaves."""
    with kept_hooks():
        yield


def test_a_standard_library_function_set_in_the_window_stays() -> None:
    """The control: code the trusted file defines, with its module's globals, is the library's own."""
    assert leftover._own_code(traceback.print_exception)
    left(traceback.print_exception, as_excepthook=True)
    assert sys.excepthook is traceback.print_exception and traceback.print_exception in gc.callbacks


def test_code_named_after_a_standard_library_file_is_put_back() -> None:
    space: dict[str, Any] = {}
    exec(compile("def hook(*args):\n    pass\n", os.__file__, "exec"), space)
    assert not leftover._own_code(space["hook"])
    left(space["hook"], as_excepthook=True)
    assert sys.excepthook is not space["hook"] and space["hook"] not in gc.callbacks


def test_code_run_in_a_library_modules_globals_but_not_defined_there_is_put_back() -> None:
    """exec'd into os's own namespace under os's file name: the globals are the module's, the code is not its."""
    exec(compile("def _kd_planted(*args):\n    pass\n", os.__file__, "exec"), os.__dict__)
    try:
        planted = os.__dict__["_kd_planted"]
        assert not leftover._own_code(planted)
    finally:
        del os.__dict__["_kd_planted"]


def test_a_library_functions_code_with_the_applications_globals_is_put_back() -> None:
    """The library's own code run over the application's globals (what it calls by name is then the application's)."""
    borrowed = types.FunctionType(traceback.print_exception.__code__, {"__name__": "app"}, "print_exception")
    assert not leftover._own_code(borrowed)
    left(borrowed, as_excepthook=True)
    assert sys.excepthook is not borrowed


STACKS_AFTER_A_WINDOW = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
from kernodeck.inenv import leftover, stackhooks
stackhooks.install()
before = leftover.taken()
signal.signal(signal.SIGUSR1, lambda *args: None)  # the application's own handler, set inside the window
leftover.put_back(before)
os.kill(os.getpid(), signal.SIGUSR1)  # the supervisor asks for the stacks of a stuck run
print("alive")
"""


def test_the_stacks_signal_still_dumps_stacks_after_the_application_set_its_own(tmp_path: Path) -> None:
    """faulthandler's handler reads as the default (signal.getsignal): putting the default back would let the
    supervisor's request for stacks end the process with none (red-team pass 40's note). It is registered again."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KERNODECK_STACKS_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", STACKS_AFTER_A_WINDOW, str(root)], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0 and "alive" in done.stdout, done.stderr
    (dumped,) = tmp_path.glob("*.txt")
    assert "most recent call first" in dumped.read_text(encoding="utf-8")


HIDDEN_BY_A_REPLACED_GETTER = """
import gc, json, signal, sys, threading
sys.path.insert(0, sys.argv[1])
from kernodeck.inenv import leftover
real = {"trace": sys.gettrace, "profile": sys.getprofile, "thread_trace": threading.gettrace,
        "thread_profile": threading.getprofile, "signal": signal.getsignal, "callbacks": gc.callbacks}
before = leftover.taken()

def app_hook(*args):  # the application's, set inside its window
    return None

def app_callback(*args):
    pass

how = sys.argv[2]
if how == "trace":
    sys.settrace(app_hook); sys.gettrace = lambda: None
elif how == "profile":
    sys.setprofile(app_hook); sys.getprofile = lambda: None
elif how == "thread_trace":
    threading.settrace(app_hook); threading.gettrace = lambda: None
elif how == "thread_profile":
    threading.setprofile(app_hook); threading.getprofile = lambda: None
elif how == "signal":
    was = signal.getsignal(signal.SIGUSR2)
    signal.signal(signal.SIGUSR2, app_hook); signal.getsignal = lambda number: was
elif how == "callbacks":
    gc.callbacks.append(app_callback); gc.callbacks = []
leftover.put_back(before)
if how == "signal":
    now = real["signal"](signal.SIGUSR2)
elif how == "callbacks":
    now = app_callback if app_callback in real["callbacks"] else None
else:
    now = real[how]()
sys.settrace(None); sys.setprofile(None)
print(json.dumps({"left": now is app_hook or now is app_callback}))
"""


@pytest.mark.parametrize("how", ["trace", "profile", "thread_trace", "thread_profile", "signal", "callbacks"])
def test_a_hook_hidden_by_a_replaced_getter_is_put_back(how: str) -> None:
    """The application sets a hook and replaces the function (or list) that reads it back (``sys.gettrace =
    lambda: None``, ``gc.callbacks = []``): the window's end reads what the interpreter holds, through the readers
    taken as the module loaded, and puts it back (else its trace function would run in Kernodeck's own frames between
    windows)."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", HIDDEN_BY_A_REPLACED_GETTER, str(root), how], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"left": False}
