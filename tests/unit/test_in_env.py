"""verify's (and bisect's) ``run_checks`` (kernodeck/verify/steps/in_env.py) on a stopped in-env process, on real
processes without torch: it keeps the earlier steps and names the stopped one with its layer, user line and stacks
file; a bisect trial's finding names the same. And collect_env runs beside the checks at a lower priority than
theirs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade.bisect import _outcome_of
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
    assert _outcome_of(drift) is Outcome.FAILED


# Stands for the env's interpreter: reads its own niceness once the parent had time to lower it, and prints it.
FAKE_PYTHON = """#!/bin/sh
exec "{python}" -c 'import os, time; time.sleep(0.5); print("niceness", os.getpriority(os.PRIO_PROCESS, 0))'
"""


def _niceness_seen(tmp_path: Path) -> int:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=os.path.realpath(sys.executable)), encoding="utf-8")
    python.chmod(0o755)
    collected = in_env.CollectEnv.start(python, tmp_path)
    collected.finish(tmp_path / "collect_env.txt", timeout=30)
    text = (tmp_path / "collect_env.txt").read_text(encoding="utf-8")
    return int(text.split("niceness ", 1)[1].split()[0])


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no process priorities here")
def test_collect_env_yields_the_cpu_to_the_checks(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    assert _niceness_seen(tmp_path) == min(19, ours + in_env.COLLECT_ENV_NICENESS)


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="no process priorities here")
def test_without_the_lowering_it_runs_at_the_checks_priority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Control: the reading above is the lowering's doing, not the fake interpreter's."""
    monkeypatch.setattr(in_env, "_lower_priority", lambda pid: None)
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    if ours >= 19:
        pytest.skip("this process already runs at the lowest priority: no lowering to show")
    assert _niceness_seen(tmp_path) == ours
