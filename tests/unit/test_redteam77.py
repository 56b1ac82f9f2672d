"""Red-team pass 77 (issue 29; notes: /work/notes/redteam77.md): the pass-76 fixes (4f7f243), by class.

CASESUFFIX1 (kernodeck/env/records.py ``require_one_each``): SHADOWDIST1's fix counts dist-info folders with a
case-sensitive ``*.dist-info`` glob; importlib.metadata (pip's reader) lower-cases each name before it matches
``.dist-info``/``.egg-info``. A declared pin's wheel carrying ``TINYC-1.0.DIST-INFO`` (and 3 other spellings: data,
RECORD-owned by tinyd; ``read_records`` does not see them either) hides tinyc's real dist-info from pip check again:
tinyc requires tinymissing, yet "No broken requirements found." is recorded and the env promoted (pip and uv).
Held: a folder of another name whose METADATA says ``Name: tinyc`` (pip keys by the folder's name) and such
``.egg-info`` folders: pip check still fails.

PTHDOOR1 (kernodeck/env/rebuild.py ``pip_reads``; seeds.require_unchanged): HOMEWINDOW1's class by another file the
reader's interpreter reads at start-up: 3.11's getpath honours ``<dir of the executable>/<its name>._pth`` on Linux
too, even under ``-I -S``: ``<env>/bin/python._pth`` replaces sys.path, so its ``encodings`` is imported from a folder
it names before any line of envpip's script. ``require_unchanged`` holds bin/python and pyvenv.cfg only. A declared
build writes the file; in the reader, that encodings rewrites tinya and its RECORD line, removes the ``._pth`` and
re-executes: promoted, tinya = tinyd's bytes (pip and uv).
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest

from kernodeck.env.records import require_one_each
from kernodeck.errors import RebuildFailed
from tests.helpers.project import kd
from tests.helpers.reach import REACHED, broken_lock, linked_stdlib, never_promoted, refused, tinya_bytes
from tests.helpers.tinylock import (
    FIND_INSTALLER,
    SDIST_BACKEND,
    declared_tinyd,
    promoted_env,
)

_FOLDERS = {"other": [f"shadow{i}-1.0.dist-info" for i in range(24)],
            "suffix": [f"{c}-1.0.DIST-INFO" for c in ("tinyc", "Tinyc", "TINYC", "tinyC")],
            "egg": [f"shadow{i}-1.0.egg-info" for i in range(24)]}


def _shadow(folders: list[str]) -> str:
    out = ""
    for folder in folders:
        meta = "PKG-INFO" if folder.endswith("egg-info") else "METADATA"
        out += (f'             "tinyd-1.0.data/purelib/{folder}/{meta}": '
                'b"Metadata-Version: 2.1\\nName: tinyc\\nVersion: 1.0\\n",\n')
        if not folder.endswith("egg-info"):
            out += f'             "tinyd-1.0.data/purelib/{folder}/RECORD": b"",\n'
    return out


def _broken_lock(tmp_path: Path, kind: str | None) -> tuple[Path, dict[str, str]]:
    """The broken lock (tests/helpers/reach.py); with ``kind``, tinyd's wheel carries folders pip reads as tinyc's."""
    return broken_lock(tmp_path, _shadow(_FOLDERS[kind]) if kind else "")


def _site_with(tmp_path: Path, *folders: str) -> Path:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for folder in folders:
        (site / folder).mkdir(parents=True)
        (site / folder / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyc\nVersion: 1.0\n", encoding="utf-8")
    return tmp_path


def test_casesuffix1_an_upper_case_suffix_is_counted(tmp_path: Path) -> None:
    """Before the fix, a case-sensitive glob never saw it (the premise); now it is named."""
    with pytest.raises(RebuildFailed, match=r"TINYC-1\.0\.DIST-INFO"):
        require_one_each(_site_with(tmp_path, "tinyc-1.0.dist-info", "TINYC-1.0.DIST-INFO"), ["tinyc"])


def test_casesuffix1_control_an_upper_case_name_is_counted(tmp_path: Path) -> None:
    with pytest.raises(RebuildFailed, match="several folders"):
        require_one_each(_site_with(tmp_path, "tinyc-1.0.dist-info", "TINYC-1.0.dist-info"), ["tinyc"])


@pytest.mark.parametrize("kind", [None, "other", "egg"])
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_casesuffix1_control_pip_check_fails_without_or_with_held_shadows(tmp_path: Path, installer: str,
                                                                         kind: str | None) -> None:
    """No shadow, or shadows pip does not take for tinyc (another folder name, .egg-info): pip check fails (an
    .egg-info no wheel's install writes, or a folder of a name the lock does not pin, is refused before it, since
    passes 77 and 78)."""
    project, env = _broken_lock(tmp_path, kind)
    said = "not the lock's installs" if kind else "pip-check failed: tinyc 1.0 requires tinymissing"
    refused(project, env, installer, said)


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_casesuffix1_an_upper_case_suffix_never_hides_a_failed_pip_check(tmp_path: Path, installer: str) -> None:
    project, env = _broken_lock(tmp_path, "suffix")
    never_promoted(project, env, installer)


# PTHDOOR1 ----------------------------------------------------------------------------------------------------------

_HOOK = "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"

# Led into another standard library's encodings/__init__.py: in the reader of an env being built (its command line
# runs pip's main), tinya's module and its RECORD line rewritten, the env's bin/python._pth removed, the process
# executed again (now the base's standard library). Given MARK: only a mark that it ran.
def _other_stdlib(tmp_path: Path, mark: Path | None) -> list[str]:
    """Another standard library (reach.linked_stdlib; the reach removes the env's bin/python._pth and runs the process
    again): the lines of a ``._pth`` naming it (and the base's lib-dynload)."""
    lib = linked_stdlib(tmp_path / "other", mark, '    os.unlink(argv[0] + b"._pth")\n    os.execv(argv[0], argv)')
    return [str(lib), str(Path(sysconfig.get_path("stdlib")) / "lib-dynload")]


# The backend's reach (tinybuild, at build time: the stated part): a ._pth beside the env's interpreter, naming PTH.
_PTH = "import os\n" + FIND_INSTALLER + r"""
def _reach():
    env = _installer()[1]
    open(os.path.join(env, "bin", "python._pth"), "w").write("\n".join(PTH) + "\n")
"""


def _declared_pth(tmp_path: Path, pth: list[str] | None) -> tuple[Path, dict[str, str]]:
    assert _HOOK in SDIST_BACKEND
    backend = SDIST_BACKEND if pth is None else (
        _PTH.replace("PTH", repr(pth)) + SDIST_BACKEND.replace(_HOOK, _HOOK + "    _reach()\n"))
    project, _, env = declared_tinyd(tmp_path, backend)
    return project, env


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pthdoor1_no_interpreter_of_the_env_starts_before_the_seal(tmp_path: Path, installer: str) -> None:
    """Measured before the fix: the other standard library's encodings ran once, in the reader (the first process of
    the env's interpreter after the build). The reader is now the base interpreter: nothing the build wrote in the
    env's bin/ is read before the seal."""
    mark = tmp_path / "ran"
    project, env = _declared_pth(tmp_path, _other_stdlib(tmp_path, mark))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode in (0, 2) and not mark.exists(), proc.stderr[-800:]


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pthdoor1_control_the_same_build_without_the_pth_promotes_the_locks_tinya(tmp_path: Path,
                                                                                  installer: str) -> None:
    project, env = _declared_pth(tmp_path, None)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode == 0 and promoted is not None, proc.stderr[-800:]
    assert tinya_bytes(promoted) == b"VERSION = '1.0'\n"


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_pthdoor1_no_stdlib_a_pth_names_runs_before_the_seal(tmp_path: Path, installer: str) -> None:
    project, env = _declared_pth(tmp_path, _other_stdlib(tmp_path, None))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or tinya_bytes(promoted) != REACHED, \
        f"promoted with tinya {REACHED!r} (rc {proc.returncode})"
