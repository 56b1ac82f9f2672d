"""THE lock check given the lock and its twin as already read (``require_checked(..., read=read_lock(...))``, what
verify's lock-check step does with its run context) decides as the check that reads them itself (``lock --check``,
``rebuild``): the same pass, the same error and message on each kind of bad lock or twin; and it reads neither again.

On a copy of the project with its committed locks (no resolver runs, no index is asked).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kernodeck.errors import KernodeckError
from kernodeck.lock import check as lock_check
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id
from tests.helpers.project import copy_project

CPU = "cp311-linux_x86_64-cpu"
LOCK = f"lockfiles/{CPU}.txt"
TWIN = f"lockfiles/pylock.{CPU}.toml"


def _append(rel: str, text: str) -> Callable[[Path], None]:
    def edit(project: Path) -> None:
        with (project / rel).open("a", encoding="utf-8") as handle:
            handle.write(text)

    return edit


def _retouch_pin(project: Path) -> None:
    """A pin's version edited by hand: the body no longer matches the lock's digest."""
    path = project / LOCK
    text = path.read_text(encoding="utf-8")
    assert "\nannotated-types==0.8.0 " in text
    path.write_text(text.replace("\nannotated-types==0.8.0 ", "\nannotated-types==0.7.0 "), encoding="utf-8")


CASES: dict[str, Callable[[Path], None] | None] = {
    "current": None,
    "inputs changed": _append("requirements/base.in", "\n# changed\n"),
    "twin of another lock": lambda p: shutil.copy(p / "lockfiles/pylock.cp311-linux_x86_64-cu130.toml", p / TWIN),
    "twin missing": lambda p: (p / TWIN).unlink(),
    "twin not TOML": lambda p: (p / TWIN).write_text("not [ toml\n", encoding="utf-8"),
    "lock body edited": _retouch_pin,
    "lock not UTF-8": lambda p: (p / LOCK).write_bytes(b"\xff\xfe lock\n"),
    "lock missing": lambda p: (p / LOCK).unlink(),
}


def _outcome(check: Callable[[], Path]) -> tuple[str, str]:
    try:
        return "passed", str(check())
    except KernodeckError as exc:
        return type(exc).__name__, f"{exc} | TIP: {exc.tip}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_check_of_the_lock_as_read_decides_as_the_check_that_reads_it(case: str, tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    edit = CASES[case]
    if edit is not None:
        edit(project)
    proj = load_project(project)
    plat = parse_platform_id(proj, CPU)
    itself = _outcome(lambda: lock_check.require_checked(proj, plat))
    given = _outcome(lambda: lock_check.require_checked(proj, plat, read=lock_check.read_lock(proj, plat)))
    assert given == itself
    assert (itself[0] == "passed") is (case == "current")  # each bad lock or twin fails (the negative controls)


def test_the_check_of_the_lock_as_read_reads_neither_file_again(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    proj = load_project(project)
    plat = parse_platform_id(proj, CPU)
    read = lock_check.read_lock(proj, plat)
    (project / LOCK).unlink()
    (project / TWIN).unlink()
    assert lock_check.require_checked(proj, plat, read=read) == project / LOCK  # decided from what was read
    with pytest.raises(KernodeckError):  # control: the check that reads them finds them gone
        lock_check.require_checked(proj, plat)
