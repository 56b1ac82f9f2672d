"""Dated resolution: `resolve-as-of` / `lock --as-of` reach both resolvers, the header and the drift check."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest
import tomlkit

from kernodeck.errors import ConfigError
from kernodeck.lock import check, inputs, lockfile, resolvers
from kernodeck.lock import compile as lock_compile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.tinylock import offline_sources, pins, tiny_project, tiny_wheels

RESOLVERS = ["pip-tools", "uv"]


def _declare(project: Path, value: str | None) -> None:
    path = project / "pyproject.toml"
    doc = tomlkit.parse(path.read_text(encoding="utf-8"))
    table = doc["tool"]["kernodeck"]  # type: ignore[index]
    if value is None:
        table.pop("resolve-as-of", None)  # type: ignore[union-attr]
    else:
        table["resolve-as-of"] = value  # type: ignore[index]
    path.write_text(tomlkit.dumps(doc), encoding="utf-8")


def test_a_date_is_midnight_utc_and_a_bad_or_future_one_is_refused() -> None:
    assert inputs.as_of_instant("2024-06-01") == "2024-06-01T00:00:00Z"
    assert inputs.as_of_instant("2024-06-01T12:30:00Z") == "2024-06-01T12:30:00Z"
    for bad in ("2024-6-1", "yesterday", "2024-06-01T12:30:00+02:00", "2024-13-01"):
        with pytest.raises(ConfigError, match="is not a date"):
            inputs.as_of_instant(bad)
    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).strftime("%Y-%m-%d")
    with pytest.raises(ConfigError, match="in the future"):
        inputs.as_of_instant(tomorrow)


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_both_resolvers_get_the_date(tmp_path: Path, resolver: str) -> None:
    project = load_project(tiny_project(tmp_path / "p"))
    plat = resolve_platform(project)
    flag = {"pip-tools": "--uploaded-prior-to", "uv": "--exclude-newer"}[resolver]
    with_date = resolvers.command(resolver, plat, ["a.in"], "out.txt", None, False, "2024-06-01T00:00:00Z",
                                  ("kdtiny-torch",))
    assert with_date[with_date.index(flag) + 1] == "2024-06-01T00:00:00Z"
    if resolver == "uv":
        assert with_date[with_date.index("--exclude-newer-package") + 1] == "kdtiny-torch=false"
    without = resolvers.command(resolver, plat, ["a.in"], "out.txt", None, False)
    assert flag not in without and "--exclude-newer-package" not in without


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
    assert check.check_lock(proj, plat) == []
    _declare(root, "2021-03-04")
    assert check.check_lock(load_project(root), plat) == []
    _declare(root, "2022-01-01")  # the declared date moved: drift, named with both dates
    changes = check.check_lock(load_project(root), plat)
    assert changes == ["the resolution date (resolve-as-of) changed: 2021-03-04T00:00:00Z -> 2022-01-01T00:00:00Z"]
    # A lock made without a date while one is declared is stale too.
    _declare(root, None)
    lock_compile.compile_lock(load_project(root), plat, resolver=resolver)
    _declare(root, "2021-03-04")
    assert check.check_lock(load_project(root), plat) == ["the resolution date (resolve-as-of) is a new input"]
    # ...and relocking with the declared date makes it current again.
    lock_compile.compile_lock(load_project(root), plat, resolver=resolver)
    assert check.check_lock(load_project(root), plat) == []


def _pypi_only(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    """PyPI and nothing of this machine's pip setup; caches of the test's own."""
    for key in list(os.environ):
        if key.startswith(("PIP_", "UV_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_TOOLS_CACHE_DIR", str(cache / "pip-tools"))
    monkeypatch.setenv("UV_CACHE_DIR", str(cache / "uv"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))


@pytest.mark.network
@pytest.mark.slow
@pytest.mark.reliability(90, "relock the same tiny inputs against PyPI with the same past date, twice, over the "
                         "first lock and from scratch with an empty cache, with both resolvers",
                         "byte-identical locks, the version the date allows (packaging 24.0 before 24.1's upload)")
@pytest.mark.parametrize("resolver", RESOLVERS)
def test_a_dated_relock_against_pypi_is_byte_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       resolver: str) -> None:
    _pypi_only(monkeypatch, tmp_path / "cache")
    root = tiny_project(tmp_path / "p", index="https://pypi.org/simple", base="packaging\n", layer="\n")
    _declare(root, "2024-06-01")  # packaging 24.1 was uploaded on 2024-06-10
    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver=resolver)
    first = target.read_bytes()
    assert pins(target) == {"packaging": "24.0"}
    lock_compile.compile_lock(proj, plat, resolver=resolver)  # over the first lock (seeded with its pins)
    assert target.read_bytes() == first
    shutil.rmtree(tmp_path / "cache")  # another day, another machine: nothing cached
    target.unlink()
    lock_compile.compile_lock(proj, plat, resolver=resolver)
    assert target.read_bytes() == first
    assert check.check_lock(proj, plat) == []
    # Negative control: a later date resolves a later version (the date, not a cache, chose 24.0).
    lock_compile.compile_lock(proj, plat, resolver=resolver, upgrade=True, as_of="2024-07-01")
    assert pins(target) == {"packaging": "24.1"}
    assert target.read_bytes() != first


def test_upgrade_moves_a_declared_date_and_puts_it_back_when_the_relock_fails(
        tmp_path: Path, wheels: Path) -> None:
    from kernodeck.errors import KernodeckError
    from kernodeck.upgrade import relock as upgrade

    root = tiny_project(tmp_path / "p")
    _declare(root, "2021-03-04")
    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver="uv")
    lock_before, pyproject_before = target.read_bytes(), (root / "pyproject.toml").read_text(encoding="utf-8")
    # A relock to another date writes the new date where the project declares one, the old file kept.
    kept = tmp_path / "kept"
    kept.mkdir()
    upgrade._keep_declared_date(proj, "2022-01-01", kept)
    assert load_project(root).resolve_as_of == "2022-01-01"
    assert (kept / "pyproject.toml").read_text(encoding="utf-8") == pyproject_before
    (root / "pyproject.toml").write_text(pyproject_before, encoding="utf-8")
    # When the relock fails (its only source emptied), the declared date goes back and the lock is untouched.
    for wheel in wheels.glob("*.whl"):
        wheel.unlink()
    with pytest.raises(KernodeckError):
        upgrade.upgrade(load_project(root), plat, as_of="2022-01-01")
    assert (root / "pyproject.toml").read_text(encoding="utf-8") == pyproject_before
    assert target.read_bytes() == lock_before
    folder = next((root / "runs").glob("upgrade-*"))
    assert (folder / "old" / target.name).read_bytes() == lock_before
    with pytest.raises(KernodeckError, match="not empty"):  # an upgrade's folder is never reused: its old/ is kept
        upgrade.upgrade(load_project(root), plat, out=folder)


def _dated_index(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The tiny wheels with upload times: alpha and beta 1.0 in 2020, beta 2.0 in 2022, the 'torch' layer in 2020."""
    folder = tiny_wheels(tmp_path / "dated")
    times = {"kdtiny_alpha-1.0": "2020-01-01", "kdtiny_beta-1.0": "2020-06-01", "kdtiny_beta-2.0": "2022-01-01",
             "kdtiny_torch-1.0": "2020-01-01"}
    return folder, {f"{stem}-py3-none-any.whl": f"{day}T00:00:00Z" for stem, day in times.items()}


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_a_dated_lock_starts_from_scratch_and_names_package_and_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     resolver: str) -> None:
    """`lock --as-of DATE` without --upgrade over pins newer than DATE resolves from scratch; a DATE before every
    upload (a loopback PEP 700 index with upload times) is one error naming the package and the date."""
    from kernodeck.errors import LockFailed
    from tests.helpers.fresh import LocalIndex

    folder, times = _dated_index(tmp_path)
    _pypi_only(monkeypatch, tmp_path / "cache")
    index = LocalIndex(sorted(folder.glob("*.whl")), upload_times=times)
    with index.serving():
        monkeypatch.setenv("PIP_INDEX_URL", index.url)
        root = tiny_project(tmp_path / "p", index=index.url)
        proj = load_project(root)
        plat = resolve_platform(proj)
        target = lock_compile.compile_lock(proj, plat, resolver=resolver)
        assert pins(target)["kdtiny-beta"] == "2.0"  # the latest, undated
        lock_compile.compile_lock(proj, plat, resolver=resolver, as_of="2021-01-01")  # no --upgrade
        assert pins(target) == {"kdtiny-alpha": "1.0", "kdtiny-beta": "1.0", "kdtiny-torch": "1.0"}
        before = target.read_bytes()
        with pytest.raises(LockFailed) as caught:
            lock_compile.compile_lock(proj, plat, resolver=resolver, as_of="2019-06-01")
    message = str(caught.value)
    assert "kdtiny-alpha" in message and "2019-06-01T00:00:00Z" in message, message
    assert "unreachable" not in message and "--as-of" in caught.value.tip, message
    assert target.read_bytes() == before
