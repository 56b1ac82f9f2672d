"""The drift check: `lock --check` passes on an untouched project and names each input that changed since the lock.

All on a copy of the project with its committed locks (no resolver runs, no index is asked).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import tomlkit

from kernodeck.errors import MissingLockfile
from kernodeck.lock import check
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.project import copy_project, kd
from tests.helpers.tinylock import set_variant_index

CPU = "cp311-linux_x86_64-cpu"
CU130 = "cp311-linux_x86_64-cu130"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "project")


def _changes(project: Path, platform_id: str = CPU) -> list[str]:
    proj = load_project(project)
    return check.check_lock(proj, parse_platform_id(proj, platform_id))


def _edit_pyproject(project: Path, edit: object) -> None:
    path = project / "pyproject.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    edit(doc)  # type: ignore[operator]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def test_untouched_checkout_is_current(project: Path) -> None:
    for platform_id in (CPU, CU130, "cp311-macosx_arm64-mps"):
        assert _changes(project, platform_id) == [], platform_id
    proc = kd(project, "lock", "--check")
    assert proc.returncode == 0, proc.stderr
    assert f"ok    {CPU}" in proc.stdout


def test_check_all_covers_every_declared_platform(project: Path) -> None:
    proc = kd(project, "lock", "--check", "--all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    declared = load_project(project).platforms
    for plat in declared:
        word = "pending" if plat.lock_on_runner else "ok   "
        assert f"{word} {plat.id}" in proc.stdout
    assert any(p.lock_on_runner for p in declared)


def test_touched_in_file_is_named(project: Path) -> None:
    with (project / "requirements" / "base.in").open("a", encoding="utf-8") as handle:
        handle.write("# a comment still changes the input\n")
    assert _changes(project) == ["requirements/base.in changed"]
    proc = kd(project, "lock", "--check")
    assert proc.returncode == 2
    assert f"STALE {CPU}: requirements/base.in changed" in proc.stdout
    assert "ERROR: lockfile lockfiles/cp311-linux_x86_64-cpu.txt is stale: requirements/base.in changed" in proc.stderr
    assert f"TIP: nox -s lock -- --platform {CPU}" in proc.stderr


def test_touched_torch_layer_is_named(project: Path) -> None:
    with (project / "requirements" / "torch-cu130.in").open("a", encoding="utf-8") as handle:
        handle.write("\n")
    assert _changes(project, CU130) == ["requirements/torch-cu130.in changed"]
    assert _changes(project) == []  # another variant's layer is not an input of the cpu lock


def test_variant_index_change_is_named(project: Path) -> None:
    set_variant_index(project, "cpu", "https://mirror.example/whl/cpu")
    assert _changes(project) == [
        "the variant's index changed: https://download.pytorch.org/whl/cpu -> https://mirror.example/whl/cpu"]
    proc = kd(project, "lock", "--check")
    assert proc.returncode == 2 and "the variant's index changed" in proc.stderr


def test_variant_index_credentials_are_not_printed(project: Path) -> None:
    set_variant_index(project, "cpu", "https://user:s3cret@mirror.example/whl/cpu")
    proc = kd(project, "lock", "--check")
    assert proc.returncode == 2 and "-> https://mirror.example/whl/cpu" in proc.stderr  # no userinfo at all
    assert "s3cret" not in proc.stdout + proc.stderr


def test_variant_backend_change_is_named(project: Path) -> None:
    _edit_pyproject(project, lambda doc: doc["tool"]["kernodeck"]["variants"]["cpu"].__setitem__("backend", "cuda"))
    assert _changes(project) == ["the variant's backend changed: cpu -> cuda"]


def _pin(group_name: str, name: str, version: str) -> Callable[[tomlkit.TOMLDocument], None]:
    """An edit that re-pins ``name`` in a dependency group of pyproject.toml."""

    def edit(doc: tomlkit.TOMLDocument) -> None:
        group = doc["dependency-groups"][group_name]  # type: ignore[index]
        for i, item in enumerate(group):  # type: ignore[arg-type]
            if isinstance(item, str) and item.startswith(f"{name}=="):
                group[i] = f"{name}=={version}"  # type: ignore[index]

    return edit


def test_resolver_version_change_is_named(project: Path) -> None:
    _edit_pyproject(project, _pin("lock", "pip-tools", "7.6.3"))
    assert _changes(project) == ["the resolver or its version changed: pip-tools==7.6.2 -> pip-tools==7.6.3"]
    assert _changes(project, CU130) == []  # made by uv: a pip-tools bump does not touch it


def test_uv_version_change_is_named_for_uv_locks(project: Path) -> None:
    _edit_pyproject(project, _pin("run", "uv", "0.14.0"))
    assert _changes(project, CU130) == ["the resolver or its version changed: uv==0.13.9 -> uv==0.14.0"]
    assert _changes(project) == []


def test_target_python_change_is_named(project: Path) -> None:
    """A lock made for 3.11 put where the 3.12 lock belongs: the recorded target Python tells."""
    lockfiles = project / "lockfiles"
    shutil.copy(lockfiles / f"{CPU}.txt", lockfiles / "cp312-linux_x86_64-cpu.txt")
    shutil.copy(lockfiles / f"pylock.{CPU}.toml", lockfiles / "pylock.cp312-linux_x86_64-cpu.toml")
    assert _changes(project, "cp312-linux_x86_64-cpu") == ["the target Python changed: 3.11 -> 3.12"]


def _twin(project: Path) -> list[str]:
    proj = load_project(project)
    return check.check_twin(proj, parse_platform_id(proj, CPU))


def test_pylock_missing_or_foreign_is_named_by_lock_check_only(project: Path) -> None:
    twin = project / "lockfiles" / f"pylock.{CPU}.toml"
    assert _twin(project) == []
    shutil.copy(project / "lockfiles" / f"pylock.{CU130}.toml", twin)
    assert _twin(project)[0] == f"pylock.{CPU}.toml was not written for this {CPU}.txt"
    proc = kd(project, "lock", "--check")
    assert proc.returncode == 2 and f"STALE {CPU}: pylock.{CPU}.toml was not written" in proc.stdout
    assert f"TIP: nox -s lock -- --platform {CPU} --pylock-only" in proc.stderr
    twin.unlink()
    assert _twin(project) == [f"pylock.{CPU}.toml (its PEP 751 lock) is missing"]
    # The input drift does not read the pylock (verify's lock-check compares the twin's pins when it exists).
    assert _changes(project) == []


def test_missing_lock_raises_with_tip(project: Path) -> None:
    (project / "lockfiles" / f"{CPU}.txt").unlink()
    with pytest.raises(MissingLockfile) as err:
        _changes(project)
    assert err.value.tip == f"nox -s lock -- --platform {CPU}"
    proc = kd(project, "lock", "--check")
    assert proc.returncode == 2 and "no lockfile for platform" in proc.stderr


def test_several_changes_are_all_named(project: Path) -> None:
    with (project / "requirements" / "torch-cpu.in").open("a", encoding="utf-8") as handle:
        handle.write("\n")
    set_variant_index(project, "cpu", "https://mirror.example/whl/cpu")
    changes = _changes(project)
    assert "requirements/torch-cpu.in changed" in changes
    assert any(re.match(r"the variant's index changed", c) for c in changes)
    assert len(changes) == 2
