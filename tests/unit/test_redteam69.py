"""Red-team pass 69 (notes: /work/notes/redteam69.md): issue 29 by class, the installers' caches for pip: PIPCACHE1.

PIPCACHE1 (pip's wheel cache decides the installed bytes of a pin built from its sdist; kernodeck/env/rebuild.py
``install``, pip branch; binding.py ``from_pip_report``; installenv.py ``_KEPT``: PIP_CACHE_DIR, and pip's default
cache is the user's): a pin whose lock lists only its sdist is built by pip at the first install, and the wheel it
built is kept in ``<cache>/wheels/<key>/`` beside an ``origin.json`` naming the sdist's hash. pip 23.1+ (the bundled
23.2.1 here) takes that cached wheel under ``--require-hashes`` when origin.json's hash is one the lock pins, never
hashing the wheel (it is no file the lock names) and never reading the sdist; its ``--report`` gives origin.json's
hash as the installed archive's. So a cached wheel holding another module (its ``RECORD`` line rewritten, which the
build's RECORD digest check reads) is installed by ``rebuild --installer pip --fresh``, bound under the lock's sdist
hash (``wheel_hashes_from: pip install --report``) and promoted; a later ``rebuild`` reuses it. docs/env-integrity.md
says ``--installer pip`` rests on no cache (the way out of UVCACHE1): false for such a pin. The controls: the cached
wheel altered with its RECORD left fails the build (RECORD digests), and ``PIP_NO_CACHE_DIR=1`` builds the sdist again.
Fix idea by class, one with UVCACHE1's: the install's caches are Kernodeck's own, made and removed by the build
(``PIP_CACHE_DIR`` too), or ``--no-cache-dir`` for pip; either way no built wheel outlives the build that made it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    SDIST_BACKEND,
    current_env,
    env_wheels,
    fresh_venv,
    locked_tiny_project,
    offline_env,
    wheel_of,
    write_sdist,
)

_LOCKS = "VALUE = 'the lock'\n"
_OTHER = b"VALUE = 'not the lock'\n"

# PIPCACHE1 --------------------------------------------------------------------------------------------------------


def _tinyc(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinyc/__init__.py")).read_bytes()


def _built(tmp_path: Path) -> tuple[Path, dict[str, str], Path, Path]:
    """A tiny lock (pip, tinya, tinyb wheels; tinyc 1.0 by its sdist only) rebuilt once with pip, its own cache warm:
    (project, env vars, the env, the sdist)."""
    links = tmp_path / "links"
    sdist = write_sdist(links, "tinyc", "1.0", _LOCKS)
    project, plat = locked_tiny_project(tmp_path / "project", env_wheels(links), (("tinyc", "1.0", [sdist]),))
    env = offline_env(PIP_FIND_LINKS=str(links), PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      UV_CACHE_DIR=str(tmp_path / "uvc"))
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    return project, env, current_env(project, plat), sdist


def _poison(cache: Path, *, record: bool) -> Path:
    """Put another module into the wheel pip built from tinyc's sdist and cached (``record``: its RECORD line
    rewritten to match); origin.json left as pip wrote it. Returns the cached wheel."""
    wheel = next(cache.glob("wheels/**/tinyc-1.0-py3-none-any.whl"))
    with zipfile.ZipFile(wheel) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    digest = base64.urlsafe_b64encode(hashlib.sha256(_OTHER).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel, "w") as archive:
        for info, data in members:
            if info.filename == "tinyc/__init__.py":
                data = _OTHER
            elif record and info.filename.endswith(".dist-info/RECORD"):
                data = b"".join(f"tinyc/__init__.py,sha256={digest},{len(_OTHER)}\n".encode()
                                if line.startswith(b"tinyc/__init__.py,") else line + b"\n"
                                for line in data.splitlines())
            archive.writestr(info, data)
    return wheel


def _promoted(project: Path) -> Path:
    return next((project / ".venv-rebuild").glob("*/current")).resolve()


def test_pipcache1_premise_a_built_wheel_is_cached_and_taken_under_require_hashes_by_its_origin(
        tmp_path: Path) -> None:
    """The first build builds tinyc from its sdist and leaves the wheel in the cache the install kept, its origin.json
    naming the lock's sdist hash; pip's own hash-checked install of the lock then takes that wheel ("Using cached")."""
    project, env, built, sdist = _built(tmp_path)
    assert _tinyc(built) == _LOCKS.encode()
    wheel = next((tmp_path / "pipc").glob("wheels/**/tinyc-1.0-py3-none-any.whl"))
    origin = json.loads((wheel.parent / "origin.json").read_text(encoding="utf-8"))
    assert origin["archive_info"]["hashes"]["sha256"] == sha256_file(sdist)
    lock = project / "lockfiles" / f"{built.parent.name}.txt"  # the platform's lock
    proc = subprocess.run([str(built / "bin" / "python"), "-m", "pip", "install", "--require-hashes", "--no-deps",
                           "--force-reinstall", "-r", str(lock)], env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "Using cached tinyc-1.0-py3-none-any.whl" in proc.stdout, proc.stdout[-800:]


def test_pipcache1_control_a_cached_wheel_altered_with_its_record_left_fails_the_build(tmp_path: Path) -> None:
    """The RECORD digest check catches a cached wheel whose module differs from its own RECORD: nothing promoted."""
    project, env, built, _ = _built(tmp_path)
    _poison(tmp_path / "pipc", record=False)
    proc = kd(project, "rebuild", "--installer", "pip", "--fresh", env=env)
    assert proc.returncode != 0 and "RECORD" in proc.stderr, proc.stderr[-800:]
    assert _promoted(project) == built and _tinyc(built) == _LOCKS.encode()


def test_pipcache1_control_pip_with_no_cache_builds_the_locks_sdist_again(tmp_path: Path) -> None:
    """The same poisoned cache, and ``PIP_NO_CACHE_DIR=1`` (kept by the install): the sdist is built again, the
    lock's module installed."""
    project, env, _, _ = _built(tmp_path)
    _poison(tmp_path / "pipc", record=True)
    proc = kd(project, "rebuild", "--installer", "pip", "--fresh", env={**env, "PIP_NO_CACHE_DIR": "1"})
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinyc(_promoted(project)) == _LOCKS.encode()


@pytest.mark.xfail(strict=True, reason="PIPCACHE1: pip takes a cached wheel built from a locked sdist by its "
                   "origin.json under --require-hashes, never hashing it; a rewritten RECORD beats the RECORD check")
def test_pipcache1_a_pip_rebuild_never_promotes_bytes_the_locks_sdist_does_not_build(tmp_path: Path) -> None:
    """PIPCACHE1: the cached wheel with its RECORD rewritten: ``rebuild --installer pip --fresh`` must not promote an
    env whose tinyc is not what the lock's sdist builds (it does: exit 0, bound under the sdist's hash, reused)."""
    project, env, _, sdist = _built(tmp_path)
    _poison(tmp_path / "pipc", record=True)
    proc = kd(project, "rebuild", "--installer", "pip", "--fresh", env=env)
    promoted = _promoted(project)
    marker = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))
    assert marker["wheels"]["tinyc"]["sha256"] == [sha256_file(sdist)]  # bound as the lock's sdist
    assert proc.returncode != 0 or _tinyc(promoted) != _OTHER, \
        "promoted with a tinyc 1.0 the lock's sdist does not build, recorded under the sdist's hash"


# BUILDREQ1 --------------------------------------------------------------------------------------------------------

_DECIDED = b"VALUE = 'decided by tinybuild'\n"
# tinybuild 1.0, the sdist's build requirement, served by the sources and pinned by no lock: its backend builds a wheel
# whose module is its own choice, and whose WHEEL names whatever generator it likes.
_TINYBUILD = SDIST_BACKEND.replace('open(f"{name}/__init__.py", "rb").read()', repr(_DECIDED)).replace(
    "Generator: tiny-backend", "Generator: setuptools (80.9.0)")


def _tinyd(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinyd/__init__.py")).read_bytes()


def _buildreq(tmp_path: Path, *, serve_backend: bool) -> tuple[Path, dict[str, str], Path]:
    """A tiny lock (pip, tinya, tinyb wheels; tinyd 1.0 by its sdist only, built by ``tinybuild``, which the lock does
    not pin); the sources serve the lock's files and, with ``serve_backend``, tinybuild 1.0: (project, env, sdist)."""
    assert _TINYBUILD != SDIST_BACKEND and repr(_DECIDED) in _TINYBUILD
    links, backends = tmp_path / "links", tmp_path / "backends"
    sdist = write_sdist(links, "tinyd", "1.0", _LOCKS, backend="tinybuild")
    wheel_of(backends, "tinybuild", "1.0", {"tinybuild/__init__.py": _TINYBUILD.encode()})
    project, _ = locked_tiny_project(tmp_path / "project", env_wheels(links), (("tinyd", "1.0", [sdist]),))
    env = offline_env(PIP_FIND_LINKS=f"{links} {backends}" if serve_backend else str(links),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"), UV_CACHE_DIR=str(tmp_path / "uvc"))
    return project, env, sdist


def test_buildreq1_premise_the_locks_hash_checked_install_fetches_a_build_requirement_it_does_not_pin(
        tmp_path: Path) -> None:
    """pip's own ``--require-hashes`` install of the lock (no Kernodeck) builds tinyd with tinybuild from the
    sources: the installed module is the backend's choice, and the lock names no tinybuild."""
    project, env, _ = _buildreq(tmp_path, serve_backend=True)
    lock = next(p for p in (project / "lockfiles").glob("*.txt") if "tinyd==1.0" in p.read_text(encoding="utf-8"))
    assert "tinybuild" not in lock.read_text(encoding="utf-8")
    python = fresh_venv(tmp_path / "venv", with_pip=True)
    proc = subprocess.run([str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(lock)],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinyd(tmp_path / "venv") == _DECIDED


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_buildreq1_control_sources_without_the_build_requirement_fail_the_build(tmp_path: Path,
                                                                               installer: str) -> None:
    """The build requirement comes from the sources, not from the lock: without it there, the build fails and
    nothing is promoted."""
    project, env, _ = _buildreq(tmp_path, serve_backend=False)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode != 0 and "tinybuild" in proc.stderr, proc.stderr[-800:]
    assert not list((project / ".venv-rebuild").glob("*/current"))


@pytest.mark.xfail(strict=True, reason="BUILDREQ1: an sdist pin's build requirements are fetched from the sources "
                   "unpinned and unhashed by both installers; the backend they bring decides the installed bytes")
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_buildreq1_a_rebuild_never_promotes_bytes_decided_by_a_file_the_lock_does_not_pin(tmp_path: Path,
                                                                                         installer: str) -> None:
    """BUILDREQ1: the sources serve tinybuild 1.0 (no lock pins it): the rebuild must not promote an env whose tinyd
    was made by it, bound under the lock's sdist hash alone (it does: exit 0, tinyd is tinybuild's choice)."""
    project, env, sdist = _buildreq(tmp_path, serve_backend=True)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    if proc.returncode != 0:
        return  # refused: nothing promoted
    promoted = _promoted(project)
    bound = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))["wheels"]["tinyd"]
    assert _tinyd(promoted) != _DECIDED, (
        f"promoted ({installer}) with a tinyd made by tinybuild 1.0, a build requirement no lock pins; bound under "
        f"{bound['sha256']} (the lock's sdist: {sha256_file(sdist)})")
