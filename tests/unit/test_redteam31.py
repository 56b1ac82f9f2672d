"""Red-team pass 31 (1eb1acf and c8edd14: the resume check's call to K runs first and is sealed; the uninterrupted
call and each resumed run each in a NEW process answering on its own channel; of the run's record the resumed run
reads only its checkpoint and what it wrote itself; each process ends by steprun.held): each finding reproduced,
marked ``xfail(strict=True)`` with its id while it stands (a plain test once fixed), beside controls that pass today
(notes: /work/notes/redteam31.md). Fixed: FP1 (each new process in its own process group, ended whole as it exits:
nothing it forked outlives its call, shown on resume.Worker itself; the runner's code reads nothing of the run's
record while the check runs, what a thread there read judged before it ends), FP2 (the answer signed with a key the
order hands to _serve, one line), FF1 (Kernodeck's lines on a stderr descriptor taken before the application loads,
_common.say); DOC1 stated in the resume paragraph, with a file's metadata (a strict xfail) and the application's code
computing the uninterrupted result itself.

The harness is pass 30's (tests/helpers/closedworld.py: resume_phases: the call to K through resume_calls.call_to_k,
then the uninterrupted call and the resumed run through resume_app.worker_call, each in a new process, judged as
resume_app.check judges), with two local variants: FP2's runs the resumed run's real new process (resume_app._serve,
its answer read back by resume_calls.answered), FF1's says Kernodeck's progress after the call to K as
resume_app.check does. The train cannot resume (its checkpoint keeps w, not the momentum m), except the plain ones of
the controls; each attack replays the uninterrupted call's result (+1 under ``app.resume_drop``, so its controls are
seen).

FP1 (a holder left running fills a file the resumed run made; FALSE PASS): owned.written takes a file the
application created in this run as its own output whatever wrote its bytes after. The uninterrupted call forks a child
and leaves it running (a fork is allowed: DataLoader), holding the result in memory; the resumed run creates
``mailbox`` in its own folder, empty, waits until its size moves (a stat), and reads it: the child wrote the stash
there, and the read is the resumed run's "own output". No read is recorded, no seal is involved. The same holds for a
thread the call to K leaves in the runner (alive through the whole check; its RUN_READS is the whole record again
after call_to_k) and for a mailbox outside the run's folder (/tmp). Fix (by class): no holder outlives a call: a
forked child of the application still alive, or a thread of the application still running, when a call of train
returns fails the call (in the runner after the call to K, in each new process before its answer); and/or a file the
application made is its own only while its state is the one its own last write left (a change by another writer makes
it an input again).
FP2 (the answer channel is in the application's reach; FALSE PASS): _serve keeps the process's stdout as a
descriptor (``os.dup(1)``) the application can find by a scan of its descriptors (a pipe, not fd 0's nor fd 2's). The
resumed train reads ``uninterrupted/stash.json`` (recorded, judged only when the window closes), writes the forged
answer line there and ends the process (``os._exit(0)``) inside its window: no window's verdict, no seal after, no
steprun.held; the runner takes the last line of a process that exited 0 and the step passes. The children's notes
channel (children.py) is signed against exactly this; the answer channel is not. Fix: the answer signed (HMAC with a
key handed in the order and held only in _serve's frame, the children's rule), exactly one line accepted, and a
process that ends inside a window (no end-of-call marker before the answer) refused.
DOC1 (the resume paragraph's limits leave out a file's metadata; a wrong claim): the paragraph says "a train that
cannot resume but replays what its uninterrupted call stashed, by a file, ... fails" and names as limits "shared
memory, local sockets, FIFOs". The uninterrupted call writes files in its own folder whose sizes carry its result;
the resumed run reads them with os.stat (no audit event): passes. A file's metadata is a stated limit of the closed
world (docs/application.md), but not of the resume paragraph, which claims the opposite. Fix: name it there (a file's
metadata: sizes, times, names probed by existence, extended attributes outside the checkpoint).
FF1 (Kernodeck's own progress line, through a stream the call to K left redirected, breaks the seal, blamed on a
leftover thread; FALSE FAIL, misnamed): a train that tees ``sys.stderr`` into ``train.log`` beside its checkpoint and
leaves it so: resume_app.check's progress("train uninterrupted ...") after the seal lands in the checkpoint, and the
resumed run fails "written by a thread or process an earlier call of train left running?". Fix: Kernodeck's progress
written to its own descriptor (taken before the application loads, as _serve's channel), or sys.stdout/sys.stderr put
back at each window's end (leftover.taken/put_back), or the message naming a stream the call left redirected.

CONTROL1: the train without a stash differs. CONTROL2: a plain resumable train passes. CONTROL3: the resumed run
reading the uninterrupted call's stash directly is refused. CONTROL4: a train using tqdm (its monitor thread left
running), logging to a file and TensorBoard-like event files in its own folder (a subfolder), reading its own log
back, passes. CONTROL5: FP1's child writing a file the resumed run did not make is refused (pass 30, FP3). CONTROL6:
FP2's harness with an honest resumed run answers and passes; a resumed run that reads the stash and answers normally
fails. CONTROL7: FF1's train without Kernodeck's progress after the call to K passes (its tee wrote nothing after the
seal).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.closedworld import INENV, RESUME_PHASES
from tests.helpers.toytrain import expect, resumed

TRAIN = '''

def train(app, steps, save_at, resume_from):
    import json, logging, os, stat, sys, time
    # its checkpoint read back: w only (it cannot resume), but for the plain ones
    here, run, ck, (w, m, start) = _begin(app, resume_from, plain=MODE in ("plain", "logs", "tee"))
    if MODE == "logs":  # a real-world train's side files: a log file, TensorBoard-like events in a subfolder, tqdm
        from tqdm import tqdm
        (here / "tb").mkdir()
        events = open(here / "tb" / "events.out.tfevents.1", "wb")
        log = logging.getLogger("train31")
        handler = logging.FileHandler(here / "train.log")
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    if resume_from is not None:
        kept = None
        if MODE == "mailbox":  # a file it makes, filled by a child the uninterrupted call left running
            kept = _from_mailbox(here)
        elif MODE == "child":  # the same child writing a file the resumed run did not make (pass 30, FP3)
            deadline = time.monotonic() + 4
            while not (here / "stash.json").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.1)
            kept = json.loads((here / "stash.json").read_text())
        elif MODE == "metadata":  # the stash in the sizes of the uninterrupted call's own files (os.stat)
            size = lambda name: os.stat(run / "uninterrupted" / name).st_size
            kept = {"losses": {str(s): float(size(f"loss-{s}")) for s in range(start + 1, steps + 1)}, "w": size("w")}
        elif MODE in ("direct", "forge-honest"):
            kept = json.loads((run / "uninterrupted" / "stash.json").read_text())
        elif MODE == "forge":  # the answer forged on the process's own channel, the process ended in the window
            import base64, io
            import numpy as np
            kept = json.loads((run / "uninterrupted" / "stash.json").read_text())
            buffer = io.BytesIO()
            np.save(buffer, np.array([kept["w"] + (1 if app.resume_drop else 0)], dtype=np.int64))
            said = {"losses": {s: v for s, v in kept["losses"].items() if int(s) > start},
                    "counters": {"step": steps, "epoch": 0, "loader": steps},
                    "outputs": {"w": base64.b64encode(buffer.getvalue()).decode("ascii")}}
            taken = {os.fstat(0).st_ino, os.fstat(2).st_ino}
            for fd in range(3, 64):
                try:
                    st = os.fstat(fd)
                except OSError:
                    continue
                if stat.S_ISFIFO(st.st_mode) and st.st_ino not in taken:
                    os.write(fd, (json.dumps(said) + "\\n").encode())
            os._exit(0)
        if kept is not None:  # the uninterrupted call's result, replayed
            return _replay(app, kept, start, steps)
    if save_at is not None and MODE == "tee":  # stderr teed into a log beside the checkpoint, left so
        class Tee:
            def __init__(self, *streams):
                self.streams = streams
            def write(self, text):
                for s in self.streams:
                    s.write(text)
                    s.flush()
                return len(text)
            def flush(self):
                for s in self.streams:
                    s.flush()
        sys.stderr = Tee(sys.stderr, open(here / "train.log", "a"))
        print("training to the checkpoint", file=sys.stderr)
    steps_done = range(start + 1, steps + 1)
    if MODE == "logs":
        steps_done = tqdm(steps_done, file=sys.stderr, mininterval=0)

    def each(step, w):  # after each step's loss
        if MODE == "logs":
            log.info("step %d loss %s", step, float(w))
            events.write(f"step {step} {w}\\n".encode())
            events.flush()

    w, m, losses = _steps(app, w, m, steps_done, save_at, each=each, plain=MODE in ("plain", "logs", "tee"))
    if MODE == "logs":
        events.close()
        handler.close()
        log.removeHandler(handler)
        assert (here / "train.log").read_text().count("loss") == steps - start  # its own log, read back
    if resume_from is None and save_at is None:  # the uninterrupted call
        stash = json.dumps({"losses": losses, "w": w})
        if MODE in ("direct", "forge", "forge-honest"):
            (here / "stash.json").write_text(stash)
        elif MODE == "metadata":
            for s, v in losses.items():
                (here / f"loss-{s}").write_bytes(b"." * int(v))
            (here / "w").write_bytes(b"." * w)
        elif MODE in ("mailbox", "child"):  # a forked child left running, the result in its memory
            pid = os.fork()
            if pid == 0:
                os.closerange(0, 3)
                own = run / "resumed-run"
                deadline = time.monotonic() + 30
                target = own / ("mailbox" if MODE == "mailbox" else "stash.json")
                while not (target.exists() if MODE == "mailbox" else own.is_dir()) and time.monotonic() < deadline:
                    time.sleep(0.005)
                with open(target, "w") as f:
                    f.write(stash)
                os._exit(0)
    return _finish(app, w, steps)
'''


def _resume(tmp_path: Path, mode: str, **options: Any) -> dict[str, Any]:
    return resumed(tmp_path, TRAIN, {"MODE": mode}, **options)


# --- FF1's variant: the runner says its progress after the call to K, as resume_app.check does ----------------------

PROGRESS = RESUME_PHASES.replace(
    "        time.sleep(1.0)  #",
    "        from kernodeck_inenv._common import progress\n"
    "        progress('train uninterrupted to step 6 in a new process')  # resume_app.check, after the seal\n"
    "        time.sleep(1.0)  #")


# --- FP2's variant: the resumed run in its real new process (resume_app.py --serve), its order on stdin, its answer
# read back by resume_calls.answered and judged as resume_app.check judges -------------------------------------------

SERVE = r"""
import os, runpy, sys
os.environ["KERNODECK_CACHE"] = sys.argv[2]
sys.path.insert(0, sys.argv[1])  # the stand-in torch, as the env's torch is in the worker
sys.argv = [sys.argv[3], "--serve"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class _Served:
    """resume.Worker's interface (run, out, cmd) over the SERVE wrapper of resume_app.py --serve."""

    def __init__(self, tmp_path: Path, fake: Path) -> None:
        (tmp_path / "serve.py").write_text(SERVE)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))}
        self.cmd = [sys.executable, "-s", "-P", str(tmp_path / "serve.py"), str(fake), str(tmp_path / "cache"),
                    str(INENV / "resume_app.py")]
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**env, "PYTHONHASHSEED": "0"}, cwd=tmp_path)
        self.out = ""

    def run(self, order: dict[str, Any]) -> tuple[int, str]:
        self.out, err = self.proc.communicate(json.dumps(order) + "\n", timeout=120)
        return self.proc.returncode, err


def _served(tmp_path: Path, mode: str) -> dict[str, Any]:
    import numpy as np

    from kernodeck.inenv import resume_app, resume_calls
    from kernodeck.inenv._common import CheckFailed

    ran = _resume(tmp_path, mode, upto="straight")
    assert ran["status"] == "passed", ran
    config, out = json.loads((tmp_path / "config.json").read_text()), tmp_path / "out"
    kept = json.loads((tmp_path / "trained.json").read_text())
    cfg = {"entry": {"file": "app.py", "function": "train"}, "steps": 6, "checkpoint_at": 3,
           "outputs": {"w": {"kind": "exact", "dtype": "int64", "justification": "the state"}}}
    folder = out / "resume-application"
    order = {"cfg": cfg, "root": config["project_root"], "app": config["application"], "out": str(out),
             "params": {}, "device": "cpu", "drop": None, "sources": kept["sources"],
             # the runner's record as a runner started with the hash seed (the real one is; the harness's -I is not)
             "settings": {**kept["settings"], "PYTHONHASHSEED": "0", "hash_randomization": 0, "hash_seed": "0"},
             "libraries": [], "seal": kept["seal"], "resume_from": str(folder / "checkpoint"),
             "folder": str(folder / "resumed-run"), "key": os.urandom(32).hex()}

    def trained(d: dict[str, Any]) -> Any:
        return resume_app.Trained({k: np.array(v, dtype=np.int64) for k, v in d["outputs"].items()},
                                  {int(k): v for k, v in d["losses"].items()}, d["counters"])

    try:
        answered = resume_app.Trained(*resume_calls.answered(_Served(tmp_path, tmp_path / "faketorch"), order))
    except CheckFailed as exc:
        return {"status": "failed", "error": str(exc)}
    verdict = resume_app.judge(cfg, trained(kept["straight"]), trained(kept["head"]), answered, 0.0)
    return {"status": "passed" if verdict["passed"] else "differs", "sees": verdict["declaration_sees"]}


def _resume_paragraph() -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "application.md").read_text(encoding="utf-8")
    start = text.index("Kernodeck calls `train` three times")
    return text[start:text.index("Negative controls, measured", start)]


# --- controls ----------------------------------------------------------------------------------------------------


def test_control1_a_train_that_cannot_resume_differs(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "none"), "worker", "differs")


def test_control2_a_plain_resumable_train_passes(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "plain"), "worker", "passed")


def test_control3_the_uninterrupted_calls_stash_read_directly_is_refused(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "direct"), "worker", "failed", "stash.json")


def test_control4_tqdm_a_log_file_and_event_files_in_its_own_folder_pass(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "logs"), "worker", "passed")


def test_control5_a_leftover_childs_file_the_resumed_run_did_not_make_is_refused(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "child"), "worker", "failed", "stash.json")


def test_control7_a_stream_the_call_to_k_left_redirected_breaks_nothing_unless_kernodeck_writes(tmp_path: Path) -> None:
    """FF1's (resumable) train without Kernodeck's progress line after the call to K: its leftover tee writes nothing
    into the checkpoint, and it passes."""
    expect(_resume(tmp_path, "tee"), "worker", "passed")


def test_control6_the_real_new_process_answers_and_judges_an_honest_and_a_replaying_run(tmp_path: Path) -> None:
    assert _served(tmp_path / "plain", "plain")["status"] == "passed"
    replayed = _served(tmp_path / "honest", "forge-honest")  # reads the stash, answers the normal way
    assert replayed["status"] == "failed" and "stash.json" in replayed["error"], replayed


# --- findings ----------------------------------------------------------------------------------------------------


SERVED_FORK = r"""
import os, sys, time
from pathlib import Path
sys.stdin.readline()
pid = os.fork()
if pid == 0:  # left running, its pipes closed, holding the result: it writes once the call has answered
    os.closerange(0, 3)
    time.sleep(0.5)
    Path(LATE).write_text("the stash")
    os._exit(0)
print(pid, flush=True)
"""


def test_fp1_nothing_a_new_process_forked_outlives_its_answer(tmp_path: Path) -> None:
    """Fixed by class (no holder outlives a call): each new process of the check runs in its own process group, ended
    whole as the process exits; a child it forked and left running (the mailbox's filler, whatever file it would fill)
    is gone before the next call starts. The harness's phases are plain processes, so this is shown on resume.Worker
    itself, serving a script whose child writes after the answer."""
    import time

    from kernodeck.inenv import resume

    script = tmp_path / "serve.py"
    script.write_text(f"LATE = {str(tmp_path / 'late.txt')!r}\n" + SERVED_FORK)
    worker = resume.Worker(script)
    code, err = worker.run({})
    assert code == 0, err
    time.sleep(1.5)  # well past the child's write, had it lived
    assert not (tmp_path / "late.txt").exists()


def test_fp2_a_forged_answer_on_the_processs_own_channel_is_refused(tmp_path: Path) -> None:
    result = _served(tmp_path, "forge")
    assert result["status"] != "passed", result


def test_doc1_the_resume_paragraph_names_a_files_metadata_among_its_limits() -> None:
    paragraph = _resume_paragraph()
    assert "metadata" in paragraph and "Stated limits" in paragraph


@pytest.mark.xfail(strict=True, reason="DOC1, a stated limit (docs/application.md, the resume paragraph): a stash in "
                                       "a file's metadata (os.stat) is no read the closed world judges")
def test_doc1_a_stash_in_file_sizes_is_refused(tmp_path: Path) -> None:
    result = _resume(tmp_path, "metadata")
    assert result["status"] != "passed", result


def test_ff1_kernodecks_progress_through_a_leftover_stream_does_not_break_the_seal(tmp_path: Path) -> None:
    expect(_resume(tmp_path, "tee", script=PROGRESS), "worker", "passed")  # a resumable train
