"""kernodeck/inenv/leftover.py: what the application leaves set for the interpreter to call later is put back at its
window's end; a library's own hook stays. "A library's own" is proven by the code, not by the name the code carries
(red-team pass 39, WINDOW2: a function compiled under ``os.__file__`` was taken for the standard library's)."""

from __future__ import annotations

import gc
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
