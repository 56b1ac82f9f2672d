"""hashin where it is the right tool: one pin changed, or hashes widened to another Python, without re-resolving.

The edits themselves need PyPI's JSON API (``network``); what is refused before any call is tested offline.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import pytest

from kernodeck.errors import ConfigError, LockFailed
from kernodeck.lock import check, hashpins, lockfile
from kernodeck.lock import compile as lock_compile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import kd
from tests.helpers.tinylock import offline_sources, tiny_project, tiny_wheels

PYPI = "https://pypi.org/simple"


@pytest.mark.parametrize(("filename", "python", "expected"), [
    ("six-1.17.0-py2.py3-none-any.whl", "3.12", True),
    ("idna-3.10-py3-none-any.whl", "3.11", True),
    ("idna-3.10.tar.gz", "3.11", True),
    ("MarkupSafe-3.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.11", True),
    ("MarkupSafe-3.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.12", False),
    ("MarkupSafe-3.0.2-cp313-cp313t-win32.whl", "3.13", False),  # free-threaded ABI: not the default CPython
    ("cryptography-44.0.0-cp39-abi3-manylinux_2_28_x86_64.whl", "3.12", True),  # hashin's own filter drops this
    ("cryptography-44.0.0-cp39-abi3-manylinux_2_28_x86_64.whl", "3.8", False),
    ("pkg-1.0-py2-none-any.whl", "3.11", False),
    ("torch-2.14.1-cp311-cp311-macosx_14_0_arm64.whl", "3.11", True),
])
def test_serves_python(filename: str, python: str, expected: bool) -> None:
    assert hashpins.serves_python(filename, python) is expected


def test_bad_python_version_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"MAJOR\.MINOR"):
        hashpins.serves_python("x.tar.gz", "3")


@pytest.fixture
def tiny_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A hermetic tiny project with a lock (no index involved)."""
    offline_sources(monkeypatch, tiny_wheels(tmp_path / "wheels"), tmp_path / "cache")
    project = tiny_project(tmp_path / "p")
    proj = load_project(project)
    lock_compile.compile_lock(proj, resolve_platform(proj), resolver="uv")
    return project


@pytest.mark.parametrize(("spec", "error", "match"), [
    ("kdtiny-torch", ConfigError, "NAME==VERSION"),
    ("kdtiny-gone==1.0", LockFailed, "not pinned"),
    ("kdtiny-torch==2.0", LockFailed, r"outside requirements/torch-cpu.in's `kdtiny-torch==1.0`"),
])
def test_upgrade_package_refusals_before_any_network(tiny_locked: Path, spec: str, error: type, match: str) -> None:
    proj = load_project(tiny_locked)
    before = (tiny_locked / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_bytes()
    with pytest.raises(error, match=match):
        hashpins.upgrade_packages(proj, resolve_platform(proj), [spec])
    assert (tiny_locked / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_bytes() == before


def test_upgrade_package_refusal_through_the_cli(tiny_locked: Path) -> None:
    proc = kd(tiny_locked, "lock", "--upgrade-package", "kdtiny-torch==2.0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "ERROR: kdtiny-torch==2.0 is outside requirements/torch-cpu.in" in proc.stderr and "TIP:" in proc.stderr


# ---- against PyPI -----------------------------------------------------------------------------------------------

def _pypi_sha256(name: str, version: str, keep: object) -> set[str]:
    """PyPI's own list, read here without hashin: the independent expectation."""
    request = urllib.request.Request(f"{PYPI}/{name}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        files = json.load(response)["files"]
    return {f["hashes"]["sha256"] for f in files
            if (f"-{version}-" in f["filename"] or f["filename"].endswith(f"-{version}.tar.gz"))
            and keep(f["filename"])}  # type: ignore[operator]


@pytest.fixture
def pypi_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tiny project locked by uv from PyPI only: six, markupsafe 3.0.1 and, in the 'torch' layer, idna 3.9."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's mirrors play no part
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    project = tiny_project(tmp_path / "p", index=PYPI, base="six==1.16.0\nmarkupsafe>=3.0,<3.1\n", layer="idna==3.9\n")
    proc = kd(project, "lock", "--resolver", "uv")
    assert proc.returncode == 0, proc.stderr
    proc = kd(project, "lock", "--resolver", "uv", "--upgrade-package", "markupsafe==3.0.1")
    assert proc.returncode == 0, proc.stderr
    return project


def _lock(project: Path) -> lockfile.Lockfile:
    return lockfile.read(project / "lockfiles" / "cp311-linux_x86_64-cpu.txt")


@pytest.mark.network
def test_upgrade_package_changes_one_pin_only(pypi_locked: Path) -> None:
    before = {p.name: p for p in _lock(pypi_locked).pins}
    proc = kd(pypi_locked, "lock", "--upgrade-package", "markupsafe==3.0.2")
    assert proc.returncode == 0, proc.stderr
    after = _lock(pypi_locked)
    pins = {p.name: p for p in after.pins}
    assert pins["markupsafe"].version == "3.0.2"
    assert set(pins["markupsafe"].hashes) == _pypi_sha256(
        "markupsafe", "3.0.2", lambda f: "-cp311-cp311-" in f or f.endswith(".tar.gz"))
    for name in ("six", "idna"):  # untouched: same version, same hashes
        assert (pins[name].version, pins[name].hashes) == (before[name].version, before[name].hashes)
    assert after.first("packages") == "3"
    assert any(e.startswith("upgrade-package markupsafe 3.0.1 -> 3.0.2") for e in after.header["edited"])
    proj = load_project(pypi_locked)
    assert check.check_lock(proj, resolve_platform(proj)) == []  # header consistent, pylock rewritten
    twin = (pypi_locked / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml").read_text(encoding="utf-8")
    assert 'version = "3.0.2"' in twin and "markupsafe-3.0.2.tar.gz" in twin.lower()


@pytest.mark.network
def test_widen_python_adds_the_same_versions_files_for_another_python(pypi_locked: Path) -> None:
    before = {p.name: p for p in _lock(pypi_locked).pins}
    proc = kd(pypi_locked, "lock", "--widen-python", "3.12")
    assert proc.returncode == 0, proc.stderr
    after = {p.name: p for p in _lock(pypi_locked).pins}
    assert {n: p.version for n, p in after.items()} == {n: p.version for n, p in before.items()}
    added = set(after["markupsafe"].hashes) - set(before["markupsafe"].hashes)
    assert added and added == _pypi_sha256("markupsafe", "3.0.1", lambda f: "-cp312-cp312-" in f)
    assert after["six"].hashes == before["six"].hashes  # a universal wheel: nothing to add
    edited = _lock(pypi_locked).header["edited"]
    assert any(e.startswith(f"widen-python 3.12: +{len(added)} hashes on 1 pins") for e in edited)
    proj = load_project(pypi_locked)
    assert check.check_lock(proj, resolve_platform(proj)) == []
    # Widening again finds nothing more and writes nothing.
    text = (pypi_locked / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_bytes()
    assert kd(pypi_locked, "lock", "--widen-python", "3.12").returncode == 0
    assert (pypi_locked / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_bytes() == text


@pytest.mark.network
def test_upgrade_to_a_version_pypi_lacks_is_refused(pypi_locked: Path) -> None:
    before = (pypi_locked / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_bytes()
    proc = kd(pypi_locked, "lock", "--upgrade-package", "markupsafe==3.0.99")
    assert proc.returncode == 2 and "PyPI lists no files for markupsafe==3.0.99" in proc.stderr
    assert (pypi_locked / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_bytes() == before
