"""The folders of passed tests, removed beside the tests that follow instead of in their teardown.

A rebuilt env is ~1.3 GB of copied files: ``rm -rf`` of one took 4.8 s here, 1.1 s of it CPU, the rest waiting on
the disk. pytest's ``tmp_path_retention_policy = "failed"`` removes a passed test's folder in its teardown, so each
worker waited for it (167 s of the suite's teardowns on 2026-12-02). Here the removal is started and the worker goes
on; at most ``LIMIT`` removals of a worker run at once (the oldest is waited for before another starts, so the disk
never holds more than a few folders past their test), and all of them are waited for when the worker's session
ends. A failed test's folder is kept, as pytest keeps it. The removals run at the workers' own priority: at the
lowest (nice 19) they starved beside two busy workers, and a worker at the limit waited 65 s and 69 s in one
teardown each (2026-12-03 profile); their CPU is about a second each.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

LIMIT = 4
_POPEN = subprocess.Popen  # taken at import: a test that replaces subprocess.Popen (to show it is never called) does
# not see its teardown's removal


class Removals:
    """The removals started by one pytest process (a worker of a parallel run, or the only one)."""

    def __init__(self) -> None:
        self._running: list[subprocess.Popen[bytes]] = []
        self._codes: list[int] = []

    def start(self, path: Path) -> None:
        """Remove ``path`` (never following a link out of it: ``rm -rf`` removes a link, not its target)."""
        while len(self._running) >= LIMIT:
            self._codes.append(self._running.pop(0).wait())
        self._running.append(_POPEN(["rm", "-rf", "--", str(path)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def wait(self) -> list[int]:
        """Wait for every removal started; the exit codes of all those started since the last wait."""
        codes = [*self._codes, *(proc.wait() for proc in self._running)]
        self._running.clear()
        self._codes.clear()
        return codes


REMOVALS = Removals()
