"""The ways the application's code ends its own process without an exception, made its failure (red-team pass 58,
EXIT2: ``os._exit(3)`` or a SIGINT it raised on itself ended the runner inside the entry's window: no record of its
line or of what it read, the step blamed on the environment).

Inside a window, in the process that runs the application's call (not a child it forked: a DataLoader worker ends by
``os._exit``), ``os._exit``, ``os.abort``, and ``signal.raise_signal`` or ``os.kill``/``os.killpg`` of its own process
or group with a signal that would end it (not one it ignores or handles itself) raise :class:`~._common.ProcessEnd`
(a SystemExit) instead: the call then fails by the rules for its
exceptions (EXIT1's ``as_failure``: its window judged, its step recorded failed at its line, layer application). The
supervisor's own signals come from another process and are untouched: an interruption is still the run's. Outside a
window (Kernodeck's runner ending with ``os._exit``) the real functions run.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from . import children, seen
from ._common import CheckFailed, ProcessEnd
from .protocol import Layer

_REAL: dict[str, Callable[..., Any]] = {}


def _in_call() -> bool:
    return seen.ON[0] and not children.forked()


def _ended(text: str, code: int) -> ProcessEnd:
    """The end asked for, as an exception; from a thread (a watchdog), whose SystemExit threading drops, also the
    step's failure (seen.PENDING, settled when the step returns): the process would have ended, the run cannot pass."""
    if threading.current_thread() is not threading.main_thread():
        seen.PENDING.append(CheckFailed(f"{text} from a thread ({threading.current_thread().name})", Layer.APPLICATION,
                                        {"tip": "end the application's run by raising, not by ending its process"}))
    return ProcessEnd(text, code)


def _own(pid: int) -> bool:
    return pid in (0, os.getpid(), -os.getpgrp())


# Signals whose default action does not end the process (ignore, stop, continue)
_KEEPS = frozenset(getattr(signal, name) for name in ("SIGCHLD", "SIGURG", "SIGWINCH", "SIGCONT", "SIGSTOP", "SIGTSTP",
                                                      "SIGTTIN", "SIGTTOU") if hasattr(signal, name))


def _ends(sig: int) -> bool:
    """Whether ``sig`` sent to this process ends it: its default action where that ends a process, or Python's own
    SIGINT handler (KeyboardInterrupt); never a signal ignored or handled by the application's own handler (a timer's
    SIGALRM, a SIGUSR1 that dumps its state: they keep running)."""
    if sig == 0:
        return False  # only asks whether the process is there
    handler = signal.getsignal(sig)
    return handler is signal.default_int_handler or (handler == signal.SIG_DFL and sig not in _KEEPS)


def _exit(code: int) -> None:
    if _in_call():
        raise _ended(f"the application called os._exit({code!r})", code)
    _REAL["_exit"](code)


def _abort() -> None:
    if _in_call():
        raise _ended("the application called os.abort()", 134)
    _REAL["abort"]()


def _raise_signal(sig: int) -> None:
    if _in_call() and _ends(sig):
        raise _ended(f"the application raised {signal.Signals(sig).name} on its own process", 128 + int(sig))
    _REAL["raise_signal"](sig)


def _kill(pid: int, sig: int) -> None:
    if _in_call() and _own(pid) and _ends(sig):
        raise _ended(f"the application sent {signal.Signals(sig).name} to its own process", 128 + int(sig))
    _REAL["kill"](pid, sig)


def _killpg(pgid: int, sig: int) -> None:
    if _in_call() and pgid in (0, os.getpgrp()) and _ends(sig):
        raise _ended(f"the application sent {signal.Signals(sig).name} to its own process group", 128 + int(sig))
    _REAL["killpg"](pgid, sig)


_GUARDS: tuple[tuple[Any, str, Callable[..., Any]], ...] = (
    (os, "_exit", _exit), (os, "abort", _abort), (signal, "raise_signal", _raise_signal), (os, "kill", _kill),
    (os, "killpg", _killpg))


def install() -> None:
    """Once per process: each way above guarded (a platform without one keeps what it has)."""
    for module, name, guard in _GUARDS:
        if name not in _REAL and hasattr(module, name):
            _REAL[name] = getattr(module, name)
            setattr(module, name, guard)
