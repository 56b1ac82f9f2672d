"""What a step FOUND, in one line (report.md's step table, the progress lines): one summariser per step name.

A step may give its own line (``details["summary"]``); otherwise its summariser reads its details, and a step
without one shows its first few scalar details. A summariser that cannot read a record gives way to that fallback:
a line is never an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, assert_never

from kernodeck.inenv import steptable
from kernodeck.inenv.findings import fmt_number, generic
from kernodeck.inenv.protocol import Status
from kernodeck.verify.record import Step


def _rebuild(d: dict[str, Any]) -> str:
    if "installer" not in d:
        return ""
    what = "reused" if d.get("reused") else f"built with {d['installer']}"
    durations = d.get("durations") or {}
    timing = ", ".join(f"{k} {fmt_number(v)}s" for k, v in durations.items() if isinstance(v, int | float))
    return what + (f" ({timing})" if timing else "")


def _inventory(d: dict[str, Any]) -> str:
    return f"{d['packages']} packages" if "packages" in d else ""


def _lock_check(d: dict[str, Any]) -> str:
    return f"{d['lock']} current against its inputs" if "lock" in d else ""


# step name -> summariser of its details: verify's own steps here, each in-env step's from its row (the step table);
# a step may instead give ``details["summary"]`` (one line) itself.
SUMMARISERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "lock-check": _lock_check,
    "rebuild": _rebuild,
    "inventory": _inventory,
    **{row.name: row.summary for row in steptable.STEPS if row.summary is not None},
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

