"""A venv of the base interpreter made by hand (its layout and pyvenv.cfg, as ``python -m venv`` writes them), and a
run configuration with no step: what the verify runner's start is tested on (tests/unit/test_early.py,
test_redteam82.py, test_redteam83.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kernodeck import early
from kernodeck.env import start
from kernodeck.verify.steps.in_env import RUNNER

BASE = Path(sys._base_executable)  # type: ignore[attr-defined]
VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"


def venv(root: Path, *, home: Path | None = None, system_site: bool = False) -> Path:
    """The venv ``root/env`` (its site-packages made, empty); its interpreter."""
    env = root / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(BASE)
    (env / "pyvenv.cfg").write_text(f"home = {home or BASE.parent}\n"
                                    f"include-system-site-packages = {'true' if system_site else 'false'}\n")
    site_packages(env / "bin" / "python").mkdir(parents=True)
    return env / "bin" / "python"


def site_packages(python: Path) -> Path:
    return python.parent.parent / "lib" / VERSION / "site-packages"


def config(root: Path) -> Path:
    """``root/run/run-config.json``: the project at ``root``, no step."""
    (root / "run").mkdir()
    path = root / "run" / "run-config.json"
    path.write_text(json.dumps({"project_root": str(root), "application": {"sample": "s.jsonl"}, "steps": []}))
    return path


def runner_argv(python: Path, root: Path, *, wait: bool = True) -> list[str]:
    """The runner's command as verify starts it (``-S``, ``--wait``), or a plain start of it (``wait`` False)."""
    return start.argv(python, str(RUNNER), *((early.WAIT,) if wait else ()), "--config", str(config(root)),
                      site=not wait)


def run(argv: list[str], root: Path, word: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``root``, given ``word`` on its stdin, with only PATH (and ``env``) in its environment."""
    return subprocess.run(argv, input=word, capture_output=True, text=True, timeout=120, cwd=root,
                          env={"PATH": os.environ.get("PATH", ""), **(env or {})}, check=False)
