"""The project as the tests use it: its root, a copy of it, and ``python -m kernodeck`` run as a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a copy of the project needs (never the rebuilt envs, runs or caches).
PROJECT_ITEMS = ("pyproject.toml", "noxfile.py", "kernodeck", "checks", "requirements", "lockfiles", "dossier")


def copy_project(dest: Path) -> Path:
    """A copy of the project's PROJECT_ITEMS in ``dest`` (no ``__pycache__``, no history)."""
    dest.mkdir(parents=True, exist_ok=True)
    for item in PROJECT_ITEMS:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__", "history"))
        else:
            shutil.copy2(src, dest / item)
    return dest


def kd(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m kernodeck ARGS`` as a user would, in ``cwd``; uv (if installed beside python) on PATH."""
    full = dict(os.environ if env is None else env)
    full["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full.get("PATH", "")])
    full["PYTHONPATH"] = str(cwd)
    return subprocess.run(
        [sys.executable, "-m", "kernodeck", *args],
        cwd=cwd,
        env=full,
        text=True,
        capture_output=True,
        timeout=timeout,
        check=False,
    )
