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
from tests.helpers.builtenv import in_env
from tests.helpers.planted import PLANT, plant_pyc
from tests.helpers.project import kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.sharedruns import SharedRun
from tests.helpers.tinyapp import copy_referenced

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_verified(tiny_referenced: Path, module_tmp: Path) -> SharedRun:
    """ONE passing verify of a copy of the session's referenced tiny project, for this module's readers (the declared
    application's report, and the dossier replayed by hand); they never change its project or dossier."""
    project = copy_referenced(tiny_referenced, module_tmp)
    out = module_tmp / "run"
    return SharedRun(project, out, kd(project, "verify", "--out", str(out)))


def test_another_application_is_declared_referenced_and_verified(
    tiny_referenced: Path, tiny_verified: SharedRun, tmp_path: Path
) -> None:
    # the tiny application declared in a copy of the project and referenced by `reference --new` (made once for the
    # run: tests/helpers/tinyapp.py's ``referenced``, the fixture ``tiny_referenced``), then verified once for this
    # module (``tiny_verified``)
    project, out, proc = tiny_verified.project, tiny_verified.out, tiny_verified.proc
    manifest = tomllib.loads((project / "dossier/reference/manifest.toml").read_text())
    assert manifest["outputs"]["logits"]["kind"] == "allclose" and manifest["outputs"]["labels"]["shape"] == [8]
    assert "weights" not in manifest and "flip_bound" not in manifest["criterion"]  # nothing MiniLM-specific
    assert manifest["application"]["code"] == {"tiny/app.py": sha256_file(project / "tiny/app.py")}
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert set(statuses(report).values()) == {"passed"}
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert steps["compare"]["details"]["outputs"]["logits"]["bitwise_equal"] is True
    assert steps["criterion"]["details"]["summary"] == "accuracy 0.88"
    assert steps["determinism"]["details"]["subset"] == "the whole sample"

    # The negative control: logits moved beyond rtol/atol in the reference fail the comparison, naming the output
    # (in this test's own copy of the referenced project).
    project = copy_referenced(tiny_referenced, tmp_path)
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
def test_project_folders_never_shadow_the_env(tiny_referenced: Path, tmp_path: Path) -> None:
    # the runner's sys.path and the entry's loading are Kernodeck's, the same for every application: the tiny one's
    # (it imports numpy and torch too), a copy of the session's referenced tiny project, without MiniLM's model load
    project = copy_referenced(tiny_referenced, tmp_path)
    for name in ("numpy", "torch", "kernodeck_inenv"):
        (project / name).mkdir(exist_ok=True)
        (project / name / "__init__.py").write_text(f"raise ImportError('the project folder {name}/ was imported')\n")
    # A timestamp-valid bytecode file beside the entry and beside an in-env module of Kernodeck (the project's copy
    # the runner runs from): neither runs (tests/unit/test_verified.py shows the plain import path would).
    marker = tmp_path / "planted-ran"
    plant_pyc(project / "tiny" / "app.py", PLANT.format(marker=str(marker)))
    plant_pyc(project / "kernodeck" / "inenv" / "tolerance.py", PLANT.format(marker=str(marker)))
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "was imported" not in proc.stderr and not marker.exists()
    assert set(statuses(read_report(out)).values()) == {"passed"}


def test_the_dossier_replays_by_hand_from_the_project_root(tiny_verified: SharedRun, tmp_path: Path) -> None:
    """procedure.md's last command, as a person runs it: the dossier's run-config (project root redacted), the env's
    interpreter, the runner by its path, from the project root. The dossier is this module's passing verify of the
    tiny application (``tiny_verified``: the runner, its run-config and its steps are Kernodeck's, the same for every
    application), replayed from its project's root: only read, its run-config copied out."""
    import subprocess

    from kernodeck.env import start
    from kernodeck.verify.steps.in_env import RUNNER_ENV
    from tests.helpers.builtenv import env_python

    project, out, proc = tiny_verified.project, tiny_verified.out, tiny_verified.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    config = json.loads((out / "run-config.json").read_text())
    assert config["project_root"] == "<project>"  # the dossier names no path of this machine
    replay = tmp_path / "replay"
    replay.mkdir()
    (replay / "run-config.json").write_text(json.dumps({**config, "steps": ["settings", "backend", "reference",
                                                                          "application", "reread", "compare"]}))
    config_path = str(replay / "run-config.json")
    # as procedure.md shows it: the runner's variables, -s -P, no other PYTHON* variable
    argv = start.argv(env_python(project), "kernodeck/inenv/runner.py", "--config", config_path)
    done = subprocess.run(argv, cwd=project, capture_output=True, text=True, check=False, timeout=600,
                          env=start.environ(RUNNER_ENV))
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in sorted((replay / "steps").glob("*.json"))]
    assert [r["status"] for r in results] == ["passed"] * 6 and results[-1]["name"] == "compare"
