"""What export builds a container from, in a copy of the project: the tools file beside it and a declared base image."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.helpers.project import ROOT, copy_project

DIGEST = "sha256:" + "0123456789abcdef" * 4


def export_project(tmp_path: Path, image: str | None = None) -> Path:
    root = copy_project(tmp_path / "project")
    shutil.copytree(ROOT / ".github" / "requirements", root / ".github" / "requirements")
    if image is not None:
        pyproject = root / "pyproject.toml"
        text = pyproject.read_text(encoding="utf-8")
        entry = 'os-arch = "linux_x86_64"\nvariant = "cpu"\n'
        assert entry in text
        pyproject.write_text(text.replace(entry, entry + f'image = "{image}"\n', 1), encoding="utf-8")
    return root
