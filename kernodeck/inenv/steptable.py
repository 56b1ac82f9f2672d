"""THE in-env step table: one row per step, in the order the steps run, read by both sides of the wall.

The runner (inside the env) reads a row's module, function and title; the orchestrator reads the rest: the default
deadline (kernodeck/project/deadlines.py), whether making a reference runs the step, how its report line summarises
what it found (findings.py), the claims it establishes (evidence.py, kernodeck/verify/claims.py) and why a pass may
skip it. The table is the enum ``StepName``: each member is a step's row, its value the step's name (the protocol's
vocabulary: run-config.json's ``steps``, ``steps/NN-NAME.json``), so code names a step as ``StepName.SETTINGS`` and
mypy knows every name. A new in-env step is its module plus its row here, nothing else
(tests/unit/test_steptable.py). The standard library and siblings only: the orchestrator imports it as
``kernodeck.inenv.steptable`` (tests/wall.py), the runner as its sibling.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import evidence, findings
from .evidence import VERIFY, ClaimRow

if sys.version_info >= (3, 11):  # noqa: UP036 (the env may run an older Python than the orchestrator)
    from enum import StrEnum
else:  # the protocol's stand-in for an older env's Python
    from .protocol import StrEnum

# Generous: a healthy run on a slow 2-core machine beside another job never trips them (the MiniLM application
# takes about a minute there; the longest silent phase, importing torch and the model, well under five).
LONGEST_S = 3600.0


@dataclass(frozen=True)
class StepRow:
    """One in-env step: what runs it (``module.function(ctx)``, its details), and what the orchestrator makes of it."""

    name: str
    module: str  # a sibling file of the runner, kernodeck/inenv/MODULE.py
    function: str
    title: str
    deadline_s: float = LONGEST_S  # the default of ``[tool.kernodeck.deadlines] NAME``
    reference: bool = True  # making a reference (``reference``) runs it
    summary: Callable[[dict[str, Any]], str] | None = None  # its report line; None: its first scalar details
    claims: tuple[ClaimRow, ...] = ()  # the claims of a pass its record establishes
    skippable: str = ""  # why a pass may skip it, when no claim rests on it (docs/claims.md, "Skipped steps")


class StepName(StrEnum):
    """The in-env steps, in the order they run: each member is its step's row (``StepName.SETTINGS.row``), its value
    the step's name (``"settings"``): the member's name in lower case, ``_`` written ``-``."""

    _value_: str
    row: StepRow

    def __new__(cls, row: StepRow) -> StepName:
        member = str.__new__(cls, row.name)
        member._value_ = row.name
        member.row = row
        return member

    SETTINGS = StepRow(
        "settings", "settings", "run", "determinism settings applied before any compute", 600.0,
        summary=findings.settings)
    SYSTEM = StepRow(
        "system", "system", "run", "system chain (OS, driver, CUDA/ROCm, devices, loaded libraries)", 600.0,
        summary=findings.system)
    BACKEND = StepRow(
        "backend", "backend", "run", "expected backend usable; small computation matches numpy", 900.0,
        summary=findings.backend, claims=(
            ClaimRow("backend", "the expected backend computes correctly (matmul exact, softmax within 1e-6)",
                     "device", evidence.backend_works),))
    EXTENSIONS = StepRow(
        "extensions", "extensions", "run",
        "compiled extensions imported, matched to their chain, smoke-checked", claims=(
            ClaimRow("extensions", "every compiled extension in the env imports against this torch; declared "
                     "smoke checks agree with their references", "extensions", evidence.extensions_sound),))
    REFERENCE = StepRow(
        "reference", "reference", "check_reference",
        "reference outputs sound (count, shape, dtype, finite, ids)", 600.0, reference=False, claims=(
            ClaimRow("reference-current", "the reference describes this code, data and weights", "code",
                     lambda d: evidence.code_unchanged(d["code"]), modes=VERIFY),),
        skippable="a new reference is being made (`reference`): there is no earlier one to check against")
    APPLICATION = StepRow(
        "application", "application", "run_entry",
        "the application's entry on the identified sample; outputs written", summary=findings.application)
    REREAD = StepRow(
        "reread", "judge", "reread", "outputs reread from disk: count, dtype, finite, shape, id order",
        600.0, summary=findings.reread)
    COMPARE = StepRow(
        "compare", "judge", "compare", "each output against the reference under its declared tolerance kind",
        900.0, summary=findings.compare, claims=(
            ClaimRow("outputs-within-tolerance", "each output is within its declared tolerance of the reference",
                     "outputs", evidence.all_outputs_passed, modes=VERIFY),))
    CRITERION = StepRow(
        "criterion", "judge", "criterion", "the application's criterion on the reread outputs", 900.0,
        summary=findings.criterion, claims=(
            ClaimRow("criterion-met", "the application's criterion is met", "passed",
                     lambda d: d["passed"] is True),
            ClaimRow("criterion-able-to-fail", "the criterion fails on rows permuted against their ids and on "
                     "noise of the outputs' own scale (it is able to fail)", "controls",
                     lambda d: isinstance(d["controls"], dict) and d["controls"].get("able_to_fail") is True)))
    DETERMINISM = StepRow(
        "determinism", "determinism", "run", "the entry rerun in one process; cost of the settings",
        summary=findings.determinism, claims=(
            ClaimRow("deterministic", "repeated runs give the same outputs (bitwise on CPU)", "repeats",
                     evidence.deterministic),))
    RESUME = StepRow(
        "resume", "resume", "run", "training resume in a new process matches the uninterrupted run",
        reference=False, summary=findings.resume, claims=(
            ClaimRow("resume", "training resumed from a checkpoint in a new process matches an uninterrupted run",
                     "passed", lambda d: d["passed"] is True, modes=VERIFY),))
    # the application's own train, resumed in a new process; asked for only when declared (verify/context.py)
    RESUME_APPLICATION = StepRow(
        "resume-application", "resume_app", "run",
        "the application's own training resumed in a new process matches its uninterrupted run",
        summary=findings.resume_application,
        skippable="the application declares no resume of its own ([tool.kernodeck.application.resume]); "
                  "the env's generic resume exercise still runs (`resume`)")


STEPS: tuple[StepRow, ...] = tuple(name.row for name in StepName)
BY_NAME: dict[str, StepRow] = {row.name: row for row in STEPS}
