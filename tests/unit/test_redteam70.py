"""Red-team pass 70 (notes: /work/notes/redteam70.md): issue 29 by class, on the five newest fixes (UVCACHE1,
PIPCACHE1, BUILDREQ1, LDCMP1, the twin read once).

BUILTTAG1 (kernodeck/env/extension_scan.py ``built_here``, sdist_builds.py ``require_declared``; both installers):
BUILDREQ1's fix decides "built here" from the installed distribution's ``WHEEL`` tags against the lock's wheels for
the pin (the twin lists an sdist and none of its wheels carries the installed tags). But the ``WHEEL`` file is written
by the very build backend the rule is about, and an honest pure-Python build writes ``Tag: py3-none-any``, which is the
tag of the wheel a lock lists for most pure-Python pins. So a pin whose lock lists both its ``py3-none-any`` wheel and
its sdist, on sources that serve the sdist only (the sources are what the lock's hashes do not trust), is built here by
a build requirement the lock does not pin, and read as "downloaded": undeclared, promoted, its completion record's
``built_here`` empty, bound under the sdist's hash (pip's report says which file it took: the sdist's hash, not the
wheel's), reused by the next ``rebuild`` (``reuse_problems`` reads that empty list). A backend that writes, in
``WHEEL``, the tag of a wheel the lock lists for another platform is read as downloaded the same way, for any pin the
lock lists a wheel of. Fix idea by class: decide "built" from what the install took, not from what the build wrote:
give the installers no way to build an undeclared pin (pip ``--only-binary <every undeclared pin>``, uv
``--no-build-package``/``--only-binary``), so that only a declared pin can be built at all; pip's report (the sha256
it names is the sdist's) says it too.

UVVENV1 (kernodeck/env/rebuild.py ``create``: ``uv venv`` runs without ``--no-cache``, with the caller's
UV_CACHE_DIR, which installenv.py keeps): UVCACHE1's class at the step before the install. ``uv venv`` writes the
base interpreter's description (its executable's path, prefixes, markers) into the user's uv cache and takes it from
there next time, checked only against the base's modification time. An entry naming another binary as the
executable (a copy of the base's here; any interpreter would do): ``rebuild --fresh`` promotes an env whose
``bin/python`` and pyvenv.cfg ``home`` are that binary, while the completion record's ``base_python`` is the one the
build found, and the next ``rebuild`` reuses it as "same base interpreter". Fix idea by class: every installer
command of a build runs with no kept cache (``uv venv --no-cache``, or ``UV_CACHE_DIR`` a folder the build makes and
removes), and the build holds the env's interpreter to the base it found (``bin/python``'s target, pyvenv.cfg's
``home``, ``sys._base_executable`` read back).

PIPCACHE2 (rebuild.py ``install``, pip branch): ``--no-cache-dir`` is on pip's command line, but pip's build-env
subprocess (the install of an sdist's build requirements) gets the caller's PIP_CACHE_DIR and not the flag: a build
requirement pip built from its sdist is left in the user's cache, and the next build takes it from there (measured: the
cached backend edited, a ``--fresh`` build of a declared pin installs what it made). Low: a declared pin's build
requirements are recorded, not proven; but "as uv's --no-cache" and the user's cache untouched do not hold for pip.
Fix idea: ``PIP_NO_CACHE_DIR=1`` (or a PIP_CACHE_DIR the build makes and removes) in the install's environment,
which the build-env subprocess inherits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env.extension_scan import built_here
from kernodeck.lock.inputs import pylock_path
from kernodeck.lock.twin import read as read_twin
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    SDIST_BACKEND,
    current_env,
    declare_built_here,
    env_wheels,
    fresh_venv,
    locked_tiny_project,
    offline_env,
    uv,
    wheel_of,
    write_sdist,
)

_LOCKS = "VALUE = 'the lock'\n"
_DECIDED = b"VALUE = 'decided by tinybuild'\n"
_WIN = "cp311-cp311-win_amd64"  # a wheel the lock lists for another platform


def _backend(tag: str) -> str:
    """tinybuild's module: a backend (pinned by no lock) whose wheel holds its own choice of module, its ``WHEEL``
    naming a well-known generator and the tag ``tag``."""
    made = SDIST_BACKEND.replace('open(f"{name}/__init__.py", "rb").read()', repr(_DECIDED)).replace(
        "Generator: tiny-backend", "Generator: setuptools (80.9.0)").replace("Tag: py3-none-any", f"Tag: {tag}")
    assert repr(_DECIDED) in made and f"Tag: {tag}" in made
    return made


# BUILTTAG1 --------------------------------------------------------------------------------------------------------


def _tinye(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinye/__init__.py")).read_bytes()


def _tagged(tmp_path: Path, *, tag: str = "py3-none-any",
            serve_wheel: bool = False) -> tuple[Path, Platform, dict[str, str], Path, Path]:
    """A tiny lock (pip, tinya, tinyb wheels; tinye 1.0 by its wheel tagged ``tag`` AND its sdist, the sdist built by
    tinybuild, which writes ``tag`` into its WHEEL); the sources serve the sdist and tinybuild, and the wheel only with
    ``serve_wheel``: (project, platform, env, the lock's wheel, the sdist)."""
    links, backends, held = tmp_path / "links", tmp_path / "backends", tmp_path / "held"
    sdist = write_sdist(links, "tinye", "1.0", _LOCKS, backend="tinybuild")
    wheel = wheel_of(links if serve_wheel else held, "tinye", "1.0", {"tinye/__init__.py": _LOCKS.encode()}, tag=tag)
    wheel_of(backends, "tinybuild", "1.0", {"tinybuild/__init__.py": _backend(tag).encode()})
    project, plat = locked_tiny_project(tmp_path / "project", env_wheels(links), (("tinye", "1.0", [wheel, sdist]),))
    env = offline_env(PIP_FIND_LINKS=f"{links} {backends}", PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      UV_CACHE_DIR=str(tmp_path / "uvc"))
    return project, plat, env, wheel, sdist


def test_builttag1_premise_a_pure_build_carries_the_tag_of_the_wheel_the_lock_lists_and_reads_as_downloaded(
        tmp_path: Path) -> None:
    """The lock (and its twin) lists tinye's py3-none-any wheel and its sdist; pip's own hash-checked install of the
    lock from sources holding the sdist only builds it with tinybuild (no lock pins it), and ``built_here`` reads the
    installed tinye as not built here: its tag is the locked wheel's."""
    project, plat, env, wheel, _ = _tagged(tmp_path)
    twin = read_twin(pylock_path(load_project(project), plat))
    pin = next(p for p in twin.packages if p.name == "tinye")
    assert pin.sdist is not None and [w.name for w in pin.wheels or ()] == [wheel.name]
    lock = next(p for p in (project / "lockfiles").glob("*.txt") if "tinye==1.0" in p.read_text(encoding="utf-8"))
    python = fresh_venv(tmp_path / "venv", with_pip=True)
    proc = subprocess.run([str(python), "-m", "pip", "install", "--require-hashes", "--no-deps", "-r", str(lock)],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert _tinye(tmp_path / "venv") == _DECIDED and "Building wheel for tinye" in proc.stdout
    info = next((tmp_path / "venv").glob("lib/python*/site-packages/tinye-1.0.dist-info"))
    assert built_here(info, "tinye", "1.0", twin) is None, "read as built here: the premise does not hold"


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_builttag1_control_sources_serving_the_wheel_install_the_locks_file(tmp_path: Path, installer: str) -> None:
    """The same lock, the sources serving tinye's wheel too: the installers take the wheel, tinybuild is not run,
    the lock's module promoted, nothing built here."""
    project, plat, env, _, _ = _tagged(tmp_path, serve_wheel=True)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = current_env(project, plat)
    assert _tinye(promoted) == _LOCKS.encode()
    assert json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))["built_here"] == []


@pytest.mark.parametrize("tag", ["py3-none-any", _WIN], ids=["pure", "another-platforms-tag"])
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_builttag1_a_rebuild_never_promotes_an_undeclared_pin_built_here_whatever_its_wheel_says(
        tmp_path: Path, installer: str, tag: str) -> None:
    """Sources serving tinye's sdist only: the install builds it with tinybuild, an undeclared pin built here; the
    rebuild must fail naming it, as BUILDREQ1's fix does for a pin whose lock lists no wheel (today: exit 0, tinye
    tinybuild's module, ``built_here`` empty, bound under the sdist's hash, reused by the next rebuild)."""
    project, _, env, _, sdist = _tagged(tmp_path, tag=tag)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = next((p.resolve() for p in (project / ".venv-rebuild").glob("*/current")), None)
    if promoted is not None:
        marker = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))
        assert sha256_file(sdist) in marker["wheels"]["tinye"]["sha256"]  # bound under the sdist's hash
        assert _tinye(promoted) == _DECIDED and marker["built_here"] == []
    assert proc.returncode == 2 and "built from its sdist only when declared" in proc.stderr, \
        f"rc {proc.returncode}: an undeclared tinye built here by tinybuild was promoted as downloaded"
    assert "built-here = ['tinye']" in proc.stderr and promoted is None, proc.stderr[-800:]


# a cache's own files (uv's interpreter entries, `uv venv`'s, are UVVENV1's): none is a build's
_BOOKKEEPING = frozenset({"CACHEDIR.TAG", ".lock", ".gitignore", ".git"})

# PIPCACHE2 --------------------------------------------------------------------------------------------------------


def _declared_build(tmp_path: Path, installer: str) -> tuple[int, list[str]]:
    """A tiny lock (pip, tinya, tinyb wheels; tinyd 1.0 by its sdist only, declared built-here), its build
    requirement tinybuild served as an sdist (an in-tree backend): a real rebuild with its own user caches; its exit
    code and the files of a build it left in the user's cache of ``installer``."""
    links, backends = tmp_path / "links", tmp_path / "backends"
    sdist = write_sdist(links, "tinyd", "1.0", _LOCKS, backend="tinybuild")
    write_sdist(backends, "tinybuild", "1.0", SDIST_BACKEND)
    project, _ = locked_tiny_project(tmp_path / "project", env_wheels(links), (("tinyd", "1.0", [sdist]),))
    declare_built_here(project, "tinyd")
    env = offline_env(PIP_FIND_LINKS=f"{links} {backends}", PIP_CACHE_DIR=str(tmp_path / "pipc"),
                      UV_CACHE_DIR=str(tmp_path / "uvc"))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    cache = tmp_path / ("pipc" if installer == "pip" else "uvc")
    return proc.returncode, sorted(p.name for p in cache.rglob("*") if p.is_file() and p.name not in _BOOKKEEPING
                                   and not p.relative_to(cache).parts[0].startswith("interpreter-"))


def test_pipcache2_control_a_uv_rebuild_leaves_nothing_in_the_users_uv_cache(tmp_path: Path) -> None:
    """uv's --no-cache holds for the build requirements too: the user's uv cache stays empty."""
    assert _declared_build(tmp_path, "uv") == (0, [])


def test_pipcache2_a_pip_rebuild_neither_reads_nor_writes_the_users_pip_cache(tmp_path: Path) -> None:
    """pip is given --no-cache-dir 'as uv's --no-cache'; but pip's build-env subprocess (the build requirements'
    install) gets the caller's PIP_CACHE_DIR and not the flag: the wheel it built of tinybuild is left in the user's
    cache with its origin.json (today), where the next build's build requirement is taken from."""
    code, left = _declared_build(tmp_path, "pip")
    assert code == 0 and left == [], f"the pip rebuild left {left} in the user's pip cache"


# UVVENV1 ----------------------------------------------------------------------------------------------------------


def _str8(text: str) -> bytes:
    """A msgpack str8 of ``text`` (32 to 255 bytes): how uv's interpreter cache stores a path."""
    data = text.encode()
    assert 32 <= len(data) < 256
    return b"\xd9" + bytes([len(data)]) + data


def _venv_built(tmp_path: Path) -> tuple[Path, Platform, dict[str, str], str]:
    """A tiny lock (pip, tinya, tinyb wheels) rebuilt once with uv, ``uvc`` its user's uv cache (kept by the install's
    allow-list): (project, platform, env, the base interpreter the build found and recorded)."""
    links = tmp_path / "links"
    project, plat = locked_tiny_project(tmp_path / "project", env_wheels(links))
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert not list((tmp_path / "uvc").glob("interpreter-v*/**/*.msgpack")), "the build wrote the user's uv cache"
    base = json.loads((current_env(project, plat) / "kernodeck-complete.json").read_text(encoding="utf-8"))
    # the user's own uv venv of that base (uv's default: with its cache) writes the interpreter's entry
    warm = subprocess.run([uv(), "venv", "--quiet", "--python", base["base_python"], str(tmp_path / "warm")], env=env,
                          capture_output=True, text=True, check=False)
    assert warm.returncode == 0, warm.stderr[-800:]
    return project, plat, env, str(base["base_python"])


def _other_interpreter(tmp_path: Path, cache: Path, base: str) -> Path:
    """Another interpreter binary (a copy of the base's: any binary would do), named by the user's uv cache as the
    base's executable: the interpreter entries `uv venv` wrote there edited, their freshness stamps left."""
    other = tmp_path / "other" / Path(base).name
    other.parent.mkdir()
    shutil.copy2(base, other)
    entries = list(cache.glob("interpreter-v*/**/*.msgpack"))
    assert entries, "uv venv wrote no interpreter entry into the user's uv cache"
    for entry in entries:
        data = entry.read_bytes()
        assert _str8(base) in data
        entry.write_bytes(data.replace(_str8(base), _str8(str(other))))
    return other


def test_uvvenv1_premise_the_create_step_writes_the_users_uv_cache_and_reads_the_interpreter_from_it(
        tmp_path: Path) -> None:
    """`uv venv` as it runs by default writes the base interpreter's entry into the user's uv cache (its
    executable's path), and then takes the executable that entry names."""
    _, _, env, base = _venv_built(tmp_path)
    other = _other_interpreter(tmp_path, tmp_path / "uvc", base)
    proc = subprocess.run([uv(), "venv", "--quiet", "--python", base, str(tmp_path / "v")], env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert os.path.realpath(tmp_path / "v" / "bin" / "python") == str(other)


def test_uvvenv1_control_a_uv_rebuild_links_the_env_to_the_base_it_found(tmp_path: Path) -> None:
    project, plat, _, base = _venv_built(tmp_path)
    assert os.path.realpath(current_env(project, plat) / "bin" / "python") == os.path.realpath(base)


def test_uvvenv1_a_uv_rebuild_never_promotes_an_env_running_another_interpreter_than_the_one_it_records(
        tmp_path: Path) -> None:
    """UVVENV1, fixed: the user's uv cache names another binary as the base's executable, and ``rebuild --fresh``
    (uv) promotes an env running the base it found and records: ``uv venv --no-cache`` reads no cache, and the build
    checks the env's interpreter against that base (seeds.require_runs). Before the fix: the env's bin/python and
    pyvenv.cfg's home were that binary, ``base_python`` the found one, reused by the next rebuild."""
    project, plat, env, base = _venv_built(tmp_path)
    other = _other_interpreter(tmp_path, tmp_path / "uvc", base)
    proc = kd(project, "rebuild", "--installer", "uv", "--fresh", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = current_env(project, plat)
    runs = os.path.realpath(promoted / "bin" / "python")
    recorded = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))["base_python"]
    assert recorded == base and runs == os.path.realpath(base) != str(other), \
        f"promoted an env running {runs}, recorded as built with {recorded}"


def test_uvvenv1_an_env_whose_interpreter_is_not_the_base_found_is_refused(tmp_path: Path) -> None:
    """The build's second check (seeds.require_runs): a venv whose bin/python leads to another binary than the base
    found is refused, naming both; the base itself passes (the control)."""
    from kernodeck.env.seeds import require_runs
    from kernodeck.errors import RebuildFailed

    base = os.path.realpath(sys.executable)
    other = tmp_path / "other" / Path(base).name
    other.parent.mkdir()
    shutil.copy2(base, other)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to(other)
    with pytest.raises(RebuildFailed, match="is not the base Python found"):
        require_runs(tmp_path / "bin" / "python", base)
    (tmp_path / "bin" / "python").unlink()
    (tmp_path / "bin" / "python").symlink_to(base)
    require_runs(tmp_path / "bin" / "python", base)
