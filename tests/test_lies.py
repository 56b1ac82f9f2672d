"""Issue 11, "wrong passed": each case shows the lie first, then what is reported instead."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tests.conftest import ROOT, kd

rel = pytest.mark.reliability


def _npy(path: Path, rows: list[list[float]]) -> None:
    """A float32 .npy written without numpy (the test session has none)."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({len(rows)}, {len(rows[0])}), }}"
    header += " " * (63 - (len(header) + 10) % 64) + "\n"
    data = b"".join(struct.pack(f"<{len(r)}f", *r) for r in rows)
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode("latin1") + data)


def _dossier(folder: Path, rows: list[list[float]]) -> None:
    (folder / "outputs").mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": []}))
    (folder / "inventory.txt").write_text("numpy==2.4.6\n")
    (folder / "system.json").write_text("{}")
    _npy(folder / "outputs" / "embeddings.npy", rows)
    (folder / "outputs" / "ids.json").write_text(json.dumps([f"s{i}" for i in range(len(rows))]))


@rel(
    45,
    "`nox -s compare` where one dossier has NaN rows (37 of 40)",
    "the non-finite rows counted and named; never `max abs difference 0; min cosine 1.0`",
)
@pytest.mark.parametrize("nan_rows", [37, 40])
def test_compare_reports_non_finite_rows(tmp_path: Path, nan_rows: int) -> None:
    nan = float("nan")
    good = [[1.0, 0.0, 0.5]] * 40
    bad = [[nan, nan, nan]] * nan_rows + good[nan_rows:]
    _dossier(tmp_path / "a", good)
    _dossier(tmp_path / "b", bad)
    proc = kd(ROOT, "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())["outputs"]
    assert len(out["non_finite_items"]) == nan_rows and out["non_finite_items"]["s0"] == {"b": 3}
    assert out["finite_items"] == 40 - nan_rows
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert f"NON-FINITE values (NaN/Inf) in {nan_rows} of 40 items" in text
    if nan_rows == 40:
        assert out["min_cosine"] is None and out["max_abs"] is None and "undefined" in text
    else:
        assert "3 finite items; max abs difference 0;" in text
    assert "40 items; max abs difference 0" not in text


def test_compare_without_non_finite_rows_is_unchanged(tmp_path: Path) -> None:
    _dossier(tmp_path / "a", [[1.0, 0.0], [0.0, 1.0]])
    _dossier(tmp_path / "b", [[1.0, 0.0], [0.0, 0.5]])
    proc = kd(ROOT, "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads((tmp_path / "cmp" / "compare.json").read_text())["outputs"]
    assert out["non_finite_items"] == {} and out["max_abs"] == 0.5 and out["min_cosine"] == pytest.approx(1.0)
    assert "2 items; max abs difference 0.5" in (tmp_path / "cmp" / "compare.md").read_text()
