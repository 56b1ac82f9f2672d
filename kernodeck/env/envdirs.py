"""Where a platform's envs live and which one is current: ``<venv-root>/<platform-id>/env-<stamp>`` folders, the
``CURRENT`` pointer (and a ``current`` symlink on POSIX), and the lock that lets one run of a platform at a time.

An env counts only once it holds its completion record (``kernodeck-complete.json``); a folder without one is what a
killed or failed build left, and the next run removes it. Nothing here builds: see :mod:`kernodeck.env.rebuild`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from filelock import FileLock

from kernodeck._fs import write_atomic
from kernodeck._proc import log
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform

MARKER = "kernodeck-complete.json"


def env_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def platform_dir(project: Project, plat: Platform) -> Path:
    return project.venv_root / plat.id


def platform_lock(project: Project, plat: Platform, timeout: float = 3600) -> FileLock:
    """One rebuild-or-verify of a platform at a time: a second run waits, it never corrupts the first."""
    folder = platform_dir(project, plat)
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / ".kernodeck.lock"), timeout=timeout)


def current_env(project: Project, plat: Platform) -> Path | None:
    pointer = platform_dir(project, plat) / "CURRENT"
    if not pointer.exists():
        return None
    env = platform_dir(project, plat) / pointer.read_text(encoding="utf-8").strip()
    return env if (env / MARKER).exists() and env_python(env).exists() else None


def marker(env: Path) -> dict[str, object]:
    """The env's completion record ({} when absent or unreadable)."""
    try:
        data = json.loads((env / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def clean_incomplete(project: Project, plat: Platform) -> list[str]:
    """Remove env folders a killed or failed build left (no completion marker, not current). Caller holds the lock."""
    folder = platform_dir(project, plat)
    current = current_env(project, plat)
    removed = []
    for child in sorted(folder.glob("env-*")):
        if child != current and not (child / MARKER).exists():
            shutil.rmtree(child, ignore_errors=True)
            removed.append(child.name)
    if removed:
        log(f"kernodeck: removed incomplete build(s) left by an earlier run: {', '.join(removed)}")
    return removed


def promote(project: Project, plat: Platform, env: Path) -> None:
    """Make ``env`` the platform's current env (the pointer switched atomically), then remove the others."""
    folder = platform_dir(project, plat)
    write_atomic(folder / "CURRENT", env.name + "\n")
    if os.name != "nt":
        tmp_link = folder / ".current.tmp"
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(env.name)
        os.replace(tmp_link, folder / "current")
    for child in folder.glob("env-*"):
        if child != env:
            shutil.rmtree(child, ignore_errors=True)
