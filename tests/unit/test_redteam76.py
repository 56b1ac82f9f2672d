"""Red-team pass 76 (issue 29; notes: /work/notes/redteam76.md): "no code of the env runs, and nothing of it decides
the record, between the install and the seal", on envpip (f682cc4, a05e1a0) and the checks after it.

HOMEWINDOW1 (kernodeck/env/rebuild.py ``run``: ``check_and_freeze`` before ``seeds.require_unchanged``): VENVHOME1's
fix holds pyvenv.cfg from the env's creation to its seal, but reads it back only AFTER the freeze/check process ran.
That process is the env's interpreter (``bin/python -I -S -B -c ...``): its standard library is the one pyvenv.cfg's
``home`` names, imported at start-up (``encodings``) before any line of envpip's script (its audit hook, EnvFolders)
runs. A declared built-here pin's build (its backend runs with the user's rights during the install: stated) sets
``home`` to another standard library; in the freeze/check process that library's ``encodings`` rewrites tinya (a wheel
pin) and its RECORD line, writes pyvenv.cfg back byte for byte, and re-executes the process, which then freezes and
checks as usual. ``require_unchanged`` reads the restored pyvenv.cfg: the env is promoted with tinya holding bytes the
declared build chose, bound to tinya's wheel sha256.

OWNTWICE1 (kernodeck/env/records.py ``read_records``; sealing.py ``seal``): a path that two RECORDs list is kept once,
with the digest of the RECORD read last (dist-info folders in sorted order): the other's line is never checked. A
declared built-here pin's wheel that lists (and writes) ``tinya/__init__.py`` itself, installed after tinya (uv's
order here), leaves tinya's own RECORD line unchecked and false: the seal passes ("every file a RECORD lists hashed
against its digest"), the env is promoted, tinya bound to its wheel's sha256 and holding tinyd's bytes. No code runs
after the install: the wheel's data alone. With pip (tinyd installed first, tinya over it) the seal refuses: control.

SHADOWDIST1 (kernodeck/env/envpip.py's readers; records.read_records; verify's ``shadowed``, recorded only): pip freeze
and pip check (importlib.metadata, both readers) take ONE dist-info per name, the first in the folder's listing. A
declared pin's wheel that carries other dist-infos of a locked name (tinyc, spelled TINYC, Tinyc, ...: 31 spellings,
each an empty RECORD, all RECORD-owned data) without its locked requirement hides the real one: tinyc requires
tinymissing, which the lock lacks, yet the build records pip_check "No broken requirements found." and is promoted
(pip and uv). The listing order decides it (ext4 here: a hash of the name; a file system listing newest first, as
tmpfs, would put pip's tinyc first, the declared wheel being installed before it: the xfail would then pass).

Premises show each door at its smallest; controls the same builds without the reach; the attacks are strict xfails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernodeck.env.records import check_record_digests, read_records
from tests.helpers.project import kd
from tests.helpers.reach import (
    REACHED,
    WHEEL_ENTRY,
    bound,
    broken_lock,
    linked_stdlib,
    never_promoted,
    record_line,
    refused,
    tinya_bytes,
)
from tests.helpers.tinylock import (
    FIND_INSTALLER,
    SDIST_BACKEND,
    declared_tinyd,
    promoted_env,
)

_LOCKS = b"VERSION = '1.0'\n"  # tinya's module as its locked wheel holds it
_HOOK = "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"


# HOMEWINDOW1 ------------------------------------------------------------------------------------------------------

# Prepended to the other standard library's encodings/__init__.py: in the freeze/check process of an env being built
# (its command line runs pip's main), tinya's module and its RECORD line rewritten, pyvenv.cfg written back as it was
# made, the process executed again (now with the base's standard library). Given MARK: only a mark that it ran.
_TAIL = """    os.replace(os.path.join(env, b".kd-made.cfg"), os.path.join(env, b"pyvenv.cfg"))
    os.execv(argv[0], argv)"""  # pyvenv.cfg written back as it was made, the process run again


def _other_stdlib(tmp_path: Path, mark: Path | None, *, reach: bool = True) -> Path:
    """Another standard library (reach.linked_stdlib; ``reach``: else the base's own encodings): the ``bin`` folder
    a pyvenv.cfg ``home`` names."""
    lib = linked_stdlib(tmp_path / "other", mark, _TAIL if reach else "    return")
    (tmp_path / "other" / "bin").mkdir()
    (lib / "site-packages").mkdir()
    return tmp_path / "other" / "bin"


# The backend's reach (tinybuild, at build time: the stated part): the env's pyvenv.cfg kept as made
# (.kd-made.cfg, which the reach moves back), its home set to OTHER.
_HOME = "import os\n" + FIND_INSTALLER + r'''
def _reach():
    env = _installer()[1]
    cfg = os.path.join(env, "pyvenv.cfg")
    made = open(cfg, "rb").read()
    if not os.path.exists(os.path.join(env, ".kd-made.cfg")):
        open(os.path.join(env, ".kd-made.cfg"), "wb").write(made)
    text = "".join(f"home = {OTHER}\n" if line.startswith("home") else line for line in open(cfg))
    open(cfg, "w").write(text)
'''


def _declared_home(tmp_path: Path, other: Path | None) -> tuple[Path, dict[str, str]]:
    """The tiny lock, tinyd declared built-here; with ``other``, tinyd's build sets the env's home to it."""
    assert _HOOK in SDIST_BACKEND
    backend = SDIST_BACKEND if other is None else (
        _HOME.replace("OTHER", repr(str(other))) + SDIST_BACKEND.replace(_HOOK, _HOOK + "    _reach()\n"))
    project, _, env = declared_tinyd(tmp_path, backend)
    return project, env


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_homewindow1_no_reader_starts_on_a_home_the_build_changed(tmp_path: Path, installer: str) -> None:
    """Measured before the fix: the other standard library's encodings ran in the build's freeze/check process (the
    first process of the env's interpreter after the build). Now the env's home is held before any reader starts:
    the rebuild is refused, that encodings never ran."""
    mark = tmp_path / "ran"
    project, env = _declared_home(tmp_path, _other_stdlib(tmp_path, mark))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 2 and "pyvenv.cfg changed during the install" in proc.stderr, proc.stderr[-800:]
    assert not mark.exists() and promoted_env(project) is None


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_homewindow1_control_a_home_left_changed_is_refused_before_the_seal(tmp_path: Path, installer: str) -> None:
    """VENVHOME1's fix: the same build, the other standard library the base's own (nothing writes pyvenv.cfg back):
    the freeze/check process runs, then the check after it refuses the changed pyvenv.cfg; nothing is promoted."""
    project, env = _declared_home(tmp_path, _other_stdlib(tmp_path, None, reach=False))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 2 and "pyvenv.cfg changed during the install" in proc.stderr, proc.stderr[-800:]
    assert promoted_env(project) is None


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_homewindow1_no_stdlib_a_build_names_runs_before_the_seal(tmp_path: Path, installer: str) -> None:
    project, env = _declared_home(tmp_path, _other_stdlib(tmp_path, None))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    assert proc.returncode in (0, 2), proc.stderr[-800:]
    assert promoted is None or tinya_bytes(promoted) != REACHED, \
        f"promoted with tinya {REACHED!r} (rc {proc.returncode}), bound to {bound(promoted)}"


# OWNTWICE1 --------------------------------------------------------------------------------------------------------


def _two_records(tmp_path: Path, *, tinyd_lists_it: bool) -> Path:
    """An env whose tinya/__init__.py holds ``REACHED``: tinya's RECORD lists it with its locked digest; with
    ``tinyd_lists_it``, tinyd's RECORD lists it too, with the digest of what it holds."""
    site = tmp_path / "env" / "lib" / "python3.11" / "site-packages"
    (site / "tinya").mkdir(parents=True)
    (site / "tinya" / "__init__.py").write_bytes(REACHED)
    for name, lines in (("tinya", [record_line("tinya/__init__.py", _LOCKS)]),
                        ("tinyd", [record_line("tinyd/__init__.py", b"")]
                         + ([record_line("tinya/__init__.py", REACHED)] if tinyd_lists_it else []))):
        (site / f"{name}-1.0.dist-info").mkdir()
        (site / f"{name}-1.0.dist-info" / "RECORD").write_text(
            "\n".join([*lines, f"{name}-1.0.dist-info/RECORD,,"]) + "\n", encoding="utf-8")
    (site / "tinyd").mkdir()
    (site / "tinyd" / "__init__.py").write_bytes(b"")
    return tmp_path / "env"


def test_owntwice1_premise_a_path_two_records_list_keeps_the_last_records_digest(tmp_path: Path) -> None:
    env = _two_records(tmp_path, tinyd_lists_it=True)
    records = read_records(env, {"tinya", "tinyd"})
    path = "lib/python3.11/site-packages/tinya/__init__.py"
    assert records.owned[path] == "tinyd"  # one owner kept: the last read; tinya's line is kept beside it (the fix)
    assert records.again == [(path, (record_line(path.split("site-packages/")[1], _LOCKS).split(",")[1], len(_LOCKS)))]


def test_owntwice1_control_the_one_record_listing_a_changed_file_is_checked(tmp_path: Path) -> None:
    env = _two_records(tmp_path, tinyd_lists_it=False)
    found = check_record_digests(env, read_records(env, {"tinya", "tinyd"})).mismatched
    assert found == ["lib/python3.11/site-packages/tinya/__init__.py (content differs from RECORD)"]


def test_owntwice1_every_records_line_is_checked(tmp_path: Path) -> None:
    env = _two_records(tmp_path, tinyd_lists_it=True)
    found = check_record_digests(env, read_records(env, {"tinya", "tinyd"})).mismatched
    assert any("tinya/__init__.py" in f for f in found), found


def _declared_over(tmp_path: Path, over: bool) -> tuple[Path, dict[str, str]]:
    """The tiny lock, tinyd declared built-here; with ``over``, tinyd's wheel also holds (and its RECORD lists)
    ``tinya/__init__.py``, its bytes ``REACHED``: data only, no code of it runs after its build."""
    assert WHEEL_ENTRY in SDIST_BACKEND
    backend = SDIST_BACKEND if not over else SDIST_BACKEND.replace(
        WHEEL_ENTRY, f'             "tinya/__init__.py": {REACHED!r},\n' + WHEEL_ENTRY)
    project, _, env = declared_tinyd(tmp_path, backend)
    return project, env


def test_owntwice1_control_uv_a_declared_build_in_its_pin_promotes_the_locks_tinya(tmp_path: Path) -> None:
    project, env = _declared_over(tmp_path, over=False)
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    promoted = promoted_env(project)
    assert proc.returncode == 0 and promoted is not None, proc.stderr[-800:]
    assert tinya_bytes(promoted) == _LOCKS


def test_owntwice1_control_pip_installs_tinya_over_tinyd_and_the_seal_refuses(tmp_path: Path) -> None:
    """pip installs the wheel it built first, tinya's over it: tinyd's line (read last) is checked and fails."""
    project, env = _declared_over(tmp_path, over=True)
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 2 and "differ from their RECORD digest" in proc.stderr, proc.stderr[-800:]
    assert promoted_env(project) is None


def test_owntwice1_a_declared_wheel_never_replaces_another_pins_file_in_a_promoted_env(tmp_path: Path) -> None:
    """uv installs the wheels in parallel: tinyd after tinya in about 4 runs of 5 here (then promoted), else the seal
    refuses (tinyd's line, read last, fails). Up to 6 builds: all refused by chance is about 1 in 15,000 (an XPASS)."""
    for attempt in range(6):
        project, env = _declared_over(tmp_path / str(attempt), over=True)
        proc = kd(project, "rebuild", "--installer", "uv", env=env)
        promoted = promoted_env(project)
        assert proc.returncode in (0, 2), proc.stderr[-800:]
        assert promoted is None or tinya_bytes(promoted) != REACHED, \
            f"promoted with tinya {REACHED!r} (rc {proc.returncode}, build {attempt + 1}), bound to {bound(promoted)}"


# SHADOWDIST1 ------------------------------------------------------------------------------------------------------

# tinyd's wheel (declared built-here) also holds, in its purelib data, second dist-infos of tinyc (a wheel pin whose
# locked METADATA requires tinymissing), without that requirement (an empty RECORD each, as the seal asks
# of a locked name): all RECORD-owned data. pip (importlib.metadata)
# takes the first folder of a name in the directory's listing order (ext4: a hash of the name, seeded per file
# system): each of tinyc's 31 other spellings by case (TINYC-1.0.dist-info, ...) is one more chance to come first.
_SPELLINGS = ["".join(c.upper() if bit & (1 << i) else c for i, c in enumerate("tinyc")) for bit in range(1, 32)]
_SHADOW = "".join(f'             "tinyd-1.0.data/purelib/{name}-1.0.dist-info/METADATA": '
                  'b"Metadata-Version: 2.1\\nName: tinyc\\nVersion: 1.0\\n",\n'
                  f'             "tinyd-1.0.data/purelib/{name}-1.0.dist-info/RECORD": b"",\n' for name in _SPELLINGS)


def _broken_lock(tmp_path: Path, shadow: bool) -> tuple[Path, dict[str, str]]:
    """The broken lock (tests/helpers/reach.py); with ``shadow``, tinyd's wheel carries tinyc's second dist-info."""
    return broken_lock(tmp_path, _SHADOW if shadow else "")


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_shadowdist1_control_a_broken_lock_fails_pip_check(tmp_path: Path, installer: str) -> None:
    project, env = _broken_lock(tmp_path, shadow=False)
    refused(project, env, installer, "pip-check failed: tinyc 1.0 requires tinymissing")


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_shadowdist1_a_second_dist_info_never_hides_a_failed_pip_check(tmp_path: Path, installer: str) -> None:
    project, env = _broken_lock(tmp_path, shadow=True)
    never_promoted(project, env, installer)
