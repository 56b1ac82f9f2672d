"""PyTorch's own report of the environment (``python -m torch.utils.collect_env``, the record its maintainers ask
for in a bug report), kept beside the checks' results as ``collect_env.txt``, reviewed like every dossier file.

Taken in the check process at the ``system`` step: torch is imported there already and no project code has run yet,
so the report is of the env as built, not as the application left it. A second process only for it imported torch
again (about 3 s of CPU of a 23 s reused-env verify, measured here: 2.75 s user for ``python -m
torch.utils.collect_env`` alone, 0.5 s wall and 0.01 s of this process's CPU for ``get_pretty_env_info()`` after
torch's import). It is an observation, not a check: its failure is the file's content ("not collected: ..."), never
the step's. Its probes (``pip list``, ``nvidia-smi``, compilers) run without a timeout of torch's, so it runs in a
thread of Kernodeck's own that the step waits for at most the run configuration's ``probe_wait_s`` (half the system
step's deadline and of the stall limit, 120 s at most): a probe that hangs (a stuck driver) is named in the file and
left behind, while the checks go on. What the probe changes in ``os.environ`` (torch sets
``PIP_DISABLE_PIP_VERSION_CHECK``) is put back before the application runs (red-team pass 23, NOTE2). The file is
Kernodeck's record of the run, which the application may not write (world.py; pass 23, NOTE1).

Its ``pip list`` probe (``python -mpip list --format=freeze`` in a new process: 0.2-0.35 s here, four fifths of the
report) is answered in this process from the distributions on its own path (importlib.metadata), the env the
inventory step has just checked against the lock, in pip's format; every other probe runs as torch runs it. The
header says so. The answer is the env as this process sees it: a new ``python -mpip`` would also list the user site
and the current folder, which ``-s -P`` keep out of the run.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import seen
from ._common import progress, write_text_atomic
from .protocol import COLLECT_ENV

HEAD = ("# python -m torch.utils.collect_env (its get_pretty_env_info() in the check process, before project code;\n"
        "# its pip list probe answered from this process's installed distributions, importlib.metadata)\n")
WAIT_S = 120.0  # without a run configuration's probe_wait_s


def pip_list() -> str:
    """``pip list --format=freeze`` of the distributions on this process's path, in pip's order (by name, case
    folded); the first of a name wins, as on an import."""
    from importlib import metadata

    seen_names: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        key = re.sub(r"[-_.]+", "-", name).lower()
        if name and key not in seen_names:
            seen_names[key] = f"{name}=={dist.version}"
    return "\n".join(seen_names[key] for key in sorted(seen_names))


def _answering_pip(run: Callable[[Any], tuple[int, str, str]]) -> Callable[[Any], tuple[int, str, str]]:
    """torch's probe runner, but its ``python -mpip list --format=freeze`` answered by :func:`pip_list`."""
    probe = [sys.executable, "-mpip", "list", "--format=freeze"]

    def answered(command: Any) -> tuple[int, str, str]:
        return (0, pip_list(), "") if command == probe else run(command)

    return answered


def _collect(found: list[str]) -> None:
    seen.own_thread()  # Kernodeck's: its probes' files and processes are never the application's
    seen.MINE.quiet = True
    try:
        from torch.utils import collect_env

        collect_env.run = _answering_pip(collect_env.run)
        found.append(collect_env.get_pretty_env_info())
    except Exception as exc:  # an observation: why it could not be taken is its record
        found.append(f"not collected: {type(exc).__name__}: {exc}")


class Report:
    """torch's report being taken: begun (:func:`begin`), then finished (:meth:`finish`: waited for and written).
    The system step reads its own facts in between (its compilers' and build chain's probes are processes too):
    nothing of the project runs meanwhile, and only the probe's ``PIP_DISABLE_PIP_VERSION_CHECK``, never a variable
    those facts read, is written into ``os.environ``; it is put back before the step ends, whatever the step met."""

    def __init__(self) -> None:
        progress("torch.utils.collect_env")
        self.found: list[str] = []
        self.environ = dict(os.environ)
        self.thread = threading.Thread(target=_collect, args=(self.found,), name="kernodeck-collect-env", daemon=True)
        self.thread.start()

    def finish(self, out: Path | None, wait_s: float = WAIT_S) -> None:
        """Waited for (``wait_s`` at most), ``os.environ`` put back, and ``collect_env.txt`` written into ``out``
        (None: the step failed before it; nothing written)."""
        self.thread.join(wait_s)
        for name in set(os.environ) - set(self.environ):
            del os.environ[name]
        os.environ.update(self.environ)
        if out is None:
            return
        text = self.found[0] if self.found else (
            f"not collected: still running after {wait_s:g}s (one of its probes hung: pip list, nvidia-smi, a "
            "compiler's version); left behind")
        write_text_atomic(out / COLLECT_ENV, HEAD + text.rstrip("\n") + "\n")


def begin() -> Report:
    """torch's report, begun in a thread of Kernodeck's own."""
    return Report()
