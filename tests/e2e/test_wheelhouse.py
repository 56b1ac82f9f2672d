"""Wheelhouse: download a lock's files hash-checked, then rebuild from them with every index disabled."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file
from kernodeck.env import envdirs, inventory, rebuild, wheelhouse
from kernodeck.errors import ConfigError
from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform, current_os_arch, current_python, parse_platform_id
from tests.helpers.project import ROOT, kd
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, wheel_spec, write_wheel

Tiny = tuple[Path, Platform, Path, dict[str, str]]


@pytest.fixture
def tiny(tmp_path: Path) -> Tiny:
    """(project, platform, the local find-links the lock was made from, the pins)."""
    links = tmp_path / "links"
    wheels = [pip_wheel(links), write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")]
    write_wheel(links, "tinya", "0.9")  # a decoy the lock does not pin: never downloaded
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    return project, plat, links, dict(wheel_spec(w) for w in wheels)


def _download(project: Path, links: Path, out: Path) -> None:
    proc = kd(project, "wheelhouse", "--out", str(out), env=offline_env(PIP_FIND_LINKS=str(links)))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_wheelhouse_then_rebuild_with_every_index_disabled(tiny: Tiny, tmp_path: Path, installer: str) -> None:
    project, plat, links, pins = tiny
    house = tmp_path / "house"
    _download(project, links, house)
    manifest = json.loads((house / wheelhouse.MANIFEST).read_text(encoding="utf-8"))
    assert manifest["platform"] == plat.id and set(manifest["files"]) == {f"{n}=={v}" for n, v in pins.items()}
    lock = lockfile.read(project / manifest["lock"])
    for pin in lock.pins:
        assert manifest["files"][pin.spec]["sha256"] in pin.hashes
    assert not (house / "tinya-0.9-py3-none-any.whl").exists()
    assert str(tmp_path) not in manifest["command"], "the manifest names no path of this machine"

    shutil.rmtree(links)  # the only source there was is gone: the wheelhouse must be enough
    env = offline_env(UV_CACHE_DIR=str(tmp_path / "uv-cache"), PIP_NO_CACHE_DIR="1")
    proc = kd(project, "rebuild", "--installer", installer, "--wheelhouse", str(house), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "--wheelhouse given" in proc.stdout
    built = current_env(project, plat)
    assert inventory.parse_freeze((built / rebuild.INVENTORY).read_text(encoding="utf-8")) == pins
    commands = " | ".join(json.loads((built / envdirs.MARKER).read_text(encoding="utf-8"))["commands"])
    assert "--no-index --find-links WHEELHOUSE" in commands and str(house) not in commands


def test_missing_wheel_is_named_before_anything_is_built(tiny: Tiny, tmp_path: Path) -> None:
    project, plat, links, _ = tiny
    house = tmp_path / "house"
    _download(project, links, house)
    (house / "tinyb-2.0-py3-none-any.whl").unlink()
    proc = kd(project, "rebuild", "--wheelhouse", str(house), env=offline_env())
    assert proc.returncode == 2
    assert "lacks 1 file(s)" in proc.stderr and "tinyb==2.0" in proc.stderr
    assert "TIP: nox -s wheelhouse -- --platform" in proc.stderr
    assert not (project / ".venv-rebuild" / plat.id / "CURRENT").exists()
    assert not list((project / ".venv-rebuild" / plat.id).glob("env-*"))


def test_a_file_with_the_wrong_hash_does_not_count(tiny: Tiny, tmp_path: Path) -> None:
    project, _, links, _ = tiny
    house = tmp_path / "house"
    _download(project, links, house)
    write_wheel(house, "tinya", "1.0", payload="TAMPERED = True\n")  # same name, other bytes
    proc = kd(project, "rebuild", "--wheelhouse", str(house), env=offline_env())
    assert proc.returncode == 2 and "tinya==1.0" in proc.stderr and "no file with the lock's hash" in proc.stderr


def test_missing_wheelhouse_folder(tiny: Tiny, tmp_path: Path) -> None:
    project, _, _, _ = tiny
    proc = kd(project, "rebuild", "--wheelhouse", str(tmp_path / "nowhere"), env=offline_env())
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_download_fails_clearly_when_the_source_lacks_a_file(tiny: Tiny, tmp_path: Path) -> None:
    project, plat, links, _ = tiny
    (links / "tinyb-2.0-py3-none-any.whl").unlink()
    proc = kd(project, "wheelhouse", "--out", str(tmp_path / "house"), env=offline_env(PIP_FIND_LINKS=str(links)))
    assert proc.returncode == 2
    assert f"ERROR: downloading {plat.id}'s lock" in proc.stderr and "tinyb" in proc.stderr
    assert not (tmp_path / "house" / wheelhouse.MANIFEST).exists()


def test_default_folder_is_ignored_by_git(tiny: Tiny) -> None:
    project, plat, _, _ = tiny
    assert wheelhouse.default_dir(load_project(project), plat) == project / ".wheelhouse" / plat.id
    assert "/.wheelhouse/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_match_skips_pins_whose_marker_excludes_the_target(tmp_path: Path) -> None:
    wheel = write_wheel(tmp_path, "tinya", "1.0")
    text = (
        f"tinya==1.0 --hash=sha256:{sha256_file(wheel)}\n"
        f"winonly==1.0 ; sys_platform == 'win32' --hash=sha256:{'0' * 64}\n"
    )
    lock = lockfile.parse_text(text.replace(" --hash", " \\\n    --hash"), tmp_path / "lock.txt")
    found, missing = wheelhouse.match(lock, tmp_path, wheelhouse.marker_environment(_foreign("linux_x86_64")))
    assert set(found) == {"tinya==1.0"} and missing == []
    _, missing = wheelhouse.match(lock, tmp_path, wheelhouse.marker_environment(_foreign("win_amd64")))
    assert missing == ["winonly==1.0"]


def _foreign(os_arch: str) -> Platform:
    project = load_project(ROOT)
    python = "3.10" if current_python() != "3.10" else "3.12"  # never this machine
    variant = project.default_variant.get(os_arch, "cpu")
    return parse_platform_id(project, f"cp{python.replace('.', '')}-{os_arch}-{variant}")


def test_pip_target_flags() -> None:
    project = load_project(ROOT)
    here = parse_platform_id(project, f"cp{current_python().replace('.', '')}-{current_os_arch()}-cpu")
    assert wheelhouse.target_flags(here) == []
    mac = _foreign("macosx_arm64")
    flags = wheelhouse.target_flags(mac)
    assert "--platform=macosx_14_0_arm64" in flags and f"--python-version={mac.python}" in flags
    assert f"--abi={mac.python_tag}" in flags and "--implementation=cp" in flags
    linux = _foreign("linux_x86_64")
    assert "--platform=manylinux_2_28_x86_64" in wheelhouse.target_flags(linux)
    assert "--platform=manylinux2014_x86_64" in wheelhouse.target_flags(linux)
    with pytest.raises(ConfigError, match="pip cannot download for"):
        wheelhouse.target_flags(Platform("3.11", "solaris_sparc", linux.variant))


def test_a_wheelhouse_is_reused_whole_and_never_loses_a_user_file(tiny: Tiny, tmp_path: Path) -> None:
    """Downloaded again over itself: replaced (earlier files carried over); with a user's file in it: refused."""
    project, _, links, pins = tiny
    house = tmp_path / "house"
    _download(project, links, house)
    _download(project, links, house)  # its own untouched folder: accepted
    listing = json.loads((house / ".kernodeck-folder").read_text(encoding="utf-8"))
    assert listing["kind"] == "wheelhouse" and wheelhouse.MANIFEST in listing["files"]
    assert len([f for f in listing["files"] if f.endswith(".whl")]) == len(pins)
    (house / "README.txt").write_text("my notes on this wheelhouse\n")
    proc = kd(project, "wheelhouse", "--out", str(house), env=offline_env(PIP_FIND_LINKS=str(links)))
    assert proc.returncode == 2 and "README.txt" in proc.stderr and "nothing removed" in proc.stderr
    assert (house / "README.txt").read_text() == "my notes on this wheelhouse\n"


def test_a_failed_download_keeps_what_came_for_the_next_run(tiny: Tiny, tmp_path: Path) -> None:
    project, _, links, _ = tiny
    held = tmp_path / "held.whl"
    shutil.move(links / "tinyb-2.0-py3-none-any.whl", held)
    house = tmp_path / "house"
    proc = kd(project, "wheelhouse", "--out", str(house), env=offline_env(PIP_FIND_LINKS=str(links)))
    assert proc.returncode == 2 and "tinyb" in proc.stderr
    # whatever came is kept, signed as Kernodeck's (without a manifest: not a wheelhouse a rebuild would take)
    assert (house / ".kernodeck-folder").exists() and not (house / wheelhouse.MANIFEST).exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".house")] == []
    shutil.move(held, links / "tinyb-2.0-py3-none-any.whl")
    _download(project, links, house)  # the partial one is Kernodeck's: completed in place of it
    assert (house / wheelhouse.MANIFEST).exists()
