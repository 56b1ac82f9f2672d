"""calibrate's analysis (pure; tested on synthetic numbers): the numbers a tolerance bounds, the verdict on the
declared bound between the noise and the margin of use, and the proposal between them."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any, assert_never

from kernodeck.inenv import kinds


class Verdict(enum.StrEnum):
    OK = "ok"
    TOO_TIGHT = "too tight"  # below the observed noise: another machine fails it
    TOO_LOOSE = "too loose"  # at or above the margin of use: a wrong output passes it
    NO_ROOM = "no room"  # the noise itself reaches the margin: no tolerance separates them

    def says(self) -> str:
        if self is Verdict.OK:
            return "ok: between the noise and the margin"
        if self is Verdict.TOO_TIGHT:
            return "TOO TIGHT: below the observed noise, it will fail on another machine"
        if self is Verdict.TOO_LOOSE:
            return "TOO LOOSE: at or above the margin of use, a wrong output would pass"
        if self is Verdict.NO_ROOM:
            return "NO ROOM: the legitimate noise already reaches the margin of use"
        assert_never(self)


@dataclass(frozen=True)
class AxisSpec:
    key: str  # the number's name in the in-env records
    label: str
    declared: float | None  # the declared tolerance in these units (None: the kind has no such bound)


def axes(kind: str, tolerance: dict[str, float]) -> list[AxisSpec]:
    """The numbers a kind's tolerance bounds, each as a distance (0 = equal) with the declared bound in its units."""
    return [AxisSpec(key, label, declared) for key, label, declared in kinds.get(kind).axes(tolerance)]


def verdict(declared: float, noise: float, margin: float | None) -> Verdict:
    """Where the declared bound sits: the noise must pass (``<=``), the margin must fail (``<``)."""
    if margin is not None and noise >= margin:
        return Verdict.NO_ROOM
    if declared < noise:
        return Verdict.TOO_TIGHT
    if margin is not None and declared >= margin:
        return Verdict.TOO_LOOSE
    return Verdict.OK


def propose(noise: float, floor: float, margin: float | None) -> float | None:
    """The geometric mean of the noise (at least the dtype's resolution) and the margin; None without room."""
    low = max(noise, floor)
    if margin is None or low <= 0 or margin <= low:
        return None
    return math.sqrt(low * margin)


@dataclass(frozen=True)
class Axis:
    key: str
    label: str
    declared: float | None
    noise: float
    noise_by_variation: dict[str, float]
    floor: float
    margin: float | None
    margin_source: str
    proposal: float | None
    verdict: Verdict | None

    def ratios(self) -> dict[str, float | None]:
        """How far the proposal sits from each side (both >= 1 when it lies between them)."""
        if self.proposal is None:
            return {"proposal_over_noise": None, "margin_over_proposal": None}
        low = max(self.noise, self.floor)
        return {"proposal_over_noise": self.proposal / low,
                "margin_over_proposal": (self.margin / self.proposal) if self.margin else None}


@dataclass(frozen=True)
class OutputCalibration:
    name: str
    kind: str
    tolerance: dict[str, float]
    axes: list[Axis]
    margin_test: str
    proposed_tolerance: dict[str, float] | None
    notes: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> list[Verdict]:
        return [a.verdict for a in self.axes if a.verdict is not None]

    def overall(self) -> str:
        bad = sorted({str(v) for v in self.verdicts if v is not Verdict.OK})
        return ", ".join(bad) if bad else str(Verdict.OK)


def _sig(value: float, digits: int = 2) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def proposed_tolerance(
    kind: str, tolerance: dict[str, float], by_axis: dict[str, float | None]
) -> dict[str, float] | None:
    """The declared table's keys at the proposal (two significant digits), or None where an axis has no proposal."""
    if any(v is None for v in by_axis.values()):
        return None
    got = {k: float(v) for k, v in by_axis.items() if v is not None}
    return kinds.get(kind).proposal(tolerance, got, _sig)


def flip_limit(key: str, flip: dict[str, Any]) -> tuple[float, str] | None:
    """Below this distance no nearest neighbour can flip (``flip`` is the reference's flip-bound record: its smallest
    nearest-neighbour lead m and the output's dim).

    max abs d moves any cosine by at most 2*sqrt(dim)*d (``reference.tolerance_bound``), a lead by twice that: below
    m/(4*sqrt(dim)). A row within cosine c of its reference moved by at most sqrt(2(1-c)) as a unit vector, so any
    cosine between two rows by at most 2*sqrt(2(1-c)) and a lead by twice that: below 1-c = m**2/32.
    """
    lead, dim = float(flip["reference_min_margin"]), float(flip["dim"])
    if key == "max_abs":
        return lead / (4 * math.sqrt(dim)), f"flip bound: lead {lead:.3g} / (4*sqrt({dim:.0f}))"
    if key == "one_minus_cos":
        return lead**2 / 32, f"flip bound: lead {lead:.3g} squared / 32"
    return None


def analyse_output(
    name: str,
    kind: str,
    tolerance: dict[str, float],
    noise: dict[str, dict[str, float]],
    margin: dict[str, Any],
    flip: dict[str, Any] | None = None,
) -> OutputCalibration:
    """One output: ``noise`` maps each variation to its numbers; ``margin`` is the in-env margin record."""
    found = bool(margin.get("found"))
    fails = margin.get("fails", {}) if found else {}
    resolution = margin.get("resolution", {})
    notes: list[str] = []
    calibrated: list[Axis] = []
    by_axis: dict[str, float | None] = {}
    for spec in axes(kind, tolerance):
        per = {v: float(nums[spec.key]) for v, nums in noise.items() if spec.key in nums}
        worst = max(per.values(), default=0.0)
        edge: float | None = float(fails[spec.key]) if spec.key in fails else None
        source = margin.get("test", "") if edge is not None else ""
        bound = flip_limit(spec.key, flip) if flip is not None else None
        if bound is not None and (edge is None or bound[0] < edge):
            edge, source = bound
        floor = float(resolution.get(spec.key, 0.0))
        proposal = propose(worst, floor, edge) if kinds.get(kind).PROPOSES else None  # exact: no number to move
        if spec.declared is not None:  # an axis shown for reading only proposes nothing
            by_axis[spec.key] = proposal
        judged = verdict(spec.declared, worst, edge) if spec.declared is not None else None
        calibrated.append(Axis(spec.key, spec.label, spec.declared, worst, per, floor, edge, source, proposal, judged))
    if not found:
        notes.append(f"no margin of use found: {margin.get('why', 'not searched')}")
    note = kinds.get(kind).calibrate_note(calibrated[0], margin) if calibrated else None
    if note:
        notes.append(note)
    return OutputCalibration(name, kind, dict(tolerance), calibrated, str(margin.get("test", "")),
                             proposed_tolerance(kind, tolerance, by_axis), notes)
