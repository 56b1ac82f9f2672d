"""What a step FOUND, in one line (report.md's step table, the progress lines): the summariser its row names.

A step may give its own line (``details["summary"]``); otherwise its summariser reads its details, and a step
without one shows its first few scalar details. A summariser that cannot read a record gives way to that fallback:
a line is never an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from kernodeck.inenv import steptable
from kernodeck.inenv.findings import generic
from kernodeck.inenv.protocol import Status
from kernodeck.verify.outside import OUTSIDE_STEPS
from kernodeck.verify.record import Step

# step name -> summariser of its details, from the step tables' rows: verify's own steps' (outside.py), then each in-env
# step's (kernodeck/inenv/steptable.py); a step may instead give ``details["summary"]`` (one line) itself.
SUMMARISERS: dict[str, Callable[[dict[str, Any]], str]] = {
    **{row.name: row.summary for row in OUTSIDE_STEPS if row.summary is not None},
    **{str(row.name): row.summary for row in steptable.STEPS if row.summary is not None},
}


def step_result(step: Step) -> str:
    """One line: what the step FOUND (an error or a reason when it did not pass), never only what it is for."""
    found = ""
    if step.status is not Status.FAILED:
        given = step.details.get("summary")
        found = given if isinstance(given, str) else ""
        if not found:
            summarise = SUMMARISERS.get(step.name)
            try:
                found = summarise(step.details) if summarise else ""
            except (KeyError, TypeError, ValueError, AttributeError):
                found = ""
            found = found or generic(step.details)
    match step.status:
        case Status.PASSED:
            text = found or step.reason or step.title
        case Status.FAILED:
            text = step.error or "failed"
        case Status.SKIPPED | Status.NOT_RUN:
            text = step.reason
        case _ as unreachable:
            assert_never(unreachable)
    return " ".join(text.split())

