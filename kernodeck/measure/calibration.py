"""A calibration's record and what people read of it: calibration.json (``Calibration.as_dict``), calibration.md
(``render``), calibration.svg (``chart_data``), and the proposal written into pyproject (``write_proposal``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernodeck import tips
from kernodeck._fs import write_atomic
from kernodeck._proc import log
from kernodeck.measure import svg
from kernodeck.measure.analysis import Axis, OutputCalibration, Verdict
from kernodeck.measure.variations import VariationRun

VERSION = 1


@dataclass(frozen=True)
class Calibration:
    platform: str
    reference_id: str
    variations: list[VariationRun]
    outputs: list[OutputCalibration]
    margins: dict[str, Any]
    started: str
    declared_differs: list[str] = field(default_factory=list)  # from the reference's record (tolerances only)
    # the caller's numerics variables every variation ran without (variations.callers_numerics), redacted
    callers_numerics: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        def axis(a: Axis) -> dict[str, Any]:
            return {**asdict(a), "verdict": str(a.verdict) if a.verdict else None, **a.ratios()}

        return {
            "version": VERSION,
            "platform": self.platform,
            "reference_id": self.reference_id,
            "started": self.started,
            "declared_differs_from_reference": self.declared_differs,
            "callers_numerics_left_out": self.callers_numerics,
            "variations": [
                {**asdict(v.variation), "folder": v.folder, "status": v.status, "seconds": round(v.seconds, 2),
                 "error": v.error, "observed": v.observed, "outputs": v.outputs}
                for v in self.variations
            ],
            "outputs": {
                o.name: {"kind": str(o.kind), "declared": o.tolerance, "verdict": o.overall(),
                         "margin_test": o.margin_test, "proposed": o.proposed_tolerance, "notes": o.notes,
                         "axes": [axis(a) for a in o.axes]}
                for o in self.outputs
            },
            "margins": self.margins,
        }


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render(cal: Calibration) -> str:
    """calibration.md: the variations tried, then per output the noise, margin, proposal and verdict."""
    lines = [f"# Calibration of the declared tolerances ({cal.platform})", "",
             f"Reference `{cal.reference_id}`; started {cal.started}. Each variation ran the application in its own "
             "process in the rebuilt env, against the reference outputs.", "",
             *([f"The declared tolerance differs from the reference's record: {'; '.join(cal.declared_differs)}. "
                "It is the declared one that is judged here.", ""] if cal.declared_differs else []),
             _left_out(cal.callers_numerics), "",
             "## Variations", "", "| variation | what | status | threads after the entry | CPU level | seconds |",
             "|---|---|---|---|---|---|"]
    for r in cal.variations:
        status = r.status if r.status != "unavailable" else f"unavailable: {r.error}"
        if r.status == "failed":
            status = f"FAILED: {r.error[:160]}"
        lines.append(f"| {r.variation.name} | {r.variation.what} | {status} | "
                     f"{r.observed.get('torch.num_threads_after_entry', '-')} | "
                     f"{r.observed.get('torch_cpu_capability', '-')} | {r.seconds:.1f} |")
    lines += ["", "## Per output", ""]
    for out in cal.outputs:
        lines += [f"### `{out.name}` ({out.kind}): {out.overall()}", "",
                  f"Declared: {', '.join(f'{k} = {v}' for k, v in out.tolerance.items()) or 'every row equal'}. "
                  f"Margin of use searched with: {out.margin_test or 'nothing that applies'}.", "",
                  "| number | noise (must pass) | worst variation | margin (must fail) | proposal | "
                  "proposal / noise | margin / proposal | declared | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for a in out.axes:
            worst = max(a.noise_by_variation, key=lambda k: a.noise_by_variation[k], default="-")
            ratios = a.ratios()
            lines.append(
                f"| {a.label} | {_g(a.noise)} | {worst if a.noise > 0 else 'all equal'} | {_g(a.margin)} | "
                f"{_g(a.proposal)} | {_g(ratios['proposal_over_noise'])} | {_g(ratios['margin_over_proposal'])} | "
                f"{_g(a.declared)} | {_says(a)} |")
        if out.proposed_tolerance:
            lines += ["", "Proposed: " + ", ".join(f"`{k} = {v}`" for k, v in out.proposed_tolerance.items())]
        for note in out.notes:
            lines += ["", f"Note: {note}"]
        for a in out.axes:
            if a.margin_source.startswith("flip bound"):
                lines += ["", f"The {a.label} margin is the {a.margin_source}."]
        lines.append("")
    lines += ["Noise below the dtype's resolution counts as that resolution when the proposal is made "
              "(one unit in the last place; one row for labels).", ""]
    return "\n".join(lines)


def _left_out(numerics: dict[str, str]) -> str:
    """What the caller had set that picks kernels, precision or threads, and every variation ran without."""
    if not numerics:
        return ("The caller set no variable that picks a kernel's code path, its precision or its thread count: each "
                "variation set only its own (the declared one: torch's own choice).")
    shown = ", ".join(f"`{name}={value}`" for name, value in numerics.items())
    return (f"Left out of every variation, as the caller had set them: {shown}. Each variation starts from torch's "
            "own choice and sets only its own variables; a verify run keeps the caller's (recorded), so a run with "
            "them may differ from this calibration's noise.")


def _says(axis: Axis) -> str:
    if axis.verdict is None:
        return "-"
    if axis.verdict is Verdict.OK and axis.margin is None:
        return "ok: at or above the noise (no margin of use to judge it against)"
    return axis.verdict.says()


def chart_data(cal: Calibration) -> list[svg.Panel]:
    panels = []
    for out in cal.outputs:
        for a in out.axes:
            panels.append(svg.Panel(
                title=f"{out.name}: {a.label} ({a.verdict or '-'})",
                points=list(a.noise_by_variation.items()),  # in run order
                margin=a.margin,
                declared=a.declared,
                proposal=a.proposal,
                floor=a.floor,
            ))
    return panels


def write_proposal(pyproject: Path, cal: Calibration) -> list[str]:
    """Write each output's proposal into pyproject (tomlkit: comments and layout kept), numbers in its justification."""
    import tomlkit

    doc = tomlkit.parse(pyproject.read_text(encoding="utf-8"))
    outputs = doc["tool"]["kernodeck"]["application"]["outputs"]
    changed = []
    for out in cal.outputs:
        if not out.proposed_tolerance:
            continue
        table = outputs[out.name]
        for key, value in out.proposed_tolerance.items():
            table[key] = value
        measured = "; ".join(
            f"{a.label}: noise {_g(a.noise)} over {len(a.noise_by_variation)} variations, margin {_g(a.margin)}"
            f" ({a.margin_source or 'not found'}), set to {_g(a.proposal)}"
            for a in out.axes)
        text = str(table.get("justification", "")).split("\n\nCalibrated", 1)[0]
        text += f"\n\nCalibrated by `{tips.nox('calibrate')}` on {cal.platform} ({cal.started}): {measured}."
        table["justification"] = tomlkit.string(text, multiline=True)
        changed.append(out.name)
    write_atomic(pyproject, tomlkit.dumps(doc))
    if changed:
        log(f"kernodeck: calibrate: wrote the proposal of {', '.join(changed)} into {pyproject.name}; "
            f"the reference records the declared contract: make it again with {tips.NEW_REFERENCE}")
    return changed
