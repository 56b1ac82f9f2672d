"""The platform lock: one run of a platform at a time; taking it, saying once that another holds it.

Below both the lock and the env (``compile_lock`` and ``rebuild`` each take a file lock of the platform's folder),
so that neither imports the other for it.
"""

from __future__ import annotations

from filelock import FileLock, Timeout

from kernodeck._proc import log
from kernodeck.errors import Busy
from kernodeck.project.platforms import Platform


def acquire(lock: FileLock, plat: Platform, who: str = "run") -> None:
    """Take ``lock``; while another ``who`` (a run, a lock) of the platform holds it, say so once and wait."""
    try:
        lock.acquire(timeout=0.1)
    except Timeout:
        log(f"kernodeck: another {who} of {plat.id} is running; waiting for it")
        try:
            lock.acquire()
        except Timeout:
            raise Busy(f"another {who} of {plat.id} kept it busy past the wait limit") from None
