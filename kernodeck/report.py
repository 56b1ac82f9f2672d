"""Typed records for steps and the run report (``report.json`` for machines, ``report.md`` for people)."""

from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, assert_never

from ._fs import write_atomic, write_json

REPORT_VERSION = 1


class Status(enum.StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"  # with a reason
    NOT_RUN = "not-run"  # an earlier step failed


class Layer(enum.StrEnum):
    """Where a failure belongs, so the diagnosis aims at that layer and not at the whole rebuild."""

    LOCK = "lock"
    INSTALL = "install"
    ENVIRONMENT = "environment"
    DEVICE = "device"
    DATA_LOADING = "data-loading"
    REFERENCE = "reference"
    TRANSFER = "transfer-to-device"
    OPERATOR = "operator"
    OUTPUT = "output"
    COMPARISON = "comparison"
    DOSSIER = "dossier"


@dataclass
class Step:
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
    """Passed only when no step failed or was left unrun; a skipped step carries its reason."""
    for step in steps:
        match step.status:
            case Status.FAILED | Status.NOT_RUN:
                return Status.FAILED
            case Status.PASSED | Status.SKIPPED:
                continue
            case _ as unreachable:
                assert_never(unreachable)
    return Status.PASSED if steps else Status.FAILED


@dataclass
class Report:
    platform: str
    steps: list[Step]
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        return overall(self.steps)

    def first_failure(self) -> Step | None:
        return next((s for s in self.steps if s.status is Status.FAILED), None)

    def as_dict(self) -> dict[str, Any]:
        failure = self.first_failure()
        return {
            "version": REPORT_VERSION,
            "status": str(self.status),
            "platform": self.platform,
            "first_failure": failure.name if failure else None,
            "steps": [s.as_dict() for s in self.steps],
            **self.meta,
        }

    def write(self, out: Path) -> None:
        write_json(out / "report.json", self.as_dict())
        write_atomic(out / "report.md", render_markdown(self))


_MARK = {Status.PASSED: "✅", Status.FAILED: "❌", Status.SKIPPED: "⏭", Status.NOT_RUN: "·"}


def render_markdown(report: Report) -> str:
    lines = [f"# Kernodeck verify: {report.status.upper()}", "", f"- platform: `{report.platform}`"]
    for key in (
        "reference_id",
        "reference_code",
        "lock",
        "lock_inputs_digest",
        "interpreter",
        "expect_backend",
        "started",
        "finished",
    ):
        if key in report.meta:
            lines.append(f"- {key.replace('_', ' ')}: `{report.meta[key]}`")
    lines += ["", "| step | status | time | note |", "|---|---|---|---|"]
    for step in report.steps:
        note = step.error or step.reason or step.title
        note = note.replace("|", "\\|").replace("\n", " ")[:160]
        lines.append(f"| {step.name} | {_MARK[step.status]} {step.status} | {step.duration_s:.2f}s | {note} |")
    failure = report.first_failure()
    if failure:
        lines += ["", "## First failure", "", f"- step: `{failure.name}` (layer: {failure.layer or 'unknown'})"]
        if failure.command:
            lines.append(f"- command: `{failure.command}`")
        if failure.interpreter:
            lines.append(f"- interpreter: `{failure.interpreter}`")
        lines += ["", "```", failure.error, "```"]
    lines += ["", "## Details", ""]
    for step in report.steps:
        if step.details:
            lines += [
                f"### {step.name}",
                "",
                "```json",
                json.dumps(step.details, indent=2, default=str)[:6000],
                "```",
                "",
            ]
    return "\n".join(lines) + "\n"
