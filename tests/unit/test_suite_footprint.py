"""The suite gives back the disk it takes: a passed test's folder goes at once, fresh machines share a uv cache inside
pytest's folder, and a loopback index drops what uv cached from it, only ever from that suite cache.

A run used to leave 22 GB in /tmp and 0.7 GB of torch per loopback port in this machine's uv cache; CI ran out of disk.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.helpers import fresh
from tests.helpers.project import ROOT
from tests.helpers.tinylock import write_wheel


def test_passed_tests_folders_are_removed() -> None:
    pytest_config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    options = pytest_config["ini_options"]
    assert options["tmp_path_retention_policy"] == "failed" and options["tmp_path_retention_count"] == 1


def test_fresh_machines_share_a_cache_inside_pytests_folder(tmp_path_factory: pytest.TempPathFactory) -> None:
    if fresh._ORIGINAL_ENV.get("UV_CACHE_DIR"):
        pytest.skip("the caller set UV_CACHE_DIR: the suite uses it")
    cache = Path(str(fresh.uv_cache_dir()))
    base = tmp_path_factory.getbasetemp()  # a parallel run's workers (pytest-xdist) share their root's cache
    assert cache == (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "uv-cache"
    assert fresh.fresh_env(tmp_path_factory.mktemp("home"))["UV_CACHE_DIR"] == str(cache)


def _cached_names(cache: Path) -> set[str]:
    return {p.name for p in cache.rglob("*kdfoot*")}


def _install_from(index: fresh.LocalIndex, cache: Path, target: Path) -> None:
    uv = Path(sys.executable).with_name("uv")
    if not uv.exists():
        pytest.skip("uv is not installed beside the test interpreter")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    subprocess.run([str(uv), "pip", "install", "--no-config", "--cache-dir", str(cache), "--target", str(target),
                    "--index-url", index.url, "kdfoot"], env=env, check=True, capture_output=True, timeout=120)


@pytest.mark.parametrize("owned", [True, False], ids=["suite-cache", "callers-cache"])
def test_a_stopped_index_drops_what_uv_cached_from_it_only_in_the_suites_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owned: bool
) -> None:
    cache = tmp_path / "uv-cache"
    monkeypatch.setattr(fresh, "_SUITE_UV_CACHE", [str(cache)])
    if not owned:  # the caller's own UV_CACHE_DIR: never cleaned, even when it is the same folder
        monkeypatch.setitem(fresh._ORIGINAL_ENV, "UV_CACHE_DIR", str(tmp_path / "callers"))
    index = fresh.LocalIndex([write_wheel(tmp_path / "wheels", "kdfoot", "1.0")])
    with index.serving():
        _install_from(index, cache, tmp_path / "target")
        assert _cached_names(cache), "uv cached nothing from the index: the test proves nothing"
    assert (tmp_path / "target" / "kdfoot" / "__init__.py").is_file()
    assert bool(_cached_names(cache)) is not owned, sorted(_cached_names(cache))
