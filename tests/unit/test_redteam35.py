"""Red-team pass 35 (3a4e867: guard._others, a key per order, read_the_checkpoint counting forked children's reads):
each finding reproduced, marked ``xfail(strict=True)`` with its id while it stands, beside controls that pass today
(notes: /work/notes/redteam35.md).

The harness is pass 34's (tests/helpers/closedworld.py: resume_phases). The train cannot resume (its checkpoint
keeps w, not the momentum m); each attack replays the uninterrupted call's result, stashed by the uninterrupted call's
process and found by the resumed run's.

FP1 (another process's state changed with no path; FALSE PASS): guard._others refuses a change to another process's
state only when it is made through a ``/proc/PID`` path. ``resource.prlimit(pid, RESOURCE, limits)`` changes another
process's limits by a system call (its audit event, ``resource.prlimit``, is not one seen.py's hook judges), and
``resource.prlimit(pid, RESOURCE)`` reads them back (no file read). Both calls of the check are children of the same
process (the runner; here the test's process), so the uninterrupted call writes its result into its parent's
``RLIMIT_RTTIME`` soft limit (any value up to the hard one, which is unlimited: no privilege needed, same user) and
the resumed run reads it: the replay passes. (``os.setpriority``/``os.sched_setaffinity`` of a pid are the same
class, fewer bits.)

FP2 (the kernel's log as a mailbox; FALSE PASS): ``/dev``'s devices are trusted as the system's for reads, and
guard._others refuses no write under ``/dev``. ``/dev/kmsg`` is the kernel's log: a line written there (root, as
here) is read back by any later process that opens it. The uninterrupted call writes its result there; the resumed
run reads the log and replays the last such line. (``socket.sethostname``, read back by ``os.uname``, is the same
class through no path at all: neither audit event is judged.)

FP3 (a change to /proc/sys spelled another way; FALSE PASS at 3a4e867): guard._others judges the path as written,
folded as text: ``//proc/sys/...`` (normpath keeps two leading slashes), ``/proc/self/root/proc/sys/...``, a link the
application made to ``/proc/sys/...`` and ``/dev/fd/N/...`` of a folder descriptor open on ``/proc/sys/kernel``
all land on the kernel's tunables and are not refused; ``/proc/self/root/proc/<ppid>/fd/0`` is another process's
stdin (pass 34's FP2a). Shown on guard.changed itself (no write made).

FP4 (a writable kernel table outside /proc/sys; FALSE PASS): ``/proc/irq/default_smp_affinity`` and
``/proc/irq/N/smp_affinity`` are writable (root, as here) and read back by any process; guard._others names only
``/proc/sys``, ``/sys`` and ``/proc/PID``. Shown on guard.changed itself.

CONTROL1: the same train without a stash differs. CONTROL2: a stash in ``/dev/shm`` (an ordinary file there) read
by the resumed run is refused. CONTROL3: a write to this process's own ``/proc/self/...`` and its own thread's
``/proc/<tid>/...`` is not refused, nor ``/dev/null``; a write to ``/proc/sys/...`` as written is.
Fixed: FP1 (resource.prlimit of another process refused, as socket.sethostname is: seen.py), FP2 and FP4 (a change
under /proc refused but for this process's own entries, under /dev but for the sinks, the terminal and its own
descriptors: guard._others), FP3 (the path judged as written and where it lands). Stated: os.setpriority and
os.sched_setaffinity on another process raise no audit event (docs/application.md).
"""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

import pytest

from kernodeck.inenv import guard
from tests.helpers.closedworld import resume_phases

TRAIN = '''

def train(app, steps, save_at, resume_from):
    import json, os, resource
    from pathlib import Path
    here = Path(app.checkpoint_dir)
    w, m, start = 0, 0, 0
    if resume_from is not None:
        w = int((Path(resume_from) / "w.txt").read_text())  # the checkpoint is read (read_the_checkpoint)
        start = 3
        text = None
        if MODE == "prlimit":
            code = resource.prlimit(os.getppid(), resource.RLIMIT_RTTIME)[0]
            if code >> 60 == 0x5:
                text = "%d|%d,%d,%d" % tuple((code >> s) & 0x7FFF for s in (45, 30, 15, 0))
        elif MODE == "kmsg":
            fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
            try:
                while True:
                    try:
                        record = os.read(fd, 8192).decode(errors="replace")
                    except BlockingIOError:
                        break
                    except OSError:  # EPIPE: a record overwritten while reading
                        continue
                    if TOKEN in record:
                        text = record.split(TOKEN, 1)[1].strip()
            finally:
                os.close(fd)
        elif MODE == "shm":
            text = Path("/dev/shm/" + TOKEN).read_text()
        if text is not None:  # the uninterrupted call's result, replayed
            w_end, rest = text.split("|", 1)
            for step, loss in zip((4, 5, 6), map(float, rest.split(","))):
                app.log(step, loss)
            app.write("w", [int(w_end)])
            return {"step": steps, "epoch": 0, "loader": steps}
    losses = {}
    for step in range(start + 1, steps + 1):
        m = m + 1
        w = w + m
        losses[step] = w
        app.log(step, float(w))
        if save_at == step:
            (here / "w.txt").write_text(str(w))
    if save_at is None and resume_from is None:  # the uninterrupted call: its stash
        text = "%d|%d,%d,%d" % (w, losses[4], losses[5], losses[6])
        if MODE == "prlimit":
            code = (0x5 << 60) | (w << 45) | (losses[4] << 30) | (losses[5] << 15) | losses[6]
            hard = resource.prlimit(os.getppid(), resource.RLIMIT_RTTIME)[1]
            resource.prlimit(os.getppid(), resource.RLIMIT_RTTIME, (code, hard))
        elif MODE == "kmsg":
            with open("/dev/kmsg", "w") as f:
                f.write(TOKEN + text + "\\n")
        elif MODE == "shm":
            Path("/dev/shm/" + TOKEN).write_text(text)
    app.write("w", [w])
    return {"step": steps, "epoch": 0, "loader": steps}
'''


def _run(tmp_path: Path, mode: str) -> dict[str, object]:
    token = f"rt35-{os.getpid()}-{tmp_path.name}:"
    return resume_phases(tmp_path, f"\nMODE = {mode!r}\nTOKEN = {token!r}\n" + TRAIN)


def test_control1_the_train_without_a_stash_differs(tmp_path: Path) -> None:
    result = _run(tmp_path, "none")
    assert result["phase"] == "worker" and result["status"] == "differs", result


def test_fp1_a_stash_in_the_parents_limits_is_refused(tmp_path: Path) -> None:
    before = resource.getrlimit(resource.RLIMIT_RTTIME)
    try:
        result = _run(tmp_path, "prlimit")
    finally:
        resource.setrlimit(resource.RLIMIT_RTTIME, before)  # this process's limit as it was
    assert result["status"] == "failed", result


def _kmsg_writable() -> None:
    try:
        os.close(os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK))
        os.close(os.open("/dev/kmsg", os.O_WRONLY))
    except OSError:
        pytest.skip("/dev/kmsg cannot be read and written here (not root, or no /dev/kmsg)")


def test_fp2_a_stash_in_the_kernel_log_is_refused(tmp_path: Path) -> None:
    _kmsg_writable()
    result = _run(tmp_path, "kmsg")
    assert result["status"] == "failed", result


def test_control2_a_stash_in_dev_shm_is_refused(tmp_path: Path) -> None:
    token = f"rt35-{os.getpid()}-{tmp_path.name}:"
    try:
        result = _run(tmp_path, "shm")
    finally:
        Path("/dev/shm", token).unlink(missing_ok=True)
    assert result["phase"] == "worker" and result["status"] == "failed", result
    assert "/dev/shm/" in str(result["error"]), result


DOMAIN = "/proc/sys/kernel/domainname"


@pytest.mark.parametrize("spelling", ["slashes", "root", "link", "folder-link", "dev-fd", "other-stdin"])
def test_fp3_the_kernels_tunables_spelled_another_way_are_refused(tmp_path: Path, spelling: str) -> None:
    fd = None
    if spelling == "slashes":
        raw = "/" + DOMAIN
    elif spelling == "root":
        raw = "/proc/self/root" + DOMAIN
    elif spelling == "link":
        (tmp_path / "name").symlink_to(DOMAIN)
        raw = str(tmp_path / "name")
    elif spelling == "folder-link":
        (tmp_path / "kernel").symlink_to("/proc/sys/kernel")
        raw = str(tmp_path / "kernel" / "domainname")
    elif spelling == "dev-fd":
        fd = os.open("/proc/sys/kernel", os.O_RDONLY)
        raw = f"/dev/fd/{fd}/domainname"
    else:
        raw = f"/proc/self/root/proc/{os.getppid()}/fd/0"
    try:
        assert guard.changed(raw, "opened to write") is not None
    finally:
        if fd is not None:
            os.close(fd)


@pytest.mark.parametrize("raw", ["/proc/irq/default_smp_affinity", "/dev/kmsg"])
def test_fp4_a_writable_kernel_table_outside_proc_sys_is_refused(raw: str) -> None:
    assert guard.changed(raw, "opened to write") is not None


def test_control3_own_process_state_is_not_refused_the_kernels_is() -> None:
    assert guard.changed("/proc/self/oom_score_adj", "opened to write") is None
    assert guard.changed(f"/proc/{os.getpid()}/comm", "opened to write") is None
    assert guard.changed("/dev/null", "opened to write") is None
    tids: list[int] = []
    ready, done = threading.Event(), threading.Event()

    def run() -> None:
        tids.append(threading.get_native_id())
        ready.set()
        done.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        ready.wait(10)
        assert guard.changed(f"/proc/{tids[0]}/comm", "opened to write") is None
    finally:
        done.set()
        thread.join()
    assert guard.changed(DOMAIN, "opened to write") is not None
