"""The ``agreement`` tolerance kind (labels): the share of equal rows >= min-share.

Everything about the kind, for every consumer (kinds.py: the table and what each member is for). It imports only
the standard library: the in-env side hands it numpy (``ops.np``, ``moves.np``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

DOC = 'the share of equal rows ≥ `min-share`'  # passes when (docs/application.md)
USE = "labels"  # for which outputs (docs/application.md)
MOVED = {  # what moved_past does, per bound (docs/verdict-rules.md)
    "min-share": "⌊(1 − min-share)·rows⌋ + 1 rows changed",
}
MEASURED = (  # calibrate's numbers, and the declared bound in their units (docs/calibration.md)
    "the share of rows that differ",
    "1 − `min-share`",
)
KEYS = {"min-share": (0.0, 1.0)}
SUMMARY = (
    ("equal_share", "min_share_allowed", "share of equal rows", "≥"),
    ("unequal_rows", None, "unequal rows", "="),
)
PROPOSES = True
FLIP_BOUND = False


def compare(ops: Any, declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    share, unequal = ops.equal_rows(ours, ref, ids)
    need = float(declared["min-share"])
    return {
        "kind": "agreement",
        "equal_share": share,
        "unequal_rows": len(unequal),
        "first_unequal": unequal[:10],
        "min_share_allowed": need,
        "summary": f"{share:.4f} of rows agree (allowed >= {need})",
        "passed": bool(share >= need),
        "bitwise_equal": ops.same_bits(ours, ref),
    }


def moved_past(moves: Any, declared: dict[str, Any], ref: Any, where: tuple[int, ...]) -> dict[str, Any]:
    rows, need = ref.shape[0], float(declared["min-share"])
    count = max(0, math.floor((1.0 - need) * rows))
    while count <= rows and (rows - count) / rows >= need:  # the fewest rows below min-share (no float slip)
        count += 1
    return {"min-share": moves.different_rows(ref, count) if count <= rows else None}


def numbers(verdict: dict[str, Any]) -> dict[str, float] | None:
    if "equal_share" not in verdict:
        return None
    return {"disagreement": max(0.0, 1.0 - float(verdict["equal_share"]))}


def axes(tolerance: dict[str, float]) -> list[tuple[str, str, float | None]]:
    return [("disagreement", "share of rows that differ", 1.0 - float(tolerance["min-share"]))]


def proposal(
    tolerance: dict[str, float], got: dict[str, float], sig: Callable[[float], float]
) -> dict[str, float] | None:
    return {"min-share": round(1.0 - got["disagreement"], 4)}


def calibrate_note(axis: Any, margin: dict[str, Any]) -> str | None:
    return None


def cell_text(nums: dict[str, float]) -> str:
    return f"agree {1 - nums['disagreement']:.4f}"


def short_text(nums: dict[str, float]) -> str:
    return f"{1 - nums['disagreement']:.3f}"


def allowed(verdict: dict[str, Any]) -> str:
    return f"agreement >= {verdict.get('min_share_allowed')}"
