"""Subprocesses: argument lists only, logged (credentials redacted) before they run; failures keep the first error."""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernodeck.errors import CommandFailed
from kernodeck.sources import redact_text

# Variables that would let the caller's Python leak into a child interpreter.
_LEAKY = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONSAFEPATH",
    "PYTHONPLATLIBDIR",  # another platlib folder: a compiled wheel's files elsewhere (red-team pass 68's note)
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
)


_LOG_LOCK = threading.Lock()
# Seconds between "still running" lines of a long phase when no terminal shows the tool's own progress (CI logs).
HEARTBEAT_ENV = "KERNODECK_PROGRESS_INTERVAL"
DEFAULT_HEARTBEAT_S = 15.0


def log(message: str) -> None:
    """The one log writer: whole lines, one at a time, whichever thread writes (no two lines ever merge)."""
    message = redact_text(message)  # the console counts as written (CI logs are often public)
    with _LOG_LOCK:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()


def interactive() -> bool:
    """A person watching a terminal: the installer's own progress display is shown; otherwise periodic lines."""
    try:
        return sys.stderr.isatty() and os.environ.get("CI", "").lower() not in ("1", "true")
    except (AttributeError, ValueError):
        return False


def heartbeat_interval() -> float:
    try:
        return max(0.05, float(os.environ.get(HEARTBEAT_ENV, DEFAULT_HEARTBEAT_S)))
    except ValueError:
        return DEFAULT_HEARTBEAT_S


@contextmanager
def alive(label: str, status: Callable[[], str] | None = None, interval: float | None = None) -> Iterator[None]:
    """While the body runs, a line every ``interval`` seconds: ``kernodeck: LABEL: still running (Ns; STATUS)``."""
    every = heartbeat_interval() if interval is None else interval
    stop = threading.Event()
    start = time.monotonic()

    def beat() -> None:
        while not stop.wait(every):
            note = status() if status else ""
            log(f"kernodeck: {label}: still running ({time.monotonic() - start:.0f}s{'; ' + note if note else ''})")

    thread = threading.Thread(target=beat, name=f"kernodeck-alive-{label}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def show(argv: Sequence[str]) -> str:
    return redact_text(shlex.join(str(a) for a in argv))


def uv_available() -> str | None:
    """The uv binary: on PATH, else the one the ``uv`` Python package ships; None when neither is there."""
    found = shutil.which("uv")
    if found:
        return found
    try:
        from uv import find_uv_bin  # type: ignore[import-not-found,unused-ignore]

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without what makes a child interpreter import from outside its own env."""
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY}
    env["PYTHONNOUSERSITE"] = "1"
    if extra:
        env.update(extra)
    return env


def first_error(text: str) -> str:
    """The first line that reads as an error with the causes the tool chained under it (uv's ``cause:`` lines: the
    first and the root one, e.g. ``Failed to fetch: <url>`` and ``Connection refused``), else the last non-empty
    line. Redacted: it is printed and may be written."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for number, line in enumerate(lines):
        low = line.lower()
        # uv prefixes its errors with a multiplication sign (U+00D7)
        if low.startswith(("error", "fatal", "\u00d7")) or "error:" in low or "exception:" in low:
            return redact_text(_with_causes(line, lines[number + 1:]))
    return redact_text(lines[-1]) if lines else "(no output)"


_CAUSE = ("cause:", "caused by:", "\u2570\u2500\u25b6")  # uv's "cause:" lines, its tree arrow


def _with_causes(line: str, following: list[str]) -> str:
    causes: list[str] = []
    for nxt in following:
        low = nxt.lower()
        prefix = next((p for p in _CAUSE if low.startswith(p)), None)
        if prefix is None:
            break
        causes.append(nxt[len(prefix):].strip())
    chosen = list(dict.fromkeys([causes[0], causes[-1]])) if causes else []
    text = " -- ".join([line.rstrip(":"), *chosen])  # spaced: a redacted query never swallows the next cause
    return text if len(text) <= 600 else text[:597] + "..."


def run(
    argv: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    quiet: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; print it first; raise :class:`CommandFailed` with the first error on a non-zero exit."""
    args = [str(a) for a in argv]
    log(f"$ {show(args)}")
    proc = subprocess.run(
        args, env=dict(env) if env is not None else None, cwd=cwd, text=True, capture_output=True, check=False
    )
    if proc.returncode != 0:
        output = (proc.stderr or "") + (proc.stdout or "")
        if not quiet:
            log(redact_text(output.rstrip()[-4000:]))
        raise CommandFailed(args, proc.returncode, first_error(proc.stderr or proc.stdout or ""), redact_text(output))
    return proc


def _last_line(lines: deque[str]) -> str:
    for line in reversed(lines):
        text = line.strip()
        if text:
            return redact_text(text)[:120]
    return ""


def run_with_progress(
    argv: Sequence[str | Path],
    *,
    label: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    on_line: Callable[[str], None] | None = None,
    quiet: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run a long command so that it shows it is alive; the same result and errors as :func:`run`.

    On a terminal the tool's own progress display reaches it (through a pseudo-terminal, so the output is still
    kept for the first error); without one (CI), its output is read line by line and a ``still running`` line
    with the latest output is logged every few seconds. ``on_line`` sees every output line (forwarding phases).
    """
    args = [str(a) for a in argv]
    log(f"$ {show(args)}")
    token = f"{os.getpid()}-{time.monotonic_ns()}"  # what it starts carries it: stopped with it (_end_command)
    full_env = {**(dict(env) if env is not None else os.environ), COMMAND_MARK: token}
    if interactive() and os.name == "posix":
        code, output = _run_on_pty(args, full_env, cwd, on_line)
    else:
        code, output = _run_piped(args, full_env, cwd, label, on_line)
    if code != 0:
        if not quiet:
            log(redact_text(output.rstrip()[-4000:]))
        raise CommandFailed(args, code, first_error(output), redact_text(output))
    return subprocess.CompletedProcess(args, code, output, "")


def _run_piped(
    args: list[str],
    env: dict[str, str] | None,
    cwd: Path | None,
    label: str,
    on_line: Callable[[str], None] | None,
) -> tuple[int, str]:
    kept: list[str] = []
    recent: deque[str] = deque(maxlen=20)
    with (
        subprocess.Popen(
            args, env=env, cwd=cwd, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=1
        ) as proc,
        alive(label, lambda: _last_line(recent)),
    ):
        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                kept.append(line)
                recent.append(line)
                if on_line:
                    on_line(line.rstrip("\n"))

        # read beside the wait: a process it left holding the pipe would keep the output open after it exits
        reader = threading.Thread(target=read, name="kernodeck-command-output", daemon=True)
        reader.start()
        try:
            code = proc.wait()
        finally:
            _end_command(proc, env)
        reader.join(_PIPES_WAIT_S)
    return code, "".join(kept)


_PIPES_WAIT_S = 60.0  # after the command and what it started are ended: the rest of their output


def _end_command(proc: subprocess.Popen[Any], env: Mapping[str, str] | None) -> None:
    """Once a long command exits (or this process is interrupted): it, and every process that carries its mark
    (:data:`COMMAND_MARK`, inherited by what it started, a session of its own or a double fork included), stopped:
    nothing it started (an installer's build backend, say) outlives it to change what the command made (red-team pass
    71, BUILDREACH1). It stays in this process's group, so a signal to the group (a terminal's Ctrl-C, a CI job
    cancelled) still reaches it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            proc.kill()
    token = (env or {}).get(COMMAND_MARK, "")
    if token:
        left = stop_carrying(COMMAND_MARK, token)
        if left:
            log(f"kernodeck: {len(left)} process(es) the command started outlived it (pid "
                f"{', '.join(map(str, left))}): stopped")


COMMAND_MARK = "KERNODECK_COMMAND"  # in a long command's environment: its own token, found again in what it started


def running(pid: int) -> bool:
    """Some thread of the process runs (a zombie does not count: its parent is gone and init reaps it; a process whose
    main thread exited while another runs does: red-team pass 72, LEADLESS1)."""
    for stat in _and_tasks(pid, "stat"):
        with contextlib.suppress(OSError):
            if stat.read_text(encoding="utf-8", errors="replace").rpartition(")")[2].split()[0] not in ("Z", "X"):
                return True
    return False


def _and_tasks(pid: int, name: str) -> Iterator[Path]:
    """The process's ``/proc`` file ``name``, then its threads' (listed only when the first does not answer)."""
    yield Path(f"/proc/{pid}/{name}")
    with contextlib.suppress(OSError):
        yield from [task / name for task in Path(f"/proc/{pid}/task").iterdir()]


def _carries(pid: int, needle: bytes) -> bool:
    """The process's environment holds ``needle``: read from it, or from one of its threads when its main thread has
    exited (the process's own file then reads empty)."""
    for environ in _and_tasks(pid, "environ"):
        with contextlib.suppress(OSError):
            data = environ.read_bytes()
            if data:
                return needle in data.split(b"\0")
    return False


def hold(pid: int) -> int | None:
    """A pidfd for ``pid`` (Linux 5.3+): signals sent through it reach that process or none, never one that took its
    pid after it ended; None where there is none (an older kernel, another system: signals go by pid)."""
    with contextlib.suppress(AttributeError, OSError):
        return os.pidfd_open(pid)
    return None


def send(pid: int, fd: int | None, sig: int) -> bool:
    """``sig`` sent to ``pid`` (through ``fd`` when there is one): True when it was delivered."""
    try:
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
        return True
    except (ProcessLookupError, PermissionError, OSError):
        return False


def stop_carrying(name: str, value: str, rounds: int = 20) -> tuple[int, ...]:
    """Every running process but this one whose environment holds ``name=value`` (read from ``/proc``; none where
    there is none, as on macOS): stopped (SIGSTOP: a stopped process forks no more), the scan repeated until it finds
    none new (a process that keeps changing its pid, forking and exiting, is caught within ``rounds``), then killed;
    their pids. Each is held by a pidfd opened before its environment is read and still alive after: a pid reused
    between the read and the signal gets none. Whatever happens during the scan (an interrupt), what it stopped is
    killed: nothing is left stopped."""
    needle, found = f"{name}={value}".encode(), dict[int, int | None]()
    try:
        for _ in range(rounds):
            new = 0
            with contextlib.suppress(OSError):
                for entry in Path("/proc").iterdir():
                    if not entry.name.isdigit() or int(entry.name) == os.getpid() or int(entry.name) in found:
                        continue
                    pid = int(entry.name)
                    if not (_carries(pid, needle) and running(pid)):
                        continue
                    # held, read again, then still the same process (alive or a zombie keeps its pid): its own read
                    fd = hold(pid)
                    if _carries(pid, needle) and send(pid, fd, 0) and send(pid, fd, signal.SIGSTOP):
                        found[pid], new = fd, new + 1
                    elif fd is not None:
                        os.close(fd)
            if not new:
                break
    finally:
        end_held(found)
    return tuple(sorted(found))


def end_held(held: Mapping[int, int | None], within: float = 2.0) -> None:
    """Each held process (pid: its pidfd, :func:`hold`) killed, then waited for up to ``within`` seconds in all (a
    pidfd reads as ready once its process has exited) and its pidfd closed: what was killed is gone when this returns,
    not still dying: a process in its exit (its memory being unmapped: its environment already reads empty, so no
    sweep can find it) included."""
    for pid, fd in held.items():
        send(pid, fd, signal.SIGKILL)
    deadline = time.monotonic() + within
    for fd in [fd for fd in held.values() if fd is not None]:
        with contextlib.suppress(OSError, ValueError):
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        os.close(fd)


def _run_on_pty(
    args: list[str], env: dict[str, str] | None, cwd: Path | None, on_line: Callable[[str], None] | None
) -> tuple[int, str]:
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen(args, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    finally:
        os.close(slave)
    chunks: list[bytes] = []
    pending, shown = b"", b""

    def show_redacted(final: bool = False) -> None:
        # Whole lines (a progress bar redraws with \r) pass through redaction, so a URL credential is never shown
        # even when a read splits it; a line still growing waits for the next read.
        nonlocal shown
        cut = len(shown) if final else max(shown.rfind(b"\n"), shown.rfind(b"\r")) + 1
        if cut <= 0 and len(shown) < 65536:
            return
        cut = cut if cut > 0 else len(shown)
        text, shown = redact_text(shown[:cut].decode("utf-8", "replace")), shown[cut:]
        with _LOG_LOCK:
            sys.stderr.write(text)
            sys.stderr.flush()

    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
            shown += data
            show_redacted()
            if on_line:
                pending += data
                *done, pending = pending.replace(b"\r", b"\n").split(b"\n")
                for line in done:
                    on_line(line.decode("utf-8", "replace"))
    finally:
        show_redacted(final=True)
        os.close(master)
        if sys.exc_info()[0] is not None:  # interrupted: it ends now, not when it would have finished
            _end_command(proc, env)
        code = proc.wait()
        _end_command(proc, env)
    return code, b"".join(chunks).decode("utf-8", "replace")
