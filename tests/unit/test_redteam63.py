"""Red-team pass 63 (notes: /work/notes/redteam63.md): the env bound to its lock after session 21 (installenv,
rebuild's ``require_the_locks``, pythons.bundled_pip), attacked by class in real tiny rebuilds: SEED1, NOBIN1; and the
record of the in-env process's end (verify/steps/in_env.py ``run_checks``): EXIT1.

SEED1 (a distribution already in the new env is never installed from the lock's file; kernodeck/env/rebuild.py
``_Build.create``/``install``): a lock that pins pip is built with ``--installer pip`` in a ``python -m venv`` env,
which seeds the base interpreter's ensurepip pip (and setuptools on 3.11). pip's hash-checked install then says
"Requirement already satisfied" for a pin at the seed's version: the seed's files stay, whatever file the lock's
hashes name; pip's report lists nothing for it, so the binding records no hash for it (``binding.problems`` never
looks at it on reuse), and ``require_the_locks`` compares names and versions only. Measured (real ``rebuild
--installer pip``, the lock's pip 23.2.1 a repacked wheel of the same version whose ``pip/__init__.py`` says
``LOCKED_COPY = True``): exit 0, promoted, the env's pip is ensurepip's (no ``LOCKED_COPY``), its completion record's
``wheels`` hold tinya and tinyb only. With ``--installer uv`` (``uv venv``, empty) the lock's file is installed. A
distro Python's ensurepip seeds its own rebuilt wheel of the same version (Debian's python-pip-whl), so the case is
not only a test's. rebuild.md says "the pip that checks and freezes the env is the lock's when the lock pins pip".
Fix idea by class: an env the lock's install fills is made empty (``--without-pip``, the bundled pip run from its
wheel, as for a lock without pip), so that every pin is installed from a hash-checked file; or ``--force-reinstall``
/ ``--ignore-installed`` for the seeds; and the binding requires a recorded hash for every pin installed.

NOBIN1 (the caller's pip setup chooses which of a pin's locked files is installed; kernodeck/env/installenv.py
``installing_env``, rebuild.py ``require_the_locks``, binding.py): a hash-pinned lock lists each pin's sdist beside
its wheels (pip-compile --generate-hashes does). ``PIP_NO_BINARY=<name>`` (or ``no-binary`` in a pip config file,
which the install keeps for its sources) reaches the pip install: the pin is BUILT here from its sdist, by whatever
build backend the sdist names (normally fetched unpinned into pip's build isolation), though the lock has a wheel for
this platform. The env holds the same name and version (``require_the_locks`` passes), the binding records the
sdist's sha256 as "the installed wheel's" (among the lock's hashes: bound), and the extensions step's ``built_here``
names nothing when the built wheel's tag is one of the lock's wheels' (py3-none-any). Measured (real ``rebuild
--installer pip`` with ``PIP_NO_BINARY=tinyc``, tinyc's wheel saying ``VALUE = 'the lock wheel'`` and its sdist's
in-tree backend writing ``'built from the sdist'``): exit 0, promoted, the env's tinyc is the sdist's build (WHEEL
Generator ``inbackend``), ``wheels.tinyc.sha256`` = the sdist's. uv 0.13.9's ``uv pip install`` has no variable for
``--no-binary`` (UV_NO_BINARY and UV_NO_BINARY_PACKAGE measured: ignored; its config files are off since UVCONF1).
Fix idea by class: the command line says which file kind each pin is installed from (``--only-binary`` for every
pin whose lock has a wheel for this platform, which beats a variable or a config file), and the binding holds that
a pin with such a wheel was installed from a wheel (pip's report names the file's hash: a wheel's, not the sdist's).

EXIT1 (the in-env process's end after every step reported; kernodeck/verify/steps/in_env.py ``run_checks``): a runner
that fails after its last step's file (runner.py then closes the resume worker and writes the final library map,
``loaded-libraries-after-run.json``) exits 1 with a traceback; ``run_checks`` reads the code only to word a step that
never reported, so with every step's file there the exit and its first error are kept nowhere: the run passes, the
dossier lacks what the runner did not write. Measured (run_checks on a fake runner: compare passed and said so, then
``RuntimeError``, exit 1): steps ``[compare: passed]``, ``run.failed`` False, nothing in meta; the error only in the
supervisor's tail. The same class as pass 62's interruption after the last step (263cace: now marks the run); a
stall there is deliberately not marked (its control). Fix idea: an exit other than 0 (or the one a failed step
gives) after every step reported is recorded in the run's meta with its first error (``first_error(tail)``), and the
report names it, as an interruption there is.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env import binding, extension_scan
from kernodeck.inenv.protocol import Status
from kernodeck.lock import check, lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade.relock import Drift, DriftVerdict, ended_steps
from kernodeck.verify.record import Verdict
from kernodeck.verify.report import Report
from tests.helpers.hangrunner import RUNNER_HEAD, checks_on_runner
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    current_env,
    env_wheels,
    fresh_venv,
    locked_tiny_project,
    offline_env,
    pip_wheel,
    wheel_spec,
    write_wheel,
)

ROOT = Path(__file__).resolve().parents[2]

# SEED1 ------------------------------------------------------------------------------------------------------------


def _record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _locked_pip(folder: Path) -> Path:
    """ensurepip's pip wheel, repacked at the same name and version with one line more in ``pip/__init__.py`` (its
    RECORD rewritten to match): a valid wheel of pip that is not the seed's file, as a distro's rebuilt one is."""
    genuine = pip_wheel(folder / "genuine")
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(genuine) as source:
        for item in source.infolist():
            files[item.filename] = source.read(item.filename)
    files["pip/__init__.py"] += b"\nLOCKED_COPY = True\n"
    record = next(name for name in files if name.endswith(".dist-info/RECORD"))
    files[record] = ("\n".join([*(_record_line(n, d) for n, d in files.items() if n != record), f"{record},,"])
                     + "\n").encode()
    target = folder / genuine.name
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return target


def _seed_project(tmp_path: Path) -> tuple[Path, Path, list[Path]]:
    links = tmp_path / "links"
    wheels = [_locked_pip(links), write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")]
    project, _ = locked_tiny_project(tmp_path / "project", wheels)
    return project, links, wheels


def _env_pip_is_the_locks(env: Path) -> bool:
    return "LOCKED_COPY" in next(env.glob("lib/python*/site-packages/pip/__init__.py")).read_text(encoding="utf-8")


def _rebuilt(tmp_path: Path, installer: str, **extra: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    project, links, _ = _seed_project(tmp_path)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"), **extra)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    return proc, project, current_env(project, resolve_platform(load_project(project)))


def test_seed1_premise_a_seeded_pip_at_the_locked_version_is_never_installed_from_the_lock(tmp_path: Path) -> None:
    """pip's hash-checked install of a lock pinning the seed's pip version with another file's hash, into a ``python
    -m venv`` env: exit 0, 'already satisfied', the seed's files kept."""
    _, links, wheels = _seed_project(tmp_path)
    assert sha256_file(wheels[0]) != sha256_file(pip_wheel(tmp_path / "seed"))  # not the seed's file
    python = fresh_venv(tmp_path / "venv", with_pip=True)
    name, version = wheel_spec(wheels[0])
    lock = tmp_path / "lock.txt"
    lock.write_text(f"{name}=={version} --hash=sha256:{sha256_file(wheels[0])}\n", encoding="utf-8")
    proc = subprocess.run([str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(lock)],
                          env=offline_env(PIP_FIND_LINKS=str(links), PIP_CACHE_DIR=str(tmp_path / "pipc")),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert "already satisfied" in proc.stdout
    assert not _env_pip_is_the_locks(tmp_path / "venv")


def test_seed1_every_pin_of_a_pip_rebuild_is_the_locks_file_and_bound(tmp_path: Path) -> None:
    """SEED1 (fixed): the env starts empty, pip is installed from the lock's file like every pin (the bundled pip
    installs), and the completion record binds its hash."""
    proc, _, env = _rebuilt(tmp_path, "pip")
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _env_pip_is_the_locks(env), "the env's pip is the base's ensurepip seed"
    wheels = json.loads((env / "kernodeck-complete.json").read_text(encoding="utf-8"))["wheels"]
    assert sorted(wheels) == ["pip", "tinya", "tinyb"]


def test_seed1_a_distribution_the_install_did_not_name_fails_the_build() -> None:
    """The class: whatever was in the env before the install (a seed, at the locked version) is named, and the
    build's own record must hold as a reuse holds it. Control: every pin named, bound."""
    lock = lockfile.parse_text("# body-digest: sha256:" + "d" * 64 + "\n#\ntinya==1.0 \\\n    --hash=sha256:" + "a" * 64
                               + "\npip==23.2.1 \\\n    --hash=sha256:" + "b" * 64 + "\n", Path("lock.txt"))
    wheels = {"tinya": binding.Wheel("tinya", "1.0", ("a" * 64,))}
    found = binding.build_problems(lock, wheels, {"tinya": "1.0", "pip": "23.2.1"}, binding.HashSource.REPORT)
    assert found == ["pip==23.2.1 was in the env before the lock's install (never installed from the lock's file)"]
    wheels["pip"] = binding.Wheel("pip", "23.2.1", ("c" * 64,))  # a file the lock does not pin
    assert "not among the lock's hashes" in " ".join(
        binding.build_problems(lock, wheels, {"tinya": "1.0", "pip": "23.2.1"}, binding.HashSource.REPORT))
    wheels["pip"] = binding.Wheel("pip", "23.2.1", ("b" * 64,))
    assert binding.build_problems(lock, wheels, {"tinya": "1.0", "pip": "23.2.1"}, binding.HashSource.REPORT) == []


def test_seed1_control_uv_installs_the_locks_pip(tmp_path: Path) -> None:
    proc, _, env = _rebuilt(tmp_path, "uv")
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _env_pip_is_the_locks(env)


# NOBIN1 -----------------------------------------------------------------------------------------------------------

_BACKEND = '''\
import base64, hashlib, zipfile

def _line(path, data):
    return path + ",sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() + "," + \\
        str(len(data))

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    info = "tinyc-1.0.dist-info"
    files = {"tinyc/__init__.py": open("tinyc/__init__.py", "rb").read(),
             info + "/METADATA": b"Metadata-Version: 2.1\\nName: tinyc\\nVersion: 1.0\\n",
             info + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: inbackend\\nRoot-Is-Purelib: true\\n"
                              b"Tag: py3-none-any\\n"}
    lines = [*(_line(p, d) for p, d in files.items()), info + "/RECORD,,"]
    files[info + "/RECORD"] = ("\\n".join(lines) + "\\n").encode()
    name = "tinyc-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel_directory + "/" + name, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return name

def get_requires_for_build_wheel(config_settings=None):
    return []
'''
_FROM_SDIST = "VALUE = 'built from the sdist'\n"
_FROM_WHEEL = "VALUE = 'the lock wheel'\n"


def _sdist(folder: Path) -> Path:
    """tinyc 1.0's sdist: an in-tree build backend (no build requirement: it builds offline) writing its module."""
    members = {
        "pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
                          b'[project]\nname = "tinyc"\nversion = "1.0"\n',
        "PKG-INFO": b"Metadata-Version: 2.1\nName: tinyc\nVersion: 1.0\n",
        "backend.py": _BACKEND.encode(),
        "tinyc/__init__.py": _FROM_SDIST.encode(),
    }
    target = folder / "tinyc-1.0.tar.gz"
    with tarfile.open(target, "w:gz") as archive:
        for path, data in members.items():
            info = tarfile.TarInfo(f"tinyc-1.0/{path}")
            info.size, info.mtime = len(data), 1577836800
            archive.addfile(info, io.BytesIO(data))
    return target


def _nobin_project(root: Path) -> tuple[Path, Path, Path]:
    """A tiny project whose lock pins tinyc 1.0 by its py3-none-any wheel and its sdist, as a real lock does."""
    links = root / "links"
    tinyc = [write_wheel(links, "tinyc", "1.0", module=_FROM_WHEEL), _sdist(links)]
    project_root, _ = locked_tiny_project(root / "project", env_wheels(links), (("tinyc", "1.0", tinyc),))
    return project_root, links, tinyc[1]


def _tinyc(env: Path) -> str:
    return next(env.glob("lib/python*/site-packages/tinyc/__init__.py")).read_text(encoding="utf-8")


def _nobin_rebuild(tmp_path: Path, **extra: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    project, links, sdist = _nobin_project(tmp_path)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"), **extra)
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    return proc, current_env(project, resolve_platform(load_project(project))), sdist


def test_nobin1_premise_pip_builds_a_locked_sdist_when_told_and_built_here_names_nothing(tmp_path: Path) -> None:
    """pip's hash-checked install with PIP_NO_BINARY picks the sdist (its hash is the lock's); the built wheel's tag
    is one of the lock's wheels', so the extensions step's built_here does not name it."""
    project, links, _ = _nobin_project(tmp_path)
    loaded = load_project(project)
    plat = resolve_platform(loaded)
    python = fresh_venv(tmp_path / "venv", with_pip=True)
    lock = project / "lockfiles" / f"{plat.id}.txt"
    proc = subprocess.run([str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(lock)],
                          env=offline_env(PIP_FIND_LINKS=str(links), PIP_NO_BINARY="tinyc",
                                         PIP_CACHE_DIR=str(tmp_path / "pipc")),
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    venv = tmp_path / "venv"
    assert _tinyc(venv) == _FROM_SDIST
    info = next(venv.glob("lib/python*/site-packages/tinyc-1.0.dist-info"))
    assert extension_scan.built_here(info, "tinyc", "1.0", check.read_lock(loaded, plat).twin) is None


@pytest.mark.parametrize("where", ["variable", "config-file"])
def test_nobin1_a_pin_with_this_platforms_wheel_is_installed_from_it(tmp_path: Path, where: str) -> None:
    """NOBIN1 (fixed): pip's no-binary from the caller (a variable, a config file) is cleared on the command line:
    the lock's wheel is installed."""
    config = tmp_path / "pip.conf"
    config.write_text("[install]\nno-binary = tinyc\n", encoding="utf-8")
    told = {"PIP_NO_BINARY": "tinyc"} if where == "variable" else {"PIP_CONFIG_FILE": str(config)}
    proc, env, sdist = _nobin_rebuild(tmp_path, **told)
    assert proc.returncode == 0, proc.stderr[-800:]
    recorded = json.loads((env / "kernodeck-complete.json").read_text(encoding="utf-8"))["wheels"]["tinyc"]
    assert recorded["sha256"] != [sha256_file(sdist)], "the sdist's hash bound as the installed wheel's"
    assert _tinyc(env) == _FROM_WHEEL, "the env's tinyc was built here from its sdist"


def test_nobin1_control_without_the_variable_the_locks_wheel_is_installed(tmp_path: Path) -> None:
    proc, env, _ = _nobin_rebuild(tmp_path)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinyc(env) == _FROM_WHEEL


# EXIT1 ------------------------------------------------------------------------------------------------------------

# A fake in-env runner (hangrunner's pattern): compare reports its pass as runner.py does, then the process fails
# after its last step (runner.py's work there: the resume worker's close, the final library map), ``fake_mode``
# "raises" with a traceback and exit 1, "ends" with exit 0 (the control).
_EXIT_RUNNER = RUNNER_HEAD + '''\
print("[kernodeck] compare: start (now)", file=sys.stderr, flush=True)
(steps / "01-compare.json").write_text(json.dumps({"name": "compare", "status": "passed", "duration_s": 0.01}))
print("[kernodeck] compare: passed in 0.01s", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "raises":
    raise RuntimeError("the final library map could not be written")
'''


def _exited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> tuple[Any, Any]:
    run_, seen = checks_on_runner(tmp_path, monkeypatch, _EXIT_RUNNER, ("compare",), mode)
    return run_, seen[0]


def test_exit1_premise_the_runner_failed_after_its_last_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, ended = _exited(tmp_path, monkeypatch, "raises")
    assert ended.code == 1 and ended.stopped is None
    assert any("RuntimeError: the final library map" in line for line in ended.tail)


def test_exit1_a_runner_that_failed_after_its_last_step_is_recorded(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """EXIT1 (fixed): the run's record keeps the process's end and its first error; the verdict is no pass."""
    run_, _ = _exited(tmp_path, monkeypatch, "raises")
    end = run_.meta.runner_end
    assert end is not None and end["code"] == 1 and "the final library map could not be written" in end["error"]
    report = Report("p", run_.steps, run_.meta.as_dict())
    assert report.verdict is Verdict.FAILED
    assert report.verdict_line().startswith("every step passed, but the check process then failed (exit 1): ")
    # upgrade and bisect read the same run: its numbers held, yet it is no answer (NOT VERIFIED, never "holds")
    steps = [s.as_dict() for s in run_.steps]
    assert Drift.from_steps(ended_steps(steps, end)).verdict is DriftVerdict.NOT_VERIFIED
    assert "the check process after its last step" in Drift.from_steps(ended_steps(steps, end)).failure


def test_exit1_control_a_runner_that_ends_cleanly_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_, ended = _exited(tmp_path, monkeypatch, "ends")
    assert ended.code == 0 and not run_.failed and run_.meta.runner_end is None
    assert [(s.name, s.status) for s in run_.steps] == [("compare", Status.PASSED)]
    assert ended_steps([s.as_dict() for s in run_.steps], run_.meta.runner_end) == [s.as_dict() for s in run_.steps]
