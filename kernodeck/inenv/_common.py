"""What every in-env step shares: the failure type with its layer, the run context, files read and written."""

from __future__ import annotations

import atexit
import hashlib
import json
import math
import os
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from .protocol import Layer

_STEP = {"name": ""}


def set_step(name: str) -> None:
    """The step now running (set by the runner): progress lines are named after it."""
    _STEP["name"] = name


def current_step() -> str:
    """The step now running ("" outside the runner's step loop)."""
    return _STEP["name"]


def _own_stderr() -> Any:
    """Kernodeck's own stream to stderr, taken as this module loads (before any of the application's code): a
    ``sys.stderr`` the application replaced (a logger's tee into a file of its checkpoint) never receives Kernodeck's
    lines (red-team pass 31, FF1)."""
    try:
        stream = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    except OSError:  # no stderr to take (closed): the interpreter's own
        return sys.__stderr__
    # closed at the interpreter's exit, never left to the collector: a process that loads this module more than once
    # (a test importing the in-env package afresh) would otherwise warn of an unclosed file as the old copy goes
    atexit.register(stream.close)
    return stream


_STDERR = _own_stderr()


def end(status: int) -> NoReturn:
    """End an in-env process now, its results written (tearing down torch and its libraries checks nothing). It
    flushes no stream: the in-env processes run unbuffered (``-u``: kernodeck/env/start.py), and any stream object,
    the interpreter's own included, may be one the application re-made, whose flush would run after its last window
    (red-team passes 41-43, WINDOW6, END1, END2)."""
    os._exit(status)


def say(line: str) -> None:
    """One of Kernodeck's lines on stderr (the orchestrator forwards them)."""
    if _STDERR is not None:
        _STDERR.write(line + "\n")
        _STDERR.flush()


def progress(what: str) -> None:
    """A sub-phase of the running step (``[kernodeck] STEP: WHAT`` on stderr); the orchestrator forwards it."""
    say(f"[kernodeck] {_STEP['name'] or 'checks'}: {what}")


class CheckFailed(Exception):
    """A check's verdict: the message is the first error, verbatim; ``layer`` says where the failure belongs."""

    def __init__(self, message: str, layer: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.layer = layer
        self.details = details or {}

    def __reduce__(self) -> tuple[Any, ...]:
        """Whole through pickle: a verdict raised in a Pool's forked child reaches the parent's call as itself (the
        default rebuilds it from the message alone, which fails there and leaves the pool waiting forever)."""
        return type(self), (str(self), self.layer, self.details)


class ProcessEnd(SystemExit):
    """The application ending its own process by a way that raises nothing (exits.py: ``os._exit``, a signal it sent
    itself), raised in its place: a SystemExit, so its call fails as by ``sys.exit`` (:class:`ApplicationExit`)."""

    def __init__(self, text: str, code: int) -> None:
        super().__init__(code)
        self.text = text


class ApplicationExit(Exception):
    """A BaseException of the application's code that is not an Exception (``sys.exit``: SystemExit, a library's own
    BaseException), as an Exception: every rule made for the application's exceptions applies to it (its window
    judged, its step recorded failed at its frame, its layer). Made by :func:`as_failure` where the application's
    call ends (world.window); the run's own interruptions are never one."""

    def __init__(self, exc: BaseException) -> None:
        if isinstance(exc, ProcessEnd):
            text = exc.text
        elif isinstance(exc, SystemExit):
            text = "the application called sys.exit(" + ("" if exc.code is None else repr(exc.code)) + ")"
        else:
            text = f"the application raised {type(exc).__name__} (a BaseException, not an Exception): {exc}"
        super().__init__(text)


# A Ctrl-C (SIGINT: the supervisor's or the user's) and a generator's close are the run's control flow, not the
# application's failure: they pass every window as they are (docs/exit-codes: an interrupted run).
_CONTROL_FLOW = KeyboardInterrupt | GeneratorExit


def as_failure(exc: BaseException) -> BaseException:
    """What the application's call raised, as the rules for its failures see it: an Exception or the run's control
    flow as they are, any other BaseException (``sys.exit``) an :class:`ApplicationExit` that keeps its traceback."""
    if isinstance(exc, Exception | _CONTROL_FLOW):
        return exc
    failure = ApplicationExit(exc).with_traceback(exc.__traceback__)
    failure.__cause__ = exc
    return failure


def made(verdict: CheckFailed, mine: Any) -> None:
    """A closed-world verdict recorded where it is made (seen._refuse, the first of a step), for the supervisor: a
    retry loop that swallows it may never close its window, and a stopped step must still name its first error.
    ``mine`` is seen.MINE: this write is Kernodeck's, not the application's."""
    from .protocol import STACKS_DIR_ENV, VERDICT_SUFFIX

    folder = os.environ.get(STACKS_DIR_ENV)
    if not folder:
        return
    line = json.dumps({"step": current_step(), "message": str(verdict), "layer": verdict.layer,
                       "tip": str(verdict.details.get("tip", ""))})
    was, mine.quiet = getattr(mine, "quiet", False), True
    try:
        fd = os.open(os.path.join(folder, f"{os.getpid()}{VERDICT_SUFFIX}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass  # the folder is gone (the run is over): the verdict is still raised where the call is
    finally:
        mine.quiet = was


class Skip(Exception):
    """The step does not apply here; the message is the reason."""


@dataclass
class Context:
    config: dict[str, Any]
    out: Path
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def again(self) -> str:
        """The command that runs this again, as a TIP names it: the session that started it (a calibrate's, a
        bisect's, an upgrade's), else its mode's."""
        return f"nox -s {self.config.get('session') or self.config.get('mode') or 'verify'}"

    @property
    def outputs(self) -> Path:
        path = self.out / "outputs"
        path.mkdir(parents=True, exist_ok=True)
        return path


def write_text_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2, default=str) + "\n")


def sha256_file(path: Path) -> str:
    """sha256 of a file (this side of the wall cannot import kernodeck: the twin of kernodeck._fs.sha256_file)."""
    return sha256_keyed(path)[1]


def sha256_keyed(path: Path) -> tuple[Any, str]:
    """The file's sha256 and the identity and state of the very file read, as ``declared_files.stat_key`` has them
    (inode, device, size, mtime, ctime), from the opened file (``fstat`` before and after the read: None when it
    moved meanwhile). A stat taken by name apart from the read could be another file's: a folder on the way swapped
    between the two (red-team pass 84b, BLD2, BLD3: the true file's digest kept under the forged one's stat)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        before = os.fstat(handle.fileno())
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
        after = os.fstat(handle.fileno())
    keys = [(st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns) for st in (before, after)]
    return (keys[0] if keys[0] == keys[1] else None), digest.hexdigest()


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (a list is an array)."""
    for kind, name in ((bool, "boolean"), (str, "string"), (list, "array"), (int | float, "number")):
        if isinstance(value, kind):
            return name
    return "null"


def load_sample(path: Path, sha256: str | None = None) -> list[dict[str, Any]]:
    """The identified sample: one JSON object per line, each with a unique string ``id`` (the rest is the app's)."""
    try:
        raw_bytes = path.read_bytes()
        raw = raw_bytes.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckFailed(f"cannot read sample {path.name}: {exc}", Layer.DATA_LOADING) from exc
    if sha256 and hashlib.sha256(raw_bytes).hexdigest() != sha256:
        raise CheckFailed(
            f"sample {path.name} differs from the reference's fingerprint (sha256 {sha256[:12]}...)", Layer.DATA_LOADING
        )
    items = []
    first_line: dict[str, int] = {}  # each id's line: a duplicate is named with both lines
    # JSON Lines ends a line at \n only (a \r before it is JSON's whitespace); str.splitlines would also end one at
    # U+2028, U+2029 or U+0085, which JSON leaves raw inside strings (red-team pass 51, SAMPLE1)
    for number, line in enumerate(raw.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CheckFailed(f"{path.name}:{number}: not JSON: {exc}", Layer.DATA_LOADING) from exc
        if not isinstance(item, dict):
            raise CheckFailed(
                f"{path.name}:{number}: not a JSON object but a JSON {_json_kind(item)} (each line is an object with "
                'a string field "id")',
                Layer.DATA_LOADING,
            )
        if not isinstance(item.get("id"), str):
            found = f"its id is {json.dumps(item['id'])}" if "id" in item else "it has no field id"
            raise CheckFailed(f"{path.name}:{number}: each line needs a string field id ({found})", Layer.DATA_LOADING)
        if item["id"] in first_line:
            raise CheckFailed(
                f"{path.name}:{number}: duplicate id {json.dumps(item['id'])} (first on line {first_line[item['id']]})",
                Layer.DATA_LOADING,
            )
        first_line[item["id"]] = number
        items.append(item)
    if not items:
        raise CheckFailed(f"{path.name}: empty sample", Layer.DATA_LOADING)
    return items


def load_file(path: Path, name: str, sha256: str | None = None, shown: str = "") -> types.ModuleType:
    """Load a module from an explicit file path, without putting its folder (or anything else) on sys.path: read once,
    checked against ``sha256`` when given, compiled from those bytes (never a ``__pycache__``: verified.py)."""
    from .verified import load_source

    return load_source(path, name, sha256, shown)


HERE = Path(__file__).resolve().parent
USER_FRAMES = 6  # the last frames shown of an exception raised in the application's code


def user_traceback(exc: BaseException, root: Path) -> dict[str, str]:
    """Where the application's own code raised ``exc``, as pytest shows a failing test: ``raised_at`` (the deepest
    frame in a project file, ``path:line in function``) and ``traceback`` (the last frames from the first one outside
    Kernodeck's in-env code, then the exception), with project paths relative to ``root``."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    while frames and Path(frames[0].filename).resolve().parent == HERE:
        frames.pop(0)  # Kernodeck's call into the application: not the user's
    root = root.resolve()

    def shown(filename: str) -> str:
        path = Path(filename).resolve()
        return path.relative_to(root).as_posix() if path.is_relative_to(root) else filename

    ours = [f for f in frames if Path(f.filename).resolve().is_relative_to(root)]
    out: dict[str, str] = {}
    if ours:
        last = ours[-1]
        out["raised_at"] = f"{shown(last.filename)}:{last.lineno} in {last.name}"
    lines = []
    for frame in frames[-USER_FRAMES:]:
        lines.append(f"  {shown(frame.filename)}:{frame.lineno} in {frame.name}")
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    lines.append(f"{type(exc).__name__}: {exc}")
    if len(frames) > USER_FRAMES:
        lines.insert(0, f"  ... {len(frames) - USER_FRAMES} earlier frame(s)")
    out["traceback"] = "\n".join(lines)
    return out


def same_float(x: float, y: float) -> bool:
    """Two finite floats with the same bits: equal, and of one sign (``-0.0 == 0.0``: red-team pass 51, DET1)."""
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)
