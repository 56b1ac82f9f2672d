"""drift: the pairwise table on synthetic dossiers (numbers, marks against the declared tolerance, the system-chain
difference that explains a cell), its heatmap, and the refusals. The comparison runs in a real subprocess: this test
venv's interpreter stands in for the rebuilt env (it has numpy), running inenv/drift.py by path."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.__main__ import main
from kernodeck.errors import KernodeckError
from kernodeck.measure import drift_map

DECLARED = {
    "emb": {"kind": "cosine", "dtype": "float32", "cosine-min": 0.9999, "max-abs": 1e-4},
    "labels": {"kind": "agreement", "dtype": "int64", "min-share": 0.9},
}
IDS = [f"r{i}" for i in range(20)]


def _dossier(folder: Path, emb: Any, labels: Any, *, threads: int, level: str, cpu: str = "Test CPU") -> Path:
    out = folder / "outputs"
    out.mkdir(parents=True)
    for name, arr in (("emb", emb), ("labels", labels)):
        np.save(out / f"{name}.npy", arr)
        (out / f"{name}.ids.json").write_text(json.dumps(IDS), encoding="utf-8")
    (folder / "system.json").write_text(json.dumps({
        "cpu_model": cpu, "torch_version": "2.13.0+cpu", "torch_cpu_capability": level,
        "cpu": {"isa_flags": ["avx2", "avx512f"]}}), encoding="utf-8")
    (folder / "settings.json").write_text(json.dumps({"torch.num_threads": threads,
                                                       "deterministic_algorithms": True}), encoding="utf-8")
    (folder / "run-config.json").write_text(json.dumps({"application": {"outputs": DECLARED}}), encoding="utf-8")
    return folder


@pytest.fixture
def three(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(1)
    base = rng.standard_normal((20, 8)).astype(np.float32)
    labels = np.arange(20, dtype=np.int64) % 4
    near = (base + 1e-6).astype(np.float32)  # legitimate noise: well inside 1e-4
    far = (base + rng.standard_normal(base.shape) * 0.05).astype(np.float32)  # a wrong output
    far_labels = labels.copy()
    far_labels[:5] += 1  # 25% of the rows differ: beyond min-share 0.9
    return [
        _dossier(tmp_path / "a", base, labels, threads=2, level="AVX512"),
        _dossier(tmp_path / "b", near, labels, threads=1, level="AVX512"),
        _dossier(tmp_path / "c", far, far_labels, threads=2, level="DEFAULT"),
    ]


def test_pairwise_table_marks_each_cell_and_names_the_difference(three: list[Path], tmp_path: Path) -> None:
    data, folder = drift_map.drift(three, tmp_path / "map", Path(sys.executable), DECLARED)
    pairs = {(r["a"], r["b"]): r for r in data["outputs"]["emb"]["pairs"]}
    assert set(pairs) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert pairs[("a", "b")]["mark"] == "within"
    assert pairs[("a", "b")]["numbers"]["max_abs"] == pytest.approx(1e-6, rel=0.5)
    assert "threads: 2 vs 1" in pairs[("a", "b")]["differs_in"]
    assert pairs[("a", "c")]["mark"] == "BEYOND" and pairs[("a", "c")]["share_of_tolerance"] > 1
    assert "CPU kernel level: AVX512 vs DEFAULT" in pairs[("a", "c")]["differs_in"]
    labels = {(r["a"], r["b"]): r for r in data["outputs"]["labels"]["pairs"]}
    assert labels[("a", "b")]["mark"] == "within" and labels[("a", "b")]["numbers"]["disagreement"] == 0
    assert labels[("a", "c")]["mark"] == "BEYOND"
    assert labels[("a", "c")]["numbers"]["disagreement"] == pytest.approx(0.25)
    text = (folder / "drift.md").read_text(encoding="utf-8")
    assert "| 1-2 |" in text and "BEYOND" in text and "2 of 3 pairs beyond" in text
    root = ET.fromstring((folder / "drift.svg").read_text(encoding="utf-8"))
    assert len([r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.get("class") == "cell"]) == 2 * 9
    assert json.loads((folder / "drift.json").read_text(encoding="utf-8"))["version"] == drift_map.VERSION


def test_an_exact_output_marks_any_changed_row_beyond(three: list[Path], tmp_path: Path) -> None:
    exact = {**DECLARED, "labels": {"kind": "exact", "dtype": "int64"}}  # the regression example's bands
    data, folder = drift_map.drift(three, tmp_path / "map", Path(sys.executable), exact)
    labels = {(r["a"], r["b"]): r for r in data["outputs"]["labels"]["pairs"]}
    assert labels[("a", "b")]["mark"] == "within" and labels[("a", "b")]["share_of_tolerance"] == 0
    assert labels[("a", "c")]["mark"] == "BEYOND" and labels[("b", "c")]["mark"] == "BEYOND"
    assert labels[("a", "c")]["share_of_tolerance"] > 1
    text = (folder / "drift.md").read_text(encoding="utf-8")
    assert "## `labels` (exact; declared every row equal): 2 of 3 pairs beyond the tolerance" in text
    # drift.json is standard JSON (no Infinity): the infinite share of a zero tolerance is written as "inf"
    written = json.loads((folder / "drift.json").read_text(encoding="utf-8"),
                         parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))
    shares = {(r["a"], r["b"]): r["share_of_tolerance"] for r in written["outputs"]["labels"]["pairs"]}
    assert shares[("a", "c")] == "inf" and shares[("a", "b")] == 0


def test_identical_runs_are_within_and_name_no_difference(tmp_path: Path) -> None:
    emb = np.ones((20, 8), dtype=np.float32)
    labels = np.zeros(20, dtype=np.int64)
    same = [_dossier(tmp_path / n, emb, labels, threads=2, level="AVX2") for n in ("x", "y")]
    data, _ = drift_map.drift(same, tmp_path / "map", Path(sys.executable), DECLARED)
    (row,) = data["outputs"]["emb"]["pairs"]
    assert row["mark"] == "within" and row["differs_in"] == "no difference in the recorded chain"
    assert row["share_of_tolerance"] < 1e-9  # float64 rounding of a cosine of equal rows


def test_other_ids_are_not_compared(three: list[Path], tmp_path: Path) -> None:
    (three[1] / "outputs" / "emb.ids.json").write_text(json.dumps(list(reversed(IDS))), encoding="utf-8")
    data, _ = drift_map.drift(three, tmp_path / "map", Path(sys.executable), DECLARED)
    row = next(r for r in data["outputs"]["emb"]["pairs"] if (r["a"], r["b"]) == ("a", "b"))
    assert row["mark"] == "not compared" and "ids" in row["error"]


def test_refusals(three: list[Path], tmp_path: Path) -> None:
    with pytest.raises(KernodeckError, match="at least two"):
        drift_map.load(three[:1])
    with pytest.raises(KernodeckError, match="not a dossier"):
        drift_map.load([three[0], tmp_path])


def test_cli_outside_a_project_reads_the_declaration_from_the_dossiers(
    three: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["drift", *map(str, three), "--out", str(tmp_path / "cli"), "--python", sys.executable])
    assert code == 0
    assert "## `emb`" in capsys.readouterr().out
    assert (tmp_path / "cli" / "drift.svg").is_file()
    assert main(["drift", str(three[0]), "--python", sys.executable]) == 2
    assert "at least two" in capsys.readouterr().err


def test_the_committed_reference_can_be_one_of_the_dossiers(three: list[Path], tmp_path: Path) -> None:
    """A reference keeps its outputs beside manifest.toml (no outputs/ folder): drift reads them there."""
    ref = tmp_path / "reference"
    ref.mkdir()
    for item in (three[0] / "outputs").iterdir():
        (ref / item.name).write_bytes(item.read_bytes())
    (ref / "manifest.toml").write_text("format = 1\n", encoding="utf-8")
    data, _ = drift_map.drift([ref, three[2]], tmp_path / "map", Path(sys.executable), DECLARED)
    (row,) = data["outputs"]["emb"]["pairs"]
    assert row["a"] == "reference" and row["mark"] == "BEYOND"
    drawn = drift_map.drift([ref, three[0]], tmp_path / "map2", Path(sys.executable), DECLARED)[0]
    (same,) = drawn["outputs"]["labels"]["pairs"]
    assert same["mark"] == "within" and same["numbers"]["disagreement"] == 0


def test_explain_names_what_differs_and_what_one_side_did_not_record() -> None:
    a = {"CPU": "AMD EPYC", "ISA flags": "avx2 avx512f avx512_vp2intersect", "threads": "?", "torch": "2.13"}
    b = {"CPU": "Xeon", "ISA flags": "avx2 avx512f amx_tile", "threads": "2", "torch": "2.13"}
    text = drift_map.explain(a, b)
    assert "CPU: AMD EPYC vs Xeon" in text
    assert "only the first has avx512_vp2intersect, only the second amx_tile" in text
    assert "(not recorded by both: threads)" in text and "torch" not in text
    assert drift_map.explain(a, dict(a)) == "no difference in the recorded chain"


def test_out_on_a_users_folder_is_refused_and_left_untouched(
    three: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    user = tmp_path / "user-folder"
    user.mkdir()
    (user / "precious.txt").write_text("mine\n", encoding="utf-8")
    assert main(["drift", *map(str, three), "--out", str(user), "--python", sys.executable]) == 2
    err = capsys.readouterr().err
    assert "ERROR:" in err and "TIP:" in err
    assert sorted(p.name for p in user.iterdir()) == ["precious.txt"]
    assert main(["drift", *map(str, three), "--out", str(tmp_path / "map"), "--python", sys.executable]) == 0
    assert main(["drift", *map(str, three), "--out", str(tmp_path / "map"), "--python", sys.executable]) == 0
