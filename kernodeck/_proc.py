"""Subprocesses: argument lists only, logged (credentials redacted) before they run; failures keep the first error."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import CommandFailed
from .sources import redact_text

# Variables that would let the caller's Python leak into a child interpreter.
_LEAKY = (
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PYTHONSAFEPATH",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
    """The first line that reads as an error, else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        low = line.lower()
        # uv prefixes its errors with a multiplication sign (U+00D7)
        if low.startswith(("error", "fatal", "\u00d7")) or "error:" in low or "exception:" in low:
            return redact_text(line)
    return redact_text(lines[-1]) if lines else "(no output)"


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
