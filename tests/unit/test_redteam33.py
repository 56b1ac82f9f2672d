"""Red-team pass 33 (a69fd38: resume_calls.adopting/end_descendants in resume_app.worker_call; _package.get_code's
".." rule): each finding reproduced, marked ``xfail(strict=True)`` with its id while it stands, beside controls that
pass today (notes: /work/notes/redteam33.md).

END1 (a chain deeper than the loop outlives its call): end_descendants kills only the processes whose parent is the
worker, then waits and looks again, 64 times, and returns silently whatever is left. A process killed hands its own
children to the subreaper, so each pass peels ONE level of the tree: a chain of 70 forked processes (each in a session
of its own, os.setsid, so resume.Worker's killpg misses them too) keeps its last levels alive after the call answered.
CONTROL1: the same chain 10 deep is ended whole.

END2 (the application's code runs after end_descendants): train's progress counters are handed back as train returned
them (a copy of the dict; keys and values the application's objects). A key that is a ``str`` subclass passes
call_train's checks and is compared by ``json.dumps(sort_keys=True)`` in resume_calls.signed, which _serve calls AFTER
worker_call's ``finally: end_descendants()``: its ``__lt__``/``__gt__`` forks a child that leaves the group and
outlives the call. CONTROL2: the same key forking in train (before end_descendants) is ended.

Fix by class: no application code after the last kill (the answer's text made from plain types, ``type(k) is str``,
``type(v) is int``, before end_descendants, or the hook refusing os.fork once it starts), and a kill that takes the
whole tree (every pid whose ppid chain reaches the worker, in one pass; what remains after the bound refused, never
returned silently).
Fixed: END1 (each pass kills the whole tree below the process, one /proc scan, until none is left; one still alive 30 s
later fails the call), END2 (train's counters must be a plain dict of str to int, resume_calls.plain_counters, so the
answer's JSON runs no application code; and a fork by a thread the call left running is refused once its processes
are ended, seen.FORKS_ENDED: tests/unit/test_resume_calls.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from tests.helpers.closedworld import INENV

CHAIN = r"""
import os, runpy, sys, time
from pathlib import Path
runpy.run_path(INENV + "/_package.py")
from kernodeck_inenv.resume_calls import adopting, end_descendants
sys.stdin.readline()
adopting()  # as resume_app.worker_call does before the call
if os.fork() == 0:  # the application's chain: each level forks the next, each in a session of its own
    for level in range(DEPTH):
        os.setsid()
        os.closerange(0, 64)
        with open(PIDS, "a") as f:
            f.write(f"{os.getpid()}\n")
        if level == DEPTH - 1:
            Path(READY).write_text("")
            time.sleep(3)  # past the call's answer and the Worker's killpg
            Path(LATE).write_text("the stash")
            os._exit(0)
        if os.fork() != 0:
            time.sleep(6)
            os._exit(0)
deadline = time.monotonic() + 20
while not os.path.exists(READY) and time.monotonic() < deadline:
    time.sleep(0.02)
end_descendants()  # as resume_app.worker_call does as the call ends
print("answered", flush=True)
"""


def _cleanup(pids: Path) -> None:
    for line in pids.read_text().split() if pids.exists() else ():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(line), signal.SIGKILL)  # only the processes this test started


def _served(tmp_path: Path, script: str, values: dict[str, object], wait: float) -> bool:
    from kernodeck.inenv import resume

    late, pids = tmp_path / "late.txt", tmp_path / "pids.txt"
    head = "".join(f"{k} = {v!r}\n" for k, v in {**values, "LATE": str(late), "PIDS": str(pids),
                                                 "READY": str(tmp_path / "ready"), "INENV": str(INENV)}.items())
    (tmp_path / "serve.py").write_text(head + script)
    try:
        code, err = resume.Worker(tmp_path / "serve.py").run({})
        assert code == 0, err
        time.sleep(wait)
        return late.exists()
    finally:
        _cleanup(pids)


def test_control1_a_chain_shallower_than_the_loop_is_ended(tmp_path: Path) -> None:
    assert not _served(tmp_path, CHAIN, {"DEPTH": 10}, 4)


def test_end1_a_chain_deeper_than_the_loop_does_not_outlive_its_call(tmp_path: Path) -> None:
    assert not _served(tmp_path, CHAIN, {"DEPTH": 70}, 4)


# resume_app._serve's order after the call, cut to it: worker_call (its finally: end_descendants), then answer and
# signed with the Trained it returned; the counters as call_train hands them on (dict(counters))
AFTER = r"""
import os, runpy, sys, time
from pathlib import Path
runpy.run_path(INENV + "/_package.py")
from kernodeck_inenv.resume_app import Trained, check_progress, TrainApp
from kernodeck_inenv.resume_calls import adopting, answer, end_descendants, plain_counters, signed
from kernodeck_inenv._common import CheckFailed
sys.stdin.readline()

def escape():
    if os.fork() == 0:
        os.setsid()
        os.closerange(0, 64)
        with open(PIDS, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(1.5)
        Path(LATE).write_text("the stash")
        os._exit(0)

class Key(str):  # the application's: a progress counter's name
    def __lt__(self, other):
        if not FORKED:
            FORKED.append(1)
            escape()
        return str.__lt__(self, other)

    def __gt__(self, other):  # either side of the sort's comparison
        return Key.__lt__(Key(other), self)

FORKED = []

def train():
    if IN_TRAIN:
        FORKED.append(1)
        escape()
    return {Key("step"): 4, "epoch": 0, "loader": 4}

adopting()
try:
    counters = train()
    app = TrainApp({}, "cpu", Path("."), Path("."), None, {})
    for s in range(1, 5):
        app.log(s, 0.0)
    plain_counters(counters, ("step", "epoch", "loader"))  # call_train's check of what train returned
    check_progress(counters, app, 0, 4)
    trained = Trained({}, dict(app.losses), dict(counters))
except CheckFailed as exc:
    trained = None
    print("refused:", exc, flush=True)
finally:
    end_descendants()
if trained is not None:
    said = answer(trained.outputs, trained.losses, trained.counters)
    line = signed(said, "00" * 32)
    print("answered", flush=True)
"""


def test_control2_a_child_forked_by_train_is_ended(tmp_path: Path) -> None:
    assert not _served(tmp_path, AFTER, {"IN_TRAIN": True}, 2.5)


def test_end2_no_application_code_forks_after_end_descendants(tmp_path: Path) -> None:
    assert not _served(tmp_path, AFTER, {"IN_TRAIN": False}, 2.5)
