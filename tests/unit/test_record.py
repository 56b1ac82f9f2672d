"""A run's verdict from its steps (kernodeck/verify/record.py): each status, and no step at all."""

from __future__ import annotations

import pytest

from kernodeck.inenv.protocol import Status
from kernodeck.verify.record import Step, overall


@pytest.mark.parametrize("status", list(Status))
def test_overall_each_status(status: Status) -> None:
    steps = [Step("a", Status.PASSED), Step("b", status, reason="r")]
    expected = Status.FAILED if status in (Status.FAILED, Status.NOT_RUN) else Status.PASSED
    assert overall(steps) is expected


def test_overall_empty_is_failed() -> None:
    assert overall([]) is Status.FAILED
