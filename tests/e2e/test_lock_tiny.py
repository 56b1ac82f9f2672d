"""Locking end to end on a hermetic tiny-wheel project: both resolvers, sources kept apart, failures leave no trace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernodeck.errors import LockFailed, SourceUnreachable
from kernodeck.lock import check, lockfile
from kernodeck.lock import compile as lock_compile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import kd
from tests.helpers.tinylock import RESOLVERS, UNREACHABLE, offline_sources, pins, tiny_project, tiny_wheels


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, folder, tmp_path / "cache")
    return folder


def _compile(project: Path, resolver: str) -> Path:
    proj = load_project(project)
    return lock_compile.compile_lock(proj, resolve_platform(proj), resolver=resolver)


def _written_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


def test_both_resolvers_pin_the_same_versions(tmp_path: Path, wheels: Path) -> None:
    found = {}
    for resolver in RESOLVERS:
        project = tiny_project(tmp_path / resolver)
        target = _compile(project, resolver)
        found[resolver] = pins(target)
        assert lockfile.read(target).first("resolver").startswith(resolver)
    assert found["pip-tools"] == found["uv"] == {"kdtiny-alpha": "1.0", "kdtiny-beta": "2.0", "kdtiny-torch": "1.0"}


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_lock_holds_no_source_and_checks_clean(tmp_path: Path, wheels: Path, resolver: str) -> None:
    project = tiny_project(tmp_path / "p")
    target = _compile(project, resolver)
    text = target.read_text(encoding="utf-8")
    assert str(wheels) not in text and "file://" not in text
    assert not re.search(r"^\s*(-i|-f|--index-url|--extra-index-url|--find-links)\b", text, re.M)
    assert "# source: find-links" not in text and "<local path>" not in text  # this machine's sources: one fixed line
    proj = load_project(project)
    assert check.check_lock(proj, resolve_platform(proj)) == []


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_credentials_in_pip_variables_reach_no_written_file(tmp_path: Path, wheels: Path,
                                                            monkeypatch: pytest.MonkeyPatch, resolver: str) -> None:
    monkeypatch.delenv("PIP_NO_INDEX")
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:s3cret@127.0.0.1:9/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://tok:s3cret@127.0.0.1:9/extra")
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")
    project = tiny_project(tmp_path / "p")
    try:
        _compile(project, resolver)
        outcome = "locked"
    except (LockFailed, SourceUnreachable) as exc:  # uv refuses an index it cannot reach; pip warns and goes on
        assert "s3cret" not in str(exc) and "s3cret" not in exc.tip
        outcome = "refused"
    proc = kd(project, "lock", "--check")
    assert "s3cret" not in proc.stdout + proc.stderr
    leaked = [p for p in _written_files(tmp_path) if b"s3cret" in p.read_bytes()]  # project, caches, all
    assert leaked == [], f"credentials written into {leaked}"
    if outcome == "locked":
        text = (project / "lockfiles" / "cp311-linux_x86_64-cpu.txt").read_text(encoding="utf-8")
        assert "# source: index-url" not in text  # this machine's index: not even its host is recorded
    else:
        assert not list((project / "lockfiles").iterdir())


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_failed_lock_leaves_previous_lock_byte_identical(tmp_path: Path, wheels: Path, resolver: str) -> None:
    project = tiny_project(tmp_path / "p")
    target = _compile(project, resolver)
    twin = project / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml"
    before, twin_before = target.read_bytes(), twin.read_bytes()
    (project / "requirements" / "base.in").write_text("kdtiny-alpha\nkdtiny-missing==9.9\n", encoding="utf-8")
    with pytest.raises(LockFailed, match=r"resolving cp311-linux_x86_64-cpu with .* failed: .*kdtiny-missing"):
        _compile(project, resolver)
    assert target.read_bytes() == before and twin.read_bytes() == twin_before
    assert sorted(p.name for p in (project / "lockfiles").iterdir()) == [target.name, twin.name]


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_unreachable_variant_index_is_one_clear_error(tmp_path: Path, wheels: Path, resolver: str) -> None:
    """A ROCm-like variant: its layer only on an index that cannot be reached, and no other source has it."""
    project = tiny_project(tmp_path / "p", layer="kdtiny-torch==1.0+rocm6.4\n")
    proc = kd(project, "lock", "--resolver", resolver, timeout=300)
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and UNREACHABLE in errors[0] and "torch-cpu.in" in errors[0], proc.stderr
    assert any(line.startswith("TIP:") and UNREACHABLE in line for line in proc.stderr.splitlines())
    assert "Traceback" not in proc.stderr
    assert not list((project / "lockfiles").iterdir())


def test_unresolvable_input_names_the_resolver_error(tmp_path: Path, wheels: Path) -> None:
    project = tiny_project(tmp_path / "p", base="kdtiny-alpha\nkdtiny-beta>=3\n")
    proc = kd(project, "lock", "--resolver", "uv")
    assert proc.returncode == 2
    error = next(line for line in proc.stderr.splitlines() if line.startswith("ERROR:"))
    assert "kdtiny-beta" in error and "resolving cp311-linux_x86_64-cpu with uv failed" in error
    assert "TIP:" in proc.stderr and "Traceback" not in proc.stderr


def test_lock_check_all_over_declared_platforms(tmp_path: Path, wheels: Path) -> None:
    project = tiny_project(tmp_path / "p")
    _compile(project, "pip-tools")
    proc = kd(project, "lock", "--check", "--all")
    # cu130 and mps have no lock in this copy: named, and the check fails; rocm64 is made on its runner.
    assert proc.returncode == 2
    assert "ok    cp311-linux_x86_64-cpu" in proc.stdout
    assert "STALE cp311-linux_x86_64-cu130: no lockfile" in proc.stdout
    assert "pending cp311-linux_x86_64-rocm64" in proc.stdout
    assert kd(project, "lock", "--check").returncode == 0


def test_pip_tools_traceback_is_kept_out_of_the_output(tmp_path: Path, wheels: Path) -> None:
    project = tiny_project(tmp_path / "p", base="kdtiny-alpha\nkdtiny-beta>=3\n")
    proc = kd(project, "lock")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    error = next(line for line in proc.stderr.splitlines() if line.startswith("ERROR:"))
    assert "kdtiny-beta" in error and "with pip-tools failed" in error


def test_pylock_only_rewrites_the_same_twin(tmp_path: Path, wheels: Path) -> None:
    project = tiny_project(tmp_path / "p")
    _compile(project, "uv")
    twin = project / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml"
    written = twin.read_bytes()
    twin.unlink()
    assert kd(project, "lock", "--check").returncode == 2
    proc = kd(project, "lock", "--pylock-only")
    assert proc.returncode == 0, proc.stderr
    assert twin.read_bytes() == written  # deterministic: same lock, same twin
    assert kd(project, "lock", "--check").returncode == 0


def test_pylock_refuses_a_hash_it_cannot_place(tmp_path: Path, wheels: Path) -> None:
    project = tiny_project(tmp_path / "p")
    target = _compile(project, "uv")
    twin = project / "lockfiles" / "pylock.cp311-linux_x86_64-cpu.toml"
    before = twin.read_bytes()
    text = target.read_text(encoding="utf-8")
    digest = re.search(r"kdtiny-beta==2.0 \\\n    --hash=sha256:([0-9a-f]{64})", text)
    assert digest
    # resealed, so that the pylock writer is what is tried (an unsealed edit is refused first: body-digest)
    target.write_text(lockfile.seal(text.replace(digest.group(1), "0" * 64)), encoding="utf-8")
    proc = kd(project, "lock", "--pylock-only")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    # named by its package and by its real cause: no index may be asked here and no local copy has that hash
    assert "first kdtiny-beta" in proc.stderr and "no local copy has it" in proc.stderr, proc.stderr
    assert twin.read_bytes() == before
