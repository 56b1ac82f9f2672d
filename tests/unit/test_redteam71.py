"""Red-team pass 71 (notes: /work/notes/redteam71.md): issue 29 by class, on the newest fixes (passes 68-70: the
install rests on no cache, the env's interpreter checked against the base found, pins built here refused unless
declared, the judging processes' environment).

VENVHOME1 (kernodeck/env/seeds.py ``require_runs``; rebuild.py ``create``): UVVENV1's fix holds the env's interpreter
to the base it found by ``bin/python``'s target alone. The interpreter that runs is that binary AND the ``home`` its
pyvenv.cfg names: ``home`` decides ``sys.base_prefix`` and the standard library every in-env process imports (and
which the closed world trusts as "the base interpreter's": inenv/homes.py reads it from the running interpreter's
sysconfig). pyvenv.cfg is a file "the venv tool writes" (envfiles.VENV_FILES): no RECORD, no digest, its content read
by no check. Two doors measured: a declared built-here pin's build (its backend runs while the env exists, with the
user's rights) rewrites it, pip and uv; and a module of the project's root folder shadowing a stdlib module (here
``textwrap.py``): ``python -m venv``, the pip build's create step, runs without ``-I`` in the project root, so that
folder is first on its ``sys.path`` (the orchestrator started as ``python -m kernodeck`` there imports it too: the
notes). Either way ``rebuild`` promotes an env running another standard library, ``base_python`` records the base
found, and the next ``rebuild`` reuses it ("same lock digest, same base interpreter"). Fix idea: read the env's
interpreter back as it runs (``bin/python -I -S``: ``sys.base_prefix``, ``sysconfig`` stdlib) against the base's own,
after the install too; hold pyvenv.cfg's content (its digest recorded, checked at reuse and verify); every build
command with ``-I`` (``base -I -m venv``; ``-I -m pip``).

BUILDREACH1 (rebuild.py ``install``; sdist_builds.py): a declared built-here pin is "recorded, not proven": its own
bytes. But its build runs the build requirements' code during the env's install, with the user's rights, and a
process it leaves behind edits ANOTHER pin's files and their RECORD line once the installer exits, before the seal:
``rebuild`` (pip and uv) promotes an env whose tinya (a wheel pin) holds bytes tinyd's build wrote, its completion
record binding tinya to its wheel's sha256 as verified, reused by the next rebuild. The record's ``built_here`` names
tinyd only. Fix idea: build the declared pins apart, into a folder of the build's own, in a process tree waited out
whole (a subreaper or a cgroup: no process of a build outlives it), then install every pin from files with no build
(the declared ones from those wheels, recorded by their hashes); or hold each wheel pin's installed files to the RECORD
inside the lock's wheel file, read and hashed by Kernodeck itself. At least: docs/rebuild.md says a declared build can
change any file of the env, not only its own pin's.

Fixed, both: every Python a build runs has ``-I`` (``base -I -m venv``, ``-I -m pip``), the env's interpreter and its
pyvenv.cfg are held from the env's creation to its seal (seeds.made / require_unchanged); every process carrying a
long command's mark (``_proc.COMMAND_MARK``, inherited by a session of its own too) is stopped once it exits
(``_proc.stop_carrying``), so nothing a build started outlives the install. Stated: a build's code that sheds the
mark (a clean environment) is beyond it: a declared pin's build runs with your
rights (docs/rebuild.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from kernodeck.env.seeds import require_runs
from kernodeck.project.platforms import Platform
from tests.helpers.project import kd
from tests.helpers.tinylock import (
    FIND_INSTALLER,
    SDIST_BACKEND,
    current_env,
    declared_tinyd,
    promoted_env,
)

_EVIL = "EVIL = 'the other stdlib'\n"
_REACHED = b"VALUE = 'written by the build of tinyd'"


def _other_stdlib(tmp_path: Path) -> Path:
    """Another standard library (the base's, linked file by file, its textwrap.py carrying ``EVIL``): the ``bin``
    folder a pyvenv.cfg ``home`` would name."""
    base = Path(sysconfig.get_path("stdlib"))
    lib = tmp_path / "other" / "lib" / base.name
    lib.mkdir(parents=True)
    (tmp_path / "other" / "bin").mkdir()
    for entry in base.iterdir():
        if entry.name not in ("textwrap.py", "site-packages", "__pycache__"):
            (lib / entry.name).symlink_to(entry)
    (lib / "site-packages").mkdir()
    (lib / "textwrap.py").write_text((base / "textwrap.py").read_text(encoding="utf-8") + _EVIL, encoding="utf-8")
    return tmp_path / "other" / "bin"


def _runs(env: Path) -> tuple[str, bool]:
    """The env's interpreter as it runs: its ``sys.base_prefix``, and whether its textwrap is the other one."""
    proc = subprocess.run([str(env / "bin" / "python"), "-I", "-c",
                           "import sys, textwrap; print(sys.base_prefix); print(hasattr(textwrap, 'EVIL'))"],
                          capture_output=True, text=True, check=True, cwd="/")
    prefix, evil = proc.stdout.split()
    return prefix, evil == "True"


# A build backend's prologue: the env being installed (its interpreter, on an ancestor's command line: pip's own
# argv[0], uv's --python), and what the build does beyond its own pin (MODE).
_REACH = r'''
import os, subprocess, sys

''' + FIND_INSTALLER + r'''
# Left behind: once the installer has exited, tinya's module rewritten (and its RECORD line, with RECORD_TOO).
_LATER = """
import base64, hashlib, os, sys, time
pid, env, record_too = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
while os.path.exists(f"/proc/{pid}"):
    time.sleep(0.01)
time.sleep(0.05)  # then at once: well before the checks and the seal (they take over 200 ms here)
site = next(os.path.join(env, "lib", d, "site-packages") for d in os.listdir(os.path.join(env, "lib")))
data = REACHED
open(os.path.join(site, "tinya", "__init__.py"), "wb").write(data)
if record_too:
    record = os.path.join(site, "tinya-1.0.dist-info", "RECORD")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines = [f"tinya/__init__.py,sha256={digest},{len(data)}" if line.startswith("tinya/__init__.py,") else line
             for line in open(record).read().splitlines()]
    open(record, "w").write("\\n".join(lines) + "\\n")
"""

def _reach():
    pid, env = _installer()
    if MODE == "home":
        cfg = os.path.join(env, "pyvenv.cfg")
        text = "".join(f"home = {OTHER}\n" if line.startswith("home") else line for line in open(cfg))
        open(cfg, "w").write(text)
    elif not os.environ.get("_LEFT_BEHIND"):  # once (pip may call build_wheel for the metadata first)
        os.environ["_LEFT_BEHIND"] = "1"
        subprocess.Popen([sys.executable, "-c", _LATER, str(pid), env, "1" if MODE == "files" else "0"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
'''


def _declared_reach(tmp_path: Path, mode: str, other: Path | None = None) -> tuple[Path, Platform, dict[str, str]]:
    """A tiny lock (pip, tinya, tinyb wheels; tinyd 1.0 by its sdist only, declared built-here) whose build
    requirement tinybuild (served as a wheel) does ``mode`` beyond tinyd: ``none``; ``home`` (the env's pyvenv.cfg
    ``home`` set to ``other``); ``files`` (tinya's module and its RECORD line rewritten after the install);
    ``file-only`` (the module alone)."""
    prologue = "" if mode == "none" else _REACH.replace("MODE", repr(mode)).replace("OTHER", repr(str(other))) \
        .replace("REACHED", repr(_REACHED))
    hook = "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
    backend = prologue + SDIST_BACKEND.replace(hook, hook + ("    _reach()\n" if prologue else ""))
    assert hook in SDIST_BACKEND
    return declared_tinyd(tmp_path, backend)




# VENVHOME1 --------------------------------------------------------------------------------------------------------


def test_venvhome1_premise_pyvenv_cfg_home_decides_the_stdlib_while_bin_python_is_the_base(tmp_path: Path) -> None:
    """A venv of the base whose pyvenv.cfg ``home`` names another folder runs that folder's standard library
    (``sys.base_prefix``, its textwrap), and ``require_runs`` (UVVENV1's check) passes it: bin/python is the base."""
    other = _other_stdlib(tmp_path)
    base = os.path.realpath(sys._base_executable)  # type: ignore[attr-defined]
    subprocess.run([base, "-I", "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True, capture_output=True)
    cfg = tmp_path / "v" / "pyvenv.cfg"
    cfg.write_text("".join(f"home = {other}\n" if line.startswith("home") else line
                           for line in cfg.read_text(encoding="utf-8").splitlines(keepends=True)), encoding="utf-8")
    require_runs(tmp_path / "v" / "bin" / "python", base)
    assert _runs(tmp_path / "v") == (str(other.parent), True)


def test_venvhome1_control_a_declared_build_that_stays_in_its_pin_leaves_the_bases_stdlib(tmp_path: Path) -> None:
    project, plat, env = _declared_reach(tmp_path, "none")
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    base = json.loads((current_env(project, plat) / "kernodeck-complete.json").read_text(encoding="utf-8"))
    assert _runs(current_env(project, plat)) == (sys.base_prefix, False)
    assert os.path.realpath(base["base_python"]).startswith(sys.base_prefix)


@pytest.mark.parametrize("door", ["declared-build-pip", "declared-build-uv", "project-root-module-pip"])
def test_venvhome1_a_rebuild_never_promotes_an_env_running_another_stdlib_than_its_bases(
        tmp_path: Path, door: str) -> None:
    """The env's pyvenv.cfg ``home`` set to another standard library during the build: by a declared pin's build
    (pip, uv), or by a ``textwrap.py`` in the project root that the create step's ``python -m venv`` imports. The
    rebuild must not promote it (today: rc 0, ``base_python`` the base found, the env's textwrap the other one, and
    the next rebuild reuses it)."""
    other = _other_stdlib(tmp_path)
    project, _, env = _declared_reach(tmp_path, "none" if door.startswith("project") else "home", other)
    if door.startswith("project"):
        (project / "textwrap.py").write_text(
            "import atexit, importlib.util, sys, sysconfig\n"
            "_spec = importlib.util.spec_from_file_location(\n"
            "    '_textwrap', sysconfig.get_path('stdlib') + '/textwrap.py')\n"
            "_real = importlib.util.module_from_spec(_spec)\n_spec.loader.exec_module(_real)\n"
            "globals().update({k: v for k, v in vars(_real).items() if not k.startswith('__')})\n"
            "if sys.argv[:1] == ['-m'] and '/.venv-rebuild/' in sys.argv[-1]:  # the create step: python -m venv\n"
            "    def _home(cfg=sys.argv[-1] + '/pyvenv.cfg'):\n"
            f"        text = ''.join('home = {other}\\n' if l.startswith('home') else l for l in open(cfg))\n"
            "        open(cfg, 'w').write(text)\n"
            "    atexit.register(_home)\n", encoding="utf-8")
    proc = kd(project, "rebuild", "--installer", door.rsplit("-", 1)[1], env=env)
    promoted = promoted_env(project)
    if promoted is not None:
        runs = _runs(promoted)
        recorded = json.loads((promoted / "kernodeck-complete.json").read_text(encoding="utf-8"))["base_python"]
        assert runs == (sys.base_prefix, False), \
            f"promoted an env running the stdlib of {runs[0]}, recorded as built with {recorded} (rc {proc.returncode})"
    if door.startswith("project"):  # fixed: every Python the build runs has -I, the project's folder off its path
        assert proc.returncode == 0 and promoted is not None, proc.stderr[-800:]
    else:  # fixed: pyvenv.cfg held from the env's creation to its seal (seeds.require_unchanged)
        assert proc.returncode == 2 and "pyvenv.cfg changed during the install" in proc.stderr, proc.stderr[-800:]


# BUILDREACH1 ------------------------------------------------------------------------------------------------------


def _tinya(env: Path) -> bytes:
    return next(env.glob("lib/python*/site-packages/tinya/__init__.py")).read_bytes()


def test_buildreach1_premise_the_process_a_declared_build_leaves_outlives_the_installer(tmp_path: Path) -> None:
    """The declared build's process, in a session of its own, is still running when the installer exits: the
    rebuild finds it by the command's mark and stops it, and says so."""
    project, _, env = _declared_reach(tmp_path, "file-only")
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert "process(es) the command started outlived it" in proc.stderr, proc.stderr[-800:]
    assert proc.returncode == 0 and _tinya(promoted_env(project) or tmp_path) != _REACHED


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_buildreach1_a_declared_build_never_changes_another_pins_bytes_in_a_promoted_env(
        tmp_path: Path, installer: str) -> None:
    """BUILDREACH1, fixed: tinyd is declared built-here; its build requirement's code leaves a process (a session of
    its own) that would rewrite tinya (a wheel pin) and its RECORD line once the installer exits; it is stopped with
    the installer (_proc.stop_carrying), and the env promoted holds tinya's wheel (before the fix: tinya held
    tinyd's bytes, bound to its wheel's sha256, reused by the next rebuild)."""
    project, _, env = _declared_reach(tmp_path, "files")
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    promoted = promoted_env(project)
    assert promoted is not None and _tinya(promoted) != _REACHED, f"promoted with tinya {_REACHED!r}"
