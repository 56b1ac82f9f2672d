"""Red-team pass 80 (issue 29; notes: /work/notes/redteam80.md): ``rebuild --installer pip`` and Kernodeck's pip folder.

PIPBYTE1 (kernodeck/env/rebuild.py ``create``, 4279296; kernodeck/env/envpip.py): the install runs Kernodeck's own
pip by the env's interpreter as ``python -I -B <pip>/__pip-runner__.py install``; pip starts the process that
installs a declared built-here pin's build requirements as ``python <pip>/__pip-runner__.py install`` (pip's
``get_runnable_pip``: no ``-B``, no ``-I``), in the install's environment, which keeps the caller's
``PYTHONDONTWRITEBYTECODE`` only when the caller set it. So that process writes the bytecode of every pip module it
imports into Kernodeck's own pip folder (the orchestrator's installed runtime, which the reader runs next). Measured:
a copy of the folder without bytecode got 334 ``.pyc`` files from one install of a sdist whose build requires a wheel.
Their bytes are the env's interpreter's compile of the folder's own sources (the base interpreter's): no false record
found. envpip's "its modules were compiled when it was installed" does not hold for a uv install (uv compiles
nothing by default): here 154 of its 441 modules had bytecode, all written after the install by processes like this.
Control: ``PYTHONDONTWRITEBYTECODE=1`` in the install's environment: nothing written.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kernodeck.env import envpip
from kernodeck.env.installenv import installing_env
from tests.helpers.project import kd
from tests.helpers.tinylock import SDIST_BACKEND, declared_tinyd, fresh_venv, wheel_of, write_sdist


def _install(tmp_path: Path, **extra: str) -> list[Path]:
    """A copy of Kernodeck's pip folder (no bytecode), run as rebuild's create() runs it, installing a sdist whose
    build requires a wheel of the same find-links folder; the ``.pyc`` files the copy holds after."""
    tool = envpip.tool_pip("3.11")
    if tool is None:
        pytest.skip("Kernodeck's pip is not a folder of modules here")
    folder = tmp_path / "site" / "pip"
    shutil.copytree(tool, folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    wheel_of(wheels, "tinybe", "1.0", {"tinybe/__init__.py": SDIST_BACKEND.encode()})
    write_sdist(wheels, "tinyd", "1.0", "X = 1\n", backend="tinybe")
    python = fresh_venv(tmp_path / "env")
    env = {k: v for k, v in installing_env().items() if k != "PYTHONDONTWRITEBYTECODE" and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE="/dev/null", **extra)
    proc = subprocess.run([str(python), "-I", "-B", str(folder / "__pip-runner__.py"), "install", "--no-index",
                           "--find-links", str(wheels), "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
                           "tinyd==1.0"], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Successfully installed tinyd-1.0" in proc.stdout
    return sorted(folder.rglob("*.pyc"))


def test_pipbyte1_control_no_bytecode_written_when_the_caller_says_so(tmp_path: Path) -> None:
    assert _install(tmp_path, PYTHONDONTWRITEBYTECODE="1") == []


def test_pipbyte1_premise_pips_build_requirements_process_writes_bytecode_into_its_folder(tmp_path: Path) -> None:
    """pip's second process (no -B) writes the bytecode of the pip modules it imports into the folder it runs from."""
    assert _install(tmp_path) != []


def test_pipbyte1_a_rebuild_writes_nothing_into_kernodecks_pip_folder(tmp_path: Path) -> None:
    """A real ``rebuild --installer pip`` of a declared built-here sdist (its build requirement installed by pip's
    second process), Kernodeck's pip a copy without bytecode found first on the orchestrator's path (the project
    folder, its PYTHONPATH): no ``.pyc`` is written into it, whatever the caller's PYTHONDONTWRITEBYTECODE."""
    tool = envpip.tool_pip("3.11")
    if tool is None:
        pytest.skip("Kernodeck's pip is not a folder of modules here")
    project, _, env = declared_tinyd(tmp_path, SDIST_BACKEND)
    info = next(tool.parent.glob("pip-*.dist-info"))
    shutil.copytree(tool, project / "pip", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copytree(info, project / info.name)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"{project / 'pip' / '__pip-runner__.py'} install" in proc.stderr, proc.stderr[-2000:]  # the copy ran
    written = sorted((project / "pip").rglob("*.pyc"))
    assert written == [], f"{len(written)} .pyc files written, e.g. {written[:2]}"
