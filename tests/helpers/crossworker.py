"""One build for every worker of a parallel run: the session's real env and the runs that only read it.

pytest-xdist gives each worker its own session, so a session fixture was built once per worker: two real env
rebuilds and two passing MiniLM verifies (each ~30 CPU-s) on CI's 2 cores, where one of each serves every reader. Here
the first worker to ask makes the thing in the run's shared root (the folder above the workers' own, where the suite's
uv cache lives too) under a file lock; the others wait on the lock and read what it wrote. What the maker returns
(JSON) is written last, atomically: its presence is the sign the thing is whole. A failed make is recorded as such and
never retried by the next worker (it would fail the same way, a minute later). The shared root is removed with the
run's base folder, as the uv cache is.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from kernodeck._fs import write_atomic

DONE = "made.json"


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The folder every worker of this run shares (the base folder itself when the run is not parallel)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def once(factory: pytest.TempPathFactory, name: str,
         make: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """``make(folder)`` run by the first worker that asks for ``name``; every worker gets the folder and what it
    returned. ``make`` returns JSON-able data; it raises to say the thing could not be made (recorded, re-raised as a
    failure in every worker that asks)."""
    folder = shared_root(factory) / "shared" / name
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / DONE
    with FileLock(str(folder.with_suffix(".lock"))):
        if not done.exists():
            try:
                made: dict[str, Any] = {"made": make(folder)}
            except Exception as exc:  # recorded for the other workers, then reported here
                made = {"failed": f"{type(exc).__name__}: {exc}"}
            write_atomic(done, json.dumps(made))
    record: dict[str, Any] = json.loads(done.read_text(encoding="utf-8"))
    if "failed" in record:
        pytest.fail(f"the shared {name} could not be made: {record['failed']}")
    return folder, record["made"]


def process_record(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A finished process as JSON (its arguments as strings), for :func:`process_from`."""
    return {"args": [str(a) for a in proc.args], "returncode": proc.returncode, "stdout": proc.stdout,
            "stderr": proc.stderr}


def process_from(record: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """The finished process :func:`process_record` wrote."""
    return subprocess.CompletedProcess(record["args"], record["returncode"], record["stdout"], record["stderr"])
