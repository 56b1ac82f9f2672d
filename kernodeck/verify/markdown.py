"""The run report for people: ``report.md`` (verdict, claims, what differs from the reference, one line per step,
the first failure, every step's details), the last line of a run (:func:`summary_line`) and the likely cause of a
failure (:func:`likely_cause`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernodeck import tips
from kernodeck.inenv.findings import fmt_value
from kernodeck.inenv.protocol import Status
from kernodeck.verify.claims import SKIPPABLE, ClaimState
from kernodeck.verify.record import Step, Verdict
from kernodeck.verify.summaries import step_result

if TYPE_CHECKING:  # the report imports this module to write itself: the type only, no import at run time
    from kernodeck.verify.report import Report

_MARK = {Status.PASSED: "✅", Status.FAILED: "❌", Status.SKIPPED: "⏭", Status.NOT_RUN: "·"}

# What the report names about the run, in this order (the rest of ``meta`` stays in report.json).
_META_KEYS = (
    "reference_id",
    "reference_code",
    "lock",
    "lock_inputs_digest",
    "interpreter",
    "expect_backend",
    "started",
    "finished",
)


def _cell(text: str, limit: int = 220) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _lineage(report: Report) -> dict[str, Any]:
    found = report.meta.get("reference_lineage")
    return found if isinstance(found, dict) else {}


def _lineage_line(report: Report) -> list[str]:
    """The reference's id, when it was made and with which lock (kernodeck.runformat.lineage)."""
    found = _lineage(report)
    if not found:
        return []
    return [f"- reference lineage: `{found.get('id')}`, made {found.get('created') or 'at a date not recorded'}, "
            f"with lock `{found.get('lock_digest') or 'not recorded'}`"]


def _differences(report: Report) -> list[str]:
    """What differs from the reference's environment (recorded in meta by the run), as bullet lines."""
    lineage = [f"- {line}" for line in _lineage(report).get("differences") or []]
    vs = report.meta.get("vs_reference")
    if not isinstance(vs, dict):
        return [*lineage, "- no reference environment recorded to compare with"]
    lines = []
    inv = vs.get("inventory")
    if isinstance(inv, dict):
        parts = [f"+{n}=={v}" for n, v in sorted(inv.get("added", {}).items())]
        parts += [f"-{n}=={v}" for n, v in sorted(inv.get("removed", {}).items())]
        parts += [f"{n} {p['expected']} → {p['observed']}" for n, p in sorted(inv.get("changed", {}).items())]
        counts = (
            f"{len(inv.get('added', {}))} added, {len(inv.get('removed', {}))} removed, "
            f"{len(inv.get('changed', {}))} changed"
        )
        lines.append(
            f"- inventory vs the reference's: {'identical' if not parts else counts + ': ' + ', '.join(parts[:12])}"
            + (" …" if len(parts) > 12 else "")
        )
    unproven = vs.get("records_without_digest")  # runformat/refdelta.UNFINGERPRINTED
    if unproven:
        lines.append(f"- the reference's {' and '.join(unproven)} carry no digest in its manifest (made before they "
                     "were fingerprinted): what is compared with them below is read from files no id covers; "
                     f"`{tips.NEW_REFERENCE}` records them")
    system = vs.get("system")
    if system is None:
        lines.append("- system chain: not compared (no system record in this run or the reference)")
    if isinstance(system, dict):
        if not system:
            lines.append("- system chain: the same as the reference's")
        for key, pair in list(system.items())[:15]:
            a, b = pair.get("reference"), pair.get("this run")
            if isinstance(a, list) and isinstance(b, list):
                shown = (
                    f"only in the reference: {', '.join(sorted(set(map(str, a)) - set(map(str, b)))) or '-'}; "
                    f"only here: {', '.join(sorted(set(map(str, b)) - set(map(str, a)))) or '-'}"
                )
            else:
                shown = f"{fmt_value(a)} → {fmt_value(b)}"
            lines.append(f"- system `{key}`: {_cell(shown, 200)}")
        one = vs.get("system_files_read_by_one")  # runformat/refdelta.READ_BY_ONE: named, not compared
        if isinstance(one, dict) and any(one.values()):
            said = "; ".join(f"by {who}: {', '.join(map(str, files[:8]))}" for who, files in one.items() if files)
            lines.append(f"- system files read in one of the two runs only (not compared): {_cell(said, 300)}")
        unrecorded = vs.get("not_in_reference") or []
        if unrecorded:
            lines.append(f"- not recorded in the reference (cannot compare): {', '.join(unrecorded)}")
    variables = vs.get("variables")  # the in-env processes' LD_*, ATEN_*, TORCH_*, OMP_*, MKL_*, CUDA_*, ... variables
    if isinstance(variables, dict):
        if not variables:
            lines.append("- variables (LD_*, ATEN_*, TORCH_*, OMP_*, MKL_*, CUDA_*, ...): the same as the reference's")
        for name, pair in variables.items():
            lines.append(f"- variable `{name}`: {_cell(str(pair.get('reference')), 90)} → "
                         f"{_cell(str(pair.get('this run')), 90)}")
    settings = vs.get("settings")  # runformat/refdelta.SETTINGS: read back in effect (thread counts first)
    if isinstance(settings, dict):
        if not settings:
            lines.append("- settings read back (thread counts, determinism, precision): the same as the reference's")
        for name, pair in list(settings.items())[:15]:
            lines.append(f"- setting `{name}`: {_cell(fmt_value(pair.get('reference')), 90)} → "
                         f"{_cell(fmt_value(pair.get('this run')), 90)}")
    return lineage + lines or ["- none recorded"]


def _inventory_vs_reference(report: Report) -> str:
    """The inventory row's second half: packages added / removed / changed against the reference's inventory."""
    vs = report.meta.get("vs_reference")
    inv = vs.get("inventory") if isinstance(vs, dict) else None
    if not isinstance(inv, dict):
        return ""
    counts = [len(inv.get(k) or {}) for k in ("added", "removed", "changed")]
    if not any(counts):
        return "; vs the reference's: identical"
    return "; vs the reference's: {} added, {} removed, {} changed".format(*counts)


def likely_cause(report: Report, failure: Step) -> str:
    """Where to look first for a failure: the layer, then what differs from the reference's environment."""
    recorded = report.meta.get("vs_reference")
    vs: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    inv = vs.get("inventory") or {}
    inv_keys = [*inv.get("changed", {}), *inv.get("added", {}), *inv.get("removed", {})]
    system = list((vs.get("system") or {}).keys())
    settings = list((vs.get("settings") or {}).keys())
    if failure.details.get("stopped"):  # a hang or a cancellation (kernodeck/supervise.py)
        at = failure.details.get("user_frame") or "no frame of the project's code"
        return (f"the run was stopped ({failure.details['stopped']}) in the {failure.layer} layer at {at}: "
                f"every thread of every process is in {failure.details.get('stacks')}, the project's frames first.")
    if failure.layer in ("lock", "install", "reference", "data-loading", "dossier", "environment"):
        return f"the {failure.layer} layer, before any numeric comparison: see the first failure below."
    if failure.layer in ("device", "transfer-to-device"):
        backend = report.meta.get("expect_backend", "the expected backend")
        return (
            f"the device layer: {backend} is not usable with this torch build, driver and devices (the system step "
            "records torch.version.cuda / hip, the driver and the devices); nothing was computed on another device."
        )
    if str(failure.layer).partition(":")[0] == "extension-abi":
        said = failure.details.get("likely_cause") or "rebuild it against this torch, or pin the torch it was built for"
        return f"the extension-abi layer: a compiled extension does not match this env's torch/CUDA: {said}."
    found = []
    if inv_keys:
        found.append(f"packages differ from the reference's inventory ({', '.join(sorted(inv_keys)[:8])})")
    if system:
        found.append(f"the system chain differs from the reference's ({', '.join(system[:8])})")
    if settings:
        found.append(f"the settings read back differ from the reference's ({', '.join(settings[:8])})")
    if not found:
        return (
            "the inventory, the system chain and the settings equal the reference's: look at the code, data or weights "
            f"(reference code: {report.meta.get('reference_code', 'not recorded')})."
        )
    return "; ".join(found) + "."


_CLAIM_MARK = {
    ClaimState.ESTABLISHED: "✅",
    ClaimState.CONTRADICTED: "❌",
    ClaimState.NOT_RECORDED: "·",
    ClaimState.STEP_FAILED: "❌",
    ClaimState.STEP_NOT_RUN: "·",
    ClaimState.STEP_SKIPPED: "⏭",
    ClaimState.STEP_ABSENT: "·",
}


def _claims_table(report: Report) -> list[str]:
    """What the verdict stands on: each claim, the step (and details key) that established it, or why not."""
    lines = ["", "## Claims", "", f"A {report.mode} passes only when every claim below is established.", "",
             "| claim | established by | state |", "|---|---|---|"]
    for claim in report.claims:
        state = f"{_CLAIM_MARK[claim.state]} {claim.state}"
        if claim.why:
            state += f": {claim.why}"
        lines.append(f"| {_cell(claim.text, 120)} | `{claim.step}` ({claim.key}) | {_cell(state, 200)} |")
    return lines


def render_markdown(report: Report) -> str:
    failure = report.first_failure()
    counts = {st: sum(1 for s in report.steps if s.status is st) for st in Status}
    tally = ", ".join(f"{n} {st}" for st, n in counts.items() if n)
    lines = [f"# Kernodeck verify: {report.verdict.upper()}", ""]
    if failure:
        lines.append(
            f"**FAILED** at `{failure.name}` (layer: {failure.layer or 'unknown'}): "
            + _cell(" ".join(failure.error.split()), 300)
        )
    else:
        lines.append(f"**{report.verdict.upper()}**: {tally} on `{report.platform}`.")
    lines += ["", f"- verdict: {report.verdict_line()}"]
    lines += ["", f"- platform: `{report.platform}`", f"- steps: {tally}"]
    for key in _META_KEYS:
        if key in report.meta:
            lines.append(f"- {key.replace('_', ' ')}: `{report.meta[key]}`")
    lines += _lineage_line(report)
    lines += _claims_table(report)
    lines += ["", "## What differs from the reference", ""]
    lines += _differences(report)
    if failure:
        lines += ["", f"**Likely cause**: {likely_cause(report, failure)}"]
    lines += ["", "## Steps", "", "| step | status | time | result |", "|---|---|---|---|"]
    for step in report.steps:
        result = step_result(step)
        if step.name == "inventory" and step.status is Status.PASSED:
            result += _inventory_vs_reference(report)
        lines.append(f"| {step.name} | {_MARK[step.status]} {step.status} | {step.duration_s:.2f}s | {_cell(result)} |")
    if failure:
        lines += ["", "## First failure", "", f"- step: `{failure.name}` (layer: {failure.layer or 'unknown'})"]
        if failure.command:
            lines.append(f"- command: `{failure.command}`")
        if failure.interpreter:
            lines.append(f"- interpreter: `{failure.interpreter}`")
        lines += ["", "```", failure.error, "```"]
    lines += ["", "## Details", "", "Every step's recorded details, as in report.json.", ""]
    for step in report.steps:
        if step.details:
            lines += [
                "<details>",
                f"<summary>{step.name}</summary>",
                "",
                "```json",
                json.dumps(step.details, indent=2, default=str)[:6000],
                "```",
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines) + "\n"


def summary_line(report: Report, path: Path) -> str:
    """The last line of a run: PASSED/FAILED, the first failure with its layer, the counts, the report's path."""
    counts = ", ".join(f"{n} {st}" for st in Status if (n := sum(1 for s in report.steps if s.status is st)))
    failure = report.first_failure()
    if failure is None:
        head = f"{report.verdict.upper()}: {counts}"
        if report.not_established or report.changed_code or report.verdict is Verdict.FAILED:
            head += f" ({report.verdict_line()})"
        elif allowed := [s for s in report.steps if s.status is Status.SKIPPED and s.name in SKIPPABLE]:
            head += " (" + "; ".join(f"{s.name} skipped, allowed in a pass: {SKIPPABLE[s.name]}" for s in allowed) + ")"
    else:
        error = " ".join(failure.error.split())
        error = error if len(error) <= 160 else error[:159] + "…"
        word = "INTERRUPTED" if report.verdict is Verdict.INTERRUPTED else "FAILED"
        head = f"{word} at {failure.name} (layer: {failure.layer or 'unknown'}): {error}; {counts}"
    return f"{head} — report: {path}"
