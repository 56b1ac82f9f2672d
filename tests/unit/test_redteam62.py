"""Red-team pass 62 (notes: /work/notes/redteam62.md): pass 61's fixes (e88c5ad Step.unreported, e2ba69e STOP2's
stopped step in in_env.run_checks, d665a08 pythons.marker_values + UV_NO_CONFIG) attacked by class: STOP3.

STOP3 (the supervisor's "running step" is the last step the process STARTED, finished or not; kernodeck/supervise.py
``_Progress`` keeps ``step`` (and its clock ``step_t0``) after the step's end line, until the next start line;
kernodeck/verify/steps/in_env.py ``run_checks`` now records ``Stopped.step`` as stopped "whatever it wrote"): a stop
that comes after a step passed (its record written, its ``passed`` line read by the supervisor) and before the next
step's start line (a hang between steps or after the last one: the resume worker's start, the final library map; a
step deadline read after the step ended in time, as ``ran`` keeps counting from the ended step's start; a Ctrl-C in
that gap) throws the genuine pass away: the step is recorded FAILED ``stalled``/``timed-out`` and the step that was
really due is ``not-run`` "an earlier step failed". Measured (run_checks on a fake runner, hangrunner's pattern, stall
2 s): ``compare`` writes ``passed``, says ``compare: passed in 0.01s``, then the process hangs before ``criterion:
start``: report ``compare: failed (stalled)``, ``criterion: not-run``; Drift NOT VERIFIED (right: the run stopped)
but the record names a passed step as the stalled one and its outputs are lost (``Drift.compared`` False).
Before e2ba69e the written pass was kept and the stop recorded at ``criterion``. Module: verify/steps/in_env.py
(``run_checks``), supervise.py (``_Progress``). Fix idea by class: the supervisor records whether the step's end
line came before the stop (a ``Stopped.between`` / the step's status), and ``run_checks`` keeps a record the
supervisor saw end before it stopped the process, recording the stop at the next step due (or as after the last).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.supervise import Stop, Supervised
from kernodeck.upgrade.relock import Drift, DriftVerdict
from kernodeck.verify.record import Step
from tests.helpers.hangrunner import RUNNER_HEAD, checks_on_runner

_OUTPUTS = {"values": {"kind": "allclose", "passed": True, "max_abs": 0.0, "summary": "ok"}}

# STOP3 ------------------------------------------------------------------------------------------------------------

# A fake in-env runner (hangrunner's pattern): compare starts, writes its pass and says so (as runner.py does), then
# the process hangs: ``fake_mode = "between"`` before the criterion's start line (between steps), ``"in"`` after it
# (the control: a hang in the criterion).
_RUNNER = RUNNER_HEAD + f'''\
print("[kernodeck] compare: start (now)", file=sys.stderr, flush=True)
(steps / "01-compare.json").write_text(json.dumps(
    {{"name": "compare", "status": "passed", "duration_s": 0.01, "details": {{"outputs": {_OUTPUTS!r}}}}}))
print("[kernodeck] compare: passed in 0.01s", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "in":
    print("[kernodeck] criterion: start (now)", file=sys.stderr, flush=True)
while True:
    time.sleep(0.1)
'''


def _stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> tuple[list[Step], Supervised]:
    """run_checks on the fake runner (stall 2 s): the steps recorded and what the supervisor said of the process."""
    run_, seen = checks_on_runner(tmp_path, monkeypatch, _RUNNER, ("compare", "criterion", "determinism"), mode)
    return run_.steps, seen[0]


def _by_name(steps: list[Step]) -> dict[str, Step]:
    return {s.name: s for s in steps}


def test_stop3_premise_the_supervisor_names_the_step_that_had_ended(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _, ended = _stopped(tmp_path, monkeypatch, "between")
    assert ended.stopped is not None and ended.stopped.kind is Stop.STALLED
    assert "compare: passed" in ended.stopped.last_progress  # the stop came after compare's end line was read
    assert any("compare: passed" in line for line in ended.tail)
    written = json.loads((tmp_path / "staging" / "steps" / "01-compare.json").read_text(encoding="utf-8"))
    assert written["status"] == "passed"  # written before the stop: no signal had been sent yet


def test_stop3_a_step_that_ended_before_the_stop_keeps_its_pass(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: the supervisor takes a step that said its end as no longer running (supervise._Progress.ended)."""
    steps, _ = _stopped(tmp_path, monkeypatch, "between")
    recorded = _by_name(steps)
    assert recorded["compare"].status is Status.PASSED, (recorded["compare"].status, recorded["compare"].error)
    assert recorded["criterion"].unreported == "stalled"  # the stop, at the step that was due


def test_stop3_control_a_hang_inside_the_next_step_is_recorded_there(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    steps, ended = _stopped(tmp_path, monkeypatch, "in")
    recorded = _by_name(steps)
    assert ended.stopped is not None and ended.stopped.step == "criterion"
    assert recorded["compare"].status is Status.PASSED
    assert recorded["criterion"].status is Status.FAILED and recorded["criterion"].unreported == "stalled"
    drift = Drift.from_steps([s.as_dict() for s in steps])
    assert drift.verdict is DriftVerdict.NOT_VERIFIED and drift.compared


@pytest.mark.parametrize(("kind", "failed_before"), [(Stop.INTERRUPTED, False), (Stop.STALLED, False),
                                                    (Stop.INTERRUPTED, True)])
def test_stop3_an_interruption_after_the_last_step_still_marks_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       kind: Stop, failed_before: bool) -> None:
    """The same class at the run's end: every step reported, then the process was stopped. Its steps keep their
    records, and an interruption (a Ctrl-C as it ended) still makes the run the user's interrupted one; a stall there
    does not (the control), nor does an interruption once a step failed (the failure is the run's finding)."""
    import dataclasses

    def as_signalled(ended: Supervised) -> Supervised:  # the stall after compare, as a Ctrl-C then would be
        assert ended.stopped is not None and ended.stopped.step == ""
        signal = "SIGINT" if kind is Stop.INTERRUPTED else ""
        return dataclasses.replace(ended, stopped=dataclasses.replace(ended.stopped, kind=kind, signal=signal))

    earlier = (Step("backend", Status.FAILED, error="no device", layer="device"),) if failed_before else ()
    run_, _ = checks_on_runner(tmp_path, monkeypatch, _RUNNER, ("compare",), "between", as_signalled, earlier)
    assert ("compare", Status.PASSED) in [(s.name, s.status) for s in run_.steps]
    marked = kind is Stop.INTERRUPTED and not failed_before
    assert run_.meta.interrupted == ({"signal": "SIGINT", "step": ""} if marked else None)
    # a hang after the last step (pass 63's class): no pass, its stall and stacks kept in the run's record
    hung = kind is Stop.STALLED and not failed_before
    assert (run_.meta.runner_end is not None) == hung
    if hung:
        assert run_.meta.runner_end is not None and run_.meta.runner_end["error"].startswith("stalled: no progress")
        assert "steps/after-the-last-step.stacks.txt" in run_.meta.runner_end["error"]
        assert (run_.staging / "steps" / "after-the-last-step.stacks.txt").is_file()
