"""Every exit code Kernodeck's commands, sessions and generated scripts use, with what each means: THE table
(docs/sessions.md's exit-code table is generated from it, see :mod:`kernodeck.docpage`)."""

from __future__ import annotations

import enum
import os
import sys
from typing import NamedTuple


class ExitCode(enum.IntEnum):
    OK = 0
    CHECK_FAILED = 1
    ERROR = 2
    NOT_CHECKED = 3
    INTERRUPTED = 130


class Meaning(NamedTuple):
    code: ExitCode
    meaning: str
    who: str  # which commands give it, and how it passes through nox


MEANINGS: tuple[Meaning, ...] = (
    Meaning(ExitCode.OK, "a pass: `verify`/`reference` with no step failed, every claim established and only "
            "allowed skips (`passed` or `passed-unlocked`); `lock --check`: every lock current; `audit`: no known "
            "vulnerability; `upgrade`: every output of the new lock within tolerance; any other command: done",
            "every command"),
    Meaning(ExitCode.CHECK_FAILED, "a check failed: the report names the first failure and its layer; `audit`: "
            "VULNERABLE; `upgrade`: an output moved beyond its tolerance",
            "nox's own failure code"),
    Meaning(ExitCode.ERROR, "`ERROR:` + `TIP:`: the lock, the reference, the environment or an argument cannot be "
            "trusted (`lock --check`: a lock is stale); the Slurm script: an array task with no platform",
            "handed on by the session; nox stops"),
    Meaning(ExitCode.NOT_CHECKED, "not checked, never a silent pass: `audit` (no network, or the service knew none "
            "of the pins); `upgrade` (its verify stopped before the outputs were compared); the Slurm script (the "
            "task's platform needs another machine architecture)", "handed on by the session; nox stops"),
    Meaning(ExitCode.INTERRUPTED, "interrupted (Ctrl-C or SIGTERM): `verify`, `reference`, `upgrade` and `bisect` "
            "keep what ran so far with every stack; the last good environment and dossier are untouched",
            "handed on by the session; nox stops"),
)


def end(code: int) -> None:
    """Exit with ``code``. Once the command is done (every file written atomically, the dossier swapped in) and no
    other thread that Python would wait for runs, the interpreter's teardown is skipped, as the in-env runner skips
    its own: freeing what a verify held (30,000 stat records, the parsed lock and twin) took 0.1-0.3 s and checks
    nothing. Another thread still running (a pool's worker) gets the ordinary exit, which waits for it."""
    import threading

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: the ordinary exit says it as Python does
        sys.exit(code)
    if any(t is not threading.current_thread() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    os._exit(code)
