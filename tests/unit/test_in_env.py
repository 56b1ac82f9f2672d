"""verify's (and bisect's) ``run_checks`` (kernodeck/verify/steps/in_env.py) on a stopped in-env process, on real
processes without torch: it keeps the earlier steps and names the stopped one with its layer, user line and stacks
file; a bisect trial's finding names the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade.bisect import _OUTCOME
from kernodeck.upgrade.bisect_search import Outcome
from kernodeck.upgrade.relock import Drift
from kernodeck.verify.markdown import summary_line
from kernodeck.verify.pipeline import Run
from kernodeck.verify.report import Report
from kernodeck.verify.steps import in_env
from tests.helpers.hangrunner import HANG_LINE, hang_project

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="checks processes through /proc (Linux)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return hang_project(tmp_path / "project")


def test_run_checks_keeps_earlier_steps_and_names_the_stalled_one(project: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(in_env, "RUNNER", project / "checks" / "fake_runner.py")
    loaded = load_project(project)
    staging = tmp_path / "staging"
    staging.mkdir()
    run_ = Run(loaded, resolve_platform(loaded, None, None), staging)
    in_env.run_checks(run_, Path(sys.executable), ("settings", "application", "compare"), {})
    steps = {s.name: s for s in run_.steps}
    assert run_.meta.as_dict()["deadlines"]["stall_s"] == 2  # the policy it ran under, recorded in the report
    assert steps["settings"].status is Status.PASSED  # kept
    stopped = steps["application"]
    assert stopped.status is Status.FAILED and stopped.layer == "application"
    where = f"checks/fake_runner.py:{HANG_LINE}"
    assert stopped.details["stopped"] == "stalled" and stopped.details["user_frame"] == where
    assert stopped.error.startswith("stalled: no progress for 2 s after 'application: batch 1/8'")
    assert "steps/application.stacks.txt" in stopped.error
    assert f"{where} in <module>" in (staging / "steps" / "application.stacks.txt").read_text()
    assert steps["compare"].status is Status.NOT_RUN
    report = Report("p", run_.steps, run_.meta.as_dict())
    assert str(report.verdict) == "failed"
    assert summary_line(report, Path("r.md")).startswith("FAILED at application (layer: application): stalled")
    # a bisect trial's finding: the hang itself, with its step, layer and line (a failure before the comparison,
    # not an output out of tolerance: upgrade/bisect.py)
    drift = Drift.from_steps([s.as_dict() for s in run_.steps])
    assert drift.failure.startswith("application: stalled") and f"checks/fake_runner.py:{HANG_LINE}" in drift.failure
    assert _OUTCOME[drift.verdict] is Outcome.FAILED
