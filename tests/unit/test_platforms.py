"""Platforms (kernodeck/project/platforms.py): ids parsed, wheel tags mapped, unknown variants named, a macOS lock
installed only for the macOS it was made for."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from kernodeck.errors import UnknownVariant
from kernodeck.project.config import Backend, load_project
from kernodeck.project.platforms import (
    UV_PLATFORM_ENV,
    UV_PLATFORMS,
    os_arch_from_tag,
    parse_platform_id,
    resolve_platform,
)
from tests.helpers.project import ROOT
from tests.helpers.tinylock import fresh_venv, uv


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("manylinux_2_36_x86_64", "linux_x86_64"),
        ("manylinux2014_aarch64", "linux_aarch64"),
        ("macosx_14_0_arm64", "macosx_arm64"),
        ("win_amd64", "win_amd64"),
        ("linux_x86_64", "linux_x86_64"),
    ],
)
def test_os_arch_from_tag(tag: str, expected: str) -> None:
    assert os_arch_from_tag(tag) == expected


def test_platform_ids_and_unknown_variant() -> None:
    project = load_project(ROOT)
    plat = parse_platform_id(project, "cp311-macosx_arm64-mps")
    assert (plat.python, plat.os_arch, plat.variant.backend) == ("3.11", "macosx_arm64", Backend.MPS)
    assert plat.lock_name == "cp311-macosx_arm64-mps.txt"
    with pytest.raises(UnknownVariant) as err:
        resolve_platform(project, variant="tpu")
    assert "cpu" in str(err.value) and "cu130" in str(err.value) and "rocm64" in str(err.value)


def test_every_backend_member_has_a_variant_or_is_declared() -> None:
    project = load_project(ROOT)
    assert {v.backend for v in project.variants.values()} == set(Backend)


# --- a macOS lock says which macOS it was made for: uv's default target (13.0) refuses its macOS 14 wheels --

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
