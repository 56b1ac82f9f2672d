"""Code run by a built env's own interpreter, started as the in-env processes are, its last line read as JSON."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

PLATFORM = "cp311-linux_x86_64-cpu"


def in_env(project: Path, code: str, *args: str) -> dict[str, Any]:
    """CODE run by the env's own interpreter, started as the in-env processes are (kernodeck/env/start.py), the
    project's checks importable; it prints one JSON line."""
    from kernodeck.env import start
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    python = project / ".venv-rebuild" / PLATFORM / "current" / "bin" / "python"
    prelude = f"import sys, json\nsys.path.insert(0, {str(project)!r})\n"
    proc = subprocess.run(
        start.argv(python, "-c", prelude + textwrap.dedent(code), *args),
        env=start.environ(RUNNER_ENV),
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
