"""Peers read our locks unchanged: pip, pip-sync and uv take the requirements lock; uv takes the PEP 751 lock.

Hermetic: tiny wheels in a temporary folder, no index. Each peer is also shown REFUSING a lock whose hash was
changed, so that a passing dry run means the hashes were read and checked.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.pylock import Pylock

from kernodeck.lock import compile as lock_compile
from kernodeck.lock import twinform
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.tinylock import fresh_venv, offline_sources, tiny_project, tiny_wheels, uv

EXPECTED = {"kdtiny-alpha": "1.0", "kdtiny-beta": "2.0", "kdtiny-torch": "1.0"}


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(project with its lock and pylock, the machine's wheel folder, the declared index folder)."""
    wheels = tiny_wheels(tmp_path / "machine-wheels")
    declared = tmp_path / "declared-index"
    shutil.copytree(wheels, declared)  # the project's declared index holds the same files as the machine's copy
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    project = tiny_project(tmp_path / "p", index=declared.as_uri())
    proj = load_project(project)
    lock_compile.compile_lock(proj, resolve_platform(proj), resolver="pip-tools")
    return project, wheels, declared


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "UV_NO_CONFIG": "1", **env})


def _tamper(path: Path) -> Path:
    text = path.read_text(encoding="utf-8")
    digest = re.search(r"[0-9a-f]{64}", text.split("kdtiny-beta", 1)[1])
    assert digest
    bad = path.with_name("tampered-" + path.name)
    bad.write_text(text.replace(digest.group(0), "0" * 64), encoding="utf-8")
    return bad


def _lock(project: Path) -> Path:
    return project / "lockfiles" / "cp311-linux_x86_64-cpu.txt"


def test_pip_install_require_hashes_dry_run(setup: tuple[Path, Path, Path]) -> None:
    project, _, _ = setup
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--require-hashes", "-r"]
    proc = _run([*argv, str(_lock(project))])
    assert proc.returncode == 0, proc.stderr
    assert "Would install kdtiny-alpha-1.0 kdtiny-beta-2.0 kdtiny-torch-1.0" in proc.stdout
    proc = _run([*argv, str(_tamper(_lock(project)))])
    assert proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stderr


def test_pip_sync_dry_run(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project, _, _ = setup
    python = fresh_venv(tmp_path / "venv", with_pip=True)  # pip-sync drives the target's own pip
    argv = [sys.executable, "-m", "piptools", "sync", "--dry-run", "--python-executable", str(python)]
    proc = _run([*argv, str(_lock(project))])
    # pip-sync's dry run exits 1 when it would change the environment: here it would install the three pins.
    assert proc.returncode in (0, 1), proc.stderr
    assert "Would install:" in proc.stdout
    for name, version in EXPECTED.items():
        assert f"{name}=={version}" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_pip_sync_checks_the_hashes_when_it_installs(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project, _, _ = setup
    python = fresh_venv(tmp_path / "venv", with_pip=True)
    argv = [sys.executable, "-m", "piptools", "sync", "--python-executable", str(python)]
    proc = _run([*argv, str(_tamper(_lock(project)))])
    assert proc.returncode != 0 and "DO NOT MATCH THE HASHES" in proc.stdout + proc.stderr
    proc = _run([*argv, str(_lock(project))])
    assert proc.returncode == 0, proc.stderr
    frozen = _run([str(python), "-m", "pip", "freeze"]).stdout.split()
    assert sorted(frozen) == sorted(f"{n}=={v}" for n, v in EXPECTED.items())


def test_uv_pip_sync_dry_run(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project, wheels, _ = setup
    python = fresh_venv(tmp_path / "venv")
    argv = [uv(), "pip", "sync", "--dry-run", "--python", str(python), "--no-index", "--find-links", str(wheels)]
    proc = _run([*argv, str(_lock(project))])
    assert proc.returncode == 0, proc.stderr
    for name, version in EXPECTED.items():
        assert f"+ {name}=={version}" in proc.stderr
    # uv's dry run does not download, so the hashes are proven by a real install, which checks them:
    real = [uv(), "pip", "sync", "--python", str(python), "--no-index", "--find-links", str(wheels)]
    assert _run([*real, str(_tamper(_lock(project)))]).returncode != 0
    proc = _run([*real, str(_lock(project))])
    assert proc.returncode == 0, proc.stderr


def test_pylock_is_valid_pep751_and_holds_no_machine_path(setup: tuple[Path, Path, Path]) -> None:
    project, wheels, declared = setup
    path = project / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml"
    text = path.read_text(encoding="utf-8")
    assert str(wheels) not in text  # the machine's copy is never named; the project's declared index is
    data = tomllib.loads(text)
    lock = Pylock.from_dict(data)  # packaging's validator of the PEP 751 fields
    assert str(lock.lock_version) == "1.0" and data["created-by"] == "kernodeck"
    assert data["requires-python"] == "==3.11.*" and len(data["environments"]) == 1
    selected = {p.name: str(p.version) for p, _ in lock.select()}  # this interpreter matches the environment
    assert selected == EXPECTED
    req = (project / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_text(encoding="utf-8")
    for package in data["packages"]:
        for wheel in package["wheels"]:
            assert wheel["url"] == f"{declared.as_uri()}/{wheel['name']}"
            assert wheel["hashes"]["sha256"] in req
    assert data["tool"]["kernodeck"]["requirements-lock"] == "cp311-linux_x86_64-cpu.txt"


def test_uv_installs_from_the_pylock(setup: tuple[Path, Path, Path], tmp_path: Path) -> None:
    project, _, _ = setup
    path = project / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml"
    python = fresh_venv(tmp_path / "venv")
    base = [uv(), "pip", "install", "--python", str(python), "--preview-features", "pylock"]
    proc = _run([*base, "--dry-run", "-r", str(path)])
    assert proc.returncode == 0, proc.stderr
    for name, version in EXPECTED.items():
        assert f"+ {name}=={version}" in proc.stderr
    tampered = path.with_name("pylock.tampered.toml")
    tampered.write_text(_tamper(path).read_text(encoding="utf-8"), encoding="utf-8")
    assert _run([*base, "-r", str(tampered)]).returncode != 0  # a wrong hash is refused at install
    proc = _run([*base, "-r", str(path)])
    assert proc.returncode == 0, proc.stderr
    frozen = _run([uv(), "pip", "freeze", "--python", str(python)]).stdout.split()
    assert sorted(frozen) == sorted(f"{n}=={v}" for n, v in EXPECTED.items())


def test_pylock_environment_marker_per_platform() -> None:
    project = load_project(Path(__file__).resolve().parents[2])
    from packaging.markers import Marker

    from kernodeck.project.platforms import parse_platform_id

    mac = twinform.environment_marker(parse_platform_id(project, "cp311-macosx_arm64-mps"))
    linux = twinform.environment_marker(parse_platform_id(project, "cp311-linux_x86_64-cpu"))
    env_mac = {"python_version": "3.11", "platform_python_implementation": "CPython", "sys_platform": "darwin",
               "platform_machine": "arm64"}
    assert Marker(mac).evaluate(env_mac) and not Marker(linux).evaluate(env_mac)
    assert not Marker(mac).evaluate({**env_mac, "python_version": "3.12"})
