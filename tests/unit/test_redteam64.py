"""Red-team pass 64 (notes: /work/notes/redteam64.md): pass 63's fixes attacked by class (every distribution of the
env from a file its install checked against the lock; which locked file is installed; the in-env process's end after
its last step), in real tiny rebuilds and on a fake runner: UVSEED1, WDIR1, EXIT2.

UVSEED1 (uv's venv is not always empty; kernodeck/env/rebuild.py ``_Build.create``, installenv.py ``installing_env``,
binding.py ``from_verified``): ``uv venv`` reads ``UV_VENV_SEED`` (its ``--seed``), which ``installing_env`` keeps, so
a caller with ``UV_VENV_SEED=1`` gets pip, setuptools and wheel (Python 3.11) seeded from the caller's uv sources
before the lock's install. uv's hash-checked install (``--require-hashes``) keeps an installed distribution at the
pinned version ("Checked 1 package"): the seed's files stay, whatever file the lock's hashes name. The seeds the lock
does not pin are removed after the check, but one it pins at the seed's version (setuptools, or pip) stays, and its
binding says the lock's hashes were verified (uv's record is the pin's set for every pin: ``build_problems`` cannot
name a distribution uv did not install). Measured (real ``rebuild --installer uv``, ``UV_VENV_SEED=1`` with
``UV_NO_CACHE=1``, the lock's setuptools 65.5.0 a repacked wheel of ensurepip's saying ``LOCKED_COPY = True``): exit
0, promoted, the env's setuptools is the seed's (its ``distutils-precedence.pth`` runs at every start), recorded as
verified, and the recorded ``uv venv`` command has no ``--seed``. With uv's cache on the env's file system the seeds
are hard links to the cache and sealing refuses the build (a "report it" TIP); with ``UV_NO_CACHE`` or a cache on
another file system (a Docker cache mount) they are copies and pass. ``--installer pip`` (``venv --without-pip``):
the lock's file (the control). Fix idea by class: the env is observed empty after ``create`` (no distribution in its
site-packages) or the build fails; ``UV_VENV_SEED`` dropped from uv venv's environment.

WDIR1 (uv reads another lock than the one Kernodeck read; rebuild.py ``install``): the install hands uv the lock by a
path relative to the project (``-r lockfiles/<platform>.txt``, run with the project as cwd); ``UV_WORKING_DIR``
(``--directory``: "relative paths are resolved with the given directory as the base"), kept by ``installing_env``,
makes uv read ``<that folder>/lockfiles/<platform>.txt``. An env is promoted whose files were checked against that
file's hashes, while the binding records the project lock's (``from_verified``) and ``require_the_locks`` compares
names and versions only. Measured (real ``rebuild --installer uv``, the other lock the same with tinya's hash that of
another tinya 1.0 wheel): exit 0, promoted, the env's tinya is the other wheel, its record the lock's hash. pip has no
such option. Fix idea: hand the installer the lock by its absolute path (recorded relative, as now); drop
``UV_WORKING_DIR``/``UV_PROJECT``.

EXIT2 (a stop after the last step; kernodeck/verify/steps/in_env.py ``run_checks``): EXIT1's fix records an exit other
than 0 after every step reported, but only when the supervisor stopped nothing. A runner that hangs after its last
step's file (its last work: closing the resume worker, the final library map ``loaded-libraries-after-run.json``) is
stopped by the stall deadline (``Stopped.step == ""``): nothing records it (pass 62 chose not to mark it
``interrupted``, rightly), and the run PASSES with the dossier lacking what the runner did not write, while the same
runner raising there fails the run. Measured on the fake runner (stall 2 s). Fix idea: a stall or a deadline after the
last step is kept as ``runner_end`` (its kind, its stacks) and is no pass, as EXIT1's exit is.
"""

from __future__ import annotations

import base64
import ensurepip
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env import seeds
from kernodeck.errors import RebuildFailed
from kernodeck.inenv.protocol import Status
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.supervise import Stop
from tests.helpers.hangrunner import RUNNER_HEAD, checks_on_runner
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    current_env,
    fresh_venv,
    locked_tiny_project,
    offline_env,
    pip_wheel,
    uv,
    write_wheel,
)

BUNDLED = Path(ensurepip.__file__).parent / "_bundled"

# UVSEED1 ----------------------------------------------------------------------------------------------------------


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _repacked(source: Path, folder: Path, module: str) -> Path:
    """``source`` repacked at the same name and version with one line more in ``module`` (its RECORD rewritten): a
    valid wheel of the same distribution that is not ``source``'s file."""
    with zipfile.ZipFile(source) as archive:
        files = {item.filename: archive.read(item.filename) for item in archive.infolist()}
    files[module] += b"\nLOCKED_COPY = True\n"
    record = next(name for name in files if name.endswith(".dist-info/RECORD"))
    files[record] = ("\n".join([*(_record_line(n, d) for n, d in files.items() if n != record), f"{record},,"])
                     + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return target


def _seeds(folder: Path) -> Path:
    """What the caller's uv sources serve ``uv venv --seed``: ensurepip's pip and setuptools, a tiny wheel 0.1."""
    pip_wheel(folder)
    setuptools = sorted(BUNDLED.glob("setuptools-*.whl"))[-1]
    shutil.copy2(setuptools, folder / setuptools.name)
    write_wheel(folder, "wheel", "0.1")
    return folder


def _seed_project(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny project whose lock pins setuptools at ensurepip's version by another file (LOCKED_COPY), tinya, tinyb."""
    links = tmp_path / "links"
    setuptools = sorted(BUNDLED.glob("setuptools-*.whl"))[-1]
    wheels = [_repacked(setuptools, links, "setuptools/__init__.py"), write_wheel(links, "tinya", "1.0"),
              write_wheel(links, "tinyb", "2.0")]
    project, _ = locked_tiny_project(tmp_path / "project", wheels)
    return project, links


def _setuptools_is_the_locks(env: Path) -> bool:
    init = next(env.glob("lib/python*/site-packages/setuptools/__init__.py"))
    return "LOCKED_COPY" in init.read_text(encoding="utf-8")


def _seed_rebuild(tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    project, links = _seed_project(tmp_path)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"), **extra)
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    return proc, current_env(project, resolve_platform(load_project(project)))


def test_uvseed1_premise_uv_venv_seeds_and_the_hash_checked_install_keeps_the_seed(tmp_path: Path) -> None:
    """``UV_VENV_SEED=1`` seeds ``uv venv``; uv's ``--require-hashes`` install of a lock pinning the seed's setuptools
    version by another file keeps the seed ("Checked"), exit 0."""
    seeds = _seeds(tmp_path / "seeds")
    venv = tmp_path / "venv"
    made = subprocess.run([uv(), "venv", "--python", sys.executable, str(venv)], capture_output=True, text=True,
                          env=offline_env(UV_VENV_SEED="1", UV_FIND_LINKS=str(seeds), UV_NO_CACHE="1"), check=False)
    assert made.returncode == 0, made.stderr[-800:]
    assert {p.name.split("-")[0] for p in venv.glob("lib/python*/site-packages/*.dist-info")} == {
        "pip", "setuptools", "wheel"}
    setuptools = sorted(BUNDLED.glob("setuptools-*.whl"))[-1]
    locked = _repacked(setuptools, tmp_path / "links", "setuptools/__init__.py")
    lock = tmp_path / "lock.txt"
    lock.write_text(f"setuptools=={setuptools.name.split('-')[1]} --hash=sha256:{sha256_file(locked)}\n",
                    encoding="utf-8")
    installed = subprocess.run(
        [uv(), "pip", "install", "--python", str(venv / "bin" / "python"), "--require-hashes", "--no-deps",
         "--link-mode", "copy", "-r", str(lock)], capture_output=True, text=True, check=False,
        env=offline_env(UV_FIND_LINKS=str(tmp_path / "links"), UV_CACHE_DIR=str(tmp_path / "uvc")))
    assert installed.returncode == 0, installed.stderr[-800:]
    assert not _setuptools_is_the_locks(venv)


def test_uvseed1_a_uv_rebuild_installs_every_pin_from_the_locks_file(tmp_path: Path) -> None:
    proc, env = _seed_rebuild(tmp_path, UV_VENV_SEED="1", UV_FIND_LINKS=str(_seeds(tmp_path / "seeds")),
                              UV_NO_CACHE="1")
    """UVSEED1 (fixed): UV_VENV_SEED no longer reaches uv venv, and a new env that is not empty fails the build."""
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _setuptools_is_the_locks(env), "promoted with the seed's setuptools, not the lock's file"


def test_uvseed1_control_without_the_variable_the_locks_file_is_installed(tmp_path: Path) -> None:
    proc, env = _seed_rebuild(tmp_path, UV_NO_CACHE="1")
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _setuptools_is_the_locks(env)


# WDIR1 ------------------------------------------------------------------------------------------------------------

_OTHER = "VALUE = 'not the lock'\n"


def _tinya(env: Path) -> str:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_text(encoding="utf-8")


def _wdir_rebuild(tmp_path: Path, attack: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A tiny project (tinya, tinyb) and, elsewhere, ``other/lockfiles/<its lock's name>``: the same lock with tinya's
    hash that of another tinya 1.0 wheel. ``attack``: ``UV_WORKING_DIR=other``, the sources serving that wheel."""
    links, served = tmp_path / "links", tmp_path / "served"
    good, tinyb = write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")
    other = write_wheel(served, "tinya", "1.0", module=_OTHER)
    shutil.copy2(tinyb, served / tinyb.name)
    project, plat = locked_tiny_project(tmp_path / "project", [good, tinyb])
    lock = project / "lockfiles" / f"{plat.id}.txt"
    (tmp_path / "other" / "lockfiles").mkdir(parents=True)
    (tmp_path / "other" / "lockfiles" / lock.name).write_text(
        lock.read_text(encoding="utf-8").replace(sha256_file(good), sha256_file(other)), encoding="utf-8")
    env = offline_env(PIP_FIND_LINKS=str(served if attack else links), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      **({"UV_WORKING_DIR": str(tmp_path / "other")} if attack else {}))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    return proc, current_env(project, plat)


def test_wdir1_premise_uv_working_dir_resolves_a_relative_lock_elsewhere(tmp_path: Path) -> None:
    """uv resolves ``-r lockfiles/x.txt`` against ``UV_WORKING_DIR``, not its cwd."""
    good, other = write_wheel(tmp_path / "good", "tinya", "1.0"), write_wheel(tmp_path / "bad", "tinya", "1.0",
                                                                               module=_OTHER)
    for folder, wheel in (("project", good), ("elsewhere", other)):
        (tmp_path / folder / "lockfiles").mkdir(parents=True)
        (tmp_path / folder / "lockfiles" / "x.txt").write_text(f"tinya==1.0 --hash=sha256:{sha256_file(wheel)}\n",
                                                               encoding="utf-8")
    python = fresh_venv(tmp_path / "venv")
    proc = subprocess.run(
        [uv(), "pip", "install", "--python", str(python), "--require-hashes", "--no-deps", "--link-mode", "copy",
         "-r", "lockfiles/x.txt"], cwd=tmp_path / "project", capture_output=True, text=True, check=False,
        env=offline_env(UV_FIND_LINKS=f"{tmp_path / 'good'},{tmp_path / 'bad'}", UV_CACHE_DIR=str(tmp_path / "uvc"),
                        UV_WORKING_DIR=str(tmp_path / "elsewhere")))
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinya(tmp_path / "venv") == _OTHER


def test_wdir1_the_lock_uv_installs_is_the_one_kernodeck_read(tmp_path: Path) -> None:
    """WDIR1 (fixed): the lock is given by its absolute path (and UV_WORKING_DIR dropped): the project's lock is the
    one installed, whose tinya the attack's sources do not serve, so the build fails and nothing is promoted."""
    proc, env = _wdir_rebuild(tmp_path, attack=True)
    assert proc.returncode != 0 and "Hash mismatch for `tinya==1.0`" in proc.stderr, proc.stderr[-800:]
    assert not env.exists(), "promoted with a tinya wheel the lock does not pin"


def test_wdir1_control_the_project_lock_is_installed(tmp_path: Path) -> None:
    proc, env = _wdir_rebuild(tmp_path, attack=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinya(env) != _OTHER


# EXIT2 ------------------------------------------------------------------------------------------------------------

# A fake in-env runner: compare reports its pass as runner.py does, then the process hangs in its last work
# (``fake_mode`` "hangs": the stall deadline stops it) or ends at once (the control).
_HANG_RUNNER = RUNNER_HEAD + '''\
print("[kernodeck] compare: start (now)", file=sys.stderr, flush=True)
(steps / "01-compare.json").write_text(json.dumps({"name": "compare", "status": "passed", "duration_s": 0.01}))
print("[kernodeck] compare: passed in 0.01s", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "hangs":
    while True:
        time.sleep(0.1)
'''


def _ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> tuple[Any, Any]:
    run_, seen = checks_on_runner(tmp_path, monkeypatch, _HANG_RUNNER, ("compare",), mode)
    return run_, seen[0]


def test_exit2_premise_the_runner_was_stopped_after_its_last_step(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    run_, ended = _ended(tmp_path, monkeypatch, "hangs")
    assert ended.stopped is not None and ended.stopped.kind is Stop.STALLED and ended.stopped.step == ""
    assert [(s.name, s.status) for s in run_.steps] == [("compare", Status.PASSED)]


def test_exit2_a_runner_stopped_after_its_last_step_is_kept_and_no_pass(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """EXIT2 (fixed): as EXIT1's exit there, the run's record keeps the stop (``runner_end``, which the verdict
    fails on)."""
    run_, _ = _ended(tmp_path, monkeypatch, "hangs")
    assert run_.meta.runner_end is not None and run_.meta.runner_end["error"].startswith("stalled"), \
        "nothing records that the check process never finished its last work: the run passes"


def test_exit2_control_a_runner_that_ends_cleanly_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_, ended = _ended(tmp_path, monkeypatch, "ends")
    assert ended.code == 0 and ended.stopped is None
    assert not run_.failed and run_.meta.runner_end is None and run_.meta.interrupted is None
    assert [(s.name, s.status) for s in run_.steps] == [("compare", Status.PASSED)]


def test_uvseed1_a_new_env_that_is_not_empty_fails_the_build(tmp_path: Path) -> None:
    """The class behind UVSEED1: whatever seeded the new env (a variable, a flag, a tool of this machine), a
    distribution in it before the lock's install fails the build. Control: an empty env (uv venv's own files only)."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (site / "_virtualenv.pth").write_text("import _virtualenv\n", encoding="utf-8")
    seeds.require_empty(tmp_path / "env")  # the control: no distribution
    (site / "setuptools-65.5.0.dist-info").mkdir()
    with pytest.raises(RebuildFailed, match="was not empty before the lock's install: setuptools"):
        seeds.require_empty(tmp_path / "env")
