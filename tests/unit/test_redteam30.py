"""Red-team pass 30 (bab34a2 and 655aa82: resume_calls.py, only the checkpoint the call to K saved passes between the
resume check's calls; steprun.py, one step rule; links.py): each finding reproduced, marked ``xfail(strict=True)``
with its id while it stands (a plain test once fixed), beside controls that pass today (notes:
/work/notes/redteam30.md).

All fixed by class: the call to K runs first and is sealed before any other call, which each run in a NEW process
(resume_calls.py); a call's result comes back on its process's own channel, copied as it returns; of the run's
record the resumed run reads only its checkpoint; each process ends by the one step rule (steprun.held: libraries,
what a leftover thread read, sources, settings); the seal's failure after the call names the resumed run's own
access; a run-record file is advised as such (advice.py). The harness is passes 28 and 29's, following the new order
(tests/helpers/closedworld.py: resume_phases: the call to K through resume_calls.call_to_k, then the uninterrupted
call and the resumed run through resume_app.worker_call, each in a new process, judged as resume_app.check judges). The
train cannot resume (its checkpoint keeps w, not the momentum), except the plain ones of the controls; each attack
replays the uninterrupted call's result (and would add +1 under ``app.resume_drop``, so its controls are seen).

FP1 (the uninterrupted call runs before the checkpoint is sealed, in the same process; FALSE PASS): the seal proves
the checkpoint unchanged since the call to K returned, not that the call to K wrote it. A thread the uninterrupted
call leaves running writes ``stash.json`` into ``checkpoint/`` as soon as Kernodeck makes the folder, i.e. during the
call to K (``thread``); or the uninterrupted call keeps its result in ``builtins`` and the call to K writes it there
(``memo``: a memo is a stated limit of the reruns, docs/application.md, but the resume paragraph claims without
qualification that "a train that cannot resume but replays what its uninterrupted call stashed fails"). The seal
takes the stash in; the resumed run reads it inside resume_from and passes. Suggested fix (by class): call train to K
first and seal its checkpoint, then the uninterrupted call: nothing the uninterrupted call does (thread, child, memo,
file) then precedes the seal, and what remains is the stated limit (the call to K training past K unseen).
FP2 (the bar on the uninterrupted call's files holds reads, not moves; FALSE PASS): the call to K moves
(``os.rename``) or hard-links (``os.link``) ``../uninterrupted/stash.json`` into its checkpoint: seen._moved treats a
move of a file the application wrote as no read, so seen.earlier's bar (pass 29, FP3's fix) never sees it. Fix: FP1's
order closes it; or a move or link of a barred file refused like a read of it.
FP3 (the resumed run's own folder is trusted whole; FALSE PASS): world.RUN_READS in the worker is [resume_from, its
own folder], and a read of any file in its own folder is accepted whoever wrote it. A child the uninterrupted call
forked and left running waits for ``resumed-run/`` (made by the worker, right before its call) and writes the stash
there; the resumed run reads it. Pass 29 named the class (FP2's last sentence); the fix did not cover it. Fix: the
worker's RUN_READS only resume_from; its own folder's files readable as any output is (owned.written, a forked child's
notes included: CONTROL6 keeps passing).
FP4 (a thread the resumed train leaves running acts after its window; FALSE PASS): the worker opens no window after
train's, so what such a thread reads is recorded (seen.LATE) and never judged, and call_train returns the app's own
``losses`` dict and ``written`` arrays, which the thread can still change. It waits until the worker checks the
checkpoint (the seal's walk of a checkpoint of 2000 shard files), reads ``uninterrupted/stash.json`` and rewrites
app.losses and app.written["w"] in place: passed. Fix (by class): what a call returns is copied as it returns
(Trained of copies); and the worker judges the LATE reads after its checks, or refuses a thread of the application
still running when train returned (nothing has a reason to run then).
FP5 (the one step rule is not the resumed run's; FALSE PASS): steprun.held is libraries + sources + settings; the
worker applies only world.sources_held. A library no lock describes loaded by the resumed call (ctypes.CDLL of a
project .so, declared as code) passes there; the same load in the runner's calls fails the step (CONTROL5). Fix: the
worker ends with steprun.held's checks (libraries.check, sources_held, the settings read back against apply's
record), or the held rule made one function both processes call.
FF1 (a resumed run's own access to its checkpoint blamed on a leftover thread; FALSE FAIL, misnamed): a checkpoint
in a SQLite database in WAL mode, opened and read by the resumed run: SQLite makes ``state.db-wal``/``-shm`` beside
it and removes them as it closes, the folder's times move, and the seal fails "written by a thread or process an
earlier call of train left running?". Opened ``immutable=1`` it passes (CONTROL4). Fix: the worker names a change
its own process could have made (the folder's times, a file it opened to write) as the resumed run's own, with the
tip (open the checkpoint read-only: a SQLite database ``?immutable=1``), and docs/application.md says so.
FF2 (the worker's refusal of a run-folder file advises declaring it as a data source): a resumed run reading
``uninterrupted/stash.json`` is refused (right), as "a file outside the project and the env is declared as a source:
[tool.kernodeck.application.data.NAME]": advice that cannot apply to a file of the run's own record. Fix: a file of
the run's folder outside RUN_READS is named as such ("the resumed run may read only its checkpoint and its own
folder"), as the call to K's refusal is (owned.EARLIER_READ).

CONTROL1: the train without a stash differs. CONTROL2: a plain resumable train passes. CONTROL3: a checkpoint with
subfolders, a relative ``latest`` link, an array read mapped (np.load mmap_mode="r") and a log beside it passes.
CONTROL4: SQLite opened immutable passes. CONTROL5: the library loaded in the runner's calls fails steprun.held.
CONTROL6: the resumed run's forked child writes into its own folder, the run reads it back: passes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.closedworld import resume_phases
from tests.helpers.toytrain import expect, resumed

TRAIN = '''

def train(app, steps, save_at, resume_from):
    import builtins, json, os, sys, threading, time
    # its checkpoint read back: w only (it cannot resume), but for the plain one
    here, run, ck, (w, m, start) = _begin(app, resume_from, plain=MODE == "plain")
    if resume_from is not None:
        if MODE == "rich":  # subfolders, a link to the latest, an array mapped, a log beside them
            import numpy as np
            m = int(np.load(ck / "latest" / "optimizer" / "m.npy", mmap_mode="r")[0])
            assert (ck / "train.log").read_text().startswith("saved")
        if MODE in ("sqlite", "sqlite-immutable"):  # its state in a SQLite database (write-ahead log), read back
            import sqlite3
            db = (sqlite3.connect(ck / "state.db") if MODE == "sqlite" else
                  sqlite3.connect(f"file:{ck / 'state.db'}?immutable=1", uri=True))
            m = int(db.execute("select m from state").fetchone()[0])
            db.close()
        kept = None
        if MODE in ("thread", "memo", "rename", "link"):
            kept = json.loads((ck / "stash.json").read_text())
        elif MODE == "direct":  # read in its call: refused (what the refusal advises is FF2's)
            kept = json.loads((run / "uninterrupted" / "stash.json").read_text())
        elif MODE == "ownfork":  # m from the checkpoint through its own folder: a forked child writes, it reads
            pid = os.fork()
            if pid == 0:
                (here / "m.txt").write_text((ck / "m.txt").read_text())
                os._exit(0)
            os.waitpid(pid, 0)
            m = int((here / "m.txt").read_text())
        elif MODE == "child":  # its own folder, where a child the uninterrupted call forked writes the stash
            deadline = time.monotonic() + 4
            while not (here / "stash.json").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)
            kept = json.loads((here / "stash.json").read_text())
        if MODE == "late":  # a thread left running reads the stash once the call's window has closed
            def late():
                main = threading.main_thread().ident
                def after_the_call():  # the worker checking its checkpoint: train's window has been judged
                    frame = sys._current_frames().get(main)
                    while frame is not None:
                        if frame.f_code.co_name in ("read_the_checkpoint", "sealed", "sources_held"):
                            return True
                        frame = frame.f_back
                    return False
                while not after_the_call():
                    time.sleep(0.0001)
                kept = json.loads((run / "uninterrupted" / "stash.json").read_text())
                for step in range(start + 1, steps + 1):
                    app.losses[step] = kept["losses"][str(step)]
                app.written["w"][0] = kept["w"]
            sys.setswitchinterval(1e-5)
            threading.Thread(target=late, daemon=True).start()
        if kept is not None:  # the uninterrupted call's result, replayed
            return _replay(app, kept, start, steps)
    if save_at is not None and MODE == "thread":
        deadline = time.monotonic() + 4  # a stat, no read: until the thread has written
        while not (here / "stash.json").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    def also(step, w, m):  # the rest of the checkpoint, after w.txt (and m.txt)
        if MODE == "late":  # a checkpoint of many files (shards): the seal's walk takes a while
            (here / "shards").mkdir()
            for i in range(2000):
                (here / "shards" / f"{i}.txt").write_text(str(i))
        if MODE == "rich":
            import numpy as np
            (here / "step-3" / "optimizer").mkdir(parents=True)
            np.save(here / "step-3" / "optimizer" / "m.npy", np.array([m]))
            os.symlink("step-3", here / "latest")
            (here / "train.log").write_text(f"saved step {step}")
        if MODE in ("sqlite", "sqlite-immutable"):
            import sqlite3
            db = sqlite3.connect(here / "state.db")
            db.execute("pragma journal_mode=wal")
            db.execute("create table state (m integer)")
            db.execute("insert into state values (?)", (m,))
            db.commit()
            db.close()
    w, m, losses = _steps(app, w, m, range(start + 1, steps + 1), save_at, also, plain=MODE in ("plain", "ownfork"))
    if resume_from is None and save_at is None:  # the uninterrupted call
        stash = json.dumps({"losses": losses, "w": w})
        if MODE == "thread":  # a thread left running writes the stash as soon as the checkpoint's folder is made
            def early():
                ck = run / "checkpoint"
                deadline = time.monotonic() + 20
                while not ck.is_dir() and time.monotonic() < deadline:
                    time.sleep(0.001)
                (ck / "stash.json").write_text(stash)
            writer = threading.Thread(target=early, daemon=True)
            writer.start()
            writer.join(30)  # written before the call returns, whatever the machine's load (a race lost under load)
        elif MODE == "memo":
            builtins.__dict__["_kept"] = stash
        elif MODE in ("rename", "link", "late", "direct"):
            (here / "stash.json").write_text(stash)
        elif MODE == "child":  # a forked child left running: it writes into the resumed run's own folder
            pid = os.fork()
            if pid == 0:
                os.closerange(0, 3)
                own = run / "resumed-run"
                deadline = time.monotonic() + 30
                while not own.is_dir() and time.monotonic() < deadline:
                    time.sleep(0.005)
                (own / "stash.json").write_text(stash)
                os._exit(0)
    if save_at is not None:  # the call to K
        if MODE == "memo":
            (here / "stash.json").write_text(builtins.__dict__.pop("_kept"))
        elif MODE == "rename":  # no read: a move of the uninterrupted call's own file
            os.rename(run / "uninterrupted" / "stash.json", here / "stash.json")
        elif MODE == "link":
            os.link(run / "uninterrupted" / "stash.json", here / "stash.json")
    return _finish(app, w, steps)
'''


def _resume(tmp_path: Path, mode: str) -> dict[str, Any]:
    return resumed(tmp_path, TRAIN, {"MODE": mode})


LIB = '''
import ctypes

def train(app, steps, save_at, resume_from):
    from pathlib import Path
    here, w, m, start = Path(app.checkpoint_dir), 0, 0, 0
    if resume_from is not None:
        w, m = (int(x) for x in (Path(resume_from) / "wm.txt").read_text().split())
        start = 3
    if (resume_from is not None) == (WHERE == "worker"):  # a library no lock describes, loaded by path
        ctypes.CDLL(str(ROOT / "lib" / "libfast.so"))
    for step in range(start + 1, steps + 1):
        m, w = m + 1, w + m + 1
        app.log(step, float(w))
        if save_at == step:
            (here / "wm.txt").write_text(f"{w} {m}")
    app.write("w", [w])
    return {"step": steps, "epoch": 0, "loader": steps}
'''


def _lib_phases(tmp_path: Path, where: str) -> dict[str, Any]:
    import shutil

    root = tmp_path / "project"
    (root / "lib").mkdir(parents=True)
    shutil.copyfile("/usr/lib/x86_64-linux-gnu/libbz2.so.1", root / "lib" / "libfast.so")
    return resume_phases(tmp_path, f"\nWHERE = {where!r}\n" + LIB, table_extra={"code": ["lib/*.so"]})


def test_control1_a_train_that_cannot_resume_differs(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "none"), "worker", "differs")


def test_control2_a_plain_resumable_train_passes(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "plain"), "worker", "passed")


def test_control3_a_checkpoint_with_subfolders_a_latest_link_a_mapped_array_and_a_log_passes(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "rich"), "worker", "passed")


def test_control4_a_checkpoint_database_opened_immutable_passes(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "sqlite-immutable"), "worker", "passed")


def test_control5_a_library_no_lock_describes_fails_the_runners_calls(tmp_path: Path) -> None:
    expect(_lib_phases(tmp_path, "runner"), "runner", "failed", "shared libraries were loaded from outside the env")


def test_control6_a_forked_child_of_the_resumed_run_writing_its_own_folder_passes(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "ownfork"), "worker", "passed")


@pytest.mark.parametrize("mode", ["thread", "memo"])
def test_fp1_the_uninterrupted_calls_stash_in_the_checkpoint_before_the_seal_is_refused(tmp_path: Path,
                                                                                      mode: str) -> None:
    """Fixed: the call to K runs first and its checkpoint is sealed before the uninterrupted call runs, in a process of
    its own: no memo of it exists for the call to K (which fails looking for it), and its thread's stash breaks the
    seal."""
    result = _resume(tmp_path, mode)
    if mode == "memo":
        expect(result, "runner", "failed")
    else:
        expect(result, "worker", "failed", "the checkpoint changed after the call that saved it")


@pytest.mark.parametrize("mode", ["rename", "link"])
def test_fp2_the_uninterrupted_calls_file_moved_into_the_checkpoint_is_refused(tmp_path: Path, mode: str) -> None:
    """Fixed: nothing of the uninterrupted call exists when the call to K runs (it fails finding no file to move)."""
    expect(_resume(tmp_path, mode), "runner", "failed")


def test_fp3_a_stash_written_into_the_resumed_runs_own_folder_is_refused(tmp_path: Path) -> None:
    """Fixed: of the run's record the resumed run reads only its checkpoint and what it wrote itself."""
    expect(_resume(tmp_path, "child"), "worker", "failed", "stash.json")


def test_fp4_a_thread_the_resumed_call_left_running_cannot_replay(tmp_path: Path) -> None:
    """Fixed: the call's result is copied as it returns, and what a thread it left running read is judged at the
    process's end (steprun.held: world.late)."""
    result = _resume(tmp_path, "late")
    assert result["status"] != "passed", result


def test_fp5_a_library_no_lock_describes_fails_the_resumed_run(tmp_path: Path) -> None:
    expect(_lib_phases(tmp_path, "worker"), "worker", "failed", "shared libraries were loaded from outside the env")


def test_ff1_a_checkpoint_database_written_by_the_resumed_run_names_its_own_access(tmp_path: Path) -> None:
    """Fixed: a change found after the resumed call names the resumed run's own access first, with the tip to open
    the checkpoint read-only (a database's journal), not only a leftover thread."""
    expect(_resume(tmp_path, "sqlite"), "worker", "failed", "by the resumed run itself", "immutable=1")


def test_ff2_a_run_folder_file_refused_in_the_resumed_run_is_named_as_such(tmp_path: Path) -> None:
    result = _resume(tmp_path, "direct")
    expect(result, "worker", "failed", "checkpoint")
    assert "data.NAME" not in result["error"], result
