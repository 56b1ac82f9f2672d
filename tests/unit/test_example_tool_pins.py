"""Each example (and `kernodeck init`'s template) pins the tools Kernodeck's sessions import, as this repository's
``run`` group does: one without pyelftools could not even start ``nox -s verify`` (a ModuleNotFoundError traceback
from kernodeck/env/extension_scan.py before any report)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.helpers.project import ROOT


def _run_group(pyproject: Path, name: str) -> set[str]:
    groups = tomllib.loads(pyproject.read_text(encoding="utf-8"))["dependency-groups"]
    return {str(item) for item in groups[name] if isinstance(item, str)}


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir()))
def test_every_example_pins_the_tools_the_sessions_import(example: str) -> None:
    assert _run_group(ROOT / "examples" / example / "pyproject.toml", "kernodeck-run") == _run_group(
        ROOT / "pyproject.toml", "run")


HUB_COPIES = ["requirements/base.in", "requirements/torch-cpu.in", "lockfiles/cp311-linux_x86_64-cpu.txt",
              "lockfiles/pylock.cp311-linux_x86_64-cpu.toml"]


@pytest.mark.parametrize("rel", HUB_COPIES)
def test_the_hub_examples_requirements_and_lock_are_this_repositorys(rel: str) -> None:
    # tests/e2e/test_weight_sources.py verifies examples/hub in the env built for this repository's lock: a relock
    # here must be copied there (examples/hub/README.md: why), or that test would meet an env that is not its lock's
    assert (ROOT / "examples" / "hub" / rel).read_bytes() == (ROOT / rel).read_bytes(), f"copy {rel} to examples/hub"
