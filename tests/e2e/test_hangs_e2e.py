"""A hang is a finding, in the real torch env: an application that hangs (a DataLoader worker blocked on a lock, a
forward hook that sleeps, a busy loop with no progress, an import blocked on a lock file) and a verify cancelled by
SIGTERM each leave a dossier naming the step, the layer and the user's file:line, with every stack, and no process.

Every case runs against the one built env (the session's ``built_project``, shared through a sibling copy) with
small deadlines from ``[tool.kernodeck.deadlines]``; the application is replaced, so each verify runs with
``--allow-code-change`` (never a pass) and stops at the application step.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.builtenv import sibling
from tests.helpers.processes import running
from tests.helpers.project import kd
from tests.helpers.reports import read_report, statuses

pytestmark = pytest.mark.slow

DATALOADER = '''\
import multiprocessing

_LOCK = multiprocessing.Lock()  # held by the main process: a worker that takes it waits forever


def run(app):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Blocked(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            _LOCK.acquire()  # HANG-LINE
            return torch.zeros(2)

    _LOCK.acquire()
    app.progress(0, 4, "batch")
    for number, _ in enumerate(DataLoader(Blocked(), batch_size=2, num_workers=2), start=1):
        app.progress(number, 4, "batch")
'''

HOOK = '''\
import time


def run(app):
    import torch

    layer = torch.nn.Linear(2, 2)

    def slow_hook(module, args, output):
        time.sleep(3600)  # HANG-LINE

    layer.register_forward_hook(slow_hook)
    app.progress(0, 1, "batch")
    layer(torch.zeros(1, 2))
'''

BUSY = '''\
def run(app):
    app.progress(0, 1, "batch")
    spins = 0
    while spins >= 0: spins += 1  # HANG-LINE
'''

IMPORT = '''\
import fcntl
import os

_FD = os.open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "app.lock"), os.O_RDWR | os.O_CREAT)
fcntl.flock(_FD, fcntl.LOCK_EX)  # HANG-LINE


def run(app):
    pass
'''

# The application's deadline (s): each case waits for it, so it is small, yet far above what the replaced
# application takes before it hangs (its module's load and the weights' fingerprint, under a second here); the stall
# stays at its default: on a loaded 2-core machine the weights' loading alone was silent for 80 s (a stall is tested
# on real processes in tests/unit/test_supervise.py).
SMALL = {"application": 12}


def _hanging(built: Path, tmp_path: Path, app: str, limits: dict[str, int]) -> Path:
    project = sibling(built, tmp_path)
    (project / "checks" / "app.py").write_text(app, encoding="utf-8")
    table = "\n[tool.kernodeck.deadlines]\n" + "".join(f"{k} = {v}\n" for k, v in limits.items())
    with (project / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write(table)
    return project


def _described(pid: int) -> str:
    """What a failure says of a process left running: its state line and command line."""
    try:
        return (Path(f"/proc/{pid}/stat").read_text() + " | "
                + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    except OSError as error:
        return f"gone since ({error})"


def _hang_line(app: str) -> int:
    return next(n for n, text in enumerate(app.splitlines(), start=1) if "HANG-LINE" in text)


def _run_pids(out: Path) -> list[int]:
    step = next(s for s in read_report(out)["steps"] if s.get("details", {}).get("stopped"))  # type: ignore[union-attr]
    return [int(p) for p in step["details"]["processes"]]


@pytest.mark.parametrize(
    ("app", "limits", "kind", "layer", "children"),
    [
        (DATALOADER, SMALL, "timed-out", "data-loading", 2),
        (HOOK, SMALL, "timed-out", "operator:slow_hook", 0),
        (BUSY, SMALL, "timed-out", "application", 0),
        (IMPORT, SMALL, "timed-out", "import", 0),
    ],
    ids=["dataloader-worker-blocked", "forward-hook-sleeps", "busy-loop", "import-blocked"],
)
def test_a_hang_is_a_finding(built_project: Path, tmp_path: Path, app: str, limits: dict[str, int], kind: str,
                             layer: str, children: int) -> None:
    project = _hanging(built_project, tmp_path, app, limits)
    holder = None
    if app is IMPORT:  # the lock file the application's import waits for, held by this test
        holder = os.open(project / "checks" / "app.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(holder, fcntl.LOCK_EX)
    out = tmp_path / "run"
    start = time.monotonic()
    try:
        proc = kd(project, "verify", "--allow-code-change", "--out", str(out), timeout=600,
                  env={**os.environ, "KERNODECK_PROGRESS_INTERVAL": "2"})
    finally:
        if holder is not None:
            os.close(holder)
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    assert report["status"] == "failed"
    done = statuses(report)
    assert [done[n] for n in ("settings", "system", "backend", "reference")] == ["passed"] * 4  # kept
    assert done["application"] == "failed" and done["compare"] == "not-run"
    step = next(s for s in report["steps"] if s["name"] == "application")  # type: ignore[union-attr]
    where = f"checks/app.py:{_hang_line(app)}"
    assert step["layer"] == layer and step["details"]["stopped"] == kind
    assert step["details"]["user_frame"] == where, step["details"]
    assert step["error"].startswith(kind) and where in step["error"]
    stacks = (out / "steps" / "application.stacks.txt").read_text()
    assert f"{where} in " in stacks and step["details"]["stacks"] == "steps/application.stacks.txt"
    pids = _run_pids(out)
    assert len(pids) >= 1 + children  # the runner, and each DataLoader worker, answered
    assert stacks.count("a child (forked from") >= children
    left = {pid: _described(pid) for pid in pids if running(pid)}
    assert not left, f"a process of the run was left: {left}"
    # found at its deadline (the stop after it takes at most 3 s for the stacks, 2 x 3 s of grace), the run bounded
    assert limits["application"] <= step["details"]["ran_s"] < limits["application"] + 15 and took < 600
    assert f"FAILED at application (layer: {layer})" in proc.stdout
    assert "steps/application.stacks.txt" in (out / "report.md").read_text()
    if app is BUSY:  # the progress line showed the silence as it grew, before the deadline
        lines = [ln for ln in proc.stderr.splitlines() if "application: no progress for" in ln]
        assert any("(last: batch 0/1)" in ln for ln in lines), proc.stderr[-3000:]
        seconds = [int(ln.split("no progress for ")[1].split(" s")[0]) for ln in lines]
        assert seconds == sorted(seconds) and seconds[-1] > seconds[0]


def test_sigterm_during_the_application_is_an_interrupted_record(built_project: Path, tmp_path: Path) -> None:
    project = _hanging(built_project, tmp_path, HOOK, {"stall": 900})  # it would wait an hour
    out = tmp_path / "run"
    full = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            "PYTHONPATH": str(project)}
    argv = [sys.executable, "-m", "kernodeck", "verify", "--allow-code-change", "--out", str(out)]
    with subprocess.Popen(argv, cwd=project, env=full, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                          start_new_session=True) as proc:
        seen, kept = threading.Event(), []

        def follow() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                kept.append(line)
                if "application: batch 0/1" in line:
                    seen.set()

        reader = threading.Thread(target=follow, daemon=True)
        reader.start()
        try:
            assert seen.wait(400), "".join(kept)[-3000:]
            time.sleep(1)
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            assert time.monotonic() - start < 20  # within a few seconds, not the stall's 900
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            reader.join(timeout=30)
    assert proc.returncode == 130, "".join(kept)[-3000:]  # the exit-code table's "interrupted", through nox
    report = read_report(out)
    assert report["status"] == "interrupted" and report["interrupted"]["signal"] == "SIGTERM"
    step = next(s for s in report["steps"] if s["name"] == "application")  # type: ignore[union-attr]
    assert step["details"]["stopped"] == "interrupted" and step["layer"] == "operator:slow_hook"
    assert f"checks/app.py:{_hang_line(HOOK)}" in (out / "steps" / "application.stacks.txt").read_text()
    assert not any(running(pid) for pid in _run_pids(out))
    assert json.loads((out / "report.json").read_text())["steps"][0]["status"] == "passed"  # earlier steps kept


def test_deadlines_are_run_policy_not_the_reference_identity(tiny_referenced: Path, tmp_path: Path) -> None:
    """A healthy verify with a deadlines table (tight for this machine, yet far above what each step takes) passes
    against the reference made without it: no new reference, nothing trips. The reference identity is Kernodeck's,
    the same for any application: the tiny one's (a copy of the session's referenced tiny project), without MiniLM's
    model load."""
    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    with (project / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write(textwrap.dedent("""
            [tool.kernodeck.deadlines]
            application = 900
            stall = 600
        """))
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert set(statuses(report).values()) == {"passed"}
    assert report["deadlines"]["steps_s"]["application"] == 900  # type: ignore[index]
    assert "timed-out" not in proc.stderr and "stalled" not in proc.stderr
