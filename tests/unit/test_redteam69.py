"""Red-team pass 69 (notes: /work/notes/redteam69.md): issue 29 by class: what decides an install's bytes besides the
lock's files (pip's wheel cache: PIPCACHE1; an sdist's build requirements: BUILDREQ1), and the loader variables in the
processes outside verify that judge outputs (LDCMP1).

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
Fixed: pip installs with ``--no-cache-dir`` on its command line (as uv with ``--no-cache``), so the sdist is built
again at every build; the user's pip cache is neither read nor written by it.

BUILDREQ1 (kernodeck/env/rebuild.py ``install``, both installers): a pin locked by its sdist alone is built with its
``[build-system] requires``, which pip's and uv's hash-checked installs fetch from the sources with no pin and no hash
(neither carries ``--require-hashes`` into the build's own install). The backend they bring decides every byte of the
wheel installed, and its ``WHEEL`` names any generator (the extensions step's ``built_here`` reads it); the binding is
the lock's sdist hash alone. Fix idea: lock a platform's build requirements with hashes and build from them (uv's
``--build-constraints`` with hashes; pip: a build env installed from the lock, ``--no-build-isolation``), or refuse a
pin built here whose build requirements the lock does not pin.

LDCMP1 (kernodeck/dossier/compare.py ``compare_declared``: ``run`` with the caller's whole environment;
measure/drift_map.py: ``start.environ()`` with no declared list and no refusal): verify refuses an undeclared
``LD_PRELOAD`` (every LOADERS variable) for its in-env processes and records the numerics variables; compare's and
drift's in-env processes, which judge outputs with verify's own code, get it unrefused and record nothing. Measured
with a preloaded library (gcc) that opens B's ``.npy`` from A: compare "equal" (bitwise), drift "within". The
orchestrator itself runs with the same variable; the class is the rule verify states, not applied where it applies.
Fix idea: one start for every in-env process (start.environ with the project's declared ones, undeclared_preload
refused, the recorded variables written into compare.json and drift.json). Fixed: the processes that only judge
outputs start with start.argv and start.judging_environ (no loader variable, none of the caller's numerics ones) and
record what they got (compare's result and drift.json, ``environment``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kernodeck._fs import sha256_file
from kernodeck.errors import KernodeckError
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    SDIST_BACKEND,
    current_env,
    declare_built_here,
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
    """A tiny lock (pip, tinya, tinyb wheels; tinyc 1.0 by its sdist only) rebuilt once with pip, which writes nothing
    into the cache the caller keeps; then the user's own hash-checked pip install of tinyc into another venv, which
    leaves the wheel it built there: (project, env vars, the env, the sdist)."""
    links = tmp_path / "links"
    sdist = write_sdist(links, "tinyc", "1.0", _LOCKS)
    project, plat = locked_tiny_project(tmp_path / "project", env_wheels(links), (("tinyc", "1.0", [sdist]),))
    declare_built_here(project, "tinyc")  # built here, declared (BUILDREQ1)
    env = offline_env(PIP_FIND_LINKS=str(links), PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      UV_CACHE_DIR=str(tmp_path / "uvc"))
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert not list((tmp_path / "pipc").glob("wheels/**/tinyc-*.whl")), "the build wrote into the user's pip cache"
    assert "Created wheel for tinyc" in _user_install(tmp_path, env, sdist, "warm")
    return project, env, current_env(project, plat), sdist


def _user_install(tmp_path: Path, env: dict[str, str], sdist: Path, name: str) -> str:
    """The user's own ``pip install --require-hashes`` of the lock's tinyc into a venv of theirs: pip's output."""
    python = fresh_venv(tmp_path / name, with_pip=True)
    wanted = tmp_path / f"{name}.txt"
    wanted.write_text(f"tinyc==1.0 --hash=sha256:{sha256_file(sdist)}\n", encoding="utf-8")
    proc = subprocess.run([str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(wanted)],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-800:] + proc.stderr[-800:]
    return proc.stdout


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
    """pip, as it runs by default, keeps the wheel it built from the lock's sdist, its origin.json naming the sdist's
    hash, and a later hash-checked install takes that wheel ("Using cached"), even altered with its RECORD."""
    _, env, _, sdist = _built(tmp_path)
    wheel = next((tmp_path / "pipc").glob("wheels/**/tinyc-1.0-py3-none-any.whl"))
    origin = json.loads((wheel.parent / "origin.json").read_text(encoding="utf-8"))
    assert origin["archive_info"]["hashes"]["sha256"] == sha256_file(sdist)
    _poison(tmp_path / "pipc", record=True)
    assert "Using cached tinyc-1.0-py3-none-any.whl" in _user_install(tmp_path, env, sdist, "user")
    assert _tinyc(tmp_path / "user") == _OTHER


def test_pipcache1_control_pip_with_no_cache_builds_the_locks_sdist_again(tmp_path: Path) -> None:
    """The same poisoned cache, and ``PIP_NO_CACHE_DIR=1`` (kept by the install): the sdist is built again, the
    lock's module installed."""
    project, env, _, _ = _built(tmp_path)
    _poison(tmp_path / "pipc", record=True)
    proc = kd(project, "rebuild", "--installer", "pip", "--fresh", env={**env, "PIP_NO_CACHE_DIR": "1"})
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinyc(_promoted(project)) == _LOCKS.encode()


@pytest.mark.parametrize("record", [True, False], ids=["record-rewritten", "record-left"])
def test_pipcache1_a_pip_rebuild_never_promotes_bytes_the_locks_sdist_does_not_build(tmp_path: Path,
                                                                                     record: bool) -> None:
    """PIPCACHE1, fixed: the cached wheel altered (its RECORD line rewritten, or left): ``rebuild --installer pip
    --fresh`` builds the lock's sdist again (pip is given ``--no-cache-dir``) and promotes the lock's module; before
    the fix it installed the cached wheel, bound under the sdist's hash."""
    project, env, _, sdist = _built(tmp_path)
    _poison(tmp_path / "pipc", record=record)
    proc = kd(project, "rebuild", "--installer", "pip", "--fresh", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = _promoted(project)
    marker = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))
    assert marker["wheels"]["tinyc"]["sha256"] == [sha256_file(sdist)]
    assert _tinyc(promoted) == _LOCKS.encode(), "promoted a tinyc 1.0 the lock's sdist does not build"


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
    declare_built_here(project, "tinyd")  # so that the install builds it
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode != 0 and "tinybuild" in proc.stderr, proc.stderr[-800:]
    assert not list((project / ".venv-rebuild").glob("*/current"))


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_buildreq1_a_rebuild_never_promotes_an_undeclared_pin_built_here(tmp_path: Path, installer: str) -> None:
    """BUILDREQ1, fixed by class: a pin built here from its sdist holds bytes its build requirements decided (fetched
    from the sources, unpinned): undeclared, the build fails naming it and the declaration, nothing promoted (before
    the fix: exit 0, tinyd tinybuild's choice, bound under the sdist's hash alone)."""
    project, env, _ = _buildreq(tmp_path, serve_backend=True)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 2, proc.stderr[-800:]
    assert "built from its sdist only when declared" in proc.stderr and ": tinyd" in proc.stderr, proc.stderr[-800:]
    assert "built-here = ['tinyd']" in proc.stderr, proc.stderr[-800:]
    assert not list((project / ".venv-rebuild").glob("*/current"))


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_buildreq1_control_a_declared_pin_built_here_is_promoted_and_recorded(tmp_path: Path, installer: str) -> None:
    """Declared (``built-here = ["tinyd"]``), the same build is promoted, the pin recorded as built here (its sdist,
    the generator its WHEEL names), not proven; taken off the declaration, the env is not reused."""
    project, env, sdist = _buildreq(tmp_path, serve_backend=True)
    declare_built_here(project, "tinyd")
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    built = json.loads((_promoted(project) / "kernodeck-complete.json").read_text(encoding="utf-8"))["built_here"]
    assert [(b["name"], b["sdist"], b["sdist_sha256"]) for b in built] == [("tinyd", "tinyd-1.0.tar.gz",
                                                                           sha256_file(sdist))]
    declare_built_here(project)
    again = kd(project, "rebuild", "--installer", installer, env=env)
    assert "built-here does not list: tinyd" in again.stderr and again.returncode == 2, again.stderr[-800:]


# LDCMP1 -----------------------------------------------------------------------------------------------------------

# A library LD_PRELOAD loads: every ``.npy`` opened under a folder named ``b`` is opened from the folder ``a`` beside it
# (code no lock describes, deciding what the comparison reads; a real one would be an allocator, an OpenMP runtime).
_SWAP_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
static const char *swapped(const char *path, char *buf) {
    const char *at = strstr(path, "/b/");
    size_t n = strlen(path);
    if (!at || n < 4 || n >= 4096 || strcmp(path + n - 4, ".npy") != 0) return path;
    strcpy(buf, path); buf[at - path + 1] = 'a';
    return buf;
}
#define WRAP(NAME) int NAME(const char *path, int flags, ...) { \
    static int (*real)(const char *, int, ...); char buf[4096]; int mode = 0; \
    if (!real) real = dlsym(RTLD_NEXT, #NAME); \
    if (flags & O_CREAT) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); } \
    return real(swapped(path, buf), flags, mode); }
#define WRAPAT(NAME) int NAME(int dirfd, const char *path, int flags, ...) { \
    static int (*real)(int, const char *, int, ...); char buf[4096]; int mode = 0; \
    if (!real) real = dlsym(RTLD_NEXT, #NAME); \
    if (flags & O_CREAT) { va_list ap; va_start(ap, flags); mode = va_arg(ap, int); va_end(ap); } \
    return real(dirfd, swapped(path, buf), flags, mode); }
WRAP(open)
WRAP(open64)
WRAPAT(openat)
WRAPAT(openat64)
"""
_needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the preloaded library")


def _labels_dossier(folder: Path, labels: list[int]) -> Path:
    """A dossier as far as compare and drift read it: one declared output (exact labels)."""
    (folder / "outputs").mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}),
                                        encoding="utf-8")
    (folder / "run-config.json").write_text(json.dumps({"application": {"outputs": {"labels": {
        "kind": "exact", "dtype": "int64", "justification": "the classes"}}}}), encoding="utf-8")
    np.save(folder / "outputs" / "labels.npy", np.asarray(labels, dtype=np.int64))
    (folder / "outputs" / "labels.ids.json").write_text(json.dumps(["r0", "r1", "r2", "r3"]), encoding="utf-8")
    return folder


def _compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preload: bool) -> tuple[bool, str]:
    """compare's verdict on ``labels`` (False when refused) and drift's mark for the pair ("refused": a non-zero exit),
    of two dossiers whose labels differ (B reversed), with (``preload``) or without the swapping library in
    LD_PRELOAD."""
    from kernodeck.__main__ import main
    from kernodeck.dossier.delta import compare

    a, b = _labels_dossier(tmp_path / "a", [0, 1, 2, 3]), _labels_dossier(tmp_path / "b", [3, 2, 1, 0])
    if preload:
        (tmp_path / "swap.c").write_text(_SWAP_C, encoding="utf-8")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "libswap.so"), str(tmp_path / "swap.c"),
                        "-ldl"], check=True, capture_output=True)
        monkeypatch.setenv("LD_PRELOAD", str(tmp_path / "libswap.so"))  # the children's, not this process's
    try:
        passed = bool(compare(a, b, Path(sys.executable))["outputs"]["per_output"]["labels"]["passed"])
    except KernodeckError:
        passed = False  # refused
    monkeypatch.chdir(tmp_path)
    if main(["drift", str(a), str(b), "--out", str(tmp_path / "map"), "--python", sys.executable]) != 0:
        return passed, "refused"
    (pair,) = json.loads((tmp_path / "map" / "drift.json").read_text(encoding="utf-8"))["outputs"]["labels"]["pairs"]
    return passed, str(pair["mark"])


def test_ldcmp1_premise_verify_refuses_an_undeclared_ld_preload_for_its_in_env_processes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """verify's rule (docs/report.md): a library LD_PRELOAD names, undeclared, is code no lock describes; the in-env
    processes' environment holds the variable (start.environ), and undeclared_preload names it; declared, it passes."""
    from kernodeck.env import start

    monkeypatch.setenv("LD_PRELOAD", "/tmp/libswap.so")
    assert start.environ()["LD_PRELOAD"] == "/tmp/libswap.so"
    assert start.undeclared_preload(start.environ(), []) == ["/tmp/libswap.so"]
    assert start.undeclared_preload(start.environ(), ["libswap.so"]) == []


@_needs_gcc
def test_ldcmp1_control_without_the_library_compare_and_drift_see_the_labels_differ(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert _compared(tmp_path, monkeypatch, preload=False) == (False, "BEYOND")


@_needs_gcc
def test_ldcmp1_compare_and_drift_never_judge_with_undeclared_code_loaded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """LDCMP1, fixed: with LD_PRELOAD naming the swapping library, compare and drift still see the labels differ:
    their judging processes start with no loader variable (start.judging_environ), and each records what it got
    (before the fix: compare 'equal', bitwise; drift 'within')."""
    passed, mark = _compared(tmp_path, monkeypatch, preload=True)
    assert not passed and mark in ("BEYOND", "refused"), \
        f"compare passed={passed}, drift {mark!r} with LD_PRELOAD's code loaded, recorded nowhere"
    drift = json.loads((tmp_path / "map" / "drift.json").read_text(encoding="utf-8"))
    assert "environment" in drift and "LD_PRELOAD" not in drift["environment"]


def test_ldcmp1_the_judging_environment_holds_no_loader_and_no_callers_numerics(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The judging processes' environment: every loader variable and the caller's numerics variables dropped, the
    plumbing kept (the control: PATH)."""
    from kernodeck.env import start

    for name in start.LOADERS:
        monkeypatch.setenv(name, "/tmp/lib.so")
    monkeypatch.setenv("MKL_CBWR", "COMPATIBLE")
    env = start.judging_environ()
    assert not set(start.LOADERS) & set(env) and "MKL_CBWR" not in env and env.get("PATH")
    assert "MKL_CBWR" in start.environ() and "LD_PRELOAD" in start.environ()  # verify's processes: recorded
