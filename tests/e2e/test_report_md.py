"""report.md leads with the verdict and what differs from the reference, then one RESULT line per step.

The tests parse report.md (the table, the verdict, the differences) and check the numbers against the step details
they come from; nothing is compared with a stored snapshot.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.runformat import refdelta as delta
from kernodeck.verify.markdown import render_markdown
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report
from kernodeck.verify.summaries import step_result
from tests.helpers.reports import EVIDENCE
from tests.helpers.sharedruns import SharedRun

ROW = re.compile(r"^\| (?P<name>[\w-]+) \| \S+ (?P<status>[\w-]+) \| (?P<time>[\d.]+)s \| (?P<result>.*) \|$")
NUMBER = r"(-?[\d.]+(?:e[-+]?\d+)?)"


def table(md: str) -> dict[str, dict[str, str]]:
    """The step table of a report.md as {step: {status, time, result}}."""
    rows = {}
    body = md.split("## Steps", 1)[1].split("\n## ", 1)[0]
    for line in body.splitlines():
        match = ROW.match(line)
        if match:
            rows[match["name"]] = match.groupdict()
    return rows


def found(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in {text!r}"
    return float(match.group(1))


def section(md: str, title: str) -> str:
    return md.split(f"## {title}", 1)[1].split("\n## ", 1)[0]


SYSTEM = {
    "torch_version": "2.13.0+cpu",
    "torch_version_cuda": None,
    "torch_version_hip": None,
    "cpu_model": "AMD EPYC",
    "torch_cpu_capability": "AVX512",
    "driver": {"unavailable": "no driver"},
    "devices": [],
}


def passing() -> Report:
    steps = [
        Step(
            "lock-check",
            Status.PASSED,
            title="lock current against its inputs",
            duration_s=0.05,
            details={"lock": "lockfiles/cp311-linux_x86_64-cpu.txt"},
        ),
        Step(
            "rebuild",
            Status.PASSED,
            title="reused",
            reason="up to date",
            details={"installer": "uv", "reused": True, "durations": {}},
        ),
        Step(
            "inventory",
            Status.PASSED,
            details={
                "packages": 87,
                "summary": "87 packages, equal to the lock",
                "vs_lock": {"added": {}, "removed": {}, "changed": {}},
                "files": EVIDENCE["inventory"]["files"],
            },
        ),
        Step(
            "settings",
            Status.PASSED,
            details={
                "deterministic_algorithms": True,
                "cudnn.benchmark": False,
                "float32_matmul_precision": "highest",
                "torch.num_threads": 2,
            },
        ),
        Step("system", Status.PASSED, details=SYSTEM),
        Step(
            "backend",
            Status.PASSED,
            details={"expected_backend": "cpu", "device": "cpu", "matmul_max_abs_error": 0.0,
                     "softmax_max_abs_error": 2e-8},
        ),
        Step("extensions", Status.PASSED, details=EVIDENCE["extensions"]),
        Step("reference", Status.PASSED, details={"rows": 40, "code": EVIDENCE["reference"]["code"]}),
        Step(
            "compare",
            Status.PASSED,
            details={
                "passed": True,
                "outputs": {
                    "embeddings": {
                        "kind": "cosine",
                        "passed": True,
                        "min_cosine": 0.99999994,
                        "max_abs": 2.3e-7,
                        "worst_id": "para-07",
                        "cosine_min_allowed": 0.9999,
                        "max_abs_allowed": 1e-4,
                        "bitwise_equal": False,
                        "per_item_cosine": {"para-07": 0.99999994},
                    }
                },
            },
        ),
        Step(
            "criterion",
            Status.PASSED,
            details={"passed": True, "pairs_checked": 10, "misses": {}, "min_margin": 0.0412,
                     "controls": {"able_to_fail": True}},
        ),
        Step(
            "determinism",
            Status.PASSED,
            details={"repeats": 3, "bitwise_identical": True, "max_abs_between_runs": 0.0, "cost_ratio": 1.05,
                     "device": "cpu", "outputs": {"embeddings": {"bitwise_identical": True}}},
        ),
        Step(
            "resume",
            Status.PASSED,
            details={
                "passed": True,
                "steps": 12,
                "checkpoint_at": 5,
                "first_diverging_step": None,
                "final_weights_max_abs": 0.0,
                "comparison": "bitwise",
                "losses_uninterrupted": [1.0, 0.5],
                "losses_resumed": [1.0, 0.5],
            },
        ),
    ]
    meta = {
        "reference_id": "sha256:abc",
        "vs_reference": {
            "inventory": {"added": {}, "removed": {}, "changed": {}},
            "system": {},
            "not_in_reference": [],
        },
    }
    return Report("cp311-linux_x86_64-cpu", steps, meta)


def test_passing_report_leads_with_verdict_and_gives_each_steps_numbers() -> None:
    report = passing()
    md = render_markdown(report)
    head = md.split("## ", 1)[0]
    assert "PASSED" in head and "FAILED" not in head
    rows = table(md)
    assert list(rows) == [s.name for s in report.steps]
    assert all(r["status"] == "passed" for r in rows.values())
    compare = rows["compare"]["result"]
    assert found(r"max abs " + NUMBER, compare) == pytest.approx(2.3e-7, rel=1e-2)
    assert found(r"max abs \S+ \(≤ " + NUMBER, compare) == pytest.approx(1e-4)
    assert found(r"min cosine " + NUMBER, compare) == pytest.approx(0.99999994, abs=1e-9)
    assert found(r"min cosine \S+ \(≥ " + NUMBER, compare) == pytest.approx(0.9999)
    assert "worst `para-07`" in compare
    assert found(r"smallest margin " + NUMBER, rows["criterion"]["result"]) == pytest.approx(0.0412)
    assert "bitwise identical" in rows["determinism"]["result"]
    assert found(r"at the last step " + NUMBER, rows["resume"]["result"]) == 0.0
    assert "deterministic True" in rows["settings"]["result"] and "threads 2" in rows["settings"]["result"]
    system = rows["system"]["result"]
    for part in ("torch 2.13.0+cpu", "CUDA none", "HIP none", "AMD EPYC, AVX512", "driver unavailable"):
        assert part in system
    assert rows["inventory"]["result"] == "87 packages, equal to the lock; vs the reference's: identical"
    assert rows["lock-check"]["result"] == "lockfiles/cp311-linux_x86_64-cpu.txt current against its inputs"
    diff = section(md, "What differs from the reference")
    assert "inventory vs the reference's: identical" in diff and "system chain: the same" in diff
    assert "Likely cause" not in md


def failing() -> Report:
    report = passing()
    at = [s.name for s in report.steps].index("compare")
    compare = report.steps[at]
    compare.status, compare.layer = Status.FAILED, "comparison"
    compare.error = "embeddings differ from the reference beyond tolerance: min cosine 0.99 at 'para-07'"
    for step in report.steps[at + 1 :]:
        step.status, step.reason, step.details = Status.NOT_RUN, "an earlier step failed", {}
    report.meta["vs_reference"] = {
        "inventory": {"added": {}, "removed": {}, "changed": {"torch": {"expected": "2.13.0", "observed": "2.14.1"}}},
        "system": {
            "cpu.isa_flags": {"reference": ["avx2", "avx512f"], "this run": ["avx2"]},
            "cpu_model": {"reference": "Intel Xeon", "this run": "AMD EPYC"},
        },
        "not_in_reference": ["torch_cpu_capability"],
    }
    return report


def test_failing_report_names_first_failure_and_likely_cause() -> None:
    md = render_markdown(failing())
    head = md.split("## ", 1)[0]
    assert "FAILED" in head and "at `compare` (layer: comparison)" in head
    rows = table(md)
    assert rows["compare"]["status"] == "failed" and "beyond tolerance" in rows["compare"]["result"]
    assert {rows[n]["status"] for n in ("criterion", "determinism", "resume")} == {"not-run"}
    assert rows["inventory"]["result"].endswith("; vs the reference's: 0 added, 0 removed, 1 changed")
    diff = section(md, "What differs from the reference")
    assert "torch 2.13.0 → 2.14.1" in diff and "0 added, 0 removed, 1 changed" in diff
    assert "only in the reference: avx512f" in diff and "Intel Xeon → AMD EPYC" in diff
    assert "not recorded in the reference (cannot compare): torch_cpu_capability" in diff
    cause = re.search(r"\*\*Likely cause\*\*: (.*)", md)
    assert cause and "torch" in cause.group(1) and "cpu.isa_flags" in cause.group(1)


def test_device_failure_points_at_the_device_layer_not_the_code() -> None:
    report = passing()
    report.meta["expect_backend"] = "cuda"
    backend = Step("backend", Status.FAILED, error="expected backend cuda is not usable", layer="device")
    at = [s.name for s in report.steps].index("backend")
    report.steps = [*report.steps[:at], backend, *[Step(s.name, Status.NOT_RUN) for s in report.steps[at + 1 :]]]
    cause = re.search(r"\*\*Likely cause\*\*: (.*)", render_markdown(report))
    assert cause and cause.group(1).startswith("the device layer: cuda is not usable")
    assert "code, data or weights" not in cause.group(1)


def test_failure_with_nothing_different_points_at_code_and_data() -> None:
    report = failing()
    report.meta["vs_reference"] = {"inventory": {"added": {}, "removed": {}, "changed": {}}, "system": {}}
    cause = re.search(r"\*\*Likely cause\*\*: (.*)", render_markdown(report))
    assert cause and "equal the reference's" in cause.group(1)


def test_step_summary_wins_and_unknown_steps_fall_back_to_their_scalars() -> None:
    assert step_result(Step("x", Status.PASSED, details={"summary": "all good, margin 3"})) == "all good, margin 3"
    generic = step_result(Step("new-step", Status.PASSED, title="t", details={"rows": 4, "ok": True, "big": [1] * 9}))
    assert generic == "rows 4, ok True"
    assert step_result(Step("new-step", Status.PASSED, title="what it is for")) == "what it is for"
    # per-output compare (outputs declared with a tolerance kind each)
    per_output = step_result(
        Step(
            "compare",
            Status.PASSED,
            details={
                "outputs": {
                    "embeddings": {
                        "kind": "cosine",
                        "max_abs": 1e-6,
                        "max_abs_allowed": 1e-4,
                        "min_cosine": 0.9999999,
                        "cosine_min_allowed": 0.9999,
                        "worst_id": "a",
                    },
                    "labels": {"kind": "exact", "unequal_rows": 0, "equal_share": 1.0},
                    "votes": {"kind": "agreement", "summary": "0.9800 of rows agree (allowed >= 0.95)"},
                }
            },
        )
    )
    assert "embeddings (cosine): max abs 1e-06 (≤ 0.0001)" in per_output
    assert "labels (exact): share of equal rows 1, unequal rows 0" in per_output
    assert "votes (agreement): 0.9800 of rows agree (allowed >= 0.95)" in per_output  # the output's own line first
    # determinism recorded per output: the largest difference between runs is named
    det = step_result(
        Step(
            "determinism",
            Status.PASSED,
            details={
                "bitwise_identical": False,
                "repeats": 3,
                "outputs": {"a": {"max_abs_between_runs": 2e-7}, "b": {"max_abs_between_runs": 5e-6}},
            },
        )
    )
    assert det == "max abs between runs 5e-06"


def test_result_column_never_hides_a_failure_behind_details() -> None:
    step = Step("compare", Status.FAILED, error="beyond tolerance", details={"max_abs": 1.0, "max_abs_allowed": 1e-4})
    assert step_result(step) == "beyond tolerance"


def _run_dossier(path: Path, system: dict[str, object] | None, inventory: str) -> Path:
    path.mkdir()
    (path / "inventory.txt").write_text(inventory)
    if system is not None:
        (path / "system.json").write_text(json.dumps(system))
    return path


def test_vs_reference_reads_both_records(tmp_path: Path) -> None:
    ref = _run_dossier(
        tmp_path / "ref",
        {**SYSTEM, "cpu": {"isa_flags": ["avx2", "avx512f"]}, "kernel": "6.1"},
        "numpy==2.0\ntorch==2.13.0+cpu\n",
    )
    run = _run_dossier(
        tmp_path / "run",
        {**SYSTEM, "cpu": {"isa_flags": ["avx2"]}, "kernel": "6.1", "python_executable": "/elsewhere", "new_field": 1},
        "numpy==2.1\ntorch==2.13.0+cpu\n",
    )
    vs = delta.vs_reference(ref, run)
    assert vs["inventory"]["changed"] == {"numpy": {"expected": "2.0", "observed": "2.1"}}
    assert list(vs["system"]) == ["cpu.isa_flags"]  # kernel equal; python_executable names the run, not the chain
    assert vs["not_in_reference"] == ["new_field"]
    same = delta.vs_reference(ref, ref)
    assert same["system"] == {} and not any(same["inventory"].values())
    early = delta.vs_reference(ref, _run_dossier(tmp_path / "early", None, "numpy==2.0\n"))
    assert "system" not in early


@pytest.mark.slow
def test_report_md_of_real_runs(passed_run: SharedRun, gpu_missing_run: SharedRun) -> None:
    """A real passing verify and a real failing one (the expected GPU missing): report.md carries the numbers. Both
    are the session's shared runs (tests/helpers/sharedruns.py)."""
    out, proc = passed_run.out, passed_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (out / "report.md").read_text(encoding="utf-8")
    details = {s["name"]: s.get("details", {}) for s in json.loads((out / "report.json").read_text())["steps"]}
    rows = table(md)
    assert "PASSED" in md.split("## ", 1)[0]
    compare = rows["compare"]["result"]
    assert found(r"max abs " + NUMBER, compare) == pytest.approx(details["compare"]["max_abs"], rel=1e-2, abs=1e-12)
    assert found(r"min cosine " + NUMBER, compare) == pytest.approx(details["compare"]["min_cosine"], abs=1e-9)
    assert details["compare"]["worst_id"] in compare
    criterion = details["criterion"]
    if isinstance(criterion.get("summary"), str):  # the application's own line, as it gave it
        assert rows["criterion"]["result"] == " ".join(criterion["summary"].split())
    else:
        margin = found(r"smallest margin " + NUMBER, rows["criterion"]["result"])
        assert margin == pytest.approx(criterion["min_margin"], rel=1e-2)
    assert "bitwise identical" in rows["determinism"]["result"]
    assert f"torch {details['system']['torch_version']}" in rows["system"]["result"]
    assert "inventory vs the reference's" in section(md, "What differs from the reference")
    collected = (out / "collect_env.txt").read_text(encoding="utf-8")  # beside system.json, reviewed like it
    assert (out / "system.json").exists() and f"PyTorch version: {details['system']['torch_version']}" in collected
    from tests.helpers.sbomcheck import errors

    document = json.loads((out / "sbom.cdx.json").read_text(encoding="utf-8"))  # the lock it ran from, as an SBOM
    assert errors(document) == [] and any(c["name"] == "torch" for c in document["components"])

    out, proc = gpu_missing_run.out, gpu_missing_run.proc
    assert proc.returncode == 1
    md = (out / "report.md").read_text(encoding="utf-8")
    rows = table(md)
    assert "at `backend`" in md.split("## ", 1)[0] and rows["backend"]["status"] == "failed"
    assert "Likely cause" in md and rows["compare"]["status"] == "not-run"
