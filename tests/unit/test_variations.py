"""A calibrate variation (kernodeck/measure/variations.py) whose in-env process stalls is named with its layer, user
line and stacks file, on real processes without torch; one that ends is read back."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernodeck.measure import variations
from kernodeck.project.deadlines import Deadlines
from tests.helpers.hangrunner import HANG_LINE, hang_project

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="checks processes through /proc (Linux)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return hang_project(tmp_path / "project")


@pytest.mark.parametrize("mode", ["hangs", "ends"])
def test_a_calibrate_variation_that_hangs_is_named(project: Path, tmp_path: Path, mode: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variations, "IN_ENV", project / "checks" / "fake_runner.py")
    staging = tmp_path / "cal"
    plan = [variations.Variation("declared", "the declared settings"),
            variations.Variation("threads-1", "1 thread", threads=1)]
    runs = variations.run_all(Path(sys.executable), staging, {"project_root": str(project), "fake_mode": mode}, plan,
                              staging / "margins.json", Deadlines(stall=2.0))
    if mode == "ends":  # the negative control: a variation that ends is read back, not stopped
        assert [r.status for r in runs] == ["passed", "passed"]
        return
    assert [r.status for r in runs] == ["failed", "failed"]
    first = runs[0]
    assert first.error.startswith(f"application stalled: layer application at checks/fake_runner.py:{HANG_LINE}")
    assert "variations/00-declared/steps/application.stacks.txt" in first.error
    stacks = staging / "variations" / "00-declared" / "steps" / "application.stacks.txt"
    assert f"checks/fake_runner.py:{HANG_LINE}" in stacks.read_text()
    assert json.loads((staging / "variations" / "00-declared" / "run-config.json").read_text())["fake_mode"] == mode
