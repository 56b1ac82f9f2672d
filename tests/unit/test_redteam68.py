"""Red-team pass 68 (notes: /work/notes/redteam68.md): issue 29 by class after the installers' allow-list
(installenv.kept) and the closed world's homes reached through a link (paths.trusted, homes.LINKED/OUTWARD): UVCACHE1.

UVCACHE1 (uv's cache decides the installed bytes; kernodeck/env/rebuild.py ``install``, binding.py ``from_verified``,
installenv.py ``_KEPT``): the install keeps ``UV_CACHE_DIR`` (and uv's default cache is the user's too). uv installs a
find-links or index wheel it has cached from the unpacked copy in its cache (``archive-v0/<id>/``), trusting the
hashes it stored beside it, and never hashes the wheel again. A copy whose module is another tinya 1.0's and whose
``RECORD`` is rewritten to match passes the build's RECORD digest check (env-integrity: the only check of the bytes
after a uv install), and uv's binding is the lock's hash set for every pin: ``rebuild --fresh`` promotes a tinya the
lock does not pin, recorded as verified against the lock's hashes. The control of the class: the same copy with its
``RECORD`` left as it was fails the build (the digest check, its tip ``uv cache clean``). Fix idea by class: do not
take the bytes of an install from a cache no check covers: install from a Kernodeck-owned cache, ``--refresh`` /
``--no-cache`` for uv, or bind each installed distribution by its files (the lock's wheel's own ``RECORD``, hashed
from the wheel the lock pins) rather than by the set the installer says it verified.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, write_wheel

_OTHER = b"VALUE = 'not the lock'\n"

# UVCACHE1 ---------------------------------------------------------------------------------------------------------


def _tinya(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_bytes()


def _built(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """A tiny lock (tinya 1.0, tinyb 2.0) rebuilt once with uv, its own cache warm: (project, env vars, the env)."""
    good, tinyb = write_wheel(tmp_path / "links", "tinya", "1.0"), write_wheel(tmp_path / "links", "tinyb", "2.0")
    project, plat = locked_tiny_project(tmp_path / "project", [good, tinyb])
    env = offline_env(PIP_FIND_LINKS=str(tmp_path / "links"), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    return project, env, current_env(project, plat)


def _poison(cache: Path, *, record: bool) -> Path:
    """Put another tinya 1.0's module into uv's unpacked copy of the lock's wheel (``record``: its RECORD line
    rewritten to match); returns the copy's module."""
    module = next(cache.glob("archive-v*/*/tinya/__init__.py"))
    module.write_bytes(_OTHER)
    if record:
        digest = base64.urlsafe_b64encode(hashlib.sha256(_OTHER).digest()).rstrip(b"=").decode()
        listing = next(module.parent.parent.glob("tinya-1.0.dist-info/RECORD"))
        lines = listing.read_text(encoding="utf-8").splitlines()
        listing.write_text("".join(f"tinya/__init__.py,sha256={digest},{len(_OTHER)}\n"
                                   if line.startswith("tinya/__init__.py,") else line + "\n" for line in lines),
                           encoding="utf-8")
    return module


def test_uvcache1_premise_uv_keeps_an_unpacked_copy_of_the_locks_wheel_in_its_cache(tmp_path: Path) -> None:
    """The first build installs the lock's tinya and leaves its unpacked copy in the cache the install kept."""
    _, _, built = _built(tmp_path)
    assert _tinya(built) != _OTHER
    module = next((tmp_path / "uvc").glob("archive-v*/*/tinya/__init__.py"))
    assert module.read_bytes() == _tinya(built)


def test_uvcache1_control_a_damaged_copy_with_its_record_fails_the_build(tmp_path: Path) -> None:
    """The RECORD digest check catches a cache copy whose bytes differ from its own RECORD: nothing promoted."""
    project, env, built = _built(tmp_path)
    _poison(tmp_path / "uvc", record=False)
    proc = kd(project, "rebuild", "--installer", "uv", "--fresh", env=env)
    assert proc.returncode != 0 and "RECORD" in proc.stderr, proc.stderr[-800:]
    assert (project / ".venv-rebuild").exists() and _tinya(built) != _OTHER


@pytest.mark.xfail(strict=True, reason="UVCACHE1, a stated limit (docs/env-integrity.md, uv's cache is trusted, not "
                   "proven): uv installs its cache's unpacked copy unhashed; a rewritten RECORD beats the RECORD check")
def test_uvcache1_a_uv_rebuild_never_promotes_bytes_the_locks_file_does_not_hold(tmp_path: Path) -> None:
    """UVCACHE1: the same copy with its RECORD rewritten: ``rebuild --fresh`` must not promote an env whose tinya
    is not the lock's file's (it does: exit 0, the env's tinya is the other one)."""
    project, env, _ = _built(tmp_path)
    _poison(tmp_path / "uvc", record=True)
    proc = kd(project, "rebuild", "--installer", "uv", "--fresh", env=env)
    promoted = next((project / ".venv-rebuild").glob("*/current")).resolve()
    assert proc.returncode != 0 or _tinya(promoted) != _OTHER, \
        "promoted with a tinya 1.0 whose bytes are not the lock's file's, recorded as verified against its hash"


@pytest.mark.parametrize("way", ["UV_NO_CACHE", "pip"])
def test_uvcache1_a_build_that_rests_on_no_cache_installs_the_locks_file(tmp_path: Path, way: str) -> None:
    """The stated limit's way out (docs/env-integrity.md): the same poisoned cache, and a fresh build with
    ``UV_NO_CACHE=1`` (uv downloads and hashes again) or with pip (it hashes each wheel file it installs) installs the
    lock's file."""
    project, env, _ = _built(tmp_path)
    _poison(tmp_path / "uvc", record=True)
    told = {**env, "UV_NO_CACHE": "1"} if way == "UV_NO_CACHE" else env
    proc = kd(project, "rebuild", "--installer", "uv" if way == "UV_NO_CACHE" else "pip", "--fresh", env=told)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = next((project / ".venv-rebuild").glob("*/current")).resolve()
    assert _tinya(promoted) != _OTHER


@pytest.mark.parametrize("name", ["PYTHONPLATLIBDIR", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"])
def test_a_child_interpreter_gets_no_variable_that_moves_its_folders(name: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 68's note: PYTHONPLATLIBDIR (another platlib folder, where a compiled wheel's files would go) reaches no
    child interpreter Kernodeck starts, as the others of its kind do not; an unrelated variable does (the control)."""
    from kernodeck._proc import clean_env

    monkeypatch.setenv(name, "/elsewhere")
    monkeypatch.setenv("KERNODECK_TEST_UNRELATED", "kept")
    env = clean_env()
    assert name not in env and env["KERNODECK_TEST_UNRELATED"] == "kept"
