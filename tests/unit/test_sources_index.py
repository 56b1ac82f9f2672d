"""kernodeck.sources.index: a variant's index (or its mirror) derived in one place, from the project's variant."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from kernodeck.sources import PYPI, index_args, index_of, mirror_var

TORCH = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class _Variant:  # what kernodeck.project.config.Variant holds of its index
    name: str
    index: str


@pytest.fixture(autouse=True)
def _no_mirror(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in [v for v in os.environ if v.startswith("KERNODECK_INDEX_")]:
        monkeypatch.delenv(var)


def test_declared_index_without_a_mirror() -> None:
    found = index_of(_Variant("cpu", TORCH + "/"))
    assert (found.url, found.mirror, found.declared_url) == (TORCH + "/", None, TORCH)
    assert not found.is_pypi and not found.declared_is_pypi
    assert index_args(found) == ["--extra-index-url", TORCH + "/"]
    assert found.pip_option() == f"--extra-index-url {TORCH}"


def test_mirror_replaces_the_index_but_not_what_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    mirror = "https://mirror.example/AbCdEfGhIjKlMnOpQrSt/simple"
    monkeypatch.setenv(mirror_var("cpu-x"), mirror)
    assert mirror_var("cpu-x") == "KERNODECK_INDEX_CPU_X"
    found = index_of(_Variant("cpu-x", TORCH))
    assert found.url == mirror and index_args(found) == ["--extra-index-url", mirror]  # what the installer asks
    assert found.pip_option() == f"--extra-index-url {TORCH}"  # what a written command names: the declared one
    assert "mirror.example" not in found.describe() and "KERNODECK_INDEX_CPU_X" in found.describe()
    assert found.shown() == "$KERNODECK_INDEX_CPU_X"
    # negative control: a mirror of PyPI's variant is asked although the declared index is PyPI
    monkeypatch.setenv(mirror_var("pypi"), mirror)
    pypi = index_of(_Variant("pypi", PYPI))
    assert pypi.declared_is_pypi and not pypi.is_pypi and index_args(pypi) == ["--extra-index-url", mirror]


@pytest.mark.parametrize("declared", [PYPI, PYPI + "/"])
def test_pypi_needs_no_index_option(declared: str) -> None:
    found = index_of(_Variant("default", declared))
    assert found.is_pypi and found.declared_is_pypi
    assert index_args(found) == [] and found.pip_option() == ""


def test_credentials_never_in_the_written_option() -> None:
    found = index_of(_Variant("cpu", "https://user:s3cretpass@download.pytorch.org/whl/cpu?token=abc"))
    assert found.pip_option() == f"--extra-index-url {TORCH}"
    assert "s3cretpass" not in found.describe() and "abc" not in found.shown()
