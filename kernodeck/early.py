"""The verify runner started before its word: once the inventory step has shown the files its start reads the build's
(env/startfiles.py; every file of the env where a variable may make its start read a file, or where its stacks folder
would lie inside the env: verify/steps/in_env.py), and while it checks the rest, compares the packages with the lock
and finds the extensions, the runner (``python -S``: no ``site``, so nothing of the env's site-packages and no
``.pth`` line) loads what needs nothing of the env, then waits on its stdin. ``go`` once the inventory has passed
(supervise.py then watches it as any in-env process); anything else (a file or a package is not the lock's, the run
was stopped) closes its stdin, and it ends having run nothing of the env. Never before those files are proven: an
interpreter reads its ``pyvenv.cfg``'s ``home`` and the libraries ``LD_LIBRARY_PATH`` names as it starts, ``-S`` or
not (red-team pass 82, EARLY1-2).

Starting the interpreter took the runner ~0.2 s before its first step (Kernodeck's in-env files compiled from their
verified bytes, the standard library torch imports), on the critical path after the orchestrator's work; now part
of it runs beside that work (docs/speed.md). One start for every in-env process: :func:`launch`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernodeck._proc import log, show, stop_carrying
from kernodeck.inenv.protocol import STACKS_DIR_ENV

GO = "go\n"  # the runner's word (kernodeck/inenv/runner.py, --wait)
WAIT = "--wait"


def stacks_root() -> Path:
    """Where a run's stacks folder is made: the temporary folder (``TMPDIR``)."""
    return Path(tempfile.gettempdir())


def stacks_folder() -> Path:
    """A run's own folder for its processes' stacks; its path is the mark every process of the run carries."""
    return Path(tempfile.mkdtemp(prefix="kernodeck-stacks-", dir=stacks_root()))


def launch(argv: Sequence[str], env: Mapping[str, str], cwd: Path, folder: Path, *,
           waiting: bool = False) -> subprocess.Popen[str]:
    """An in-env process, logged first: in a session (and process group) of its own, stopped whole; its stderr piped
    (its progress lines); its stdin a pipe for its word when ``waiting``, else nothing."""
    log(f"$ {show(argv)}")
    return subprocess.Popen(list(argv), env={**env, STACKS_DIR_ENV: str(folder)}, cwd=cwd,
                            stdin=subprocess.PIPE if waiting else subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, bufsize=1, start_new_session=True)


@dataclass
class Early:
    """A runner started with ``--wait``: its command, environment and folder as it was started with them."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: Path
    folder: Path
    proc: subprocess.Popen[str]

    def matches(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> bool:
        """Whether it was started as the checks would start it now (else it is dropped and a new one started)."""
        return (self.argv, self.env, self.cwd) == (tuple(argv), dict(env), cwd) and self.proc.poll() is None

    def go(self) -> subprocess.Popen[str]:
        """Its word, once the env is proven: the process, watched from now on (one that ended before its word, its
        start failed: its end and what it said are the run's finding, as for any start)."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(GO)
            self.proc.stdin.close()
        return self.proc

    def drop(self) -> None:
        """Never given its word: its stdin closed (it ends having run nothing of the env), then its group and
        anything carrying the run's mark killed, its folder removed."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=2.0)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL) if hasattr(os, "killpg") else self.proc.kill()
            self.proc.wait()
        stop_carrying(STACKS_DIR_ENV, str(self.folder))
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def start(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> Early:
    """The runner, started now with ``--wait`` (``argv`` holds it), its word given later (:meth:`Early.go`)."""
    assert WAIT in argv
    folder = stacks_folder()
    try:
        proc = launch(argv, env, cwd, folder, waiting=True)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return Early(tuple(argv), dict(env), cwd, folder, proc)
