"""The ``exact`` tolerance kind (integers, labels): every row equal.

Everything about the kind, for every consumer (kinds.py: the table and what each member is for). It imports only
the standard library: the in-env side hands it numpy (``ops.np``, ``moves.np``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DOC = 'equal'  # passes when (docs/application.md)
USE = "integers, labels where any change matters"  # for which outputs (docs/application.md)
MOVED = {  # what moved_past does, per bound (docs/verdict-rules.md)
    "exact": "one row changed by one representable step",
}
MEASURED = (  # calibrate's numbers, and the declared bound in their units (docs/calibration.md)
    "the share of rows that differ (the note counts them in rows)",
    "0",
)
KEYS: dict[str, tuple[float, float]] = {}
SUMMARY = (
    ("equal_share", "min_share_allowed", "share of equal rows", "≥"),
    ("unequal_rows", None, "unequal rows", "="),
)
PROPOSES = False  # no number to move; a noise above zero makes it too tight (use agreement)
FLIP_BOUND = False


def compare(ops: Any, declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    share, unequal = ops.equal_rows(ours, ref, ids)
    passed = not unequal
    return {
        "kind": "exact",
        "equal_share": share,
        "unequal_rows": len(unequal),
        "first_unequal": unequal[:10],
        "summary": "equal" if passed else f"{len(unequal)} of {len(ids)} rows differ, first {unequal[0]!r}",
        "passed": passed,
        "bitwise_equal": ops.same_bits(ours, ref),
    }


def moved_past(moves: Any, declared: dict[str, Any], ref: Any, where: tuple[int, ...]) -> dict[str, Any]:
    return {"exact": moves.different_rows(ref, 1)}


def numbers(verdict: dict[str, Any]) -> dict[str, float] | None:
    if "equal_share" not in verdict:
        return None
    return {"disagreement": max(0.0, 1.0 - float(verdict["equal_share"]))}


def axes(tolerance: dict[str, float]) -> list[tuple[str, str, float | None]]:
    return [("disagreement", "share of rows that differ", 0.0)]


def proposal(
    tolerance: dict[str, float], got: dict[str, float], sig: Callable[[float], float]
) -> dict[str, float] | None:
    return None  # exact has no number to move; a noise above zero makes it too tight (use agreement)


def _rows(share: float, rows: int | None) -> str:
    return f"{round(share * rows)} of {rows} rows" if rows else f"a share of {share:.3g} of the rows"


def calibrate_note(axis: Any, margin: dict[str, Any]) -> str | None:
    """What calibrate can say of an ``exact`` output, in rows: the noise (rows that differed in the worst variation),
    the margin (rows changed until the criterion fails), and why there is no tolerance to propose."""
    rows = margin.get("rows")
    if not isinstance(rows, int) or rows <= 0:  # an older record: one row is the resolution
        rows = round(1 / axis.floor) if axis.floor > 0 else None
    if axis.noise > 0:
        worst = max(axis.noise_by_variation, key=lambda k: axis.noise_by_variation[k])
        said = (f"exact: no tolerance to propose. {_rows(axis.noise, rows)} differed ({worst}), so exact fails on "
                "another machine: declare kind = \"agreement\" with a min-share (calibrate then proposes one)")
    else:
        said = (f"exact: no tolerance to propose. No variation changed a row (0 of {rows or '?'} rows differed in "
                f"{len(axis.noise_by_variation)} variations), so exact holds on this machine")
    if axis.margin is not None:
        said += f"; the criterion fails once {_rows(axis.margin, rows)} change"
    elif "the application's criterion: still passes" in str(margin.get("why", "")):
        said += ("; the criterion does not react to this output (it still passes with every row changed): exact is "
                 "the only check that fails a changed row")
    return said + "."


def cell_text(nums: dict[str, float]) -> str:
    return f"agree {1 - nums['disagreement']:.4f}"


def short_text(nums: dict[str, float]) -> str:
    return f"{1 - nums['disagreement']:.3f}"


def allowed(verdict: dict[str, Any]) -> str:
    return "equal"
