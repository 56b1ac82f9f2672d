"""Red-team pass 68 (notes: /work/notes/redteam68.md): issue 29 by class after the installers' allow-list
(installenv.kept) and the closed world's homes reached through a link (paths.trusted, homes.LINKED/OUTWARD): UVCACHE1.

UVCACHE1 (uv's cache decides the installed bytes; kernodeck/env/rebuild.py ``install``, binding.py ``from_verified``,
installenv.py ``_KEPT``): the install keeps ``UV_CACHE_DIR`` (and uv's default cache is the user's too). uv installs a
find-links or index wheel it has cached from the unpacked copy in its cache (``archive-v0/<id>/``), trusting the
hashes it stored beside it, and never hashes the wheel again. A copy whose module is another tinya 1.0's and whose
``RECORD`` is rewritten to match passes the build's RECORD digest check (env-integrity: the only check of the bytes
after a uv install), and uv's binding is the lock's hash set for every pin: ``rebuild --fresh`` promotes a tinya the
lock does not pin, recorded as verified against the lock's hashes. The control of the class: the same copy with its
``RECORD`` left as it was fails the build (the digest check). Fix idea by class: do not
take the bytes of an install from a cache no check covers: install from a Kernodeck-owned cache, ``--refresh`` /
``--no-cache`` for uv, or bind each installed distribution by its files (the lock's wheel's own ``RECORD``, hashed
from the wheel the lock pins) rather than by the set the installer says it verified. Fixed: uv installs with
``--no-cache`` (each locked file read and hashed again into a cache uv makes and removes; its files hard-linked out of
it, so they are the env's alone once it is gone); the user's cache is neither read nor written by a build.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path

import pytest

from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, fresh_venv, locked_tiny_project, offline_env, uv, write_wheel

_OTHER = b"VALUE = 'not the lock'\n"

# UVCACHE1 ---------------------------------------------------------------------------------------------------------


def _tinya(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_bytes()


def _built(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """A tiny lock (tinya 1.0, tinyb 2.0) rebuilt once with uv, then the user's own uv install of the same files
    into another venv, which leaves uv's unpacked copies in the cache the user keeps: (project, env vars, the env)."""
    good, tinyb = write_wheel(tmp_path / "links", "tinya", "1.0"), write_wheel(tmp_path / "links", "tinyb", "2.0")
    project, plat = locked_tiny_project(tmp_path / "project", [good, tinyb])
    env = offline_env(PIP_FIND_LINKS=str(tmp_path / "links"), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert not list((tmp_path / "uvc").glob("archive-v*/*/tinya")), "the build wrote into the user's uv cache"
    _user_install(tmp_path, env, "warm")
    return project, env, current_env(project, plat)


def _user_install(tmp_path: Path, env: dict[str, str], name: str) -> Path:
    """The user's own ``uv pip install`` of the lock's tinya (hash-checked), as uv runs by default: from its cache."""
    python = fresh_venv(tmp_path / name)
    proc = subprocess.run([uv(), "pip", "install", "--python", str(python), "--no-deps", "--find-links",
                           str(tmp_path / "links"), "--no-index", "tinya==1.0"],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    return python.parent.parent


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


def test_uvcache1_premise_uv_installs_its_caches_unpacked_copy_unhashed(tmp_path: Path) -> None:
    """The premise of the class: uv, as it runs by default, installs the lock's tinya from the unpacked copy its
    cache keeps, never hashing it again: the poisoned copy is what a plain ``uv pip install`` puts in a venv."""
    _built(tmp_path)
    _poison(tmp_path / "uvc", record=True)
    env = offline_env(UV_CACHE_DIR=str(tmp_path / "uvc"))
    assert _tinya(_user_install(tmp_path, env, "user")) == _OTHER


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_uvcache1_a_rebuild_never_promotes_bytes_the_locks_file_does_not_hold(tmp_path: Path, installer: str) -> None:
    """UVCACHE1, fixed: the same poisoned cache, kept by the caller (``UV_CACHE_DIR``), and ``rebuild --fresh``
    installs the lock's file: uv is run with ``--no-cache`` (it reads and hashes each file again into a cache of its
    own that it removes), pip hashes each wheel file it installs. Before the fix uv promoted the other tinya."""
    project, env, _ = _built(tmp_path)
    _poison(tmp_path / "uvc", record=True)
    proc = kd(project, "rebuild", "--installer", installer, "--fresh", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = next((project / ".venv-rebuild").glob("*/current")).resolve()
    assert _tinya(promoted) != _OTHER, "promoted a tinya 1.0 whose bytes are not the lock's file's"
    assert not [p for p in promoted.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_nlink > 1]


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
