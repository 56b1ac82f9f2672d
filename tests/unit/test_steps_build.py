"""The rebuild step's probe of a ``--python`` interpreter (kernodeck/verify/steps/build.py): it asks the env's
interpreter for its version with ``-I -S``, so no code of that env (a planted ``.pth``, a ``sitecustomize.py``) runs
before its files are known clean (docs/env-integrity.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.project.config import Backend, Variant
from kernodeck.project.platforms import Platform
from kernodeck.verify.steps.build import interpreter_platform

CPU = Platform("3.11", "linux_x86_64", Variant("cpu", Backend.CPU, "torch-cpu", "https://download.pytorch.org/whl/cpu"))


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bare venv of the running Python (no pip: nothing installed)."""
    env = tmp_path_factory.mktemp("probe") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=120)
    return env


@pytest.mark.parametrize("kind", ["pth", "sitecustomize"])
def test_the_interpreter_probe_runs_no_startup_code_of_the_env(env: Path, tmp_path: Path, kind: str) -> None:
    python = env / "bin" / "python"
    site = Path(subprocess.run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    marker = tmp_path / "ran"
    planted = site / ("zz-hook.pth" if kind == "pth" else "sitecustomize.py")
    code = f"import pathlib; pathlib.Path({str(marker)!r}).write_text('ran')\n"
    planted.write_text(code, encoding="utf-8")
    try:
        # negative control: with -I alone (the probe before), the planted code runs
        subprocess.run([python, "-I", "-c", "pass"], check=True, timeout=60)
        assert marker.read_text() == "ran"
        marker.unlink()
        found = interpreter_platform(None, str(python), CPU)  # type: ignore[arg-type]  # the project is not used
        assert found.python == f"{sys.version_info[0]}.{sys.version_info[1]}"
        assert found.os_arch == CPU.os_arch and found.variant == CPU.variant
        assert not marker.exists(), "the --python probe ran the env's start-up code"
    finally:
        planted.unlink()
