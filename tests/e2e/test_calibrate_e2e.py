"""calibrate and drift end to end on copies of examples/digits and examples/regression, run as a user runs them
(`python -m kernodeck`).

The copy declares a logits tolerance far tighter than the thread/ISA noise and a labels tolerance far looser than the
margin of use (the criterion's accuracy floor): the negative controls, reported "too tight" and "too loose" from
real measurements. Then `--write` puts the proposal into the copy's pyproject (comments kept), and drift maps three
of the calibration's variation dossiers. The regression copy declares its predictions' tolerance above the margin of
use (too loose), and its bands are exact: counted in rows, no tolerance proposed. Each copy shares its example's env,
rebuilt once for the whole run (``digits_built``, ``regression_built``: this machine's package sources, pip's own
config).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.helpers.builtenv import example_copy
from tests.helpers.project import ROOT

pytestmark = pytest.mark.slow



def _kd(project: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])  # uv beside this python
    return subprocess.run([sys.executable, "-m", "kernodeck", *args], cwd=project, env=env, text=True,
                          capture_output=True, timeout=1500, check=False)


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> None:
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode}):\n{tail}"


def test_calibrate_and_drift_on_digits(digits_built: Path, tmp_path: Path) -> None:
    project = example_copy(digits_built, tmp_path / "digits")  # its env the run's rebuilt one (same lock: reused)
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    text = re.sub(r"rtol = 1e-3\natol = 1e-3", "rtol = 1e-7\natol = 1e-7", text)
    text = text.replace("min-share = 0.99", "min-share = 0.5")
    assert "rtol = 1e-7" in text and "min-share = 0.5" in text
    pyproject.write_text(text, encoding="utf-8")

    # the caller's MKL_CBWR reaches no variation, and calibration.md says so (red-team pass 36, CAL1)
    proc = _kd(project, "calibrate", "--out", "runs/cal", "--write", MKL_CBWR="COMPATIBLE")
    _ok(proc, "calibrate")
    folder = project / "runs" / "cal"
    data = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    status = {v["name"]: v["status"] for v in data["variations"]}
    assert status["declared"] == "passed" and status["threads-1"] == "passed"
    assert status["nondeterministic"] == "passed" and status["tf32"] == "unavailable"
    assert status["isa-default"] == "passed"  # every x86 CPU has the scalar kernels
    assert data["declared_differs_from_reference"]  # the edited tolerances, judged as declared
    logits, labels = data["outputs"]["logits"], data["outputs"]["labels"]
    assert logits["verdict"] == "too tight", logits
    assert labels["verdict"] == "too loose", labels
    ratio = logits["axes"][0]
    assert ratio["noise"] > 1 and ratio["margin"] > ratio["noise"] and ratio["proposal_over_noise"] > 1
    assert labels["axes"][0]["margin"] < 0.5 and labels["margin_test"] == "the application's criterion"
    table = (folder / "calibration.md").read_text(encoding="utf-8")
    assert ("| isa-default | ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41 | "
            "passed |") in table  # MKL and oneDNN at the same level as ATen (red-team pass 36, CAL1)
    assert "TOO TIGHT" in table and "TOO LOOSE" in table and "unavailable: TF32" in table
    # (a parallel test run's worker sets OMP_NUM_THREADS for its share of the cores: tests/conftest.py)
    caller = {k: v for k, v in os.environ.items() if k == "OMP_NUM_THREADS"}
    (line,) = [ln for ln in table.splitlines() if "Left out of every variation, as the caller had set them:" in ln]
    assert all(f"`{k}={v}`" in line for k, v in {"MKL_CBWR": "COMPATIBLE", **caller}.items()), line
    assert data["callers_numerics_left_out"] == {"MKL_CBWR": "COMPATIBLE", **caller}
    assert "TOO TIGHT" in proc.stdout  # the table is printed too
    chart = ET.fromstring((folder / "calibration.svg").read_text(encoding="utf-8"))
    assert [el for el in chart.iter("{http://www.w3.org/2000/svg}line") if el.get("class") == "declared"]

    written = pyproject.read_text(encoding="utf-8")
    declared = tomllib.loads(written)["tool"]["kernodeck"]["application"]["outputs"]
    assert declared["logits"]["rtol"] == logits["proposed"]["rtol"] and declared["logits"]["rtol"] > 1e-7
    assert declared["labels"]["min-share"] == labels["proposed"]["min-share"] > 0.5
    assert "Calibrated by `nox -s calibrate`" in declared["logits"]["justification"]
    assert "# The test split" in written  # comments kept

    variations = sorted((folder / "variations").iterdir())
    chosen = [v for v in variations if v.name.split("-", 1)[1] in ("declared", "threads-1", "isa-default")]
    assert len(chosen) == 3
    proc = _kd(project, "drift", *map(str, chosen), "--out", "runs/drift")
    _ok(proc, "drift")
    drift = json.loads((project / "runs" / "drift" / "drift.json").read_text(encoding="utf-8"))
    assert len(drift["outputs"]["logits"]["pairs"]) == 3
    explained = {r["differs_in"] for r in drift["outputs"]["logits"]["pairs"]}
    assert any("CPU kernel level" in e for e in explained) and any("threads" in e for e in explained)
    assert "## `logits`" in proc.stdout
    ET.fromstring((project / "runs" / "drift" / "drift.svg").read_text(encoding="utf-8"))


def test_calibrate_on_regression_loose_allclose_and_exact_bands(regression_built: Path, tmp_path: Path) -> None:
    project = example_copy(regression_built, tmp_path / "regression")  # its env the run's rebuilt one (reused)
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    # rtol = atol = 10 lets a prediction move by 10 or more: the R² floor fails long before (the negative control)
    loose = text.replace("rtol = 1e-4\natol = 1e-4", "rtol = 10.0\natol = 10.0")
    assert loose != text
    pyproject.write_text(loose, encoding="utf-8")

    proc = _kd(project, "calibrate", "--out", "runs/cal")
    _ok(proc, "calibrate")
    folder = project / "runs" / "cal"
    data = json.loads((folder / "calibration.json").read_text(encoding="utf-8"))
    predictions, band = data["outputs"]["predictions"], data["outputs"]["band"]
    assert predictions["verdict"] == "too loose", predictions
    assert predictions["margin_test"] == "the application's criterion"
    ratio = predictions["axes"][0]
    assert ratio["noise"] < 1 and ratio["margin"] < 1  # both far below the declared 10 + 10*|y|
    assert ratio["proposal_over_noise"] > 1 and ratio["margin_over_proposal"] > 1
    assert predictions["proposed"]["rtol"] < 10.0
    assert band["kind"] == "exact" and band["proposed"] is None and band["axes"][0]["proposal"] is None
    assert band["verdict"] in ("ok", "too tight")  # too tight only where this machine changed a band
    said = band["notes"][-1]
    assert said.startswith("exact: no tolerance to propose") and "of 120 rows" in said
    assert "does not react to this output" in said  # the R² criterion never reads the bands
    table = (folder / "calibration.md").read_text(encoding="utf-8")
    assert "TOO LOOSE" in table and "Declared: every row equal" in table

    variations = sorted((folder / "variations").iterdir())
    chosen = [v for v in variations if v.name.split("-", 1)[1] in ("declared", "threads-1", "isa-default")]
    proc = _kd(project, "drift", *map(str, chosen), "--out", "runs/drift")
    _ok(proc, "drift")
    drift = json.loads((project / "runs" / "drift" / "drift.json").read_text(encoding="utf-8"))
    assert len(drift["outputs"]["band"]["pairs"]) == 3
    assert "## `band` (exact; declared every row equal)" in proc.stdout
