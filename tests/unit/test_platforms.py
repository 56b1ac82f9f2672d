"""Platforms (kernodeck/project/platforms.py): ids parsed, wheel tags mapped, unknown variants named."""

from __future__ import annotations

import pytest

from kernodeck.errors import UnknownVariant
from kernodeck.project.config import Backend, load_project
from kernodeck.project.platforms import os_arch_from_tag, parse_platform_id, resolve_platform
from tests.helpers.project import ROOT


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("manylinux_2_36_x86_64", "linux_x86_64"),
        ("manylinux2014_aarch64", "linux_aarch64"),
        ("macosx_14_0_arm64", "macosx_arm64"),
        ("win_amd64", "win_amd64"),
        ("linux_x86_64", "linux_x86_64"),
    ],
)
def test_os_arch_from_tag(tag: str, expected: str) -> None:
    assert os_arch_from_tag(tag) == expected


def test_platform_ids_and_unknown_variant() -> None:
    project = load_project(ROOT)
    plat = parse_platform_id(project, "cp311-macosx_arm64-mps")
    assert (plat.python, plat.os_arch, plat.variant.backend) == ("3.11", "macosx_arm64", Backend.MPS)
    assert plat.lock_name == "cp311-macosx_arm64-mps.txt"
    with pytest.raises(UnknownVariant) as err:
        resolve_platform(project, variant="tpu")
    assert "cpu" in str(err.value) and "cu130" in str(err.value) and "rocm64" in str(err.value)


def test_every_backend_member_has_a_variant_or_is_declared() -> None:
    project = load_project(ROOT)
    assert {v.backend for v in project.variants.values()} == set(Backend)
