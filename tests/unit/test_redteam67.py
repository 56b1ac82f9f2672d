"""Red-team pass 67 (notes: /work/notes/redteam67.md): issue 29 by class after pass 66's fixes; the installers'
variables at install time, in real tiny rebuilds: UVOVR1.

UVOVR1 (uv's overrides replace the lock's hashes; kernodeck/env/installenv.py ``_WHERE``/``installing_env``,
rebuild.py ``install``, binding.py ``from_verified``): ``installing_env`` keeps ``UV_OVERRIDE`` (pass 45 dropped it
for the resolver only). An override line ``tinya==1.0 --hash=sha256:<another file's>`` replaces the lock's requirement
in uv's hash-checked install (``--require-hashes``): uv checks the file against the override's hash, not the lock's,
and installs another tinya 1.0 wheel. The pin's name and version are the lock's (``require_the_locks`` holds), and
uv's binding is the pin's hash set for every pin (``from_verified``): the build is promoted with a file whose hash is
not the lock's, recorded as verified against the lock's hashes. ``UV_CONSTRAINT`` with the same line is refused by
uv ("no overlapping hashes": the control of the class), as ``PIP_CONSTRAINT`` is by pip (hash mismatch). Fix idea by
class: drop ``UV_OVERRIDE`` (and ``UV_CONSTRAINT``, ``UV_EXCLUDE``/``UV_EXCLUDES``, ``PIP_CONSTRAINT``: anything that
adds requirements to an install of the lock) from the installers' environment, or name them on the command line as
empty; uv's record could also be read back (its ``RECORD`` or the cache's hash) rather than taken from the lock.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env import installenv
from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, fresh_venv, locked_tiny_project, offline_env, uv, write_wheel

_OTHER = "VALUE = 'not the lock'\n"

# UVOVR1 -----------------------------------------------------------------------------------------------------------


def _tinya(env: Path) -> str:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_text(encoding="utf-8")


def _two_tinyas(tmp_path: Path) -> tuple[Path, Path]:
    """The lock's tinya 1.0 wheel and another tinya 1.0 wheel (``_OTHER``), in two folders."""
    return (write_wheel(tmp_path / "links", "tinya", "1.0"),
            write_wheel(tmp_path / "served", "tinya", "1.0", module=_OTHER))


def _line_file(tmp_path: Path, name: str, wheel: Path) -> Path:
    path = tmp_path / name
    path.write_text(f"tinya==1.0 --hash=sha256:{sha256_file(wheel)}\n", encoding="utf-8")
    return path


def test_uvovr1_premise_an_override_line_replaces_the_locks_hash_in_a_hash_checked_install(tmp_path: Path) -> None:
    """uv's ``--require-hashes`` install of a lock pinning one tinya file installs another when ``UV_OVERRIDE``
    names that file's hash; the same line as ``UV_CONSTRAINT`` is refused (the control)."""
    good, other = _two_tinyas(tmp_path)
    lock, line = _line_file(tmp_path, "lock.txt", good), _line_file(tmp_path, "line.txt", other)

    def install(venv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        python = fresh_venv(tmp_path / venv)
        return subprocess.run(
            [uv(), "pip", "install", "--python", str(python), "--require-hashes", "--no-deps", "--link-mode", "copy",
             "-r", str(lock)], capture_output=True, text=True, check=False,
            env=offline_env(UV_FIND_LINKS=str(other.parent), UV_CACHE_DIR=str(tmp_path / "uvc"), **extra))

    overridden = install("over", UV_OVERRIDE=str(line))
    assert overridden.returncode == 0, overridden.stderr[-800:]
    assert _tinya(tmp_path / "over") == _OTHER
    constrained = install("cons", UV_CONSTRAINT=str(line))
    assert constrained.returncode != 0 and "no overlapping hashes" in constrained.stderr, constrained.stderr[-800:]


def _rebuild(tmp_path: Path, variable: str | None) -> tuple[subprocess.CompletedProcess[str], Path, str]:
    """A real ``rebuild --installer uv`` of a tiny lock (tinya, tinyb), the sources serving the other tinya 1.0 only,
    ``variable`` (``UV_OVERRIDE``, ``UV_CONSTRAINT`` or none) naming that file's hash. Returns the env's lock hash
    of tinya too."""
    good, other = _two_tinyas(tmp_path)
    tinyb = write_wheel(tmp_path / "links", "tinyb", "2.0")
    shutil.copy2(tinyb, tmp_path / "served" / tinyb.name)
    project, plat = locked_tiny_project(tmp_path / "project", [good, tinyb])
    line = _line_file(tmp_path, "line.txt", other)
    env = offline_env(PIP_FIND_LINKS=str(tmp_path / "served"), UV_CACHE_DIR=str(tmp_path / "uvc"),
                      PIP_CACHE_DIR=str(tmp_path / "pipc"), **({variable: str(line)} if variable else {}))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    return proc, current_env(project, plat), sha256_file(good)


def test_uvovr1_a_uv_rebuild_never_promotes_a_file_the_lock_does_not_pin(tmp_path: Path) -> None:
    """UVOVR1 (fixed): the installers keep only the variables of an allow-list (installenv.kept): UV_OVERRIDE never
    reaches uv, which installs the lock, whose tinya the sources do not serve: the build fails, nothing promoted."""
    proc, env, _ = _rebuild(tmp_path, "UV_OVERRIDE")
    assert proc.returncode != 0 and "tinya" in proc.stderr, proc.stderr[-800:]
    assert not env.exists(), "promoted with a tinya 1.0 wheel whose hash is not the lock's"


@pytest.mark.parametrize(("name", "kept"), [
    ("UV_OVERRIDE", False), ("UV_CONSTRAINT", False), ("UV_EXCLUDE", False), ("UV_BUILD_CONSTRAINT", False),
    ("PIP_CONSTRAINT", False), ("PIP_REQUIREMENT", False), ("PIP_USE_FEATURE", False), ("UV_A_FUTURE_SETTING", False),
    ("PIP_INDEX_URL", True), ("PIP_FIND_LINKS", True), ("PIP_CONFIG_FILE", True), ("UV_DEFAULT_INDEX", True),
    ("UV_CACHE_DIR", True), ("UV_OFFLINE", True), ("UV_INDEX_PRIVATE_PASSWORD", True), ("HTTPS_PROXY", True),
    ("SSL_CERT_FILE", True)])
def test_uvovr1_the_installers_keep_an_allow_list_of_their_variables(name: str, kept: bool,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The class: of pip's and uv's variables an install keeps only its sources, network and cache; any other (one
    that adds requirements, or one no pass has named yet) is dropped. Those kept reach the install."""
    monkeypatch.setenv(name, "x")
    assert installenv.kept(name) is kept
    assert (name in installenv.installing_env()) is kept


def test_uvovr1_control_uv_constraint_with_that_hash_fails_the_build(tmp_path: Path) -> None:
    proc, env, _ = _rebuild(tmp_path, "UV_CONSTRAINT")
    assert proc.returncode != 0, proc.stderr[-800:]
    assert not env.exists()


def test_uvovr1_control_without_a_variable_the_served_file_is_refused(tmp_path: Path) -> None:
    proc, env, _ = _rebuild(tmp_path, None)
    assert proc.returncode != 0 and "tinya" in proc.stderr, proc.stderr[-800:]
    assert not env.exists()


def test_the_running_interpreter_is_trusted_by_its_identity_not_its_path_alone(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass 67's note on ENVLINK1's fix: the interpreter that runs is trusted by its path only while that path is
    still the file the process started from; another file put there (a writable base's bin) is judged as any read.
    Control: the same file."""
    from kernodeck.inenv import homes, paths

    binary = tmp_path / "python3.11"
    binary.write_bytes(b"\x7fELF the interpreter")
    monkeypatch.setattr(homes, "INTERPRETER", str(binary))
    monkeypatch.setattr(homes, "_RUNNING", os.stat(binary))
    assert homes.interpreter(str(binary)) and paths.trusted(str(binary))
    swapped = tmp_path / "swapped"
    swapped.write_text("threshold=0.7\n", encoding="utf-8")
    os.replace(swapped, binary)
    assert not homes.interpreter(str(binary)) and not paths.trusted(str(binary))
