"""The application's own resume as compare and the drift map read it (kernodeck/dossier/resume_outputs.py): each
dossier's resumed run (end state, loss curve, progress counters), written by the resume-application step's own writers
(``resume_app._keep`` and ``record``) into small fake dossiers. Equal runs compare with zero delta; a perturbed one is
named, output by output. The comparison runs in a real subprocess: this test venv's interpreter stands in for the
rebuilt env (it has numpy), running inenv/compare_outputs.py and inenv/drift.py by path."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.__main__ import main
from kernodeck.dossier import resume_outputs
from kernodeck.dossier.delta import compare, render_compare
from kernodeck.errors import KernodeckError
from kernodeck.inenv import resume_app
from kernodeck.measure import drift_map

PYTHON = Path(sys.executable)
CONTRACT: dict[str, Any] = {
    "entry": {"file": "checks/train.py", "function": "train"}, "steps": 6, "checkpoint_at": 3,
    "outputs": {"weights": {"kind": "allclose", "dtype": "float32", "rtol": 0.0, "atol": 1e-6,
                            "justification": "the final weights"}},
    "controls": ["optimizer"], "gpu_tolerance": 1e-5,
}
LABELS = {"labels": {"kind": "exact", "dtype": "int64", "justification": "the classes"}}
WEIGHTS = np.linspace(-1, 1, 12, dtype=np.float32)
CURVE = [2.0, 1.5, 1.2, 1.0, 0.9, 0.8]
COUNTERS = {"step": 6, "epoch": 2, "loader": 0}


def _dossier(folder: Path, *, weights: Any = WEIGHTS, curve: list[float] = CURVE, counters: dict[str, int] = COUNTERS,
             device: str = "cpu", contract: dict[str, Any] | None = CONTRACT) -> Path:
    """A verify dossier as far as compare and drift read it, its resumed run kept by the step's own writers."""
    (folder / "steps").mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"status": "passed", "platform": "p", "steps": [
        {"name": "resume-application", "status": "passed"}]}), encoding="utf-8")
    config: dict[str, Any] = {"application": {"outputs": LABELS}}
    if contract is not None:
        config["resume_application"] = contract
    (folder / "run-config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "steps" / "03-backend.json").write_text(json.dumps({"details": {"device": device}}), encoding="utf-8")
    (folder / "outputs").mkdir()
    np.save(folder / "outputs" / "labels.npy", np.arange(4, dtype=np.int64))
    (folder / "outputs" / "labels.ids.json").write_text(json.dumps(["a", "b", "c", "d"]), encoding="utf-8")
    if contract is not None:
        run = resume_outputs.run_folder(folder)
        run.mkdir(parents=True)
        resume_app._keep(run, resume_app.Trained({"weights": np.asarray(weights)}, {}, counters))
        resume_app.record(run, list(curve), counters)
    return folder


def _resume(a: Path, b: Path) -> tuple[dict[str, Any], str]:
    result = compare(a, b, PYTHON)
    return result["resume_application"], render_compare(result)


def test_equal_resumed_runs_compare_with_zero_delta(tmp_path: Path) -> None:
    found, text = _resume(_dossier(tmp_path / "a"), _dossier(tmp_path / "b"))
    assert found["available"] and sorted(found["per_output"]) == ["loss-curve", "progress", "weights"]
    assert all(v["passed"] and v["bitwise_equal"] for v in found["per_output"].values()), found["per_output"]
    assert found["per_output"]["weights"]["max_abs"] == 0 and found["per_output"]["loss-curve"]["max_abs"] == 0
    assert found["per_output"]["loss-curve"]["atol"] == 0  # both ran on a CPU: the step's own rule, bitwise
    section = text.split("## The application's resume", 1)[1].split("## System", 1)[0]
    assert section.count("within its declared tolerance") == 3 and "BEYOND" not in section


PERTURBED = [
    # the end state: one weight moved beyond atol 1e-6
    ({"weights": WEIGHTS + np.eye(1, 12, 7, dtype=np.float32)[0] * 1e-3}, "weights", "'7'"),
    # the loss curve: step 5 parts by one part in 1e12 (bitwise on a CPU)
    ({"curve": [*CURVE[:4], CURVE[4] + 1e-12, CURVE[5]]}, "loss-curve", "'5'"),
    # the progress: the resumed run ended in another epoch
    ({"counters": {**COUNTERS, "epoch": 1}}, "progress", "'epoch'"),
]


@pytest.mark.parametrize(("change", "name", "where"), PERTURBED, ids=[p[1] for p in PERTURBED])
def test_a_perturbed_resumed_run_is_named(tmp_path: Path, change: dict[str, Any], name: str, where: str) -> None:
    found, text = _resume(_dossier(tmp_path / "a"), _dossier(tmp_path / "b", **change))
    beyond = sorted(n for n, v in found["per_output"].items() if not v["passed"])
    assert beyond == [name], found["per_output"]
    line = next(x for x in text.splitlines() if x.startswith(f"- `{name}`"))
    assert "BEYOND its declared tolerance" in line and where in line, line


def test_an_output_in_another_dtype_fails_naming_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The same values in float64 where A's are float32 (the declared dtype) is another output: it fails, naming the
    output and both dtypes, as verify fails an application's output in another dtype; the drift map says so too."""
    found, text = _resume(_dossier(tmp_path / "a"), _dossier(tmp_path / "b", weights=WEIGHTS.astype(np.float64)))
    assert not found["per_output"]["weights"]["passed"], found["per_output"]["weights"]
    assert "- `weights` (allclose): BEYOND its declared tolerance: dtype float64 in B, float32 in A (declared " \
           "float32)" in text
    assert found["per_output"]["loss-curve"]["passed"] and found["per_output"]["progress"]["passed"]
    pair = _weights_drift_pair(tmp_path, monkeypatch, capsys)
    assert pair["mark"] == "not compared" and pair["error"] == "dtype float64 in B, float32 in A (declared float32)"


def _weights_drift_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The drift map of dossiers a and b: its pair for the resumed run's weights."""
    monkeypatch.chdir(tmp_path)
    assert main(["drift", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "map"),
                 "--python", sys.executable]) == 0
    capsys.readouterr()
    data = json.loads((tmp_path / "map" / "drift.json").read_text(encoding="utf-8"))
    (pair,) = data["outputs"]["resume-application/weights"]["pairs"]
    return dict(pair)


def test_a_scalar_and_a_one_element_array_are_other_outputs_naming_both_shapes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Each dossier keeps the shape train wrote (``_keep``): a 0-d output in A and the same value as shape (1,) in B
    fail compare naming both shapes, and the drift map does not compare them; two 0-d outputs compare equal."""
    scalar, one = np.float32(0.5), np.array([0.5], dtype=np.float32)
    found, text = _resume(_dossier(tmp_path / "a", weights=scalar), _dossier(tmp_path / "b", weights=one))
    assert not found["per_output"]["weights"]["passed"], found["per_output"]["weights"]
    assert "- `weights` (allclose): BEYOND its declared tolerance: shape (1,) in B, () in A" in text
    found, _ = _resume(_dossier(tmp_path / "c", weights=scalar), _dossier(tmp_path / "d", weights=scalar))
    assert found["per_output"]["weights"]["passed"], found["per_output"]["weights"]  # the control: 0-d is readable
    pair = _weights_drift_pair(tmp_path, monkeypatch, capsys)
    assert pair["mark"] == "not compared" and pair["error"] == "shape (1,) in B, () in A"


def test_on_a_gpu_the_loss_curve_is_read_under_the_declared_gpu_tolerance(tmp_path: Path) -> None:
    near = [v + 1e-7 for v in CURVE]
    found, _ = _resume(_dossier(tmp_path / "a"), _dossier(tmp_path / "b", curve=near, device="cuda"))
    assert found["per_output"]["loss-curve"]["passed"] and found["per_output"]["loss-curve"]["atol"] == 1e-5
    found, _ = _resume(_dossier(tmp_path / "c"), _dossier(tmp_path / "d", curve=near))  # the control: both on a CPU
    assert not found["per_output"]["loss-curve"]["passed"]


def test_a_dossier_without_a_resume_is_named_and_two_without_get_no_section(tmp_path: Path) -> None:
    found, text = _resume(_dossier(tmp_path / "a", contract=None), _dossier(tmp_path / "b"))
    assert found["not_declared"] == ["a"] and "A declares no resume of the application" in text
    result = compare(_dossier(tmp_path / "c", contract=None), _dossier(tmp_path / "d", contract=None), PYTHON)
    assert result["resume_application"] is None and "## The application's resume" not in render_compare(result)


def test_another_resume_contract_is_named_before_the_numbers(tmp_path: Path) -> None:
    other = {**copy.deepcopy(CONTRACT), "checkpoint_at": 2}
    found, text = _resume(_dossier(tmp_path / "a"), _dossier(tmp_path / "b", contract=other))
    assert found["contract"] == {"checkpoint_at": {"a": 3, "b": 2}}
    assert "DIFFERENT RESUME CONTRACT: `checkpoint_at` 3 in A, 2 in B" in text


def test_another_gpu_tolerance_is_named_as_a_difference_of_the_contract(tmp_path: Path) -> None:
    """The bound the loss curve is read under off a CPU is a setting of the contract: two dossiers that declare
    different ones are told apart (compare reads the curve under A's), one without it counts as the default."""
    other = {**copy.deepcopy(CONTRACT), "gpu_tolerance": 1e-3}
    found, text = _resume(_dossier(tmp_path / "a"), _dossier(tmp_path / "b", contract=other, device="cuda"))
    assert found["contract"] == {"gpu_tolerance": {"a": 1e-5, "b": 1e-3}}
    assert "DIFFERENT RESUME CONTRACT: `gpu_tolerance` 1e-05 in A, 0.001 in B (another bound on the loss curve" in text
    assert found["per_output"]["loss-curve"]["atol"] == 1e-5  # A's, as said
    default = {k: v for k, v in copy.deepcopy(CONTRACT).items() if k != "gpu_tolerance"}
    found, _ = _resume(_dossier(tmp_path / "c"), _dossier(tmp_path / "d", contract=default))
    assert found["contract"] == {}  # absent: the step applied the default, the same as A's


@pytest.mark.parametrize("value", [-1, "1e-5", True, float("nan"), float("inf")])
@pytest.mark.parametrize("side", ["a", "b"])
def test_a_malformed_gpu_tolerance_in_a_dossier_is_refused(tmp_path: Path, value: Any, side: str) -> None:
    """A dossier's recorded gpu tolerance is checked as the declaration's is, on either side: never a negative or
    non-finite bound, never a traceback."""
    bad = {**copy.deepcopy(CONTRACT), "gpu_tolerance": value}
    folders = {s: _dossier(tmp_path / s, contract=bad if s == side else CONTRACT, device="cuda") for s in "ab"}
    with pytest.raises(KernodeckError, match=rf"{side}/run-config.json: resume_application.gpu_tolerance: .* is not "
                                             r"a finite number >= 0"):
        compare(folders["a"], folders["b"], PYTHON)


def test_the_drift_map_reads_the_resumed_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    folders = [_dossier(tmp_path / "a"), _dossier(tmp_path / "b"),
               _dossier(tmp_path / "c", weights=WEIGHTS + 1e-3, counters={**COUNTERS, "loader": 2})]
    monkeypatch.chdir(tmp_path)  # outside a project: the declarations come from the dossiers' run-config.json
    assert main(["drift", *map(str, folders), "--out", str(tmp_path / "map"), "--python", sys.executable]) == 0
    assert "## `resume-application/weights` (allclose" in capsys.readouterr().out
    data = json.loads((tmp_path / "map" / "drift.json").read_text(encoding="utf-8"))
    marks = {name: {(r["a"], r["b"]): r["mark"] for r in out["pairs"]} for name, out in data["outputs"].items()}
    for name in ("resume-application/weights", "resume-application/progress"):
        assert marks[name] == {("a", "b"): "within", ("a", "c"): "BEYOND", ("b", "c"): "BEYOND"}, name
    assert set(marks["resume-application/loss-curve"].values()) == {"within"}
    assert set(marks["labels"].values()) == {"within"}  # the application's outputs, mapped as before


def test_the_drift_map_names_another_resume_contract_as_compare_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Another ``steps`` and ``gpu_tolerance`` (c), or another declared end state (d), between two dossiers is named
    by the drift map for that pair (resume_outputs.differences, compare's own), its numbers still shown; a and b,
    the same contract, are not."""
    loose = copy.deepcopy(CONTRACT)
    loose["outputs"]["weights"]["atol"] = 1e-3
    folders = [_dossier(tmp_path / "a"), _dossier(tmp_path / "b"),
               _dossier(tmp_path / "c", contract={**copy.deepcopy(CONTRACT), "steps": 8, "gpu_tolerance": 1e-3}),
               _dossier(tmp_path / "d", contract=loose)]
    monkeypatch.chdir(tmp_path)
    assert main(["drift", *map(str, folders), "--out", str(tmp_path / "map"), "--python", sys.executable]) == 0
    text = capsys.readouterr().out
    data = json.loads((tmp_path / "map" / "drift.json").read_text(encoding="utf-8"))
    named = {(c["a"], c["b"]): sorted(c["differs"]) for c in data["resume_contracts"]}
    assert named == {("a", "c"): ["gpu_tolerance", "steps"], ("b", "c"): ["gpu_tolerance", "steps"],
                     ("a", "d"): ["outputs"], ("b", "d"): ["outputs"],
                     ("c", "d"): ["gpu_tolerance", "outputs", "steps"]}
    assert "- 1-3: DIFFERENT RESUME CONTRACT: `steps` 6 in a, 8 in c (another training" in text
    assert "- 1-4: DIFFERENT RESUME CONTRACT: `outputs` weights declared otherwise or by one only" in text
    rows = {(r["a"], r["b"]): r for r in data["outputs"]["resume-application/weights"]["pairs"]}
    assert rows[("a", "c")]["differs_in"].startswith("DIFFERENT RESUME CONTRACT (`steps`, `gpu_tolerance`); ")
    assert rows[("a", "c")]["mark"] == "within"  # the numbers, still shown
    assert "RESUME CONTRACT" not in rows[("a", "b")]["differs_in"]
    assert "RESUME CONTRACT" not in "".join(r["differs_in"] for r in data["outputs"]["labels"]["pairs"])
    found, _ = _resume(folders[0], folders[2])  # compare names the same settings
    assert sorted(found["contract"]) == named[("a", "c")]


def test_without_a_resume_declared_the_drift_map_has_only_the_applications_outputs(tmp_path: Path) -> None:
    folders = [_dossier(tmp_path / n, contract=None) for n in ("a", "b")]
    assert drift_map.resume_declared(None, folders) is None
    # declared, but only one dossier holds a resumed run (calibrate's variations run no training): not mapped either
    ran = [_dossier(tmp_path / "c"), _dossier(tmp_path / "d")]
    assert drift_map.resume_declared(None, ran) is not None  # the control: two resumed runs are mapped
    assert drift_map.resume_declared(None, [ran[0], folders[0]]) is None
    resume = drift_map.resume_declared(None, folders)
    data, _ = drift_map.drift(folders, tmp_path / "map", PYTHON, LABELS, resume=resume)
    assert list(data["outputs"]) == ["labels"]
