"""The stacks a stuck in-env run left (faulthandler's dumps, one file per process), read and told: the user's
first frame as ``file:line``, the layer the blockage belongs to, and ``steps/<step>.stacks.txt`` for people.

The processes wrote the dumps themselves (``kernodeck/inenv/stackhooks.py``) when the supervisor
(:mod:`kernodeck.supervise`) asked; this module only reads text. A user frame is one in a file of the project that
is neither in an environment (``site-packages``) nor Kernodeck's own in-env code.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from kernodeck.inenv.protocol import Layer
from kernodeck.inenv.steptable import BY_NAME

INENV = Path(__file__).resolve().parent / "inenv"  # Kernodeck's own in-env code: trimmed from what is shown
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')
_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+)")
_HEADER = re.compile(r"^# pid (?P<pid>\d+) parent (?P<parent>\d+) (?P<how>\w+): (?P<argv>.*)$")
_ENV_PARTS = ("site-packages", "dist-packages")
# Where a frame's file says the blockage belongs (the innermost such frame of a stack decides).
_DATA = "torch/utils/data/"
_MODULE = "torch/nn/modules/module.py"
_WEIGHTS = ("torch/serialization.py", "safetensors/", "transformers/modeling_utils.py")
_TRANSFER = (".to(", ".cuda(", ".cpu(", ".copy_(")


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str

    def where(self, root: Path) -> str:
        """``file:line`` with project files relative to the project root."""
        return f"{_shown(self.file, root)}:{self.line}"


@dataclass
class Thread:
    ident: str
    current: bool
    frames: list[Frame] = field(default_factory=list)  # most recent call first, as faulthandler writes them

    @property
    def main(self) -> bool:
        """The thread a script started in: its outermost frame is a module's top level."""
        return bool(self.frames) and self.frames[-1].func == "<module>"


@dataclass
class ProcessStacks:
    pid: int
    parent: int
    how: str  # started (the runner, a spawned child) or forked (a DataLoader worker)
    argv: str
    threads: list[Thread] = field(default_factory=list)

    def main_thread(self) -> Thread | None:
        return next((t for t in self.threads if t.main), self.threads[0] if self.threads else None)


def parse(text: str) -> ProcessStacks:
    """One process's file: its header line, then each dump faulthandler wrote (the last one counts)."""
    lines = text.splitlines()
    head = _HEADER.match(lines[0]) if lines else None
    proc = ProcessStacks(int(head["pid"]), int(head["parent"]), head["how"], head["argv"]) if head else \
        ProcessStacks(0, 0, "unknown", "")
    seen: set[str] = set()
    for line in lines[1:]:
        thread = _THREAD.match(line)
        if thread:
            if thread["ident"] in seen:  # a second dump: keep the latest
                proc.threads, seen = [], set()
            seen.add(thread["ident"])
            proc.threads.append(Thread(thread["ident"], thread["current"] == "Current thread"))
            continue
        frame = _FRAME.match(line)
        if frame and proc.threads:
            proc.threads[-1].frames.append(Frame(frame["file"], int(frame["line"]), frame["func"]))
    return proc


def _inside(file: str, folder: Path) -> bool:
    path = os.path.normpath(file)
    return any(path == str(f) or path.startswith(str(f) + os.sep) for f in {folder, folder.resolve()})


def _shown(file: str, root: Path) -> str:
    for base in (root, root.resolve()):
        if _inside(file, base):
            return os.path.relpath(os.path.normpath(file), base)
    return file


def is_user(frame: Frame, root: Path) -> bool:
    """A frame of the project's own code: under its root, in no environment, not Kernodeck's in-env code."""
    if frame.file.startswith("<") or _inside(frame.file, INENV):
        return False
    parts = Path(frame.file).parts
    return _inside(frame.file, root) and not any(p in _ENV_PARTS or p.startswith(".venv") for p in parts)


def first_user_frame(thread: Thread | None, root: Path) -> Frame | None:
    """The innermost frame of the project's code in ``thread`` (where its code was when it stopped)."""
    return next((f for f in thread.frames if is_user(f, root)), None) if thread else None


def _source_line(frame: Frame) -> str:
    try:
        with open(frame.file, encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, start=1):
                if number == frame.line:
                    return text.strip()
    except OSError:
        return ""
    return ""


@dataclass(frozen=True)
class Diagnosis:
    """Where a stopped run was: the layer and the user's frame that names it (``file:line``, or empty)."""

    layer: str
    user_frame: str
    user_frames: tuple[str, ...]  # each process's innermost user frame, ``pid N: file:line in func``


def _importing(frame: Frame) -> bool:
    return frame.file.startswith("<frozen importlib.") or (frame.func == "<module>" and _DATA in _posix(frame))


def _posix(frame: Frame) -> str:
    return frame.file.replace(os.sep, "/")


def _loading(thread: Thread) -> bool:
    """A thread running torch's data code (a DataLoader, its worker loop), not one importing it: a process that
    imports torch (the resume check's worker, started early) runs ``torch/utils/data``'s module bodies and the
    functions they call (``datapipes``' decorators and metaclasses: 116 of them, measured), loading nothing. A data
    frame counts only when no import is under it on the stack."""
    frames = thread.frames  # most recent call first
    return any(_DATA in _posix(f) and f.func != "<module>" and not any(_importing(g) for g in frames[i + 1:])
               for i, f in enumerate(frames))


def diagnose(step: str, processes: list[ProcessStacks], runner_pid: int, root: Path) -> Diagnosis:
    """The layer from what the stacks were doing (data loading, an import, an operator, weights, a transfer),
    else from the step; the user's frame where the blockage is (a DataLoader worker's when it is the workers')."""
    main_proc = next((p for p in processes if p.pid == runner_pid), processes[0] if processes else None)
    main = main_proc.main_thread() if main_proc else None
    children = [p for p in processes if p is not main_proc]
    user_frames = tuple(
        f"pid {p.pid}: {fr.where(root)} in {fr.func}" for p in [*([main_proc] if main_proc else []), *children]
        if (fr := first_user_frame(p.main_thread(), root)) is not None)
    if first_user_frame(main, root) is None:
        # the runner runs none of the project's code: it waits on a child that does (the resume check's worker,
        # in a new process), whose stack says where the project's code is
        main = next((t for p in children if first_user_frame(t := p.main_thread(), root) is not None), main)
    frame = first_user_frame(main, root)
    frames = main.frames if main else []
    files = [_posix(f) for f in frames]
    worker = next((p for p in children if any(_loading(t) for t in p.threads)), None)
    if worker is not None or (main is not None and _loading(main)):
        chosen = (first_user_frame(worker.main_thread(), root) if worker else None) or frame
        return Diagnosis(Layer.DATA_LOADING, chosen.where(root) if chosen else "", user_frames)
    where = frame.where(root) if frame else ""
    if any(f.func == "exec_module" or (_inside(f.file, INENV) and f.func == "load_file") for f in frames):
        return Diagnosis(Layer.IMPORT, where, user_frames)
    if frame is not None and any(t in _source_line(frame) for t in _TRANSFER):
        return Diagnosis(Layer.TRANSFER, where, user_frames)
    if any(f.endswith(_MODULE) for f in files):
        name = frame.func if frame else "forward"
        return Diagnosis(f"{Layer.OPERATOR}:{name}", where, user_frames)
    if any(w in f for f in files for w in _WEIGHTS) or any(
            _inside(f.file, INENV) and f.func in ("weights", "_fingerprint") for f in frames):
        return Diagnosis(Layer.WEIGHTS, where, user_frames)
    return Diagnosis(_step_layer(step), where, user_frames)


def _step_layer(step: str) -> str:
    """Where a stuck step belongs when its stacks say nothing more: read from its row (``steptable``: the layers its
    failure may belong to), the application's where the project's code runs in it, else its first; ``unknown`` for
    a step the table does not have (before the first one started) or a row that names none."""
    row = BY_NAME.get(step)
    if row is None or not row.layers:
        return Layer.UNKNOWN
    return Layer.APPLICATION if Layer.APPLICATION in row.layers else row.layers[0]


def _thread_lines(thread: Thread, root: Path, main: bool) -> list[str]:
    label = "main thread" if main else "thread"
    lines = [f"-- {label} {thread.ident} --"]
    ours = [f for f in thread.frames if is_user(f, root)]
    for frame in ours:
        src = _source_line(frame)
        lines.append(f"  {frame.where(root)} in {frame.func}" + (f"    # {src}" if src else ""))
    if ours:
        lines.append("  (every frame, most recent call first:)")
    trimmed = 0
    for frame in thread.frames:
        if _inside(frame.file, INENV):
            trimmed += 1
            continue
        lines.append(f"    {_shown(frame.file, root)}:{frame.line} in {frame.func}")
    if trimmed:
        lines.append(f"    ({trimmed} frame(s) of Kernodeck's in-env runner trimmed)")
    if not thread.frames:
        lines.append("    (no Python frame)")
    return lines


def render(processes: list[ProcessStacks], runner_pid: int, root: Path, headline: str) -> str:
    """``steps/<step>.stacks.txt``: every thread of every process, the runner first; per thread the user's frames
    first (with their source line), then every frame (Kernodeck's in-env frames trimmed)."""
    out = [f"# {headline}", "# Most recent call first. The project's own frames are listed first in each thread.", ""]
    ordered = sorted(processes, key=lambda p: (p.pid != runner_pid, p.pid))
    for proc in ordered:
        role = "the in-env runner" if proc.pid == runner_pid else f"a child ({proc.how} from {proc.parent})"
        out.append(f"== process {proc.pid}: {role} ==")
        main = proc.main_thread()
        threads = sorted(proc.threads, key=lambda t: (t is not main, first_user_frame(t, root) is None))
        for thread in threads:
            out.extend(_thread_lines(thread, root, thread is main))
        if not proc.threads:
            out.append("  (no stacks: the process did not answer before it was stopped)")
        out.append("")
    if not processes:
        out.append("(no process answered: the stacks could not be taken)")
    return "\n".join(out).rstrip() + "\n"
