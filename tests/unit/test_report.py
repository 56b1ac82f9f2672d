"""The report (kernodeck/verify/report.py): written, read back, its first failure named in the markdown."""

from __future__ import annotations

import json
from pathlib import Path

from kernodeck.inenv.protocol import Status
from kernodeck.verify.markdown import render_markdown
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report


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
