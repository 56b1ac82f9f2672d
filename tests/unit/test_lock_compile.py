"""Dated resolution in the lock (kernodeck/lock/compile.py): a dated relock against PyPI is byte-identical, and
`lock --as-of` over newer pins starts from scratch or names the package and the date it cannot reach."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from kernodeck.lock import check
from kernodeck.lock import compile as lock_compile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.tinylock import RESOLVERS, declare_as_of, pins, tiny_project, tiny_wheels


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
    declare_as_of(root, "2024-06-01")  # packaging 24.1 was uploaded on 2024-06-10
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
