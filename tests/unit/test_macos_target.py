"""A macOS lock says which macOS it was made for: uv's default target (13.0) refuses its macOS 14 wheels."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

from kernodeck.project.platforms import UV_PLATFORM_ENV, UV_PLATFORMS
from tests.helpers.project import ROOT
from tests.helpers.tinylock import fresh_venv, uv

PYLOCK = ROOT / "lockfiles" / "pylock.cp311-macosx_arm64-mps.toml"


def _dry_run(python: Path, target: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MACOSX_DEPLOYMENT_TARGET"}
    env.update(UV_NO_CONFIG="1", UV_OFFLINE="1")
    if target:
        env["MACOSX_DEPLOYMENT_TARGET"] = target
    argv = [uv(), "pip", "install", "--preview-features", "pylock", "--dry-run", "--python", str(python),
            "--python-platform", UV_PLATFORMS["macosx_arm64"], "--python-version", "3.11", "-r", str(PYLOCK)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)


def test_macos_pylock_records_its_target_and_installs_only_with_it(tmp_path: Path) -> None:
    recorded = tomllib.loads(PYLOCK.read_text(encoding="utf-8"))["tool"]["kernodeck"]["macos-deployment-target"]
    assert recorded == UV_PLATFORM_ENV["macosx_arm64"]["MACOSX_DEPLOYMENT_TARGET"] == "14.0"
    python = fresh_venv(tmp_path / "venv")
    default = _dry_run(python, None)  # the negative control: uv's own default, macOS 13.0
    assert default.returncode != 0 and "macosx_13_0_arm64" in default.stderr
    made_for = _dry_run(python, recorded)
    assert made_for.returncode == 0, made_for.stderr
    assert any(line.startswith(" + torch==") for line in made_for.stderr.splitlines())
