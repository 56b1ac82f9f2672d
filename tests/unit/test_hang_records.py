"""A stopped in-env process as each command records it, on real processes without torch: verify's (and bisect's)
``run_checks`` keeps the earlier steps and names the stopped one with its layer, user line and stacks file; a bisect
trial's finding and a calibrate variation name the same."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.measure import variations
from kernodeck.project.config import load_project
from kernodeck.project.deadlines import Deadlines
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade.bisect import _outcome_of
from kernodeck.upgrade.bisect_search import Outcome
from kernodeck.upgrade.relock import Drift
from kernodeck.verify.markdown import summary_line
from kernodeck.verify.pipeline import Run
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report
from kernodeck.verify.steps import in_env
from tests.helpers.project import copy_project

INENV = Path(__file__).resolve().parents[2] / "kernodeck" / "inenv"

FAKE = f'''\
import json, runpy, sys, time
from pathlib import Path

runpy.run_path({str(INENV / "_package.py")!r})
from kernodeck_inenv.stackhooks import install

install()
config = Path(sys.argv[sys.argv.index("--config") + 1])
out = config.parent
(out / "steps").mkdir(exist_ok=True)
(out / "steps" / "01-settings.json").write_text(json.dumps({{"name": "settings", "status": "passed"}}))
print("[kernodeck] application: start (now)", file=sys.stderr, flush=True)
print("[kernodeck] application: batch 1/8", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "ends":
    (out / "noise.json").write_text(json.dumps({{"variation": {{}}, "outputs": {{}}, "observed": {{}}}}))
    sys.exit(0)
while True:
    time.sleep(0.1)  # HANG-LINE
'''
HANG_LINE = next(n for n, text in enumerate(FAKE.splitlines(), start=1) if "HANG-LINE" in text)

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="checks processes through /proc (Linux)")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = copy_project(tmp_path / "project")
    (root / "checks" / "fake_runner.py").write_text(FAKE, encoding="utf-8")
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write("\n[tool.kernodeck.deadlines]\nstall = 2\n")
    return root


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
