"""Real verifies of the unmodified built project that several tests only READ, run once per test session (the
fixtures ``passed_run`` and ``gpu_missing_run`` in tests/conftest.py): a MiniLM verify costs ~30 CPU-s (more on a
loaded machine), and nine tests each ran their own passing one only to read its dossier, output, log or read counts.
A reader never writes into the shared run or its project: one that must change a run copies it first (as
test_reliability's full-disk case copies it into its mount).

The passing run is made so that every reader's question has its answer in it, none bending another's:

- a sibling of the built project (a fresh copy sharing its env, as ``sibling`` makes it), its files settled past
  kernodeck.sources' racy window, so that each input is read once by design (tests/e2e/test_reads_once.py);
- run under the read counter (tests/helpers/readcount.py: ``python -m kernodeck``'s own ``main`` in the process, an
  audit hook that only counts ``open`` calls), which writes the counts beside the run;
- with credentials in PIP_EXTRA_INDEX_URL / UV_INDEX_URL / UV_INDEX (:data:`SECRETS`, unreachable hosts: the reused
  env needs no index), so that tests/e2e/test_verify_e2e.py can look for them in every file and line it left;
- with a progress line every 0.5 s (:data:`PROGRESS`, KERNODECK_PROGRESS_INTERVAL: the default is 15 s), so that
  tests/e2e/test_progress.py finds every phase in its log (the heartbeat only writes lines; it reads no file).

A passing verify with those variables set and the counter attached is still a passing verify of the project as it is:
the readers assert that it passed, every step of it.

The concurrent pair (``concurrent_runs``) is two verifies of one copy of the referenced tiny project (the tiny
application: tests/helpers/tinyapp.py), started at once: one test asserts both finish, another compares their
dossiers; each ran its own pair or run before (of MiniLM, whose model only added its load and runs to each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import crossworker
from tests.helpers.builtenv import sibling
from tests.helpers.project import ROOT, kd

READCOUNT = ROOT / "tests" / "helpers" / "readcount.py"
SECRETS = {
    "PIP_EXTRA_INDEX_URL": "https://alice:t0psecret@127.0.0.1:9/simple http://127.0.0.1:9/simple?access_token=QTOKEN42",
    "UV_INDEX_URL": "https://bob:t0psecret2@127.0.0.1:9/simple",
    "UV_INDEX": "http://127.0.0.1:9/QTOKEN43/simple",  # a token in the path, cloudsmith style
}
PROGRESS = {"KERNODECK_PROGRESS_INTERVAL": "0.5"}


@dataclass(frozen=True)
class SharedRun:
    """One real run: its project, its dossier folder, the finished process, and the counter's file (or None)."""

    project: Path
    out: Path
    proc: subprocess.CompletedProcess[str]
    counts_file: Path | None = None

    def counts(self) -> dict[str, dict[str, int]]:
        assert self.counts_file is not None, "this run was not counted"
        data: dict[str, dict[str, int]] = json.loads(self.counts_file.read_text(encoding="utf-8"))
        return data


def settled(project: Path) -> Path:
    """A copied project whose files are older than kernodeck.sources' racy window (a configuration file changed in
    the last 100 ms is read again at each use, by design: it may change again within one timestamp)."""
    time.sleep(0.15)
    return project


def counted_env(project: Path, **extra: str) -> dict[str, str]:
    """The environment ``python -m kernodeck`` gets from :func:`tests.helpers.project.kd`, for the read counter."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = str(project)
    env.update(extra)
    return env


def run_counted(project: Path, counts: Path, *args: str, plant: tuple[str, ...] = (),
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m kernodeck ARGS`` in ``project`` under the read counter, which writes ``counts``."""
    return subprocess.run([sys.executable, str(READCOUNT), str(counts), *plant, "--", *args], cwd=project,
                          env=counted_env(project) if env is None else env, text=True, capture_output=True,
                          timeout=900, check=False)


def _record(run: SharedRun) -> dict[str, Any]:
    return {"project": str(run.project), "out": str(run.out), "proc": crossworker.process_record(run.proc),
            "counts_file": None if run.counts_file is None else str(run.counts_file)}


def _restore(made: dict[str, Any]) -> SharedRun:
    return SharedRun(Path(made["project"]), Path(made["out"]), crossworker.process_from(made["proc"]),
                     None if made["counts_file"] is None else Path(made["counts_file"]))


def shared(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], SharedRun]) -> SharedRun:
    """The run ``make`` makes, made once for every worker of the run (tests/helpers/crossworker.py)."""
    _, made = crossworker.once(factory, name, lambda folder: _record(make(folder)))
    return _restore(made)


def shared_pair(factory: pytest.TempPathFactory, name: str,
                make: Callable[[Path], tuple[SharedRun, SharedRun]]) -> tuple[SharedRun, SharedRun]:
    """The two runs ``make`` makes, made once for every worker of the run."""
    _, made = crossworker.once(factory, name, lambda folder: {"runs": [_record(run) for run in make(folder)]})
    first, second = (_restore(run) for run in made["runs"])
    return first, second


def passed_run(built: Path, folder: Path) -> SharedRun:
    """The passing verify several tests read (see the module's docstring); not asserted here: each reader asserts
    what it needs, so a failure is reported by the tests, with the run's stderr."""
    project = settled(sibling(built, folder))
    out, counts = folder / "run", folder / "counts.json"
    proc = run_counted(project, counts, "verify", "--out", str(out), env=counted_env(project, **SECRETS, **PROGRESS))
    return SharedRun(project, out, proc, counts)


def gpu_missing_run(built: Path, folder: Path) -> SharedRun:
    """A real verify that fails at the backend step: the GPU expected (``--expect-backend cuda``) is not there."""
    out = folder / "run"
    return SharedRun(built, out, kd(built, "verify", "--expect-backend", "cuda", "--out", str(out)))


def concurrent_pair(project: Path, folder: Path) -> tuple[SharedRun, SharedRun]:
    """Two verifies of ``project`` (sharing the built env) started at once (the second waits on the platform's file
    lock): the pair tests/e2e/test_verify_e2e.py asserts both finish passed, and tests/e2e/test_dossier.py compares
    (two passing runs of one platform, zero delta). Not asserted here: each reader asserts that both passed."""
    procs: dict[str, subprocess.CompletedProcess[str]] = {}

    def go(name: str) -> None:
        procs[name] = kd(project, "verify", "--out", str(folder / name))

    threads = [threading.Thread(target=go, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = (SharedRun(project, folder / name, procs[name]) for name in ("a", "b"))
    return first, second
