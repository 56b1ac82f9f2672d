"""Whether a process is still running, by its /proc record (a zombie or a dead one is not): what the hang and
supervisor tests check after a stop."""

from __future__ import annotations

from pathlib import Path


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")
