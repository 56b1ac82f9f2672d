"""The one place an in-env process is started and waited on: deadlines, stall detection, cancellation, stacks.

verify, reference, upgrade and replay (through verify), bisect's trials and each calibrate variation start their in-env
process through :func:`supervise`. It runs in its own process group; its stderr's ``[kernodeck] STEP: WHAT`` lines are
its progress events (a phase, a step's start or end, each ``app.progress``). A step that outlives its deadline, a
silence longer than ``stall``, or a SIGTERM/SIGINT to this process stops it the same way: every process of the run that
registered (``kernodeck/inenv/stackhooks.py``) is asked for its stacks, then the whole group gets SIGTERM, then SIGKILL
after a short grace; no process of the run is left. The caller writes the record from the :class:`Stopped` it gets back.
A second signal stops everything at once.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import queue
import shutil
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, assert_never

from kernodeck import stackdump
from kernodeck._proc import alive, end_held, heartbeat_interval, hold, log, running, send, stop_carrying
from kernodeck.early import Early, launch, stacks_folder
from kernodeck.inenv.protocol import STACKS_DIR_ENV, STACKS_SIGNAL, STATUSES, VERDICT_SUFFIX
from kernodeck.project.deadlines import Deadlines

GRACE_S = 3.0  # between SIGTERM and SIGKILL
_KILL = getattr(signal, "SIGKILL", signal.SIGTERM)  # Windows has no SIGKILL: its SIGTERM ends a process outright
ANSWER_S = 3.0  # the longest wait for the stacks the processes were asked for
_POLL_S = 0.2


class Stop(enum.StrEnum):
    """Why the supervisor stopped the in-env process."""

    TIMED_OUT = "timed-out"  # a step outlived its deadline
    STALLED = "stalled"  # no progress event for ``stall`` seconds
    INTERRUPTED = "interrupted"  # SIGTERM or SIGINT to the command


@dataclass(frozen=True)
class Stopped:
    """A stopped run as the report tells it."""

    kind: Stop
    step: str  # the step that was running ("" before the first one started)
    ran_s: float  # how long that step had run
    silent_s: float  # since the last progress event
    limit_s: float  # the deadline that expired (0 when interrupted)
    last_progress: str
    signal: str  # the signal that interrupted (interrupted only)
    layer: str
    user_frame: str
    user_frames: tuple[str, ...]
    stacks: str  # steps/<step>.stacks.txt's text
    pids: tuple[int, ...]  # every process that answered (the runner and its children)
    refused: str = ""  # the step's first closed-world refusal, made before it was stopped (swallowed by its code)
    refused_tip: str = ""  # that refusal's own advice

    def message(self, stacks_file: str = "") -> str:
        last = f"'{self.last_progress}'" if self.last_progress else "the start"
        at = f" at {self.user_frame}" if self.user_frame else ""
        match self.kind:
            case Stop.TIMED_OUT:
                what = f"timed-out: still running after {self.ran_s:.0f} s (deadline {self.limit_s:.0f} s)"
            case Stop.STALLED:
                what = f"stalled: no progress for {self.silent_s:.0f} s after {last}"
            case Stop.INTERRUPTED:
                what = f"interrupted by {self.signal} after {self.ran_s:.0f} s"
            case _ as unreachable:
                assert_never(unreachable)
        first = f"{self.refused} (caught by the application's code, which then kept running); then " if self.refused \
            else ""
        return f"{first}{what}; layer {self.layer}{at}" + (f"; every stack in {stacks_file}" if stacks_file else "")

    def details(self, stacks_file: str) -> dict[str, Any]:
        return {"stopped": str(self.kind), "ran_s": round(self.ran_s, 1), "silent_s": round(self.silent_s, 1),
                "deadline_s": self.limit_s, "last_progress": self.last_progress, "signal": self.signal,
                "user_frame": self.user_frame, "user_frames": list(self.user_frames), "stacks": stacks_file,
                "processes": list(self.pids), **({"refused": self.refused} if self.refused else {})}


@dataclass
class Supervised:
    """The in-env process's end: its exit code, its last stderr lines, and why it was stopped (None: it ended)."""

    code: int
    tail: list[str]
    stopped: Stopped | None = None
    escaped: tuple[int, ...] = ()  # processes of the run that had left its group (setsid): found and stopped


@dataclass
class _Progress:
    """What the process said last: the step running, its phase, when each began, whether it said its end (STOP3)."""

    step: str = ""
    what: str = "starting"
    step_t0: float = field(default_factory=time.monotonic)
    last_t: float = field(default_factory=time.monotonic)
    ended: bool = False

    def feed(self, line: str) -> None:
        if not line.startswith("[kernodeck] "):
            return
        now = time.monotonic()
        self.last_t = now
        step, sep, what = line.removeprefix("[kernodeck] ").partition(": ")
        if not sep:
            return
        head = what.split(" ", 1)[0]
        if head == "start":
            self.step, self.step_t0, self.what, self.ended = step, now, "start", False
        elif head not in STATUSES:
            self.step, self.what, self.ended = step, what, False
        elif step == self.step:
            self.what, self.ended = what, True

    @property
    def last_what(self) -> str:
        return f"{self.step}: {self.what}" if self.step else ""

    def silent(self) -> float:
        return time.monotonic() - self.last_t

    def status(self, stall_note_after: float) -> str:
        """The progress line's note: the phase, and a growing silence once it is worth reading."""
        where = f"{self.step}: " if self.step else ""
        silent = self.silent()
        if silent >= stall_note_after:
            return f"{where}no progress for {silent:.0f} s (last: {self.what})"
        return f"{where}{self.what}"


class _Signals:
    """SIGTERM/SIGINT while the in-env process runs: the first asks for the record, a second stops at once."""

    def __init__(self, pgid_of: Callable[[], int | None]) -> None:
        self.pgid_of, self.received = pgid_of, ""
        self.first_t = 0.0

    def handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if not self.received:  # the watch loop logs it: a handler must not take the log's lock (the loop may hold it)
            self.received, self.first_t = name, now
            return
        if now - self.first_t < 1.0:  # the same Ctrl-C seen twice (the terminal's group and a forwarding parent)
            return
        pgid = self.pgid_of()
        if pgid is not None:
            _signal_group(pgid, _KILL)
        os.write(2, f"kernodeck: a second {name}: stopped at once (no dossier)\n".encode())
        os._exit(128 + signum)

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield  # signal handlers belong to the main thread; a caller in another thread keeps its own
            return
        old = {s: signal.signal(s, self.handle) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)


def _signal_group(pgid: int, signum: int) -> bool:
    """Signal the run's whole process group (where there are none, Windows: the runner itself; 0 only asks)."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(pgid, signum)
        elif signum:
            os.kill(pgid, signum)
        else:
            return False
    except (ProcessLookupError, PermissionError):
        return False
    return True


def supervise(argv: Sequence[str], *, env: Mapping[str, str], cwd: Path, deadlines: Deadlines, root: Path,
              label: str = "checks", on_line: Callable[[str], None] | None = None,
              early: Early | None = None, started: Callable[[], object] = lambda: None) -> Supervised:
    """Run ``argv`` (an in-env process), logged first; stop it on a deadline, a stall or a signal. ``early``: the
    runner started already with ``argv``, waiting for its word (early.py), given it here. ``started``: called once
    the process runs (its word given), before it is watched."""
    folder = early.folder if early is not None else stacks_folder()
    tail: deque[str] = deque(maxlen=40)
    progress = _Progress()
    procs: list[subprocess.Popen[str]] = []
    held: dict[int, int | None] = {}  # each process that answered the stacks signal: its pidfd
    escaped: tuple[int, ...] | None = None  # once the run's marked processes were swept
    signals = _Signals(lambda: procs[0].pid if procs else None)
    lines: queue.Queue[str | None] = queue.Queue()
    note_after = min(2 * heartbeat_interval(), deadlines.stall / 4)  # a silence of two heartbeats is shown
    try:
        with signals.installed(), alive(label, lambda: progress.status(note_after)):
            proc = early.go() if early is not None else launch(argv, env, cwd, folder)
            procs.append(proc)
            started()
            reader = threading.Thread(target=_read, args=(proc, lines), name="kernodeck-inenv-stderr", daemon=True)
            reader.start()
            expired = _watch(proc, lines, progress, tail, deadlines, signals, on_line)
            stopped = _stop(proc, expired, folder, root, held) if expired is not None else None
            code = proc.wait()
            _signal_group(proc.pid, _KILL)  # what the run left behind in its group (none when it is tidy)
            escaped = _stop_escaped(folder)  # and what left the group (a daemon in a session of its own)
            # each that answered, in the group or not, gone (not still dying) once this returns: one whose mark no
            # longer reads (a process in its exit reads an empty environment) escapes the sweep by mark
            end_held(held, within=GRACE_S)
            held.clear()
            reader.join(timeout=GRACE_S)  # a child that kept the pipe open was killed with the group
            if proc.stderr is not None and not reader.is_alive():
                proc.stderr.close()
    finally:
        if procs and procs[0].poll() is None:  # an error here: never leave the run behind
            _signal_group(procs[0].pid, _KILL)
            procs[0].wait()
        if procs and escaped is None:  # nor what left its group (a worker in a session of its own)
            _stop_escaped(folder)  # any error before the sweep above (STACKNAME1, pass 79)
        end_held(held)  # on an error above: what it still holds
        shutil.rmtree(folder, ignore_errors=True)
    return Supervised(code, list(tail), stopped, escaped or ())


def _stop_escaped(folder: Path) -> tuple[int, ...]:
    """Every process of the run (:func:`_of_the_run`: its mark) still running once the group is stopped: killed, and
    named."""
    found = stop_carrying(STACKS_DIR_ENV, str(folder))
    if found:
        log(f"kernodeck: {len(found)} process(es) of the run had left its process group (pid "
            f"{', '.join(map(str, found))}): stopped")
    return found


def _of_the_run(pid: int, folder: Path, pgid: int | None = None) -> bool:
    """The one rule for a process of this run: it carries the run's mark (``STACKS_DIR_ENV`` = the run's own folder,
    inherited by whatever the run started: a session of its own, as the resume check's worker, or a double fork
    included), never a pid reused by another process. Where there is no ``/proc`` to read it (macOS), the run's
    process group (``pgid``) stands in: a process that left the group is not found there."""
    try:
        return f"{STACKS_DIR_ENV}={folder}".encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        if pgid is None or Path("/proc/self").exists():
            return False  # gone, or not ours to read
    try:
        return os.getpgid(pid) == pgid
    except (ProcessLookupError, PermissionError):
        return False


def _read(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.put(line.rstrip("\n"))
    lines.put(None)


@dataclass(frozen=True)
class _Expired:
    """What expired, and where the process was then (its last step, phase and silence)."""

    kind: Stop
    limit_s: float
    step: str
    ran_s: float
    silent_s: float
    last_progress: str
    signal: str = ""


def _watch(proc: subprocess.Popen[str], lines: queue.Queue[str | None], progress: _Progress, tail: deque[str],
           deadlines: Deadlines, signals: _Signals, on_line: Callable[[str], None] | None) -> _Expired | None:
    """Forward the process's lines until it ends (None) or a deadline, a stall or a signal stops it."""
    exited = 0.0
    while True:
        try:
            line = lines.get(timeout=_POLL_S)
        except queue.Empty:
            line = ""
        if line is None:
            return None
        if not line and proc.poll() is not None:  # ended, but a child it left may hold the pipe open
            exited = exited or time.monotonic()
            if time.monotonic() - exited > 1.0:
                return None
        if line:
            tail.append(line)
            progress.feed(line)
            if on_line:
                on_line(line)
        ran = time.monotonic() - progress.step_t0
        running = "" if progress.ended else progress.step  # after its end, a stop is the next step's (pass 62)
        snapshot = (running, ran, progress.silent(), progress.last_what)
        if signals.received:
            log(f"kernodeck: {signals.received} received: taking the stacks and stopping the run (a second signal "
                "stops at once)")
            return _Expired(Stop.INTERRUPTED, 0.0, *snapshot, signal=signals.received)
        if running and ran > deadlines.step(running):
            return _Expired(Stop.TIMED_OUT, deadlines.step(running), *snapshot)
        if progress.silent() > deadlines.stall:
            return _Expired(Stop.STALLED, deadlines.stall, *snapshot)


def _stop(proc: subprocess.Popen[str], why: _Expired, folder: Path, root: Path, held: dict[int, int | None]) -> Stopped:
    """Ask every registered process of the run for its stacks (each that answers held in ``held``, for the caller to
    end), then stop the group; what the record needs."""
    log(f"kernodeck: {why.step or 'checks'}: {why.kind}: asking every process of the run for its stacks, "
        "then stopping them")
    asked = _ask_stacks(proc.pid, folder)
    held.update(asked)
    _signal_group(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GRACE_S)
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline and _group_alive(proc.pid, asked):
        time.sleep(0.1)
    _signal_group(proc.pid, _KILL)  # whatever is left of the group, workers included
    files = [p for p in sorted(folder.glob("*.txt")) if p.stem.isdigit() and int(p.stem) in asked]
    processes = [stackdump.parse(p.read_text(encoding="utf-8", errors="replace")) for p in files]
    processes = [p for p in processes if p.threads or p.pid == proc.pid]
    found = stackdump.diagnose(why.step, processes, proc.pid, root)
    refused = _refused(folder, why.step)
    stopped = Stopped(why.kind, why.step, why.ran_s, why.silent_s, why.limit_s, why.last_progress, why.signal,
                      str(refused.get("layer") or found.layer), found.user_frame, found.user_frames, "",
                      tuple(p.pid for p in processes), str(refused.get("message", "")), str(refused.get("tip", "")))
    headline = f"{why.step or 'checks'}: {stopped.message()}"
    return dataclasses.replace(stopped, stacks=stackdump.render(processes, proc.pid, root, headline))


def _refused(folder: Path, step: str) -> dict[str, Any]:
    """The first closed-world refusal a process of the run recorded in ``step`` as it was made (seen._refuse): the
    stopped step's first error, lost otherwise when the application swallowed it and never ended its call."""
    found: list[tuple[int, dict[str, Any]]] = []
    for path in folder.glob(f"*{VERDICT_SUFFIX}"):
        with suppress(OSError, ValueError):
            record = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(record, dict) and record.get("step") in (step, "") and record.get("message"):
                found.append((path.stat().st_mtime_ns, record))
    return min(found, key=lambda item: item[0])[1] if found else {}


def _ask_stacks(pgid: int, folder: Path) -> dict[int, int | None]:
    """Send the stacks signal to each process of the run (:func:`_of_the_run`, in the runner's group or not) that
    registered, each held (a pidfd, opened before it is judged: the pid stays its own); wait until their files stop
    growing. The held processes: pid to pidfd."""
    signum = getattr(signal, STACKS_SIGNAL, None)
    asked: dict[int, int | None] = {}
    if signum is None or not hasattr(os, "getpgid"):
        return asked  # no such signal here (Windows): the processes are stopped without their stacks
    for path in folder.glob("*.txt"):
        if not path.stem.isdigit():
            continue  # the run's to write: a name that is no pid names no process (red-team pass 79, STACKNAME1)
        pid = int(path.stem)
        fd = hold(pid)
        if _of_the_run(pid, folder, pgid) and send(pid, fd, signum):
            asked[pid] = fd
        elif fd is not None:
            os.close(fd)  # a pid reused by another process since, or gone
    sizes: dict[int, int] = {}
    stable_since = time.monotonic()
    end = time.monotonic() + ANSWER_S
    while time.monotonic() < end:
        time.sleep(0.1)
        now = {pid: (folder / f"{pid}.txt").stat().st_size for pid in asked if (folder / f"{pid}.txt").exists()}
        if now != sizes:
            sizes, stable_since = now, time.monotonic()
        elif all(_answered(folder / f"{pid}.txt") for pid in asked) and time.monotonic() - stable_since > 0.3:
            break
    return asked


def _answered(path: Path) -> bool:
    with suppress(OSError):
        return "(most recent call first)" in path.read_text(encoding="utf-8", errors="replace")
    return True


def _group_alive(pgid: int, known: Iterable[int]) -> bool:
    """Some process of the group still runs (a zombie does not count: its parent is gone and init reaps it)."""
    if not _signal_group(pgid, 0):
        return False
    if not Path("/proc/self/stat").exists():
        return True
    return any(running(pid) for pid in known)


