"""tests/helpers/removals.py: a passed test's folder removed beside the next tests, never what a link in it names."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.removals import LIMIT, Removals


def test_a_folder_is_removed_and_a_link_in_it_is_not_followed(tmp_path: Path) -> None:
    kept = tmp_path / "built-env"
    (kept / "lib").mkdir(parents=True)
    (kept / "lib" / "torch.so").write_bytes(b"x")
    folders = []
    for n in range(LIMIT + 2):  # more than may run at once: the oldest are waited for, none is dropped
        folder = tmp_path / f"test-{n}"
        (folder / "project").mkdir(parents=True)
        (folder / "project" / "data.bin").write_bytes(b"0" * 4096)
        (folder / "project" / ".venv-rebuild").symlink_to(kept, target_is_directory=True)
        folders.append(folder)
    removals = Removals()
    for folder in folders:
        removals.start(folder)
    assert removals.wait() == [0] * len(folders)
    assert not any(folder.exists() for folder in folders)
    assert (kept / "lib" / "torch.so").read_bytes() == b"x"
