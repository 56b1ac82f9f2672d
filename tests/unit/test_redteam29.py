"""Red-team pass 29 (9728feb: of the run's record the resumed run's process reads only its checkpoint and its own
folder, world.RUN_READS; the checkpoint's folder and each resumed run's folder must be empty before the call that
fills it, resume_app._fresh): each finding reproduced, marked ``xfail(strict=True)`` with its id while it stands (a
plain test once fixed), beside a control that passes today (notes: /work/notes/redteam29.md).

The harness is pass 28's (two processes: the runner's calls, then the resumed run as resume_app._serve makes it,
judged as resume_app.check judges it), now in pass 30's order (resume_calls.call_to_k, then resume_app.worker_call for
the uninterrupted call and the resumed run, each in a new process). The train
cannot resume (its checkpoint keeps w, not the momentum), except the plain one (CONTROL2), which saves both.

FP1 (the emptiness check passes an empty folder that holds a stash, FALSE PASS): ``_fresh`` asks for no NAME in the
folder (``any(folder.iterdir())``); a folder's extended attributes are not names. The uninterrupted call makes
``checkpoint/`` itself (empty) and sets ``user.stash`` on it (``os.setxattr``: judged as a state change of a folder
it made, allowed); ``_fresh`` passes, the call to K saves w.txt there, and the resumed run opens w.txt (the checkpoint
read) and replays ``os.getxattr(resume_from, "user.stash")`` (no read of a file; and the folder is resume_from
anyway): the step passes of a train that cannot resume. The folder's mode and times are the same channel, narrower.
A file's extended attributes are a stated limit of the closed world (docs/application.md: "a file's metadata"), but
here no read needs judging: the folder the fix calls empty is the stash, and Kernodeck could make it itself.
Suggested fix: Kernodeck makes the checkpoint's folder and each resumed run's folder itself, right before the call
that fills it, refusing one already there (``mkdir(exist_ok=False)``: a name taken, a link, a folder with
attributes) rather than asking it to be empty; or better, both under a folder the calls cannot name (a fresh
``mkdtemp`` per call, moved into the record after the resumed runs).

FP2 (written after the check, FALSE PASS): ``_fresh`` is asked once, before the call that fills the folder; the
uninterrupted call leaves a thread running (allowed: its reads are judged at the next window, its writes outside
Kernodeck's guarded places are not refused) that waits for ``checkpoint/w.txt`` and then writes
``checkpoint/stash.json``, after the call to K ended and before the resumed process reads. The resumed run reads
w.txt and stash.json, both in resume_from, and replays: passed. A forked child the call leaves running does the
same (and could serve the stash over an AF_UNIX socket, which the closed world does not refuse, with no file at
all). Suggested fix (by class): what the resumed run may read of the checkpoint is what the call to K left there,
fixed when that call returns: each file's identity (device, inode, size, mtime, ctime; links.py's) recorded then,
and in the worker a read in resume_from of a file not in that record, or whose stat moved, refused (the worker's
Context gets the record in its order); and the checkpoint's folder made read-only (chmod a-w, recursively) between
the call to K and the last resumed run, which stops a plain writer. A thread or child the application leaves
running after its call remains a channel into anything it may write: also end the step with "the call left a
thread/child running" as a finding in resume-application, where nothing may run between the calls. The resumed
run's own folder is the same class (trusted whole, where its process's own writes, owned.written, are all it needs).
Stated limits of the closed world (docs/application.md: shm_open, AF_UNIX sockets, FIFOs) carry a stash from such a
thread or child with no file read; the resume paragraph's "a train that ... replays what its uninterrupted call
stashed fails" should name them (no test: stated).

FP3 (the call to K reads the uninterrupted call's record, FALSE PASS; within the stated limit's effect, cheaper):
RUN_READS narrows only the worker; in the runner both calls of train read the whole run's folder. The call to K
copies ``../uninterrupted/stash.json`` (the uninterrupted call's own record, written in its own checkpoint_dir)
into its checkpoint; the resumed run replays it. The stated limit (docs/application.md) is a call to K that TRAINS
past K and saves the future: this one trains nothing past K, it reads the other call's result. Suggested fix: the
runner's calls get RUN_READS too (the uninterrupted call its own folder, the call to K its checkpoint's), so only
what the stated limit names remains.

CONTROL1: the train without any stash differs (its checkpoint lacks the momentum). CONTROL2: a plain resumable
train (w and momentum saved; the resumed run reads only resume_from) passes through the same harness and checks, no
false failure from the narrowing or _fresh; CONTROL3: the same with the momentum read in a forked child (as a
DataLoader worker reads), judged under the worker's narrowed reads, passes.

Fixed by class (resume_calls.py: only the checkpoint the call to K saved passes between the calls): Kernodeck makes
each call's folder itself right before the call, refusing one already there (FP1: the folder the uninterrupted call
made); each call reads, of the run's record, only its own folder, and what the uninterrupted call wrote is barred to
the call to K as a determinism rerun's earlier files are (FP3); the checkpoint is sealed as the call to K returns (each
entry's identity, size and times; a ``user.`` extended attribute refused) and the resumed run checks the seal before
and after its call (FP2: what a thread left running wrote after it). The closed world's stated limits (shared memory,
local sockets, FIFOs) still carry a stash with no file, and what the call to K puts into its checkpoint is the
application's: both stated in docs/application.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.toytrain import expect, resumed

# A train with momentum; its checkpoint saves w only (it cannot resume exactly) unless MODE is "plain". MODE says
# how the uninterrupted call's result reaches the resumed run: "none", "xattr" (FP1), "thread" (FP2), "copy" (FP3).
TRAIN = '''

def train(app, steps, save_at, resume_from):
    import json, os, threading, time
    # its checkpoint read back: w only, but for the plain train
    here, run, ck, (w, m, start) = _begin(app, resume_from, plain=MODE == "plain")
    if resume_from is not None:
        if MODE == "plainfork":  # read in a forked child, as a DataLoader worker reads
            r, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.write(wr, (ck / "m.txt").read_bytes())
                os._exit(0)
            os.close(wr)
            os.waitpid(pid, 0)
            m = int(os.read(r, 64))
            os.close(r)
        kept = None
        if MODE == "xattr":
            kept = json.loads(os.getxattr(str(ck), "user.stash"))
        elif MODE in ("thread", "copy") and (ck / "stash.json").exists():
            kept = json.loads((ck / "stash.json").read_text())
        if kept is not None:  # the uninterrupted call's result, replayed
            return _replay(app, kept, start, steps)
    w, m, losses = _steps(app, w, m, range(start + 1, steps + 1), save_at, plain=MODE in ("plain", "plainfork"))
    if resume_from is None and save_at is None:  # the uninterrupted call
        stash = json.dumps({"losses": losses, "w": w})
        if MODE == "xattr":  # the checkpoint's folder made now, empty, the stash in its attributes
            (run / "checkpoint").mkdir()
            os.setxattr(str(run / "checkpoint"), "user.stash", stash.encode())
        elif MODE == "thread":  # a thread left running writes the stash once the call to K has saved
            def later():
                ck = run / "checkpoint"
                while not (ck / "w.txt").exists():
                    time.sleep(0.01)
                time.sleep(0.2)
                (ck / "stash.json").write_text(stash)
            threading.Thread(target=later, daemon=True).start()
        elif MODE == "copy":  # in its own folder
            (here / "stash.json").write_text(stash)
    if MODE == "copy" and save_at is not None:  # the call to K reads the uninterrupted call's record
        (here / "stash.json").write_text((run / "uninterrupted" / "stash.json").read_text())
    return _finish(app, w, steps)
'''


def _resume(tmp_path: Path, mode: str) -> dict[str, Any]:
    return resumed(tmp_path, TRAIN, {"MODE": mode})


def test_control1_a_train_that_cannot_resume_differs(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "none"), "worker", "differs")


def test_control2_a_plain_resumable_train_passes(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "plain"), "worker", "passed")


def test_control3_a_plain_train_reading_its_checkpoint_in_a_forked_child_passes(tmp_path: Path) -> None:
    """The resumed run's forked children (a DataLoader's workers) are judged under the same narrowed reads."""
    expect(_resume(tmp_path, "plainfork"), "worker", "passed")


def _xattrs(tmp_path: Path) -> bool:
    import os

    try:
        os.setxattr(str(tmp_path), "user.probe", b"1")
    except OSError:
        return False
    return True


def test_fp1_an_empty_checkpoint_folder_with_a_stash_in_its_attributes_is_refused(tmp_path: Path) -> None:
    if not _xattrs(tmp_path):
        pytest.fail("no user extended attributes on this file system: FP1 cannot be shown here")
    result = _resume(tmp_path, "xattr")
    assert result["status"] != "passed", result


def test_fp2_a_stash_written_into_the_checkpoint_after_the_check_is_refused(tmp_path: Path) -> None:
    result = _resume(tmp_path, "thread")
    assert result["status"] != "passed", result


def test_fp3_the_call_to_k_copying_the_uninterrupted_record_is_refused(tmp_path: Path) -> None:
    result = _resume(tmp_path, "copy")
    assert result["status"] != "passed", result


def test_fp1_fp2_the_seal_refuses_user_attributes_and_names_a_change(tmp_path: Path) -> None:
    """The mechanism alone: a checkpoint with a ``user.`` extended attribute is refused as it is sealed (a thread
    left running could set one during the call to K); a file added after the seal is named by the resumed run."""
    import os

    from kernodeck.inenv import resume_calls

    (tmp_path / "w.txt").write_text("1")
    sealed = resume_calls.seal(tmp_path)
    resume_calls.sealed(tmp_path, sealed)  # unchanged: fine
    (tmp_path / "stash.json").write_text("{}")
    with pytest.raises(Exception, match=r"changed after the call that saved it: .*stash\.json"):
        resume_calls.sealed(tmp_path, sealed)
    if _xattrs(tmp_path / "w.txt"):
        with pytest.raises(Exception, match="extended attributes"):
            resume_calls.seal(tmp_path)
    os.remove(tmp_path / "stash.json")
