"""What export's image holds for verify (kernodeck/dossier/export.py, project_items): the folders of the files the
lock's inputs name by -r/-c too, since the image's lock check fingerprints them (red-team pass 44, LOCK4's class)."""

from __future__ import annotations

from pathlib import Path

from kernodeck.dossier.export import project_items
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import copy_project


def _items(root: Path) -> list[str]:
    proj = load_project(root)
    return project_items(proj, resolve_platform(proj))


def test_the_folder_of_a_file_an_input_names_is_in_the_image(tmp_path: Path) -> None:
    root = copy_project(tmp_path / "p")
    assert "constraints" not in _items(root)  # control: no input names it
    base = root / "requirements" / "base.in"
    base.write_text("-c ../constraints/shared.txt\n" + base.read_text(encoding="utf-8"), encoding="utf-8")
    (root / "constraints").mkdir()
    (root / "constraints" / "shared.txt").write_text("numpy<3\n", encoding="utf-8")
    assert {"constraints", "requirements"} <= set(_items(root))


def test_a_refused_named_file_leaves_the_image_to_its_lock_check(tmp_path: Path) -> None:
    """One named file missing: the items are the declared inputs' folders (the image's lock check refuses it)."""
    root = copy_project(tmp_path / "p")
    base = root / "requirements" / "base.in"
    base.write_text("-c ../constraints/shared.txt\n" + base.read_text(encoding="utf-8"), encoding="utf-8")
    items = _items(root)
    assert "requirements" in items and "constraints" not in items
