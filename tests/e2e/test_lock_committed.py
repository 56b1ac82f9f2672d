"""The committed locks: one per declared platform (but those locked on their own runner), strict, free of any
machine source or credential, each with a PEP 751 twin holding the same pins and hashes at public URLs."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.pylock import Pylock

from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from tests.helpers.project import ROOT, copy_project, kd

PROJECT = load_project(ROOT)
LOCKED = [p.id for p in PROJECT.platforms if not p.lock_on_runner]
USERINFO = re.compile(r"[a-z][a-z0-9+.-]*://[^/@\s]+@(?!\*\*\*)", re.I)  # a URL with a user part not redacted


def test_every_declared_platform_has_a_lock_or_is_locked_on_its_runner() -> None:
    assert {"cp311-linux_x86_64-cpu", "cp311-linux_x86_64-cu130", "cp311-macosx_arm64-mps"} <= set(LOCKED)
    for platform_id in LOCKED:
        assert (PROJECT.lockfiles / f"{platform_id}.txt").is_file(), platform_id
        assert (PROJECT.lockfiles / f"pylock.{platform_id}.toml").is_file(), platform_id
    rocm = [p for p in PROJECT.platforms if p.variant == "rocm64"]
    assert rocm and rocm[0].lock_on_runner


@pytest.mark.parametrize("platform_id", LOCKED)
def test_lock_is_strict_and_holds_no_machine_source(platform_id: str) -> None:
    path = PROJECT.lockfiles / f"{platform_id}.txt"
    lock = lockfile.read(path)
    text = path.read_text(encoding="utf-8")
    assert lock.first("platform") == platform_id
    assert int(lock.first("packages")) == len(lock.pins)
    assert all(pin.hashes for pin in lock.pins)
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert not [line for line in body if re.match(r"\s*(-i|-f|--index-url|--extra-index-url|--find-links)\b", line)]
    for needle in ("file://", "/opt/", "/home/", "/root/", "/tmp/", "s3cret"):
        assert needle not in text, needle
    assert not USERINFO.search(text)
    # The same on every machine: the declared index, PyPI, and one fixed line for this machine's own sources.
    from kernodeck.lock.compile import MACHINE_SOURCES_NOTE

    sources = lock.header.get("source", [])
    assert MACHINE_SOURCES_NOTE in sources and len(sources) == 3, sources
    for source in sources:
        assert source == MACHINE_SOURCES_NOTE or source.split(" ", 1)[1].startswith("https://"), source


@pytest.mark.parametrize("platform_id", LOCKED)
def test_pylock_twin_has_the_same_pins_and_hashes_at_public_urls(platform_id: str) -> None:
    txt = PROJECT.lockfiles / f"{platform_id}.txt"
    path = PROJECT.lockfiles / f"pylock.{platform_id}.toml"
    text = path.read_text(encoding="utf-8")
    data = tomllib.loads(text)
    Pylock.from_dict(data)
    assert data["lock-version"] == "1.0" and data["created-by"] == "kernodeck"
    assert data["tool"]["kernodeck"]["requirements-lock-sha256"] == hashlib.sha256(txt.read_bytes()).hexdigest()
    lock = lockfile.read(txt)
    expected = {p.name: (p.version, set(p.hashes)) for p in lock.pins}
    found = {}
    for package in data["packages"]:
        files = [*package.get("wheels", []), *([package["sdist"]] if "sdist" in package else [])]
        assert files, package["name"]
        for entry in files:
            assert entry["url"].startswith("https://") and "path" not in entry, entry
            assert entry["url"].rsplit("/", 1)[-1].replace("%2B", "+") == entry["name"]
        found[package["name"]] = (package["version"], {f["hashes"]["sha256"] for f in files})
    assert found == expected
    for needle in ("file://", "/opt/", "s3cret"):
        assert needle not in text
    assert not USERINFO.search(text)


def test_untouched_copy_checks_clean_for_all_platforms(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    proc = kd(project, "lock", "--check", "--all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("ok    ") == len(LOCKED)


def test_macos_lock_targets_macos_14_arm64_wheels() -> None:
    lock = lockfile.read(PROJECT.lockfiles / "cp311-macosx_arm64-mps.txt")
    assert "MACOSX_DEPLOYMENT_TARGET=14.0" in lock.first("command")
    data = tomllib.loads((PROJECT.lockfiles / "pylock.cp311-macosx_arm64-mps.toml").read_text(encoding="utf-8"))
    torch = next(p for p in data["packages"] if p["name"] == "torch")
    assert any("macosx_14_0_arm64" in w["name"] for w in torch["wheels"])
    assert not any(name.startswith("nvidia-") for name in lock.versions())


def test_cuda_lock_pins_pypi_torch_with_its_nvidia_wheels() -> None:
    versions = lockfile.read(PROJECT.lockfiles / "cp311-linux_x86_64-cu130.txt").versions()
    assert versions["torch"] == "2.14.1"
    assert any(name.startswith("nvidia-") for name in versions)


@pytest.mark.slow
@pytest.mark.network
def test_uv_gives_the_committed_cpu_pins_and_hashes(tmp_path: Path) -> None:
    """The cross-platform resolver agrees with pip-tools on the real CPU lock (this machine's sources give torch)."""
    project = copy_project(tmp_path / "project")
    committed = lockfile.read(project / "lockfiles" / "cp311-linux_x86_64-cpu.txt")
    proc = kd(project, "lock", "--resolver", "uv", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    made = lockfile.read(project / "lockfiles" / "cp311-linux_x86_64-cpu.txt")
    assert made.first("resolver").startswith("uv ")
    assert {p.name: (p.version, set(p.hashes)) for p in made.pins} == \
        {p.name: (p.version, set(p.hashes)) for p in committed.pins}


def test_uv_reads_the_committed_pylocks_offline(tmp_path: Path) -> None:
    """uv takes each committed PEP 751 lock as it is (offline dry run) and honours its `environments`."""
    import os
    import subprocess

    from tests.helpers.tinylock import fresh_venv, uv

    python = fresh_venv(tmp_path / "venv")
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_OFFLINE": "1"}
    for platform_id in LOCKED:
        path = PROJECT.lockfiles / f"pylock.{platform_id}.toml"
        proc = subprocess.run([uv(), "pip", "install", "--preview-features", "pylock", "--dry-run", "--python",
                               str(python), "-r", str(path)], capture_output=True, text=True, timeout=300, env=env)
        marker = tomllib.loads(path.read_text(encoding="utf-8"))["environments"][0]
        if Marker(marker).evaluate():  # the lock is for this interpreter's environment
            assert proc.returncode == 0, proc.stderr
            installs = {line.split()[1] for line in proc.stderr.splitlines() if line.startswith(" + ")}
            assert installs == {p.spec for p in lockfile.read(PROJECT.lockfiles / f"{platform_id}.txt").pins}
        else:
            # refused: another platform's environment, or another Python's (requires-python, checked first)
            assert proc.returncode != 0 and ("not supported by the lockfile" in proc.stderr
                                             or "incompatible with the `pylock.toml`'s Python requirement"
                                             in proc.stderr), proc.stderr
