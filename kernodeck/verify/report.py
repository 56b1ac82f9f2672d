"""The run report: :class:`Report`, its verdict derived from the claims; ``report.json`` for machines, ``report.md``
for people.

The report is told in four modules beside this one, each one concept: :mod:`.record` (a step's record, the steps'
overall status, the verdict's names), :mod:`.claims` (the claims a pass stands on), :mod:`.summaries` (what a step
found, in one line) and :mod:`.markdown` (report.md, the run's last line). Their public names are re-exported here:
code outside the package imports them from ``kernodeck.verify.report``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

from kernodeck import tips
from kernodeck._fs import write_atomic, write_json
from kernodeck.inenv.protocol import Status
from kernodeck.verify.claims import Claim, evaluate_claims, unexcused_skips
from kernodeck.verify.markdown import render_markdown
from kernodeck.verify.record import Step, Verdict, overall

REPORT_VERSION = 2  # 2: the claims a pass stands on (``claims``), the verdict derived from them


@dataclass
class Report:
    """A run as report.json and report.md tell it: its steps, what it recorded (``meta``), and the verdict derived
    from the claims its steps establish (never from the steps alone)."""

    platform: str
    steps: list[Step]
    meta: dict[str, Any] = field(default_factory=dict)
    # What a passing run did NOT establish (e.g. --python: the env differs from the lock); empty for a rebuild.
    not_established: list[str] = field(default_factory=list)
    # Code files that differ from the reference's fingerprint (verify --allow-code-change): never a pass.
    changed_code: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        """Which claims the run stands on: ``verify`` (every claim) or ``reference`` (no reference to compare with)."""
        mode = self.meta.get("mode")
        return mode if mode in ("verify", "reference") else "verify"

    @property
    def claims(self) -> list[Claim]:
        return evaluate_claims(self.steps, self.mode)

    def unestablished(self) -> list[Claim]:
        """The claims this run did not establish: any one of them, and the run has not passed."""
        return [c for c in self.claims if not c.established]

    @property
    def status(self) -> Status:
        """Passed exactly when the verdict is a pass (of either kind): from the claims, never from the steps alone."""
        return Status.PASSED if self.verdict in (Verdict.PASSED, Verdict.PASSED_UNLOCKED) else Status.FAILED

    @property
    def verdict(self) -> Verdict:
        if self.meta.get("interrupted"):  # a cancelled run (supervise.py): never a pass, never a finding of its own
            return Verdict.INTERRUPTED
        match overall(self.steps):
            case Status.FAILED | Status.NOT_RUN:
                return Verdict.FAILED
            case Status.PASSED | Status.SKIPPED:
                missing = self.unestablished()
                if self.changed_code:  # --allow-code-change: the code claim alone is excused, and named instead
                    missing = [c for c in missing if c.id != "reference-current"]
                if missing and not (self.not_established and all(c.variant for c in missing)):
                    return Verdict.FAILED
                if unexcused_skips(self.steps, self.mode) or self.meta.get("runner_end"):
                    return Verdict.FAILED  # a skip a pass may not take; the in-env process failing after its steps
                if self.changed_code:
                    return Verdict.PASSED_WITH_CHANGED_CODE
                return Verdict.PASSED_UNLOCKED if self.not_established else Verdict.PASSED
            case _ as unreachable:
                assert_never(unreachable)

    def verdict_line(self) -> str:
        match self.verdict:
            case Verdict.PASSED:
                return (
                    "passed: the environment is the lock's (observed inventory equals it) and every check passed; "
                    f"{len(self.claims)} claims established"
                )
            case Verdict.PASSED_UNLOCKED:
                return "every check passed, but NOT established: " + "; ".join(self.not_established)
            case Verdict.PASSED_WITH_CHANGED_CODE:
                return (
                    "NOT a pass: the checks ran on code that differs from the reference's (--allow-code-change): "
                    + ", ".join(self.changed_code)
                    + f"; if the change is intended: {tips.NEW_REFERENCE}"
                )
            case Verdict.INTERRUPTED:
                failure = self.first_failure()
                return f"interrupted during {failure.name if failure else 'the run'} (every stack kept)"
            case Verdict.FAILED:
                failure = self.first_failure()
                if failure is not None or overall(self.steps) is not Status.PASSED:
                    return f"failed at {failure.name if failure else 'an unrun step'}"
                if end := self.meta.get("runner_end"):
                    return (f"every step passed, but the check process then failed (exit {end.get('code')}): "
                            f"{end.get('error') or 'no error printed'}")
                missing = self.unestablished()
                return "every step passed, but NOT established: " + "; ".join(
                    [f"{c.text} ({c.why})" for c in missing]
                    + [f"{s.name} was skipped ({s.reason or 'no reason given'}), which a pass may not skip"
                       for s in unexcused_skips(self.steps, self.mode)]
                )
            case _ as unreachable:
                assert_never(unreachable)

    def first_failure(self) -> Step | None:
        return next((s for s in self.steps if s.status is Status.FAILED), None)

    def as_dict(self) -> dict[str, Any]:
        failure = self.first_failure()
        return {
            "version": REPORT_VERSION,
            "status": str(self.verdict),
            "verdict": {
                "line": self.verdict_line(),
                "not_established": self.not_established,
                "changed_code": self.changed_code,
            },
            "platform": self.platform,
            "first_failure": failure.name if failure else None,
            "steps": [s.as_dict() for s in self.steps],
            **self.meta,
            "claims": [c.as_dict() for c in self.claims],
        }

    def write(self, out: Path) -> None:
        write_json(out / "report.json", self.as_dict())
        write_atomic(out / "report.md", render_markdown(self))

