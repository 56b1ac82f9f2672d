"""THE lock check given the lock and its twin as already read (``require_checked(..., read=read_lock(...))``, what
verify's lock-check step does with its run context) decides as the check that reads them itself (``lock --check``,
``rebuild``): the same pass, the same error and message on each kind of bad lock or twin; and it reads neither again.

On a copy of the project with its committed locks (no resolver runs, no index is asked). And the resolution date
(`resolve-as-of`) as an input of the check, on a tiny lock resolved offline by each resolver.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from kernodeck.errors import KernodeckError
from kernodeck.lock import check as lock_check
from kernodeck.lock import compile as lock_compile
from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id, resolve_platform
from tests.helpers.project import copy_project
from tests.helpers.tinylock import RESOLVERS, declare_as_of, offline_sources, tiny_project, tiny_wheels

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


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, folder, tmp_path / "cache")
    return folder


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_the_date_is_recorded_and_is_an_input_of_the_drift_check(tmp_path: Path, wheels: Path,
                                                                  resolver: str) -> None:
    root = tiny_project(tmp_path / "p")
    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver=resolver, as_of="2021-03-04")
    lock = lockfile.read(target)
    assert lock.first("resolve-as-of").startswith("2021-03-04T00:00:00Z")
    assert lock.inputs["resolve-as-of"] == "2021-03-04T00:00:00Z"
    assert "2021-03-04T00:00:00Z" in lock.first("command")
    # None declared: the one-off --as-of the lock records stands.
    assert lock_check.check_lock(proj, plat) == []
    declare_as_of(root, "2021-03-04")
    assert lock_check.check_lock(load_project(root), plat) == []
    declare_as_of(root, "2022-01-01")  # the declared date moved: drift, named with both dates
    changes = lock_check.check_lock(load_project(root), plat)
    assert changes == ["the resolution date (resolve-as-of) changed: 2021-03-04T00:00:00Z -> 2022-01-01T00:00:00Z"]
    # A lock made without a date while one is declared is stale too.
    declare_as_of(root, None)
    lock_compile.compile_lock(load_project(root), plat, resolver=resolver)
    declare_as_of(root, "2021-03-04")
    assert lock_check.check_lock(load_project(root), plat) == ["the resolution date (resolve-as-of) is a new input"]
    # ...and relocking with the declared date makes it current again.
    lock_compile.compile_lock(load_project(root), plat, resolver=resolver)
    assert lock_check.check_lock(load_project(root), plat) == []
