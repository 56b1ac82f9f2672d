"""The report (kernodeck/verify/report.py): written, read back, its first failure named in the markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.verify.markdown import render_markdown, summary_line
from kernodeck.verify.pipeline import Run
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report
from tests.helpers.project import copy_project


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return copy_project(tmp_path / "project")


def test_report_roundtrip_and_first_failure(tmp_path: Path) -> None:
    steps = [
        Step("lock-check", Status.PASSED),
        Step(
            "compare", Status.FAILED, error="boom", layer="comparison", command="python x", interpreter="/e/bin/python"
        ),
        Step("criterion", Status.NOT_RUN, reason="earlier"),
    ]
    report = Report("cp311-linux_x86_64-cpu", steps, {"reference_id": "sha256:1"})
    report.write(tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["status"] == "failed" and data["first_failure"] == "compare"
    assert [Step.from_dict(s).status for s in data["steps"]] == [Status.PASSED, Status.FAILED, Status.NOT_RUN]
    md = render_markdown(report)
    assert "First failure" in md and "boom" in md and "comparison" in md


def test_an_interrupted_record_is_the_verdict_interrupted(project: Path, tmp_path: Path) -> None:
    loaded = load_project(project)
    run_ = Run(loaded, resolve_platform(loaded, None, None), tmp_path)
    run_.meta.interrupted = {"signal": "SIGTERM", "step": "application"}
    failed = Step("application", Status.FAILED, error="interrupted by SIGTERM after 3 s", layer="application")
    report = Report("p", [failed], run_.meta.as_dict())
    assert str(report.verdict) == "interrupted" and report.as_dict()["status"] == "interrupted"
    assert report.verdict_line().startswith("interrupted during application")
    assert summary_line(report, Path("r.md")).startswith("INTERRUPTED at application")
    # the negative control: the same step without the record is an ordinary failure
    assert str(Report("p", [failed], {}).verdict) == "failed"
