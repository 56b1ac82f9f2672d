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
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from . import seen
from ._common import progress, write_text_atomic
from .protocol import COLLECT_ENV

HEAD = "# python -m torch.utils.collect_env (its get_pretty_env_info() in the check process, before project code)\n"
WAIT_S = 120.0  # without a run configuration's probe_wait_s


def _collect(found: list[str]) -> None:
    seen.own_thread()  # Kernodeck's: its probes' files and processes are never the application's
    seen.MINE.quiet = True
    try:
        from torch.utils import collect_env

        found.append(collect_env.get_pretty_env_info())
    except Exception as exc:  # an observation: why it could not be taken is its record
        found.append(f"not collected: {type(exc).__name__}: {exc}")


def write(out: Path, wait_s: float = WAIT_S) -> None:
    """``collect_env.txt`` in ``out``: torch's report, or why it is missing."""
    progress("torch.utils.collect_env")
    found: list[str] = []
    environ = dict(os.environ)
    thread = threading.Thread(target=_collect, args=(found,), name="kernodeck-collect-env", daemon=True)
    thread.start()
    thread.join(wait_s)
    for name in set(os.environ) - set(environ):
        del os.environ[name]
    os.environ.update(environ)
    text = found[0] if found else (f"not collected: still running after {wait_s:g}s (one of its probes hung: "
                                   "pip list, nvidia-smi, a compiler's version); left behind")
    write_text_atomic(out / COLLECT_ENV, HEAD + text.rstrip("\n") + "\n")
