"""What may pass between the resume check's calls of train: only the checkpoint the call to K saved.

The runner calls train to K, saving its checkpoint, and seals it as the call returns (each entry's identity, size and
times; a ``user.`` extended attribute, state no check reads, refused). Only then does any other call run, each in a
NEW process of its own: the uninterrupted call to N, and each resumed run from the checkpoint. No call shares a
process, memory or a thread with another, and none has run before the checkpoint is sealed (red-team pass 30, FP1 and
FP2: the uninterrupted call, in the runner before, reached the checkpoint by a thread, a memo or a move). Kernodeck
makes each call's folder itself, right before the call (one already there is refused); of the run's record a call
may read only what it is handed (the resumed run: its checkpoint) and what it wrote itself (world.RUN_READS; pass 30,
FP3: its own folder, read whole before, carried what another process wrote there); the resumed run checks the seal
before and after its call. What the call to K itself puts into its checkpoint is the application's (a stated limit:
docs/application.md).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import io
import json
import os
import signal
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._common import CheckFailed, Context
from .protocol import SYSTEM_FILES, ConfigKey, Layer
from .world import RUN_READS


def made(folder: Path, what: str) -> Path:
    """``folder``, made now by Kernodeck for the call that fills it; one already there is refused."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()
    except FileExistsError:
        raise CheckFailed(f"{what} ({folder.name}) is already there before the call that fills it: an earlier call of "
                          "train made it, and the resumed run would read what it holds", Layer.APPLICATION) from None
    return folder


@contextmanager
def reading_only(ctx: Context, *folders: Path) -> Iterator[None]:
    """Within: of the run's record, the call may read only ``folders`` (its own, or the checkpoint)."""
    before = ctx.state.get(RUN_READS)
    ctx.state[RUN_READS] = [str(f) for f in folders]
    try:
        yield
    finally:
        if before is None:
            ctx.state.pop(RUN_READS, None)
        else:
            ctx.state[RUN_READS] = before


def _attributes(path: str) -> list[str]:
    try:
        return [n for n in os.listxattr(path, follow_symlinks=False) if n.startswith("user.")]
    except (OSError, AttributeError):  # a file system without them, or a platform
        return []


def seal(folder: Path) -> dict[str, list[int]]:
    """The checkpoint as it is now: each entry (links not followed) by its identity, size, times and type."""
    found: dict[str, list[int]] = {}
    for top, dirs, files in os.walk(folder):
        for name in [".", *dirs, *files] if top == str(folder) else [*dirs, *files]:
            path = os.path.normpath(os.path.join(top, name))
            st = os.lstat(path)
            if _attributes(path):
                raise CheckFailed(f"the checkpoint holds extended attributes ({os.path.relpath(path, folder)}): "
                                  "state no check reads; save the checkpoint's state in its files", Layer.APPLICATION)
            found[os.path.relpath(path, folder)] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                                    stat.S_IFMT(st.st_mode)]
    return found


def read_the_checkpoint(folder: Path) -> None:
    """(worker) The resumed run opened a file of the checkpoint it was handed (the closed world's record of its call):
    a train that ignores ``resume_from`` and trains again from step 0 ends where the uninterrupted run ends, and its
    controls can be made to differ, so agreement alone does not show that anything was resumed."""
    from . import children, paths, seen

    inside = tuple(form.rstrip(os.sep) + os.sep for form in paths.forms(str(folder)))
    seen.from_children()  # what its forked children read counts too (a loader process: red-team pass 34, FF1)
    if not any(path.startswith(inside) for path in (*seen.READ, *children.READ)):
        raise CheckFailed("the resumed run read no file of the checkpoint it was handed (resume_from: "
                          f"{folder.parent.name}/{folder.name} of the run's folder): "
                          "train must restore its state from there, not train again from the start",
                          Layer.APPLICATION, {"tip": "load the checkpoint from resume_from in train "
                                              "(docs/application.md: the resume contract)"})


def sealed(folder: Path, expected: dict[str, Any], after: bool = False) -> None:
    """(worker) The checkpoint still as the call to K left it (``after``: checked again after the resumed call)."""
    now = seal(folder)
    if now != {k: list(v) for k, v in expected.items()}:
        changed = sorted(k for k in {*now, *expected} if now.get(k) != list(expected.get(k) or []))
        who = ("by the resumed run itself (a file opened to write: a database's journal; open the checkpoint "
               "read-only, SQLite ?immutable=1) or by a thread or process an earlier call left running" if after
               else "by a thread or process an earlier call of train left running?")
        raise CheckFailed(f"the checkpoint changed after the call that saved it: {', '.join(changed[:6])} (written "
                          f"{who})", Layer.APPLICATION, {"changed": changed})


def call_to_k(call: Callable[..., Any], ctx: Context, folder: Path, at: int) -> tuple[Any, dict[str, list[int]]]:
    """(runner) The call to K, first of the check's calls, in the checkpoint's folder made for it and reading only
    that; the checkpoint sealed as it returns. ``call(folder, steps, save_at)`` is one call of train."""
    checkpoint = made(folder / "checkpoint", "the checkpoint's folder")
    with reading_only(ctx, checkpoint):
        head = call(checkpoint, at, at)
    return head, seal(checkpoint)


def worker_context(order: dict[str, Any]) -> Context:
    """(worker) The call's Context: the runner's located sources and links adopted, its settings record and declared
    libraries (what this process's call is held to: steprun.held); of the run's record only the checkpoint it resumes
    from, if any, readable, and what it writes itself (the uninterrupted call's replayed passed: red-team passes 28,
    FP1, and 30, FP3)."""
    from .application import adopt

    ctx = Context(config={ConfigKey.PROJECT_ROOT: order["root"], ConfigKey.APPLICATION: order["app"],
                          ConfigKey.LIBRARIES: list(order.get("libraries") or [])}, out=Path(order["out"]))
    if isinstance(order.get("settings"), dict):
        ctx.state["settings"] = order["settings"]
    adopt(ctx, order.get("sources") or {})
    ctx.state[RUN_READS] = [order["resume_from"]] if order.get("resume_from") else []
    return ctx


def called(order: dict[str, Any]) -> str:
    """The call an order names, as a verdict says it."""
    return "resumed run" if order.get("resume_from") else "uninterrupted run"


def plain_counters(counters: Any, required: tuple[str, ...]) -> None:
    """The progress counters a call of train returned: a plain dict of plain names to whole numbers, ``required`` among
    them. What a call's answer is made of runs none of the application's code once its processes are ended (a key's
    own comparison, run by the answer's sorted JSON, forked after: red-team pass 33, END2)."""
    if type(counters) is not dict or any(k not in counters for k in required) or not all(
            type(k) is str and type(v) is int for k, v in counters.items()):
        raise CheckFailed(f"train must return its progress counters, whole numbers {list(required)} at least (a plain "
                          f"dict of str to int); it returned {counters!r}", Layer.APPLICATION)


def answer(outputs: dict[str, Any], losses: dict[int, float], counters: dict[str, int]) -> dict[str, Any]:
    """(worker) A call's result as its process hands it back on its own channel: each output as .npy bytes (dtype and
    shape kept exactly)."""
    import numpy as np

    encoded = {}
    for name, arr in outputs.items():
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(arr), allow_pickle=False)
        encoded[name] = base64.b64encode(buffer.getvalue()).decode("ascii")
    return {"losses": {str(k): v for k, v in losses.items()}, "counters": counters, "outputs": encoded}


def with_records(said: dict[str, Any], ctx: Context | None) -> dict[str, Any]:
    """(worker) The answer (a result or a verdict) with what the call's windows recorded of the system's files and the
    kernel's state it read (systemfiles.py: ``system_files``), which the runner takes as its step's own
    (:func:`answered`): a record made in a process of the run reaches the run's (red-team pass 57, PROC4)."""
    return {**said, SYSTEM_FILES: dict(ctx.state.get(SYSTEM_FILES) or {}) if ctx is not None else {}}


def _take_records(ctx: Context | None, found: dict[str, Any], order: dict[str, Any]) -> None:
    """(runner) A call's ``system_files`` kept as the runner's own, so in the step's details and system.json
    (steprun.run); a name the runner recorded already keeps its record."""
    files = found.get(SYSTEM_FILES, {})
    if type(files) is not dict or not all(type(k) is str and type(v) is str for k, v in files.items()):
        raise CheckFailed(f"the {called(order)}'s process answered system_files that are no record of files read (a "
                          "dict of path to sha256)", Layer.APPLICATION)
    if ctx is not None:
        mine = ctx.state.setdefault(SYSTEM_FILES, {})
        for path, value in files.items():
            mine.setdefault(path, value)


def signed(said: dict[str, Any], key: str) -> str:
    """(worker) The answer's one line: the answer and its signature with the order's key (HMAC-SHA256), which the
    process's serving code holds, as the forked children's notes are signed (children.py): a line the application's
    code writes on the channel is not Kernodeck's answer (red-team pass 31, FP2)."""
    text = json.dumps(said, default=str, sort_keys=True)
    mac = hmac.new(bytes.fromhex(key), text.encode(), hashlib.sha256).hexdigest()
    return json.dumps({"answer": text, "mac": mac})


def answered(worker: Any, order: dict[str, Any], ctx: Context | None = None
             ) -> tuple[dict[str, Any], dict[int, float], dict[str, int]]:
    """(runner) ``order`` given to ``worker`` (a resume.Worker), and its answer read from the process's own channel
    (its stdout, which the application's code does not write to: resume_app._serve), never from a file of the run's
    folder another process or a thread could rewrite; exactly one line, signed (:func:`signed`): (outputs, losses,
    counters). What the call's windows recorded of the system's files goes into ``ctx``'s record, a verdict's too."""
    import numpy as np

    code, err = worker.run(order)
    lines = [x for x in str(worker.out).splitlines() if x.strip()]
    if code != 0 or not lines:
        said = [x for x in err.splitlines() if x.strip()]
        raise CheckFailed(f"the {called(order)}'s process failed: {said[-1] if said else f'exit {code}'}",
                          Layer.APPLICATION, {"command": [*worker.cmd, "<", "(its order)"], "stderr": said[-12:]})
    try:
        line = json.loads(lines[0]) if len(lines) == 1 else {}
        text, mac = str(line["answer"]), str(line["mac"])
    except (ValueError, KeyError, TypeError):
        text, mac = "", ""
    expected = hmac.new(bytes.fromhex(order["key"]), text.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac, expected):
        raise CheckFailed(f"the {called(order)}'s process answered what Kernodeck's code did not write ({len(lines)} "
                          "line(s) on its channel, not one signed answer): the application's code wrote there",
                          Layer.APPLICATION)
    found = json.loads(text)
    _take_records(ctx, found, order)
    if "error" in found:
        raise CheckFailed(found["error"], found["layer"], found.get("details") or {})
    outputs = {name: np.load(io.BytesIO(base64.b64decode(found["outputs"][name])), allow_pickle=False)
               for name in order["cfg"]["outputs"]}
    return outputs, {int(k): float(v) for k, v in found["losses"].items()}, found["counters"]


def adopting() -> None:
    """(worker) This process adopts whatever is orphaned below it (Linux's child subreaper): a child the application
    forks stays its own to end, even one that left the process group (``os.setsid``) or whose parent ended."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):  # not Linux: the process group alone (resume.Worker) ends what it forked
        pass


def _below(pid: int) -> list[int]:
    """Every process whose parent chain leads to ``pid`` (one scan of /proc: the whole tree, not one level)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as stat_file:
                    parents[int(entry)] = int(stat_file.read().rsplit(b")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, level = [], [pid]
    while level:
        level = [child for child, parent in parents.items() if parent in level]
        found += level
    return found


def end_descendants() -> None:
    """(worker) Every process below this one ended before it answers: nothing the call forked outlives it (red-team
    passes 31-33, FP1 and END1: a child left running filled a file the next call made; a chain deeper than the passes),
    whichever group or session it moved to (:func:`adopting` makes them this process's children as their parents
    end); no fork is allowed from then on (seen.FORKS_ENDED: a thread the call left running). One still alive 30 s
    later fails the call."""
    from . import seen

    seen.FORKS_ENDED[0] = True
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        below = _below(os.getpid())
        if not below:
            return
        for pid in below:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        reaped = False
        for pid in below:  # this process's own children now (adopted ones included), each waited for until it ends
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
                reaped = True
        if not reaped:  # each still the child of one that is ending: adopted in a moment
            time.sleep(0.001)
    raise CheckFailed(f"processes the call forked were still alive 30 s after it ended: {_below(os.getpid())[:8]}",
                      Layer.APPLICATION)
