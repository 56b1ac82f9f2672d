"""resume_calls.py: the resumed run's new process is held to the runner's records (its settings, its libraries, its
sources), as each of the runner's steps is (steprun.held; red-team pass 27, NOTE1: its sources only, before).

The two phases run as the resume check runs them (tests/helpers/closedworld.resume_phases: a closed project, the
in-env package as the runner loads it, a stand-in torch whose settings are applied and read back).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv._common import CheckFailed, Context
from kernodeck.inenv.protocol import SYSTEM_FILES
from kernodeck.inenv.resume_calls import answer, answered, signed, with_records
from kernodeck.inenv.systemfiles import read_in
from tests.helpers.closedworld import resume_phases

TRAIN = '''

def train(app, steps, save_at, resume_from):
    from pathlib import Path
    here = Path(app.checkpoint_dir)
    w, m, start = 0, 0, 0
    if resume_from is not None:  # a full checkpoint: the state and its momentum
        w = int((Path(resume_from) / "w.txt").read_text())
        m = int((Path(resume_from) / "m.txt").read_text())
        start = 3
    for step in range(start + 1, steps + 1):
        m = m + 1
        w = w + m
        app.log(step, float(w))
        if save_at == step:
            (here / "w.txt").write_text(str(w))
            (here / "m.txt").write_text(str(m))
    app.write("w", [w])
    return {"step": steps, "epoch": 0, "loader": steps}
'''


def test_a_resumable_train_passes_in_a_new_process_holding_the_runners_settings(tmp_path: Path) -> None:
    result = resume_phases(tmp_path, TRAIN)
    assert (result["phase"], result["status"]) == ("worker", "passed"), result


@pytest.mark.parametrize("change", ["torch.set_num_threads(1)", "torch.set_num_interop_threads(1)",
                                    "torch.backends.cudnn.benchmark = True"])
def test_a_setting_not_the_runners_in_the_new_process_fails_its_call(tmp_path: Path, change: str) -> None:
    """What the env's code changed in the new process before the call (outside the project's windows): the resumed
    run computed with other settings than settings.json records, so its call fails, naming them."""
    result = resume_phases(tmp_path, TRAIN, worker_start=change)
    assert (result["phase"], result["status"]) == ("worker", "failed"), result
    assert "not in effect" in result["error"], result


FORK_AFTER = r"""
import os, runpy, sys, threading
runpy.run_path(sys.argv[1])
from kernodeck_inenv import seen
from kernodeck_inenv._common import CheckFailed
seen.install()  # as the first window does: this thread is Kernodeck's, a new one the application's

def fork(said):
    try:
        if os.fork() == 0:
            os._exit(0)
        os.wait()
        said.append("forked")
    except CheckFailed as exc:
        said.append(f"refused: {exc}")

for ended in (False, True):  # before, then after, the call's processes are ended (resume_calls.end_descendants)
    seen.FORKS_ENDED[0] = ended
    said = []
    thread = threading.Thread(target=fork, args=(said,))
    thread.start()
    thread.join()
    print(said[0])
"""


def test_a_thread_the_call_left_running_cannot_fork_once_its_processes_are_ended(tmp_path: Path) -> None:
    """After a resume call's processes are ended, a fork by a thread the application left running is refused (what it
    would run would outlive the call: red-team pass 33, END2's class); the control: the same fork before is allowed
    (a DataLoader's workers)."""
    from tests.helpers.closedworld import INENV

    (tmp_path / "fork_after.py").write_text(FORK_AFTER)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))}
    done = subprocess.run([sys.executable, "-s", "-P", str(tmp_path / "fork_after.py"), str(INENV / "_package.py")],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    before, after = done.stdout.splitlines()
    assert before == "forked"
    assert after.startswith("refused:") and "forked after its call ended" in after


# --- the records a call's process made reach the runner's (red-team pass 57, PROC4) --------------------------------

class _Answering:
    """resume.Worker's interface (run, out, cmd): its one signed line, the answer ``said``."""

    def __init__(self, said: dict[str, Any], key: str) -> None:
        self.out, self.cmd = signed(said, key), ["resume_app.py", "--serve"]

    def run(self, order: dict[str, Any]) -> tuple[int, str]:
        return 0, ""


_KEY = "00" * 32
_ORDER = {"key": _KEY, "cfg": {"outputs": []}, "resume_from": None}
_STATE = "/proc/sys/kernel/domainname"


def _worker_ctx(tmp_path: Path, files: dict[str, str]) -> Context:
    ctx = Context(config={}, out=tmp_path)
    ctx.state[SYSTEM_FILES] = dict(files)
    return ctx


def test_a_calls_system_files_reach_the_runners_record(tmp_path: Path) -> None:
    said = with_records(answer({}, {1: 0.5}, {"steps": 1}), _worker_ctx(tmp_path, {_STATE: "ab" * 32}))
    runner = Context(config={}, out=tmp_path)
    runner.state[SYSTEM_FILES] = {"/etc/os-release": "cd" * 32}  # an earlier step's
    before = set(runner.state[SYSTEM_FILES])
    answered(_Answering(said, _KEY), _ORDER, runner)
    assert read_in(runner, before) == {_STATE: "ab" * 32}  # the step's own record: its details, system.json


def test_a_calls_verdict_hands_its_records_on_too(tmp_path: Path) -> None:
    said = with_records({"error": "RT57: domainname set", "layer": "application", "details": {}},
                        _worker_ctx(tmp_path, {_STATE: "ab" * 32}))
    runner = Context(config={}, out=tmp_path)
    with pytest.raises(CheckFailed, match="RT57"):
        answered(_Answering(said, _KEY), _ORDER, runner)
    assert runner.state[SYSTEM_FILES] == {_STATE: "ab" * 32}


def test_a_record_the_runner_holds_keeps_its_value(tmp_path: Path) -> None:
    said = with_records(answer({}, {}, {}), _worker_ctx(tmp_path, {_STATE: "ff" * 32}))
    runner = Context(config={}, out=tmp_path)
    runner.state[SYSTEM_FILES] = {_STATE: "ab" * 32}
    answered(_Answering(said, _KEY), _ORDER, runner)
    assert runner.state[SYSTEM_FILES] == {_STATE: "ab" * 32}


@pytest.mark.parametrize("files", [["/proc/sys/kernel/domainname"], {_STATE: 1}, "x"])
def test_system_files_that_are_no_record_are_refused(tmp_path: Path, files: Any) -> None:
    said = {**answer({}, {}, {}), SYSTEM_FILES: files}
    runner = Context(config={}, out=tmp_path)
    with pytest.raises(CheckFailed, match="system_files that are no record"):
        answered(_Answering(said, _KEY), _ORDER, runner)
    assert SYSTEM_FILES not in runner.state


def test_a_call_that_read_no_system_file_answers_an_empty_record(tmp_path: Path) -> None:
    assert with_records(answer({}, {}, {}), None)[SYSTEM_FILES] == {}
    assert with_records(answer({}, {}, {}), Context(config={}, out=tmp_path))[SYSTEM_FILES] == {}
