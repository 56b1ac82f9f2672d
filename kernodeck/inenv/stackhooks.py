"""Every process of the run can be asked for its Python stacks: ``faulthandler`` registered on a signal.

The supervisor outside the env (``kernodeck/supervise.py``) sends ``STACKS_SIGNAL`` to each process of the run that
registered before it stops a stuck run, so the dossier shows where every thread of every process was (the DataLoader
worker blocked on a lock, the forward hook that sleeps, the resume check's worker in its own session). Every in-env
script installs this as it loads its siblings (``_package.py``, the first thing each does: the runner, the resume
workers, calibrate's, drift's, compare's; ``tests/unit/test_stackhooks.py`` runs each); a child the runner or torch
forks (DataLoader workers) registers again with its own file (``os.register_at_fork``), and a child spawned by
``multiprocessing`` imports the runner as its main module, which loads them again. Standard library only.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
from pathlib import Path
from typing import IO

from .protocol import STACKS_DIR_ENV, STACKS_SIGNAL

_OPEN: list[IO[str]] = []  # the file faulthandler writes to must stay open for the process's life
_INSTALLED = {"done": False}


def _register(folder: Path, how: str) -> None:
    signum = getattr(signal, STACKS_SIGNAL, None)
    if signum is None:  # no such signal here (Windows): nothing can ask for stacks
        return
    try:
        handle = (folder / f"{os.getpid()}.txt").open("w", encoding="utf-8")
    except OSError:
        return  # the folder is gone: the run is over
    handle.write(f"# pid {os.getpid()} parent {os.getppid()} {how}: {' '.join(sys.argv)[:300]}\n")
    handle.flush()
    for old in _OPEN:
        old.close()  # a forked child's copy of its parent's file
    _OPEN[:] = [handle]
    faulthandler.register(signum, file=handle, all_threads=True, chain=False)


def reinstate(signum: int) -> None:
    """faulthandler on ``signum`` again, to the same file, when it is the stacks signal: its handler was just put back
    to the default that :func:`signal.getsignal` reports for faulthandler's own (leftover.put_back, the application
    having set its own), which would end the process when the supervisor asks for its stacks (red-team pass 40)."""
    if _OPEN and signum == getattr(signal, STACKS_SIGNAL, None):
        faulthandler.unregister(signum)  # still "registered" to faulthandler, which would not install its handler again
        faulthandler.register(signum, file=_OPEN[0], all_threads=True, chain=False)


def install() -> None:
    """Register this process, and every process forked from it, when the supervisor asked for stacks."""
    folder = os.environ.get(STACKS_DIR_ENV)
    if not folder or _INSTALLED["done"] or not Path(folder).is_dir():
        return
    _INSTALLED["done"] = True
    _register(Path(folder), "started")
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: _register(Path(folder), "forked"))
