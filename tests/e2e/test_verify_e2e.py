"""End to end, as a user runs it: real subprocesses on a copy of the project with its real torch environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.builtenv import env_python, in_env, reseal, sibling
from tests.helpers.faults import BACKEND_FAULTS, OUTPUT_FAULTS, inject, output_fault
from tests.helpers.project import copy_project, kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.resumecli import resume_cli
from tests.helpers.sharedruns import SECRETS, SharedRun
from tests.helpers.tinyapp import copy_referenced

pytestmark = pytest.mark.slow
AFTER_COMPARE = ("criterion", "determinism", "resume")


def test_verify_passes_every_step(passed_run: SharedRun) -> None:
    out, proc = passed_run.out, passed_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(out)
    assert report["status"] == "passed" and report["first_failure"] is None
    assert set(statuses(report).values()) == {"passed"}
    assert list(statuses(report)) == [
        "lock-check",
        "rebuild",
        "inventory",
        "settings",
        "system",
        "backend",
        "extensions",
        "reference",
        "application",
        "reread",
        "compare",
        "criterion",
        "determinism",
        "resume",
    ]
    system = json.loads((out / "system.json").read_text())
    assert "torch_version_cuda" in system and "torch_version_hip" in system
    assert system["torch_version_cuda"] is None and system["torch_version_hip"] is None  # a CPU build
    assert system["driver"].get("unavailable") and system["vendor"].startswith("none")
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert steps["determinism"]["details"]["bitwise_identical"] is True
    assert steps["resume"]["details"]["first_diverging_step"] is None and steps["resume"]["details"]["new_process"]
    # The contract is the tolerance DECLARED in pyproject (not the manifest's copy); bitwise identity with the
    # reference holds only on the CPU that made it, so it is recorded as information, never asserted.
    import tomllib

    pyproject = tomllib.loads((passed_run.project / "pyproject.toml").read_text())
    declared = pyproject["tool"]["kernodeck"]["application"]["outputs"]["embeddings"]
    compare = steps["compare"]["details"]
    assert compare["min_cosine"] >= declared["cosine-min"] and compare["max_abs"] <= declared["max-abs"]
    assert isinstance(compare["bitwise_equal"], bool)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["deterministic_algorithms"] is True and settings["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    for name in (
        "procedure.md",
        "inventory.txt",
        "lock.txt",
        "run-config.json",
        "outputs/embeddings.npy",
        "outputs/embeddings.ids.json",
        "report.md",
        "inventory-vs-reference.json",
    ):
        assert (out / name).exists(), name
    assert "pip check" in (out / "procedure.md").read_text()


def test_perturbed_reference_fails_at_compare(tiny_referenced: Path, tmp_path: Path) -> None:
    # the comparison against the declared tolerance is Kernodeck's, the same for every application: the tiny one's
    # logits (allclose, rtol 1e-5) here, in a copy of the session's referenced tiny project, where MiniLM's model
    # would only add its load and its runs up to the compare step
    project = copy_referenced(tiny_referenced, tmp_path)
    in_env(project, "import numpy as np; p='dossier/reference/logits.npy'; a=np.load(p); a[0]+=1e-3; np.save(p,a)")
    reseal(project, ("logits",))
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 1
    report = read_report(out)
    st = statuses(report)
    assert report["first_failure"] == "compare" and st["compare"] == "failed"
    assert all(st[name] == "not-run" for name in AFTER_COMPARE)
    failed = next(s for s in report["steps"] if s["name"] == "compare")  # type: ignore[union-attr]
    assert failed["layer"] == "comparison" and "beyond tolerance" in failed["error"] and failed["interpreter"]


@pytest.mark.reliability(
    7,
    "outputs corrupted (NaN, ids out of order) or truncated between write and reread",
    "the reread step fails, not the comparison; compare not-run",
)
@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("nan-output", "non-finite"),
        ("reverse-ids", "not in input order"),
        ("truncate-output", "cannot read logits.npy"),
    ],
)
def test_bad_outputs_fail_the_reread_step(tiny_referenced: Path, tmp_path: Path, fault: str, message: str) -> None:
    # the reread step is Kernodeck's, the same for every application: the tiny one's logits here (MiniLM's model
    # would only add its load, ~5 CPU-s a run), in a copy of the session's referenced tiny project
    assert fault in OUTPUT_FAULTS
    project = copy_referenced(tiny_referenced, tmp_path)
    inject(project, *output_fault(fault, "logits"))
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    report = read_report(tmp_path / "run")
    step = next(s for s in report["steps"] if s["name"] == "reread")  # type: ignore[union-attr]
    assert report["first_failure"] == "reread" and step["layer"] == "output" and message in step["error"]
    assert statuses(report)["compare"] == "not-run"


@pytest.mark.reliability(
    11,
    "the expected GPU backend missing (`--expect-backend cuda` on CPU)",
    "backend failed, later steps not-run, no embedding computed",
)
def test_expected_gpu_missing_stops_everything(gpu_missing_run: SharedRun) -> None:
    out = gpu_missing_run.out
    assert gpu_missing_run.proc.returncode == 1
    report = read_report(out)
    st = statuses(report)
    assert report["first_failure"] == "backend" and st["system"] == "passed"
    assert all(
        st[n] == "not-run"
        for n in ("reference", "application", "reread", "compare", "criterion", "determinism", "resume")
    )
    backend = next(s for s in report["steps"] if s["name"] == "backend")  # type: ignore[union-attr]
    assert backend["layer"] == "device" and "torch.version.cuda" in backend["error"]
    assert not (out / "outputs" / "embeddings.npy").exists()  # no CPU fallback computed anything


@pytest.mark.reliability(
    3,
    "the lock stale against its inputs (an .in edited)",
    "verify refuses before rebuilding, naming the change and the lock command; the env untouched",
)
def test_stale_lock_refused_before_rebuilding(built_project: Path, tmp_path: Path) -> None:
    project = sibling(built_project, tmp_path)
    before = (project / ".venv-rebuild/cp311-linux_x86_64-cpu/CURRENT").read_text()
    with (project / "requirements/base.in").open("a") as handle:
        handle.write("six\n")
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 2
    assert "ERROR: lockfile lockfiles/cp311-linux_x86_64-cpu.txt is stale: requirements/base.in changed" in proc.stderr
    assert "TIP: nox -s lock -- --platform cp311-linux_x86_64-cpu" in proc.stderr
    st = statuses(read_report(out))
    assert st["lock-check"] == "failed" and st["rebuild"] == "not-run"
    assert (project / ".venv-rebuild/cp311-linux_x86_64-cpu/CURRENT").read_text() == before


@pytest.mark.reliability(
    8, "an unreadable or malformed sample file", "the failure attributed to the data-loading layer"
)
def test_malformed_sample_is_a_data_loading_failure(built_project: Path, tmp_path: Path) -> None:
    project = sibling(built_project, tmp_path)
    (project / "dossier/reference/sample.jsonl").write_bytes(b'{"id": "p01a", "text": \xff\xfe broken\n')
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    report = read_report(tmp_path / "run")
    failed = next(s for s in report["steps"] if s["status"] == "failed")  # type: ignore[union-attr]
    assert failed["layer"] == "data-loading" and "sample" in failed["error"]


@pytest.mark.parametrize("drop", ["rng", "optimizer", "sampler"])
def test_resume_negative_controls_name_the_divergence(built_project: Path, tmp_path_factory: pytest.TempPathFactory,
                                                      drop: str) -> None:
    proc = resume_cli(tmp_path_factory, built_project, drop)  # the run's one such run (tests/helpers/resumecli.py)
    assert proc.returncode == 1, proc.stderr[-2000:]
    verdict = json.loads(proc.stdout)
    assert verdict["passed"] is False and verdict["first_diverging_step"] == 6  # checkpoint at 5: the next step


def test_resume_full_state_passes(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    proc = resume_cli(tmp_path_factory, built_project)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["first_diverging_step"] is None


def test_existing_interpreter_equal_to_the_lock(tiny_referenced: Path, tmp_path: Path) -> None:
    """--python on an env that holds exactly the lock: observed equal, so a plain `passed` is earned (the built env,
    through a copy of the session's referenced tiny project: the mode is Kernodeck's, the same for any application)."""
    project = copy_referenced(tiny_referenced, tmp_path)
    python = env_python(project)
    before = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
    ).stdout
    proc = kd(project, "verify", "--python", str(python), "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(tmp_path / "run")
    steps = {s["name"]: s for s in report["steps"]}  # type: ignore[union-attr]
    assert steps["rebuild"]["status"] == "skipped" and "nothing installed" in steps["rebuild"]["reason"]
    assert steps["inventory"]["status"] == "passed"
    assert steps["inventory"]["details"]["vs_lock"] == {"added": {}, "removed": {}, "changed": {}}
    assert report["status"] == "passed" and report["verdict"]["not_established"] == []
    after = subprocess.run(
        [str(python), "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True
    ).stdout
    assert before == after


@pytest.mark.reliability(
    10,
    "credentials in PIP_EXTRA_INDEX_URL / UV_INDEX_URL during verify",
    "no file of the dossier, no output line holds them",
)
def test_credentials_never_reach_the_dossier(passed_run: SharedRun) -> None:
    """The session's passing run had credentials in PIP_EXTRA_INDEX_URL, UV_INDEX_URL and UV_INDEX (SECRETS)."""
    assert all(any(secret in value for value in SECRETS.values()) for secret in ("t0psecret", "QTOKEN42", "QTOKEN43"))
    out, proc = passed_run.out, passed_run.proc
    assert proc.returncode == 0, proc.stderr[-2000:]
    for secret in ("t0psecret", "QTOKEN42", "QTOKEN43"):
        assert secret not in proc.stderr + proc.stdout
    for path in out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert b"t0psecret" not in data and b"QTOKEN4" not in data, path


@pytest.mark.reliability(
    9, "two verify runs of the same platform at once", "both finish correctly (the second waits on a file lock)"
)
def test_two_verifies_at_once_both_finish(concurrent_runs: tuple[SharedRun, SharedRun]) -> None:
    # the session's shared pair (tests/helpers/sharedruns.py: two verifies of one copy of the referenced tiny project
    # started at once in two threads, as this test started them; the platform's file lock is Kernodeck's, the same
    # for every application); tests/e2e/test_dossier.py compares the same two dossiers
    for run in concurrent_runs:
        assert run.proc.returncode == 0, run.proc.stderr[-2000:]
        assert read_report(run.out)["status"] == "passed"


def test_nox_verify_from_a_fresh_copy(tmp_path: Path) -> None:
    """The README's main command, as a user runs it, in an empty copy: nox venv, rebuild from the lock, verify."""
    project = copy_project(tmp_path / "fresh")
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "verify", "--", "--out", str(out)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = read_report(out)
    assert report["status"] == "passed" and statuses(report)["rebuild"] == "passed"
    assert (project / ".venv-rebuild/cp311-linux_x86_64-cpu/current/bin/python").exists()


@pytest.mark.parametrize(("fault", "layer"), [("transfer", "transfer-to-device"), ("operator", "operator:matmul")])
def test_failure_attributed_to_its_layer(built_project: Path, tmp_path: Path, fault: str, layer: str) -> None:
    project = sibling(built_project, tmp_path)
    inject(project, *BACKEND_FAULTS[fault])
    proc = kd(project, "verify", "--out", str(tmp_path / "run"))
    assert proc.returncode == 1
    report = read_report(tmp_path / "run")
    step = next(s for s in report["steps"] if s["name"] == "backend")  # type: ignore[union-attr]
    assert report["first_failure"] == "backend" and step["layer"] == layer
    assert step["error"].startswith(("RuntimeError", "AssertionError"))  # torch's first error, verbatim
    assert step["interpreter"].endswith("bin/python") and "kernodeck/inenv/runner.py" in step["command"]
