"""The tolerance kinds, one table: a kind's name -> the module that says everything about it (standard library only).

Both sides of the wall read it: the in-env comparison (tolerance.py), controls (controls.py) and margin numbers
(margin.py), the flip bound (judge.py), and the orchestrator's validation (project/app_contract.py), schema
(tests/helpers/schema_code.py), calibrate (measure/analysis.py; the keys it may judge: measure/tolerance_search.py),
drift (measure/drift_map.py), upgrade (upgrade/relock.py), the manifest's flip bound (runformat/recording.py), the
report line (verify/summaries.py) and the docs' tables (docpage.py). None of them branches on a kind's name
(tests/unit/test_kinds.py). A kind module imports only the standard library, never numpy (the orchestrator imports
it, and never numpy): the in-env side hands it numpy and the array helpers it needs (:class:`Ops`, :class:`Moves`).

A new kind is one module ``kind_NAME.py`` beside this one, defining every member of :class:`ToleranceKind`, and one
entry in :data:`KINDS`; then ``python -m tests.helpers.schema_code`` (the JSON schema's kind enum and keys are written
from this table) and ``python -m kernodeck.docpage`` (the docs' tables of kinds are too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from . import kind_agreement, kind_allclose, kind_cosine, kind_exact


@dataclass(frozen=True)
class Ops:
    """What a kind's ``compare`` is handed (tolerance.py's): numpy and the shared array helpers."""

    np: Any
    rows: Callable[[Any], Any]  # an array as rows (2-D, one row per item)
    max_abs: Callable[[Any, Any], float]  # largest |a-b| (NaN when non-finite)
    largest: Callable[[Any], float]  # the largest value of an array, 0.0 when empty
    equal_rows: Callable[[Any, Any, list[str]], tuple[float, list[str]]]  # (share of equal rows, ids of the others)
    same_bits: Callable[[Any, Any], bool]  # the same dtype, shape and bytes ("bitwise": -0.0 is not 0.0)


@dataclass(frozen=True)
class Moves:
    """What a kind's ``moved_past`` is handed (controls.py's): numpy and the ways to move a reference."""

    np: Any
    nudged: Callable[[Any, tuple[int, ...], float], Any | None]  # one value (at ``where``) moved up by ``by``
    rotated: Callable[[Any, float], Any | None]  # the first row turned to a cosine against itself
    different_rows: Callable[[Any, int], Any]  # the first ``count`` rows changed


# One row of the report's compare line: (found key, allowed key or None, words, operator), read from a verdict.
SummaryRow = tuple[str, str | None, str, str]
# One axis calibrate measures and drift shares: (number key, label, declared bound in its units or None: shown only).
Axis = tuple[str, str, float | None]


class ToleranceKind(Protocol):
    """What a kind module defines (kind_cosine.py is the fullest example)."""

    # read-only members (properties, so that a module's constants satisfy them):
    @property
    def DOC(self) -> str:
        """When an output passes, in words (docs/application.md's table of kinds, generated)."""
        ...

    @property
    def USE(self) -> str:
        """The outputs it is for (same table)."""
        ...

    @property
    def MOVED(self) -> Mapping[str, str]:
        """Per key of ``moved_past``, how the reference is moved past it (docs/verdict-rules.md, generated)."""
        ...

    @property
    def MEASURED(self) -> tuple[str, str]:
        """Calibrate's numbers, and the declared bound in their units (docs/calibration.md, generated)."""
        ...

    @property
    def KEYS(self) -> Mapping[str, tuple[float, float]]:
        """Its tolerance keys in pyproject (all required), each with its bounds [low, high]."""
        ...

    @property
    def SUMMARY(self) -> Sequence[SummaryRow]:
        """Its numbers on the report's compare line."""
        ...

    @property
    def PROPOSES(self) -> bool:
        """Calibrate proposes a tolerance for it (exact has no number to move)."""
        ...

    @property
    def FLIP_BOUND(self) -> bool:
        """Its `max-abs` key (it must have one) is held to the criterion's nearest-neighbour flip bound (reference,
        calibrate)."""
        ...

    def compare(self, ops: Ops, declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
        """The verdict on same-shape, finite arrays: ``kind``, ``passed``, ``summary`` and its numbers."""
        ...

    def moved_past(self, moves: Moves, declared: dict[str, Any], ref: Any, where: tuple[int, ...]) -> dict[str, Any]:
        """Per declared bound, the reference moved just past it (None: no such move), which ``compare`` must fail;
        ``where``: the element of largest magnitude."""
        ...

    def numbers(self, verdict: dict[str, Any]) -> dict[str, float] | None:
        """The distances of a verdict (0 = equal, growing with the difference); None: it holds none."""
        ...

    def axes(self, tolerance: dict[str, float]) -> list[Axis]:
        """The numbers its tolerance bounds, each with the declared bound in its units (calibrate's axes, drift's
        shares; None: shown only)."""
        ...

    def proposal(
        self, tolerance: dict[str, float], got: dict[str, float], sig: Callable[[float], float]
    ) -> dict[str, float] | None:
        """Its pyproject keys at calibrate's proposal (``got``: the proposal per bounded axis; ``sig`` rounds to two
        significant digits)."""
        ...

    def calibrate_note(self, axis: Any, margin: dict[str, Any]) -> str | None:
        """A note for calibrate's report on its first axis (``analysis.Axis``) and the margin record, or None."""
        ...

    def cell_text(self, nums: dict[str, float]) -> str:
        """Its numbers in a drift table cell."""
        ...

    def short_text(self, nums: dict[str, float]) -> str:
        """The one number that fits a drift heatmap cell."""
        ...

    def allowed(self, verdict: dict[str, Any]) -> str:
        """What its tolerance allows, in words, from a verdict (upgrade's drift table)."""
        ...


KINDS: dict[str, ToleranceKind] = {
    "cosine": kind_cosine,
    "allclose": kind_allclose,
    "exact": kind_exact,
    "agreement": kind_agreement,
}


def get(name: object) -> ToleranceKind:
    """The kind called ``name`` (ValueError naming it otherwise)."""
    found = KINDS.get(str(name))
    if found is None:
        raise ValueError(f"unknown tolerance kind {name!r}")
    return found


def flip_bound(name: object) -> bool:
    """Whether the criterion's nearest-neighbour flip bound applies to an output of this kind."""
    return str(name) in KINDS and KINDS[str(name)].FLIP_BOUND


def summary_rows() -> list[SummaryRow]:
    """Every kind's compare-line rows in table order, each found key once."""
    rows: dict[str, SummaryRow] = {}
    for kind in KINDS.values():
        for row in kind.SUMMARY:
            rows.setdefault(row[0], row)
    return list(rows.values())
