"""The application contract end to end, in the real torch env: another application than the MiniLM sample, declared
through the same public mechanism, and the in-env side's isolation from the project's folders."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from kernodeck._fs import sha256_file, write_atomic
from kernodeck.project.config import load_project
from kernodeck.runformat import manifest as dossier_manifest
from tests.conftest import kd, read_report, statuses
from tests.e2e.test_verify_e2e import in_env, sibling
from tests.planted import PLANT, plant_pyc

pytestmark = pytest.mark.slow

TINY_APP = '''
import numpy as np


def run(app):
    import torch

    x = torch.tensor([[r["a"], r["b"]] for r in app.records], dtype=torch.float32, device=app.device)
    w = torch.tensor(app.params["weights"], dtype=torch.float32, device=app.device)
    logits = (x @ w).cpu().numpy()
    ids = [r["id"] for r in app.records]
    app.progress(len(ids), len(ids), "records")
    app.write("logits", logits, ids)
    app.write("labels", logits.argmax(axis=1).astype(np.int64), ids)


def criterion(outputs, ids, records, params):
    share = float(np.mean(outputs["labels"] == np.array([r["label"] for r in records])))
    return {"passed": share >= params["min-accuracy"], "summary": f"accuracy {share:.2f}", "margin": share - 0.5}
'''

TINY_DECLARATION = """[tool.kernodeck.application]
entry = "tiny/app.py:run"
criterion = "tiny/app.py:criterion"
sample = "tiny/sample.jsonl"
code = ["tiny/app.py"]
params = { weights = [[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], min-accuracy = 0.75 }

[tool.kernodeck.application.outputs.logits]
kind = "allclose"
dtype = "float32"
rtol = 1e-5
atol = 1e-6
justification = "float32 logits of one small matmul: only rounding may differ"

[tool.kernodeck.application.outputs.labels]
kind = "agreement"
dtype = "int64"
min-share = 1.0
justification = "labels decide the business outcome: every one must agree"

"""


def _tiny_project(built: Path, tmp_path: Path) -> Path:
    project = sibling(built, tmp_path)
    (project / "tiny").mkdir()
    (project / "tiny/app.py").write_text(TINY_APP)
    rows = [(1.0, 0.5), (-1.0, 2.0), (0.5, -0.5), (2.0, 2.0), (-2.0, -1.0), (0.0, 1.0), (1.5, -2.0), (-0.5, 0.25)]
    weights = [[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]]
    lines = []
    for i, (a, b) in enumerate(rows):
        logits = [a * weights[0][k] + b * weights[1][k] for k in range(3)]
        label = max(range(3), key=lambda k: logits[k])
        label = (label + 1) % 3 if i == 3 else label  # one wrong label: accuracy 7/8
        lines.append(json.dumps({"id": f"t{i}", "a": a, "b": b, "label": label}))
    (project / "tiny/sample.jsonl").write_text("\n".join(lines) + "\n")
    text = (project / "pyproject.toml").read_text()
    start, end = text.index("[tool.kernodeck.application]"), text.index("# The resume exercise")
    (project / "pyproject.toml").write_text(text[:start] + TINY_DECLARATION + text[end:])
    return project


def test_another_application_is_declared_referenced_and_verified(built_project: Path, tmp_path: Path) -> None:
    project = _tiny_project(built_project, tmp_path)
    proc = kd(project, "reference", "--new", "--out", str(tmp_path / "ref"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = tomllib.loads((project / "dossier/reference/manifest.toml").read_text())
    assert manifest["outputs"]["logits"]["kind"] == "allclose" and manifest["outputs"]["labels"]["shape"] == [8]
    assert "weights" not in manifest and "flip_bound" not in manifest["criterion"]  # nothing MiniLM-specific
    assert manifest["application"]["code"] == {"tiny/app.py": sha256_file(project / "tiny/app.py")}
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert set(statuses(report).values()) == {"passed"}
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert steps["compare"]["details"]["outputs"]["logits"]["bitwise_equal"] is True
    assert steps["criterion"]["details"]["summary"] == "accuracy 0.88"
    assert steps["determinism"]["details"]["subset"] == "the whole sample"

    # The negative control: logits moved beyond rtol/atol in the reference fail the comparison, naming the output.
    ref = project / "dossier/reference"
    in_env(project, "import numpy as np; p='dossier/reference/logits.npy'; a=np.load(p); a[2, 1] += 1e-3; np.save(p,a)")
    path = ref / "manifest.toml"
    manifest = tomllib.loads(path.read_text())
    manifest["outputs"]["logits"]["sha256"] = sha256_file(ref / "logits.npy")
    manifest["id"] = dossier_manifest.identity(manifest)
    write_atomic(path, dossier_manifest.render(manifest))
    assert dossier_manifest.load(load_project(project)).id == manifest["id"]
    proc = kd(project, "verify", "--out", str(tmp_path / "run2"))
    assert proc.returncode == 1
    report = read_report(tmp_path / "run2")
    failed = next(s for s in report["steps"] if s["name"] == "compare")  # type: ignore[union-attr]
    assert report["first_failure"] == "compare" and failed["layer"] == "comparison"
    assert "logits differs from the reference beyond tolerance" in failed["error"] and "'t2'" in failed["error"]
    assert "labels" not in failed["error"]


@pytest.mark.reliability(
    37,
    "a `numpy/` folder (and a `checks/` one) at the project root that would shadow the env's packages",
    "never imported: the in-env runner puts nothing of the project on sys.path; the entry is loaded by its file path",
)
def test_project_folders_never_shadow_the_env(built_project: Path, tmp_path: Path) -> None:
    project = sibling(built_project, tmp_path)
    for name in ("numpy", "torch", "kernodeck_inenv"):
        (project / name).mkdir(exist_ok=True)
        (project / name / "__init__.py").write_text(f"raise ImportError('the project folder {name}/ was imported')\n")
    # A timestamp-valid bytecode file beside the entry and beside an in-env module of Kernodeck (the project's copy
    # the runner runs from): neither runs (tests/unit/test_verified_code.py shows the plain import path would).
    marker = tmp_path / "planted-ran"
    plant_pyc(project / "checks" / "app.py", PLANT.format(marker=str(marker)))
    plant_pyc(project / "kernodeck" / "inenv" / "tolerance.py", PLANT.format(marker=str(marker)))
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "was imported" not in proc.stderr and not marker.exists()
    assert set(statuses(read_report(out)).values()) == {"passed"}


def test_the_dossier_replays_by_hand_from_the_project_root(built_project: Path, tmp_path: Path) -> None:
    """procedure.md's last command, as a person runs it: the dossier's run-config (project root redacted), the env's
    interpreter, the runner by its path, from the project root."""
    import subprocess

    from kernodeck.env import start
    from kernodeck.verify.steps.in_env import RUNNER_ENV
    from tests.e2e.test_verify_e2e import env_python

    out = tmp_path / "run"
    proc = kd(built_project, "verify", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((out / "run-config.json").read_text())
    assert config["project_root"] == "<project>"  # the dossier names no path of this machine
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "run-config.json").write_text(json.dumps({**config, "steps": ["settings", "backend", "reference",
                                                                          "application", "reread", "compare"]}))
    config_path = str(replay / "run-config.json")
    # as procedure.md shows it: the runner's variables, -s -P, no other PYTHON* variable
    argv = start.argv(env_python(built_project), "kernodeck/inenv/runner.py", "--config", config_path)
    done = subprocess.run(argv, cwd=built_project, capture_output=True, text=True, check=False, timeout=600,
                          env=start.environ(RUNNER_ENV))
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in sorted((replay / "steps").glob("*.json"))]
    assert [r["status"] for r in results] == ["passed"] * 6 and results[-1]["name"] == "compare"
