"""Output folders (kernodeck/outdir.py): a swap into place keeps the old folder when it fails."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_swap_into_place_keeps_old_on_failure(tmp_path: Path) -> None:
    from kernodeck import outdir

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("old")
    outdir.mark(out, "dossier")  # Kernodeck's own folder: the only kind a swap replaces
    staging = tmp_path / ".out.staging"
    staging.mkdir()
    (staging / "report.json").write_text("new")
    outdir.mark(staging, "dossier")
    outdir.swap_into_place(staging, out)
    assert (out / "report.json").read_text() == "new" and not staging.exists()
    with pytest.raises(OSError):
        outdir.swap_into_place(tmp_path / "missing-staging", out)
    assert (out / "report.json").read_text() == "new"  # the earlier dossier is back in place
