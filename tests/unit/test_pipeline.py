"""verify's loop (kernodeck/verify/pipeline.py): stop at the first failure, the rest not-run, a raising step failed."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck.errors import ConfigError, KernodeckError
from kernodeck.inenv.protocol import Layer, Status
from kernodeck.verify.pipeline import Entry, Run, StepFailed, drive
from kernodeck.verify.record import Step

CTX: Any = SimpleNamespace(names=("a", "b"))  # the loop hands the context on; these steps read only its names


def _run(tmp_path: Path) -> Run:
    return Run(None, None, tmp_path)  # type: ignore[arg-type]


def passes(name: str) -> Entry:
    return Entry(name, lambda ctx, run: Step(name, Status.PASSED), Layer.ENVIRONMENT, lambda ctx: (name,))


def raises(name: str, error: KernodeckError) -> Entry:
    def act(ctx: Any, run: Run) -> Step:
        raise error

    return Entry(name, act, Layer.INSTALL, lambda ctx: (name,))


def test_every_step_runs_when_none_fails(tmp_path: Path) -> None:
    run = _run(tmp_path)
    drive(CTX, run, [passes("one"), passes("two"), Entry("many", lambda ctx, run: None, Layer.ENVIRONMENT,
                                                          lambda ctx: ctx.names)])
    assert [(s.name, s.status) for s in run.steps] == [("one", Status.PASSED), ("two", Status.PASSED)]
    assert run.error is None and not run.failed


def test_a_failed_step_leaves_the_rest_not_run(tmp_path: Path) -> None:
    """A step that returns a failed Step: every later step (and each step a phase would have made) is not-run."""
    run = _run(tmp_path)
    failing = Entry("two", lambda ctx, run: Step("two", Status.FAILED, error="broken"), Layer.LOCK,
                    lambda ctx: ("two",))
    ran: list[str] = []

    def later(ctx: Any, run: Run) -> Step:
        ran.append("three")  # must never run
        return Step("three", Status.PASSED)

    drive(CTX, run, [passes("one"), failing, Entry("three", later, Layer.INSTALL, lambda ctx: ("three",)),
                     Entry("checks", later, Layer.ENVIRONMENT, lambda ctx: ctx.names)])
    assert ran == []
    assert [(s.name, str(s.status)) for s in run.steps] == [
        ("one", "passed"), ("two", "failed"), ("three", "not-run"), ("a", "not-run"), ("b", "not-run")]
    assert all(s.reason == "an earlier step failed: two" for s in run.steps[2:])


def test_a_raising_step_fails_with_the_first_error(tmp_path: Path) -> None:
    """A step that raises becomes failed, holding its error, layer and tip; the run keeps the FIRST error."""
    run = _run(tmp_path)
    first = ConfigError("the first cause", tip="nox -s lock")
    drive(CTX, run, [raises("one", first), raises("two", KernodeckError("a later one"))])
    one = run.steps[0]
    assert (one.name, one.status, one.error, one.layer) == ("one", Status.FAILED, "the first cause", "install")
    assert one.details == {"tip": "nox -s lock"} and one.duration_s >= 0
    assert run.steps[1].status is Status.NOT_RUN
    assert run.error is first
    run.fail(KernodeckError("recorded after"))  # the first error stays the one the run raises
    assert run.error is first


def test_an_error_a_step_does_not_fail_on_ends_the_run(tmp_path: Path) -> None:
    """Negative control of the catch: an error outside ``fails_on`` is not turned into a step (as before: no report)."""
    run = _run(tmp_path)
    entry = Entry("lock-check", raises("x", ConfigError("input gone")).act, Layer.LOCK, lambda ctx: ("lock-check",),
                  fails_on=())
    with pytest.raises(ConfigError, match="input gone"):
        drive(CTX, run, [entry, passes("two")])
    assert run.steps == []


def test_a_step_failing_with_its_own_record_is_failed_by_the_loop(tmp_path: Path) -> None:
    """StepFailed: the record the step made (details, command) kept, failed by the loop's rule (layer, tip, the first
    error); the other steps the entry would have made are not-run."""
    run = _run(tmp_path)
    error = ConfigError("not the lock's", tip="nox -s rebuild")

    def act(ctx: Any, run: Run) -> Step:
        raise StepFailed(error, Step("a", Status.PASSED, command="pip install", details={"files": 3}))

    drive(CTX, run, [Entry("checks", act, Layer.INSTALL, lambda ctx: ctx.names), passes("later")])
    a, b, later = run.steps
    assert (a.name, a.status, a.error, a.layer, a.command) == ("a", Status.FAILED, "not the lock's", "install",
                                                             "pip install")
    assert a.details == {"files": 3, "tip": "nox -s rebuild"} and run.error is error
    assert (b.name, b.status, later.status) == ("b", Status.NOT_RUN, Status.NOT_RUN)
    assert b.reason == later.reason == "an earlier step failed: a"


def _failers(root: Path) -> list[str]:
    """Every call of a run's ``fail`` outside pipeline.py: the failure rule written again."""
    return [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py")) if path.name != "pipeline.py"
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if re.search(r"\brun_?\.fail\(", line)]


def test_the_failure_rule_is_only_in_the_loop(tmp_path: Path) -> None:
    assert _failers(Path(__file__).resolve().parents[2] / "kernodeck") == []
    planted = tmp_path / "kernodeck" / "step.py"
    planted.parent.mkdir()
    planted.write_text("def act(ctx, run):\n    run.fail(error)\n    return Step('x', Status.FAILED)\n",
                       encoding="utf-8")
    assert _failers(tmp_path / "kernodeck") == ["step.py:2"]
