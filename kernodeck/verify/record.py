"""The record of one step as report.json keeps it, the steps' overall status, and the names a run's verdict takes.

The base of the report's modules (:mod:`.claims`, :mod:`.summaries`, :mod:`.markdown` and :mod:`.report` build on
it; it imports none of them).
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, assert_never

# one definition for both sides of the wall (re-exported: the orchestrator's modules import them from here)
from kernodeck.inenv.protocol import Status


class Verdict(enum.StrEnum):
    """The run's top-level status (``report.json`` "status"): what a pass established, never more."""

    PASSED = "passed"  # every step passed AND every claim a pass stands on was established (CLAIMS)
    PASSED_UNLOCKED = "passed-unlocked"  # every check passed, but the env is NOT shown to be the lock's (--python)
    # every check passed on code that differs from the reference's (--allow-code-change): not a pass, exit 1
    PASSED_WITH_CHANGED_CODE = "passed-with-changed-code"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # SIGTERM/SIGINT stopped the run: the step it stopped is kept with every stack


def reported(step: dict[str, Any]) -> bool:
    """Whether a step's record (report.json's) is the step's own result, not the orchestrator's note that it never
    gave one (:attr:`Step.unreported`: a field of the record, never of its details, which a criterion's answer
    fills)."""
    return not step.get("unreported")


@dataclass
class Step:
    """One step of a run as report.json records it: its status, and what it found (``details``) or why not."""

    name: str
    status: Status
    title: str = ""
    duration_s: float = 0.0
    reason: str = ""
    error: str = ""
    layer: str = ""
    command: str = ""
    interpreter: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    # set only on a failed step's record the orchestrator wrote because the step never reported its own: what ended it
    # (a stop by deadline, stall or signal: kernodeck/supervise.py's kind; "process ended": its process died)
    unreported: str = ""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        return {k: v for k, v in data.items() if v not in ("", {}, None) or k in ("name", "status")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values["status"])
        return cls(**values)


def overall(steps: list[Step]) -> Status:
    """The steps alone: passed when no step failed or was left unrun (a skipped step carries its reason).

    Not the verdict: a run passes only when every claim it stands on is established (:meth:`Report.verdict`); this
    is what the benchmark's partial runs ask, and the first half of the verdict.
    """
    for step in steps:
        match step.status:
            case Status.FAILED | Status.NOT_RUN:
                return Status.FAILED
            case Status.PASSED | Status.SKIPPED:
                continue
            case _ as unreachable:
                assert_never(unreachable)
    return Status.PASSED if steps else Status.FAILED

