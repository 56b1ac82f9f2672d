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


# --- item 5: the declared tolerance is the contract, not the manifest's copy -----------------------------------------

TOL_LINE = "max-abs = 1e-4\n"


def _edit_manifest(project: Path, **tables: dict[str, object]) -> None:
    """Edit manifest tables and recompute its id, as an adversary (or a careless hand) would."""
    import tomllib

    from kernodeck import reference
    from kernodeck._fs import write_atomic

    path = project / "dossier/reference/manifest.toml"
    manifest = tomllib.loads(path.read_text())
    for table, values in tables.items():
        target = manifest
        for part in table.split("."):
            target = target[part]
        target.update(values)
    manifest["id"] = reference.identity(manifest)
    write_atomic(path, reference.render(manifest))


def _refused(project: Path, out: Path, *needles: str) -> None:
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode != 0 and "ERROR:" in proc.stderr
    assert "TIP: " in proc.stderr and "nox -s reference -- --new" in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert report["status"] == "failed" and report["first_failure"] == "reference-manifest"
    assert steps["reference-manifest"]["layer"] == "reference"
    assert steps["rebuild"]["status"] == "not-run" and steps["compare"]["status"] == "not-run"


def test_contract_table_differences_are_generic() -> None:
    from kernodeck.reference import table_differences

    declared = {"cosine-min": 0.9999, "max-abs": 1e-4}
    same = {"cosine_min": 0.9999, "max_abs": 0.0001, "justification": "why"}
    assert table_differences(declared, same, frozenset({"justification"})) == []
    loose = {"cosine_min": 0.0, "max_abs": 10.0, "justification": "why"}
    assert table_differences(declared, loose, frozenset({"justification"})) == [
        "cosine_min: 0.0 -> declared 0.9999",
        "max_abs: 10.0 -> declared 0.0001",
    ]
    assert table_differences(declared, {"cosine_min": 0.9999}, frozenset()) == [
        "max_abs: '(missing)' -> declared 0.0001"
    ]
    assert table_differences({"kind": "a"}, {"kind": "a", "extra": 1}, frozenset()) == [
        "extra: 1 -> declared '(not declared)'"
    ]


@rel(
    42,
    "the reference manifest's tolerance loosened (cosine-min 0.0, max-abs 10.0), its id recomputed; or its criterion "
    "changed; or a declared tolerance loose enough to flip a neighbour copied into it",
    "verify refuses the reference before rebuilding, naming the difference from pyproject's declaration "
    "(or the flip bound), with `TIP: nox -s reference -- --new`",
)
@pytest.mark.parametrize("edit", ["loosened-manifest", "criterion", "flip-bound"])
def test_verify_holds_the_declared_contract(tmp_path: Path, edit: str) -> None:
    from tests.conftest import copy_project

    project = copy_project(tmp_path / "project")
    if edit == "loosened-manifest":
        _edit_manifest(project, **{"outputs.embeddings": {"cosine-min": 0.0, "max-abs": 10.0}})
        _refused(project, tmp_path / "run", "cosine_min: 0.0 -> declared 0.9999", "max_abs: 10.0 -> declared 0.0001")
    elif edit == "criterion":
        _edit_manifest(project, application={"criterion": "checks/anything_goes.py:criterion"})
        _refused(project, tmp_path / "run", "criterion: 'checks/anything_goes.py:criterion' -> declared 'checks/app.py")
    else:
        # pyproject AND the manifest agree on a tolerance that could flip a nearest neighbour: still refused
        pyproject = project / "pyproject.toml"
        assert TOL_LINE in pyproject.read_text()
        pyproject.write_text(pyproject.read_text().replace(TOL_LINE, TOL_LINE.replace("1e-4", "1e-2")))
        _edit_manifest(project, **{"outputs.embeddings": {"max-abs": 1e-2}})
        _refused(project, tmp_path / "run", "could flip a nearest neighbour", "declared max-abs 0.01")
