"""Each example (and `kernodeck init`'s template) pins the tools Kernodeck's sessions import, as this repository's
``run`` group does: one without pyelftools could not even start ``nox -s verify`` (a ModuleNotFoundError traceback
from kernodeck/env/extension_scan.py before any report)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.conftest import ROOT


def _run_group(pyproject: Path, name: str) -> set[str]:
    groups = tomllib.loads(pyproject.read_text(encoding="utf-8"))["dependency-groups"]
    return {str(item) for item in groups[name] if isinstance(item, str)}


@pytest.mark.parametrize("example", sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_dir()))
def test_every_example_pins_the_tools_the_sessions_import(example: str) -> None:
    assert _run_group(ROOT / "examples" / example / "pyproject.toml", "kernodeck-run") == _run_group(
        ROOT / "pyproject.toml", "run")
