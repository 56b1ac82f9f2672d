"""Shared fixtures. Tests are hermetic: no PIP_*/UV_* variables unless a test needs the real package sources."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What a copy of the project needs (never the rebuilt envs, runs or caches).
PROJECT_ITEMS = ("pyproject.toml", "noxfile.py", "kernodeck", "checks", "requirements", "lockfiles", "dossier")


@pytest.fixture(autouse=True)
def hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in list(os.environ):
        if var.startswith(("PIP_", "UV_")) or var in ("PYTHONPATH", "VIRTUAL_ENV", "KERNODECK_VARIANT", "KERNODECK_FAULT"):
            monkeypatch.delenv(var, raising=False)


def copy_project(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for item in PROJECT_ITEMS:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__", "history"))
        else:
            shutil.copy2(src, dest / item)
    return dest


def kd(cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``python -m kernodeck ARGS`` as a user would, in ``cwd``; uv (if installed beside python) on PATH."""
    full = dict(os.environ if env is None else env)
    full["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), full.get("PATH", "")])
    full["PYTHONPATH"] = str(cwd)
    return subprocess.run([sys.executable, "-m", "kernodeck", *args], cwd=cwd, env=full, text=True,
                          capture_output=True, timeout=timeout, check=False)


def read_report(folder: Path) -> dict[str, object]:
    return json.loads((folder / "report.json").read_text(encoding="utf-8"))


def statuses(report: dict[str, object]) -> dict[str, str]:
    return {s["name"]: s["status"] for s in report["steps"]}  # type: ignore[index,union-attr]


@pytest.fixture(scope="session")
def built_project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A copy of the project with its real environment rebuilt once (torch, sentence-transformers, the model).

    Needs this machine's package sources (pip config): the one kind of test allowed to use them.
    """
    project = copy_project(tmp_path_factory.mktemp("built") / "project")
    proc = kd(project, "rebuild")
    if proc.returncode != 0:
        pytest.fail(f"rebuild of the real environment failed:\n{proc.stderr[-3000:]}")
    yield project
