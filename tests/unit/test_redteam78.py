"""Red-team pass 78 (issue 29; notes: /work/notes/redteam78.md): the reader before the seal (envpip, ecac11d), by class.

NAMEFOLD1 (kernodeck/env/records.py ``require_one_each``; inventory.require_the_locks): pip (26.3, Kernodeck's) keys
a distribution by its metadata folder's name (``get_dist_canonical_name``: the folder before METADATA's ``Name``) in
pip check's package set, but ``pip freeze`` prints METADATA's ``Name`` and folds equal names into one line
(``installations[req.canonical_name]``). A declared pin's wheel (data, RECORD-owned by tinyd) carrying
``tinymissing-1.0.dist-info`` whose METADATA says ``Name: tinyc``: pip check finds tinymissing (tinyc's missing
requirement) and says "No broken requirements found."; freeze prints ``tinyc==1.0`` twice, folded into one, so
require_the_locks sees the lock's set; require_one_each sees one folder per name (it does not ask whether the lock
pins that name); read_records skips an unpinned name; ownership: tinyd's RECORD owns the files. The env is promoted
with a false pip_check. Control: the same folder saying ``Name: tinymissing`` is printed by freeze and refused.

Held: a pin's folder made a link to a folder outside the env by a declared build before the install (pip and uv
write tinya through it): the seal's lstat scan sees a link no RECORD owns and tinya's files missing: refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernodeck.env.records import require_one_each
from kernodeck.errors import RebuildFailed
from tests.helpers.project import kd
from tests.helpers.reach import broken_lock, never_promoted, refused
from tests.helpers.tinylock import (
    FIND_INSTALLER,
    SDIST_BACKEND,
    declared_tinyd,
    promoted_env,
)


def _folded(name: str) -> str:
    """tinyd's wheel carries tinymissing-1.0.dist-info whose METADATA says ``Name: {name}``."""
    return (f'             "tinyd-1.0.data/purelib/tinymissing-1.0.dist-info/METADATA": '
            f'b"Metadata-Version: 2.1\\nName: {name}\\nVersion: 1.0\\n",\n'
            '             "tinyd-1.0.data/purelib/tinymissing-1.0.dist-info/RECORD": b"",\n')


def _broken_lock(tmp_path: Path, name: str | None) -> tuple[Path, dict[str, str]]:
    """The broken lock (tests/helpers/reach.py); with ``name``, tinyd's wheel carries the tinymissing folder naming
    ``name``."""
    return broken_lock(tmp_path, _folded(name) if name else "")


def test_namefold1_an_unpinned_folder_whose_metadata_names_a_pin_is_refused(tmp_path: Path) -> None:
    """Before the fix require_one_each counted folders by their own names only: this env passed (the premise)."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    for folder in ("tinyc-1.0.dist-info", "tinymissing-1.0.dist-info"):
        (site / folder).mkdir(parents=True)
        (site / folder / "METADATA").write_text("Metadata-Version: 2.1\nName: tinyc\nVersion: 1.0\n",
                                                encoding="utf-8")
    with pytest.raises(RebuildFailed, match="not a pin of the lock"):
        require_one_each(tmp_path, ["tinyc"])


@pytest.mark.parametrize("name", [None, "tinymissing"])
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_namefold1_control_no_folder_or_its_own_name_is_refused(tmp_path: Path, installer: str,
                                                                name: str | None) -> None:
    """No folder: pip check fails. The folder under its own name: freeze prints it, the env is not the lock's."""
    project, env = _broken_lock(tmp_path, name)
    refused(project, env, installer, "tinymissing" if name else "pip-check failed: tinyc 1.0 requires tinymissing")


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_namefold1_a_folded_folder_never_hides_a_failed_pip_check(tmp_path: Path, installer: str) -> None:
    project, env = _broken_lock(tmp_path, "tinyc")
    never_promoted(project, env, installer)


# Held (pass 78): a folder of a pin made a link to a place outside the env by a declared build, before the install
# writes the pin through it -------------------------------------------------------------------------------------

_HOOK = "def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):\n"
_LINKED = "import os\n" + FIND_INSTALLER + r"""
def _reach():
    env = _installer()[1]
    lib = os.path.join(env, "lib")
    site = os.path.join(lib, os.listdir(lib)[0], "site-packages")
    os.makedirs(OUTSIDE, exist_ok=True)
    if not os.path.lexists(os.path.join(site, "tinya")):
        os.symlink(OUTSIDE, os.path.join(site, "tinya"))
"""


@pytest.mark.parametrize("linked", [False, True])
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_linked_folder_held_a_pin_written_through_a_link_is_refused(tmp_path: Path, installer: str,
                                                                     linked: bool) -> None:
    outside = tmp_path / "outside"
    backend = SDIST_BACKEND.replace(_HOOK, _HOOK + "    _reach()\n") if linked else SDIST_BACKEND
    assert _HOOK in SDIST_BACKEND
    project, _, env = declared_tinyd(tmp_path, _LINKED.replace("OUTSIDE", repr(str(outside))) + backend)
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    promoted = promoted_env(project)
    if not linked:
        assert proc.returncode == 0 and promoted is not None, proc.stderr[-800:]
        return
    assert (outside / "__init__.py").is_file(), proc.stderr[-800:]  # the install wrote tinya through the link
    assert proc.returncode == 2 and promoted is None, proc.stderr[-800:]
