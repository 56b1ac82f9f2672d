"""Each committed lock of a PyPI-indexed platform, checked the way a peer on that platform would use it (network).

For every committed lock whose variant's index is PyPI (the cu130 and mps locks of every Python, made here with uv's
cross-platform resolution): ``uv pip install --dry-run --python-platform … --python-version …`` against PyPI
installs every pin for that platform, and every sha256 the lock accepts is a file PyPI lists for that pin. Skips,
saying so, where pypi.org cannot be reached. A lock whose index is download.pytorch.org is not checked here (that
index cannot be reached from this machine): those platforms are declared ``lock-on-runner``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.lock import index_client, lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import UV_PLATFORM_ENV, UV_PLATFORMS, resolve_platform
from kernodeck.sources import PYPI, reachable
from tests.helpers.project import ROOT

PROJECT = load_project(ROOT)
PYPI_LOCKED = [p.id for p in PROJECT.platforms
               if not p.lock_on_runner and PROJECT.variant(p.variant).index.rstrip("/") == PYPI]
UV = Path(sys.executable).parent / "uv"


@pytest.fixture(scope="module")
def pypi() -> None:
    ok, why = reachable(PYPI + "/", timeout=10)
    if not ok:
        pytest.skip(f"pypi.org cannot be reached from here ({why}): the peer checks need it")


def test_new_pythons_and_arm_are_locked_and_declared() -> None:
    ids = {p.id for p in PROJECT.platforms}
    for py in ("cp312", "cp313"):
        for rest in ("linux_x86_64-cu130", "macosx_arm64-mps", "linux_aarch64-cu130"):
            assert f"{py}-{rest}" in PYPI_LOCKED and (ROOT / "lockfiles" / f"{py}-{rest}.txt").is_file()
        for rest in ("linux_x86_64-cpu", "linux_aarch64-cpu"):  # download.pytorch.org: locked on the runner
            assert f"{py}-{rest}" in ids and f"{py}-{rest}" not in PYPI_LOCKED


def dry_run(lock_file: Path, platform_id: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    plat = resolve_platform(PROJECT, platform_id)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    env.update(UV_NO_CONFIG="1", UV_CACHE_DIR=str(tmp_path / "uv-cache"), **UV_PLATFORM_ENV.get(plat.os_arch, {}))
    argv = [str(UV) if UV.exists() else "uv", "pip", "install", "--dry-run", "--target", str(tmp_path / "target"),
            "--python-platform", UV_PLATFORMS[plat.os_arch], "--python-version", plat.python,
            "--require-hashes", "--no-deps", "--index-url", PYPI, "-r", str(lock_file)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)


def hashes_not_on_index(lock_file: Path) -> list[str]:
    """``name==version sha256:…`` for each accepted hash PyPI does not list for that pin."""
    fetcher = index_client.Fetcher()
    missing: list[str] = []
    try:
        for pin in lockfile.read(lock_file).pins:
            listed = {f.sha256 for f in fetcher.index_files(PYPI, pin.name)}
            missing += [f"{pin.spec} sha256:{h}" for h in pin.hashes if h not in listed]
    finally:
        fetcher.close()
    return missing


@pytest.mark.network
@pytest.mark.parametrize("platform_id", PYPI_LOCKED)
def test_peer_installs_the_lock_for_its_platform(platform_id: str, tmp_path: Path, pypi: None) -> None:
    lock_file = ROOT / "lockfiles" / f"{platform_id}.txt"
    proc = dry_run(lock_file, platform_id, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pins = lockfile.read(lock_file).pins
    assert f"Would install {len(pins)} packages" in proc.stderr, proc.stderr[-1500:]
    assert hashes_not_on_index(lock_file) == []


@pytest.mark.network
def test_peer_checks_fail_on_a_lock_pypi_cannot_serve(tmp_path: Path, pypi: None) -> None:
    """Negative controls: a pin PyPI has no such version of fails the dry run; a hash PyPI does not list is named."""
    platform_id = next(p for p in PYPI_LOCKED if "macosx" in p)
    text = (ROOT / "lockfiles" / f"{platform_id}.txt").read_text(encoding="utf-8")
    bad_version = tmp_path / "bad-version.txt"
    bad_version.write_text(text.replace("\ntorch==2.14.1 \\", "\ntorch==2.14.99 \\"), encoding="utf-8")
    assert dry_run(bad_version, platform_id, tmp_path).returncode != 0
    pin = next(p for p in lockfile.read(ROOT / "lockfiles" / f"{platform_id}.txt").pins if p.name == "tokenizers")
    bad_hash = tmp_path / "bad-hash.txt"
    bad_hash.write_text(lockfile.seal(text.replace(pin.hashes[0], "0" * 64)), encoding="utf-8")
    assert hashes_not_on_index(bad_hash) == [f"{pin.spec} sha256:{'0' * 64}"]
