"""kernodeck/env/sdist_builds.py: a pin built here from its locked sdist is refused unless declared (``built-here``),
first at the installer (wheels only for every undeclared pin), then by reading the env against the lock's twin."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.pylock import Pylock

from kernodeck.env import sdist_builds
from kernodeck.errors import RebuildFailed
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import copy_project
from tests.helpers.tinylock import declare_built_here

_SHA = "0" * 64


def _twin() -> Pylock:
    """A twin locking kdsrc 1.0 by its sdist and a py3-none-any wheel, and tinya 1.0 by its wheel only."""
    return Pylock.from_dict({
        "lock-version": "1.0", "created-by": "tests",
        "packages": [
            {"name": "kdsrc", "version": "1.0",
             "sdist": {"name": "kdsrc-1.0.tar.gz", "url": "https://x.invalid/kdsrc-1.0.tar.gz",
                       "hashes": {"sha256": _SHA}},
             "wheels": [{"name": "kdsrc-1.0-py3-none-any.whl", "url": "https://x.invalid/kdsrc-1.0-py3-none-any.whl",
                         "hashes": {"sha256": _SHA}}]},
            {"name": "tinya", "version": "1.0",
             "wheels": [{"name": "tinya-1.0-py3-none-any.whl", "url": "https://x.invalid/tinya-1.0-py3-none-any.whl",
                         "hashes": {"sha256": _SHA}}]},
        ]})


def _env(root: Path, tag: str) -> Path:
    """An env whose kdsrc 1.0 carries ``tag`` in its WHEEL file, beside tinya 1.0 (a wheel)."""
    site = root / "lib" / "python3.11" / "site-packages"
    for name, wheel_tag in (("kdsrc", tag), ("tinya", "py3-none-any")):
        info = site / f"{name}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n\n", encoding="utf-8")
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: tests\nTag: {wheel_tag}\n", encoding="utf-8")
        (info / "RECORD").write_text("", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_project(tmp_path_factory.mktemp("sdist-builds") / "project")


def test_an_undeclared_pin_the_env_shows_built_here_fails_the_build(tmp_path: Path, project: Path) -> None:
    """The second check: kdsrc installed with a tag none of its locked wheels carries, undeclared: refused."""
    declare_built_here(project)
    loaded = load_project(project)
    with pytest.raises(RebuildFailed, match=r"kdsrc 1\.0 \(from kdsrc-1\.0\.tar\.gz\)") as caught:
        sdist_builds.require_declared(_env(tmp_path, "cp311-cp311-linux_x86_64"), loaded, resolve_platform(loaded),
                                      _twin())
    assert "built-here = ['kdsrc']" in str(caught.value.tip)


def test_a_declared_one_passes_recorded_and_a_downloaded_wheel_is_none(tmp_path: Path, project: Path) -> None:
    declare_built_here(project, "KDSrc")  # names compare canonicalised
    loaded = load_project(project)
    (made,) = sdist_builds.require_declared(_env(tmp_path / "a", "cp311-cp311-linux_x86_64"), loaded,
                                            resolve_platform(loaded), _twin())
    assert (made.name, made.sdist, made.sdist_sha256) == ("kdsrc", "kdsrc-1.0.tar.gz", _SHA)
    declare_built_here(project)
    loaded = load_project(project)
    assert sdist_builds.require_declared(_env(tmp_path / "b", "py3-none-any"), loaded, resolve_platform(loaded),
                                         _twin()) == []


def test_the_installer_builds_no_undeclared_pin() -> None:
    """First line (BUILTTAG1: a pure build writes the tag of the locked wheel): every undeclared pin is wheels-only
    (pip's and uv's ``--only-binary`` alike); nothing to say when every pin is declared."""
    args = sdist_builds.installer_args(["kdsrc", "Tiny_A", "pip"], {"built-here": ["kdsrc"]})
    assert args == ["--only-binary", "pip,tiny-a"]
    assert sdist_builds.installer_args(["kdsrc"], {"built-here": ["kdsrc"]}) == []
    assert sdist_builds.installer_args(["kdsrc", "pip"], {}) == ["--only-binary", ":all:"]  # none declared


def test_an_install_failing_on_an_undeclared_pin_says_what_to_declare() -> None:
    exc = RebuildFailed("install failed: tinyd==1.0 has no usable wheels and building from source is disabled")
    told = sdist_builds.explain(exc, ["tinyd", "tinya"], {})
    assert "only when declared" in str(told) and "built-here = ['tinyd']" in str(told.tip)
    other = RebuildFailed("install failed: the network is down")
    assert sdist_builds.explain(other, ["tinyd"], {}) is other  # control: no pin named, the error as it was
    assert sdist_builds.explain(exc, ["tinyd"], {"built-here": ["tinyd"]}) is exc  # declared: not the cause


def test_an_env_recorded_without_the_list_or_with_an_undeclared_pin_is_not_reused() -> None:
    assert sdist_builds.reuse_problems({}, {})  # built by an older Kernodeck
    made = {sdist_builds.RECORDED: [{"name": "kdsrc"}]}
    assert "kdsrc" in sdist_builds.reuse_problems(made, {})[0]
    assert sdist_builds.reuse_problems(made, {"built-here": ["kdsrc"]}) == []
