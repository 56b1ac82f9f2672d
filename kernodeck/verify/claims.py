"""The claims a pass stands on: THE table (:data:`CLAIMS`) and how a run's steps establish each claim, or why not.

Each claim names the step that establishes it and the key of that step's ``details`` that records the evidence; a
claim is established only when that step passed AND its record holds the evidence (docs/claims.md).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, replace
from typing import Any, assert_never

from kernodeck.inenv import steptable
from kernodeck.inenv.evidence import ClaimRow
from kernodeck.inenv.protocol import Status
from kernodeck.verify.outside import OUTSIDE_STEPS
from kernodeck.verify.record import Step


class ClaimState(enum.StrEnum):
    """Whether a claim was established, and if not, why not."""

    ESTABLISHED = "established"
    CONTRADICTED = "contradicted"  # the step ran, and its own record says the claim does not hold
    NOT_RECORDED = "not-recorded"  # the step ran but recorded no such evidence (its details lack the key)
    STEP_FAILED = "step-failed"
    STEP_NOT_RUN = "step-not-run"
    STEP_SKIPPED = "step-skipped"
    STEP_ABSENT = "step-absent"  # no such step in the run at all


# THE table: every claim, in the order the report shows them, from the step tables' rows: verify's own steps'
# (outside.py), then each in-env step's (kernodeck/inenv/steptable.py), in the order they run.
CLAIMS: tuple[ClaimRow, ...] = (
    *(replace(claim, step=row.name) for row in OUTSIDE_STEPS for claim in row.claims),
    *(replace(claim, step=str(row.name)) for row in steptable.STEPS for claim in row.claims),
)


@dataclass(frozen=True)
class Claim:
    """A claim as this run left it: established by ``step`` (its details' ``key``), or why not."""

    id: str
    text: str
    step: str
    key: str
    state: ClaimState
    why: str = ""
    variant: bool = False

    @property
    def established(self) -> bool:
        return self.state is ClaimState.ESTABLISHED

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "claim": self.text,
            "step": self.step,
            "key": self.key,
            "state": str(self.state),
            "established": self.established,
            "why": self.why,
        }


def _claim_state(spec: ClaimRow, step: Step | None) -> tuple[ClaimState, str]:
    if step is None:
        return ClaimState.STEP_ABSENT, f"no {spec.step} step in this run"
    match step.status:
        case Status.FAILED:
            return ClaimState.STEP_FAILED, f"{spec.step} failed"
        case Status.NOT_RUN:
            return ClaimState.STEP_NOT_RUN, f"{spec.step} was not run ({step.reason or 'an earlier step failed'})"
        case Status.SKIPPED:
            return ClaimState.STEP_SKIPPED, f"{spec.step} was skipped ({step.reason or 'no reason given'})"
        case Status.PASSED:
            pass
        case _ as unreachable:
            assert_never(unreachable)
    if spec.key not in step.details:
        return ClaimState.NOT_RECORDED, f"{spec.step} recorded no {spec.key}"
    try:
        holds = spec.holds(step.details)
    except (KeyError, TypeError, ValueError, AttributeError):
        holds = False
    if not holds:
        return ClaimState.CONTRADICTED, f"{spec.step} records {spec.key} = {_claim_value(step.details[spec.key])}"
    return ClaimState.ESTABLISHED, ""


def _claim_value(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 80 else text[:79] + "…"


def evaluate_claims(steps: list[Step], mode: str = "verify") -> list[Claim]:
    """Every claim of ``mode``, each established or not by the LAST step of its name (a step repeated counts once)."""
    by_name = {s.name: s for s in steps}
    out: list[Claim] = []
    for spec in CLAIMS:
        if mode not in spec.modes:
            continue
        state, why = _claim_state(spec, by_name.get(spec.step))
        out.append(Claim(spec.id, spec.text, spec.step, spec.key, state, why, spec.variant))
    return out


# THE skipped-step rule (docs/claims.md, "Skipped steps"): a step a claim rests on, skipped, leaves its
# claim unestablished (`step-skipped`), so the run cannot pass; of the steps no claim rests on, only these may be
# skipped in a pass, each for the reason given (the summary line repeats it). Any other skipped step fails the verdict.
SKIPPABLE: dict[str, str] = {
    **{row.name: row.skippable for row in OUTSIDE_STEPS if row.skippable},
    **{str(row.name): row.skippable for row in steptable.STEPS if row.skippable},
}


def unexcused_skips(steps: list[Step], mode: str = "verify") -> list[Step]:
    """The skipped steps no claim of ``mode`` rests on and :data:`SKIPPABLE` does not allow: each one fails a run."""
    claimed = {spec.step for spec in CLAIMS if mode in spec.modes}
    return [s for s in steps if s.status is Status.SKIPPED and s.name not in SKIPPABLE and s.name not in claimed]
