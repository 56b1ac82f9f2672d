"""The verdict is a list of claims (issue 19, item 7): `passed` only when every claim a pass stands on is established.

Each claim has its negative controls here: its step failed, not run, skipped or missing from the run, its evidence
key absent, its evidence saying the opposite; each leaves the claim not established and the run not passed. One
end-to-end test shows the claims in a real report (and a real report with a step taken out failing).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv.evidence import ClaimRow
from kernodeck.inenv.protocol import Status
from kernodeck.verify import claims as verify_claims
from kernodeck.verify import record
from kernodeck.verify.claims import CLAIMS, ClaimState, evaluate_claims
from kernodeck.verify.markdown import render_markdown
from kernodeck.verify.record import Step, Verdict
from kernodeck.verify.report import REPORT_VERSION, Report
from tests.helpers.project import kd
from tests.helpers.reports import EVIDENCE, complete_steps, read_report
from tests.helpers.sharedruns import SharedRun

rel = pytest.mark.reliability

IDS = [spec.id for spec in CLAIMS]

# claim id -> a change of its step's details that makes the evidence say the claim does NOT hold
CONTRADICT: dict[str, list[dict[str, Any]]] = {
    "lock-current": [{"lock": ""}],
    "env-packages": [
        {"vs_lock": {"added": {"six": "1.0.0"}, "removed": {}, "changed": {}}},
        {"vs_lock": {"added": {}, "removed": {}}},  # a delta that does not say what changed is no evidence
    ],
    "env-files-unchanged": [
        {"files": {**EVIDENCE["inventory"]["files"], "counts": {**EVIDENCE["inventory"]["files"]["counts"],
                                                                  "added": 1}}},
        {"files": {**EVIDENCE["inventory"]["files"], "snapshot": "none"}},
        {"files": {**EVIDENCE["inventory"]["files"], "without_record": ["torch"]}},
        {"files": {**EVIDENCE["inventory"]["files"], "damaged": {"torch": ["torch/__init__.py"]}}},
        {"files": {**EVIDENCE["inventory"]["files"],
                   "bytecode_since_build": {"files": 1, "checked_now": 1, "not_its_source": ["x.pyc"]}}},
        {"files": "yes"},
    ],
    "reference-current": [
        {"code": {"files": {"checks/app.py": "0" * 64}, "changed": ["checks/app.py"], "allowed": True}},
        {"code": {"files": {}, "changed": []}},  # no file fingerprinted: no evidence
    ],
    "outputs-within-tolerance": [
        {"outputs": {"embeddings": {"passed": False}}},
        {"outputs": {}},
        {"passed": False},
    ],
    "criterion-met": [{"passed": False}, {"passed": "true"}],
    "criterion-able-to-fail": [{"controls": {"able_to_fail": False}}, {"controls": {}}],
    "deterministic": [{"repeats": 1}, {"bitwise_identical": False}, {"outputs": {}}],
    "resume": [{"passed": False}],
    "backend": [
        {"softmax_max_abs_error": math.nan},  # NaN compares false both ways: never a pass
        {"softmax_max_abs_error": math.inf},
        {"matmul_max_abs_error": 1e-3},
        {"device": ""},
    ],
    "extensions": [
        {"extensions": [{"distribution": "kdext", "objects": [{"module": "kdext._C", "imported": False}]}]},
        {"smoke": {"kdext": {"max_abs": math.nan}}},
        {"extensions": "kdext"},
    ],
}


def spec_of(claim_id: str) -> ClaimRow:
    return next(spec for spec in CLAIMS if spec.id == claim_id)


def with_step(steps: list[Step], name: str, **change: Any) -> list[Step]:
    for step in steps:
        if step.name == name:
            for key, value in change.items():
                setattr(step, key, value)
    return steps


def claim(report: Report, claim_id: str) -> verify_claims.Claim:
    return next(c for c in report.claims if c.id == claim_id)


def test_every_claim_is_tested_and_named_once() -> None:
    assert set(CONTRADICT) == set(IDS) and len(IDS) == len(set(IDS))
    assert {s.step for s in CLAIMS} <= set(EVIDENCE)


def test_a_complete_run_establishes_every_claim_and_passes() -> None:
    report = Report("p", complete_steps())
    assert all(c.state is ClaimState.ESTABLISHED for c in report.claims)
    assert [c.id for c in report.claims] == IDS
    assert report.verdict is Verdict.PASSED and report.status is Status.PASSED
    data = report.as_dict()
    assert data["version"] == REPORT_VERSION == 2 and data["status"] == "passed"
    assert [c["id"] for c in data["claims"]] == IDS
    assert all(c["established"] and c["state"] == "established" for c in data["claims"])
    assert {c["step"] for c in data["claims"]} == {s.step for s in CLAIMS}


@pytest.mark.parametrize("claim_id", IDS)
@pytest.mark.parametrize(
    ("status", "state"),
    [
        (Status.FAILED, ClaimState.STEP_FAILED),
        (Status.NOT_RUN, ClaimState.STEP_NOT_RUN),
        (Status.SKIPPED, ClaimState.STEP_SKIPPED),
    ],
)
def test_a_claim_whose_step_did_not_pass_is_not_established(claim_id: str, status: Status, state: ClaimState) -> None:
    spec = spec_of(claim_id)
    report = Report("p", with_step(complete_steps(), spec.step, status=status, reason="r", error="e"))
    found = claim(report, claim_id)
    assert found.state is state and not found.established and spec.step in found.why
    assert report.verdict is Verdict.FAILED and report.status is Status.FAILED


@pytest.mark.parametrize("claim_id", IDS)
def test_a_claim_whose_step_is_missing_from_the_run_fails_it(claim_id: str) -> None:
    """A step silently dropped (not run, removed from the list) cannot yield passed: the other steps all passed."""
    spec = spec_of(claim_id)
    steps = [s for s in complete_steps() if s.name != spec.step]
    report = Report("p", steps)
    assert record.overall(steps) is Status.PASSED  # the steps alone would have said passed
    assert claim(report, claim_id).state is ClaimState.STEP_ABSENT
    assert report.verdict is Verdict.FAILED and report.as_dict()["status"] == "failed"
    assert f"no {spec.step} step in this run" in report.verdict_line()


@pytest.mark.parametrize(("claim_id", "change"), [(c, ch) for c, changes in CONTRADICT.items() for ch in changes])
def test_a_claim_whose_evidence_says_otherwise_is_contradicted(claim_id: str, change: dict[str, Any]) -> None:
    spec = spec_of(claim_id)
    steps = complete_steps()
    step = next(s for s in steps if s.name == spec.step)
    step.details.update(change)
    report = Report("p", steps)
    found = claim(report, claim_id)
    assert found.state is ClaimState.CONTRADICTED and not found.established, found
    assert report.verdict is Verdict.FAILED
    # and the good value passes (negative and positive control on the same record)
    assert Report("p", complete_steps()).verdict is Verdict.PASSED


@pytest.mark.parametrize("claim_id", IDS)
def test_a_claim_whose_key_is_absent_is_not_established(claim_id: str) -> None:
    """A step that stops recording its evidence fails the run: every claim is required, none only shown."""
    spec = spec_of(claim_id)
    steps = complete_steps()
    next(s for s in steps if s.name == spec.step).details.pop(spec.key)
    report = Report("p", steps)
    found = claim(report, claim_id)
    assert found.state is ClaimState.NOT_RECORDED and not found.established
    assert report.verdict is Verdict.FAILED and found in report.unestablished()
    assert f"{spec.step} recorded no {spec.key}" in report.verdict_line()
    assert "binding" not in report.as_dict()["claims"][IDS.index(claim_id)]


def test_a_declared_variant_passes_unlocked_only_on_the_environment_claims() -> None:
    steps = with_step(complete_steps(), "lock-check", status=Status.SKIPPED, reason="no lock (--python)")
    steps[1].details["vs_lock"] = {"added": {"six": "1.0.0"}, "removed": {}, "changed": {}}
    assert Report("p", steps).verdict is Verdict.FAILED  # not declared: the same record fails
    declared = Report("p", steps, not_established=["that the environment is the lock's"])
    assert declared.verdict is Verdict.PASSED_UNLOCKED and declared.status is Status.PASSED
    steps = [s for s in steps if s.name != "resume"]  # a variant excuses nothing about the checks
    assert Report("p", steps, not_established=["x"]).verdict is Verdict.FAILED


def test_a_reference_run_stands_on_the_claims_it_can_establish() -> None:
    steps = [s for s in complete_steps() if s.name not in ("reference", "compare", "resume")]
    assert Report("p", steps).verdict is Verdict.FAILED  # as a verify: no compare, no resume
    ref = Report("p", steps, {"mode": "reference"})
    assert ref.verdict is Verdict.PASSED
    assert {c.id for c in ref.claims} == set(IDS) - {"reference-current", "outputs-within-tolerance", "resume"}
    ref.steps = [s for s in ref.steps if s.name != "determinism"]
    assert ref.verdict is Verdict.FAILED


def test_outputs_claim_needs_every_output_of_several() -> None:
    """With several outputs the compare step records each one's verdict only (no top-level ``passed``)."""
    steps = complete_steps()
    compare = next(s for s in steps if s.name == "compare")
    compare.details = {"outputs": {"logits": {"passed": True}, "labels": {"passed": True}}}
    assert Report("p", steps).verdict is Verdict.PASSED
    compare.details["outputs"]["labels"]["passed"] = False
    assert claim(Report("p", steps), "outputs-within-tolerance").state is ClaimState.CONTRADICTED
    compare.details["outputs"]["labels"] = {"kind": "agreement"}  # a verdict without its pass: no evidence
    assert Report("p", steps).verdict is Verdict.FAILED


def test_the_last_record_of_a_step_decides() -> None:
    steps = [*complete_steps(), Step("compare", Status.PASSED, details={"passed": False, "outputs": {}})]
    assert Report("p", steps).verdict is Verdict.FAILED


def test_markdown_shows_the_claims_table() -> None:
    steps = complete_steps()
    steps[1].details.pop("files")
    steps = [s for s in steps if s.name != "resume"]
    md = render_markdown(Report("p", steps))
    assert md.startswith("# Kernodeck verify: FAILED")
    table = md.split("## Claims", 1)[1].split("\n## ", 1)[0]
    assert "| claim | established by | state |" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == len(IDS)
    assert any("`compare` (outputs)" in r and "✅ established" in r for r in rows)
    assert any("`resume` (passed)" in r and "step-absent: no resume step in this run" in r for r in rows)
    assert any("`inventory` (files)" in r and "not-recorded" in r for r in rows)
    assert "every step passed, but NOT established" in md


def test_claims_are_computed_from_the_steps_given() -> None:
    assert [c.state for c in evaluate_claims([], "verify")] == [ClaimState.STEP_ABSENT] * len(IDS)
    assert Report("p", []).verdict is Verdict.FAILED


# --- in a real report ---------------------------------------------------------------------------------------------


def test_a_real_failed_report_lists_every_claim_with_why_not(tmp_path: Path) -> None:
    """A real verify that stops at lock-check: every claim is in report.json and report.md, none established."""
    from tests.helpers.outfolders import lockless

    project = lockless(tmp_path)
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 2 and "no lockfile" in proc.stderr
    report = read_report(out)
    claims = report["claims"]
    assert isinstance(claims, list) and [c["id"] for c in claims] == IDS
    states = {c["id"]: c["state"] for c in claims}
    assert states["lock-current"] == "step-failed" and states["resume"] == "step-not-run"
    assert not any(c["established"] for c in claims)
    assert "## Claims" in (out / "report.md").read_text()


@pytest.mark.slow
def test_a_real_passing_report_establishes_its_claims(passed_run: SharedRun) -> None:
    out, proc = passed_run.out, passed_run.proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((out / "report.json").read_text())
    assert data["status"] == "passed" and data["version"] == REPORT_VERSION
    assert all(c["established"] for c in data["claims"]), data["claims"]
    assert {c["id"] for c in data["claims"]} == {s.id for s in CLAIMS}
    md = (out / "report.md").read_text()
    assert "| the environment's packages are exactly the lock's | `inventory` (vs_lock) | ✅ established |" in md
    # the same real run with one step taken out of its record: not a pass
    steps = [Step.from_dict(s) for s in data["steps"] if s["name"] != "determinism"]
    assert Report(data["platform"], steps, {"mode": "verify"}).verdict is Verdict.FAILED


@pytest.mark.slow
@rel(
    77,
    "a check silently dropped from a run: `resume` taken out of verify's step list (in the project's Kernodeck copy)",
    "every step that ran passed, yet FAILED (exit 1): the claim `resume` is `step-absent`, named in the verdict",
)
def test_a_dropped_check_cannot_pass(tiny_referenced: Path, tmp_path: Path) -> None:
    # the step list and the claims are Kernodeck's, the same for every application: the tiny one's run (a copy of the
    # session's referenced tiny project, tests/helpers/tinyapp.py), where MiniLM's model would only add its load
    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    verify_py = project / "kernodeck" / "verify" / "steps" / "in_env.py"  # where the in-env step list is
    text = verify_py.read_text()
    every = "IN_ENV_STEPS = tuple(step.value for step in StepName)"
    assert every in text
    verify_py.write_text(text.replace(every, every.replace(")", " if step is not StepName.RESUME)"), 1))
    out = tmp_path / "run"
    proc = kd(project, "verify", "--out", str(out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(out)
    assert report["status"] == "failed" and report["first_failure"] is None
    assert all(s["status"] == "passed" for s in report["steps"])  # type: ignore[index, union-attr]
    assert "resume" not in {s["name"] for s in report["steps"]}  # type: ignore[index, union-attr]
    states = {c["id"]: c["state"] for c in report["claims"]}  # type: ignore[index, union-attr]
    assert states["resume"] == "step-absent"
    assert "NOT established" in report["verdict"]["line"]  # type: ignore[index]
    assert "FAILED: " in proc.stdout and "no resume step in this run" in proc.stdout


def test_changed_code_is_named_never_passed_and_excuses_nothing_else() -> None:
    """--allow-code-change: the reference claim is contradicted; the verdict names the files and is not a pass."""
    steps = complete_steps()
    next(s for s in steps if s.name == "reference").details["code"] = {
        "files": {"checks/app.py": "0" * 64}, "changed": ["checks/app.py"], "allowed": True}
    assert Report("p", steps).verdict is Verdict.FAILED  # without the run's own record of the allowed change
    allowed = Report("p", steps, changed_code=["checks/app.py"])
    assert allowed.verdict is Verdict.PASSED_WITH_CHANGED_CODE and allowed.status is Status.FAILED
    assert "checks/app.py" in allowed.verdict_line()
    steps = [s for s in steps if s.name != "resume"]  # any other claim missing: failed, as ever
    assert Report("p", steps, changed_code=["checks/app.py"]).verdict is Verdict.FAILED
