"""kernodeck/supervise.py on real processes without torch: a stall, a deadline and a signal each stop the whole
process group after every registered process (the runner and a forked child) gave its stacks; nothing is left."""

from __future__ import annotations

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

from kernodeck.inenv.protocol import STACKS_DIR_ENV
from kernodeck.project.deadlines import Deadlines
from kernodeck.supervise import Stop, _ask_stacks, supervise
from tests.helpers.processes import running

ROOT = Path(__file__).resolve().parents[2]
INENV = ROOT / "kernodeck" / "inenv"

# A stand-in for the in-env runner: registers its stacks hook as runner.py does, announces a step and a phase,
# then does what MODE says. Line numbers matter: the tests look for them in the stacks.
FAKE_RUNNER = textwrap.dedent('''\
    import multiprocessing as mp
    import os
    import runpy
    import signal
    import sys
    import time

    runpy.run_path(sys.argv[1] + "/_package.py")
    from kernodeck_inenv.stackhooks import install

    install()
    MODE = sys.argv[2]


    def blocked(lock):
        lock.acquire()  # LINE-CHILD-BLOCKED


    def shed_the_mark_once_it_answered():
        import ctypes

        mine = os.path.join(os.environ["KERNODECK_STACKS_DIR"], f"{os.getpid()}.txt")
        while "(most recent call first)" not in open(mine).read():
            time.sleep(0.05)
        environ = ctypes.POINTER(ctypes.c_void_p).in_dll(ctypes.CDLL(None), "environ")
        n = 0
        while environ[n]:  # the strings /proc/<pid>/environ reads, overwritten in place
            if ctypes.string_at(environ[n]).startswith(b"KERNODECK_STACKS_DIR="):
                ctypes.memset(environ[n], ord("X"), 20)
            n += 1


    def main():
        open("pids.txt", "a").write(f"{os.getpid()}\\n")
        print("[kernodeck] application: start (now)", file=sys.stderr, flush=True)
        print("[kernodeck] application: batch 1/8", file=sys.stderr, flush=True)
        if MODE == "ends":
            return
        if MODE == "leaves":  # a child left behind, holding stderr open, and the runner ends
            pid = os.fork()
            if pid == 0:
                time.sleep(3600)
            open("pids.txt", "a").write(f"{pid}\\n")
            os._exit(0)
        if MODE == "escapes":  # a daemon that leaves the run's process group (setsid), and the runner ends
            pid = os.fork()
            if pid == 0:
                os.setsid()
                time.sleep(3600)
            open("pids.txt", "a").write(f"{pid}\\n")
            os._exit(0)
        if MODE == "sheds":  # a child in a session of its own that, once it answered, no longer carries the mark
            pid = os.fork()
            if pid == 0:
                os.setsid()
                shed_the_mark_once_it_answered()
                time.sleep(3600)
            open("pids.txt", "a").write(f"{pid}\\n")
            while True:
                time.sleep(0.1)
        if MODE == "deaf":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends it
        how = mp.get_context("spawn" if MODE == "spawns" else "fork")
        lock = how.Lock()
        lock.acquire()
        child = how.Process(target=blocked, args=(lock,))
        child.start()
        open("pids.txt", "a").write(f"{child.pid}\\n")
        n = 0
        while True:
            if MODE == "chatty":
                print(f"[kernodeck] application: batch {n}/8", file=sys.stderr, flush=True)  # LINE-CHATTY
            time.sleep(0.1)  # LINE-MAIN-WAITS
            n += 1


    if __name__ == "__main__":
        main()
''')


def _line(marker: str) -> int:
    return next(n for n, text in enumerate(FAKE_RUNNER.splitlines(), start=1) if marker in text)


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "app.py").write_text(FAKE_RUNNER, encoding="utf-8")
    return project


def _argv(project: Path, mode: str) -> list[str]:
    return [sys.executable, "-I", str(project / "app.py"), str(INENV), mode]


def _pids(project: Path) -> list[int]:
    return [int(p) for p in (project / "pids.txt").read_text().split()]


pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="checks processes through /proc (Linux)")


def test_a_stall_stops_the_group_with_every_stack(tmp_path: Path) -> None:
    project = _project(tmp_path)
    start = time.monotonic()
    ended = supervise(_argv(project, "blocks"), env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=2.0),
                      root=project)
    assert time.monotonic() - start < 2.0 + 15
    stopped = ended.stopped
    assert stopped is not None and stopped.kind is Stop.STALLED
    assert stopped.step == "application" and stopped.last_progress == "application: batch 1/8"
    assert stopped.message().startswith("stalled: no progress for 2 s after 'application: batch 1/8'")
    assert stopped.layer == "application" and stopped.user_frame == f"app.py:{_line('LINE-MAIN-WAITS')}"
    runner, child = _pids(project)
    assert set(stopped.pids) == {runner, child}  # both answered
    # every stack: the runner's and the forked child's, each with its user frame first
    assert f"== process {child}: a child (forked from {runner}) ==" in stopped.stacks
    assert f"app.py:{_line('LINE-CHILD-BLOCKED')} in blocked    # lock.acquire()" in stopped.stacks
    assert any(f.endswith(f"app.py:{_line('LINE-CHILD-BLOCKED')} in blocked") for f in stopped.user_frames)
    assert "_package.py" not in stopped.stacks  # Kernodeck's in-env frames trimmed
    assert not running(runner) and not running(child)  # no process of the run left
    assert not [p for p in Path(os.environ.get("TMPDIR", "/tmp")).glob("kernodeck-stacks-*")
                if (p / f"{runner}.txt").exists()]  # the supervisor's folder is gone


def test_a_spawned_child_gives_its_stacks_too(tmp_path: Path) -> None:
    """multiprocessing's spawn (macOS's default) starts a new interpreter that imports the runner as its main module:
    the hook installed at import registers it."""
    project = _project(tmp_path)
    ended = supervise(_argv(project, "spawns"), env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=4.0),
                      root=project)
    assert ended.stopped is not None and ended.stopped.kind is Stop.STALLED
    runner, child = _pids(project)
    assert f"== process {child}: a child (started from {runner}) ==" in ended.stopped.stacks
    assert f"app.py:{_line('LINE-CHILD-BLOCKED')} in blocked" in ended.stopped.stacks
    assert not running(runner) and not running(child)


def test_a_process_that_ends_is_not_stopped(tmp_path: Path) -> None:
    """The negative control: the same process, ending by itself under the same deadlines."""
    project = _project(tmp_path)
    ended = supervise(_argv(project, "ends"), env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=2.0),
                      root=project)
    assert ended.stopped is None and ended.code == 0
    assert ended.tail[-1] == "[kernodeck] application: batch 1/8"


def test_a_run_that_ends_leaving_a_child_is_not_a_hang_and_leaves_nothing(tmp_path: Path) -> None:
    project = _project(tmp_path)
    start = time.monotonic()
    ended = supervise(_argv(project, "leaves"), env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=30.0),
                      root=project)
    assert time.monotonic() - start < 15 and ended.stopped is None and ended.code == 0
    time.sleep(0.3)
    assert not any(running(pid) for pid in _pids(project))


def test_a_step_past_its_deadline_is_timed_out_although_it_makes_progress(tmp_path: Path) -> None:
    project = _project(tmp_path)
    limits = Deadlines(steps={"application": 2.0}, stall=100.0)
    ended = supervise(_argv(project, "chatty"), env=dict(os.environ), cwd=project, deadlines=limits, root=project)
    stopped = ended.stopped
    assert stopped is not None and stopped.kind is Stop.TIMED_OUT, ended
    assert stopped.limit_s == 2.0 and stopped.ran_s >= 2.0 and stopped.silent_s < 1.0
    assert stopped.message().startswith("timed-out: still running after 2 s (deadline 2 s)")
    assert stopped.user_frame in {f"app.py:{_line('LINE-CHATTY')}", f"app.py:{_line('LINE-MAIN-WAITS')}"}
    assert not any(running(pid) for pid in _pids(project))


DRIVER = textwrap.dedent('''\
    import json, os, sys
    from pathlib import Path
    from kernodeck.project.deadlines import Deadlines
    from kernodeck.supervise import supervise

    project = Path(sys.argv[1])
    argv = [sys.executable, "-I", str(project / "app.py"), sys.argv[2], sys.argv[3]]
    ended = supervise(argv, env=dict(os.environ), cwd=project, deadlines=Deadlines(), root=project,
                      on_line=lambda line: print(line, file=sys.stderr, flush=True))
    s = ended.stopped
    print(json.dumps({"kind": str(s.kind), "signal": s.signal, "stacks": s.stacks} if s else None))
''')


def _driver(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path]:
    project = _project(tmp_path)
    (tmp_path / "driver.py").write_text(DRIVER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "driver.py"), str(project), str(INENV), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stderr is not None
    seen = threading.Event()

    def wait_for_batch() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "batch 1/8" in line:
                seen.set()

    threading.Thread(target=wait_for_batch, daemon=True).start()
    assert seen.wait(60), "the fake runner never started"
    deadline = time.monotonic() + 30
    while len(_pids(project)) < 2 and time.monotonic() < deadline:  # the child is started too
        time.sleep(0.1)
    return proc, project


def test_a_signal_gives_the_interrupted_record_with_stacks(tmp_path: Path) -> None:
    proc, project = _driver(tmp_path, "blocks")
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert time.monotonic() - start < 10
    assert proc.returncode == 0
    record = json.loads(out)
    assert record["kind"] == "interrupted" and record["signal"] == "SIGTERM"
    assert f"app.py:{_line('LINE-CHILD-BLOCKED')} in blocked" in record["stacks"]
    assert not any(running(pid) for pid in _pids(project))


def test_a_second_signal_stops_at_once(tmp_path: Path) -> None:
    proc, project = _driver(tmp_path, "deaf")  # the runner ignores SIGTERM: only the grace's SIGKILL would end it
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)
    second = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    assert time.monotonic() - second < 1.0  # at once: not after the grace
    assert proc.returncode == 128 + signal.SIGTERM
    time.sleep(0.3)
    assert not any(running(pid) for pid in _pids(project))


def test_a_process_that_left_the_group_is_stopped_too(tmp_path: Path) -> None:
    """A daemon the application started in a session of its own (setsid, a double fork) is out of reach of the group's
    signal: found by the run's mark in its environment, it is stopped and named, never left running."""
    project = _project(tmp_path)
    ended = supervise(_argv(project, "escapes"), env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=30.0),
                      root=project)
    daemon = _pids(project)[-1]
    assert ended.stopped is None and ended.code == 0 and ended.escaped == (daemon,)
    time.sleep(0.3)
    assert not running(daemon)


def test_a_process_that_answered_is_ended_although_it_no_longer_carries_the_mark(tmp_path: Path) -> None:
    """Each process that answered the stacks signal is held from then on (a pidfd) and is gone when the supervisor
    returns, whether or not its mark can still be read: a process in its exit reads an empty environment, so the sweep
    by mark missed one still dying (a full CI run: the resume check's worker left running after a hang's verify); a
    process that rewrote its environment stands in for it here."""
    project = _project(tmp_path)
    ended = supervise(_argv(project, "sheds"), env=dict(os.environ), cwd=project, deadlines=Deadlines(stall=2.0),
                      root=project)
    runner, child = _pids(project)
    assert ended.stopped is not None and set(ended.stopped.pids) == {runner, child}  # both answered
    assert not running(child), "a process of the run that answered was left running"


def test_a_process_of_the_run_is_found_by_the_runs_mark_not_by_its_group(tmp_path: Path) -> None:
    """Who is asked for stacks: a registered process carrying the run's mark, in a session of its own (the resume
    check's worker); never one whose pid file is in the folder but that carries another run's mark (a pid reused),
    even in the group given (red-team pass 57, HANG1)."""
    folder = tmp_path / "stacks"
    folder.mkdir()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleep, env={**os.environ, STACKS_DIR_ENV: str(folder)}, start_new_session=True)
    stranger = subprocess.Popen(sleep, env={**os.environ, STACKS_DIR_ENV: str(tmp_path / "another")})
    try:
        for proc in (ours, stranger):
            (folder / f"{proc.pid}.txt").write_text("", encoding="utf-8")
        asked = _ask_stacks(os.getpgrp(), folder)
        assert set(asked) == {ours.pid}  # the group given is the stranger's, not ours'
        assert all(fd is not None for fd in asked.values())  # held (a pidfd) from then on
        assert stranger.poll() is None  # never sent the signal (it would have ended it)
    finally:
        for proc in (ours, stranger):
            proc.kill()
            proc.wait()
