"""The ``allclose`` tolerance kind (logits, tensors): |a-b| <= atol + rtol*|b| elementwise.

Everything about the kind, for every consumer (kinds.py: the table and what each member is for). It imports only
the standard library: the in-env side hands it numpy (``ops.np``, ``moves.np``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DOC = '|a−b| ≤ `atol` + `rtol`·|b| elementwise'  # passes when (docs/application.md)
USE = "logits, tensors"  # for which outputs (docs/application.md)
MOVED = {  # what moved_past does, per bound (docs/verdict-rules.md)
    "atol + rtol*|ref|": "the largest value moved by 1.5 × (atol + rtol·|value|)",
}
MEASURED = (  # calibrate's numbers, and the declared bound in their units (docs/calibration.md)
    "the allclose ratio: max of abs(a−b) / (atol + rtol·abs(ref)); max abs for reading",
    "1.0 (a proposal scales atol and rtol together)",
)
KEYS = {"rtol": (0.0, float("inf")), "atol": (0.0, float("inf"))}
SUMMARY = (("max_abs", "max_abs_allowed", "max abs", "≤"), ("values_over", None, "values over atol + rtol*|ref|", "="))
PROPOSES = True
FLIP_BOUND = False


def compare(ops: Any, declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    np = ops.np
    a, b = ops.rows(ours).astype(np.float64), ops.rows(ref).astype(np.float64)
    rtol, atol = float(declared["rtol"]), float(declared["atol"])
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - b)
        allowed = atol + rtol * np.abs(b)
    over = ~(diff <= allowed)  # NaN (an overflowed difference) counts as over, never as within
    rows_over = [ids[i] for i in np.flatnonzero(over.any(axis=1))]
    with np.errstate(divide="ignore", invalid="ignore"):
        excess = np.where(allowed > 0, diff / allowed, np.where(diff > 0, np.inf, 0.0))
    passed = not rows_over
    return {
        "kind": "allclose",
        "passed": passed,
        "summary": (
            f"{int(over.sum())} values in {len(rows_over)} rows exceed atol {atol} + rtol {rtol}*|ref|, "
            f"first {rows_over[0]!r}; max abs {float(diff.max()):.3g}"
            if rows_over
            else f"every value within atol {atol} + rtol {rtol}*|ref| (max abs {ops.largest(diff):.3g})"
        ),
        "max_abs": ops.largest(diff),
        "max_ratio_to_allowed": float(excess.max()) if excess.size else 0.0,
        "values_over": int(over.sum()),
        "rows_over": rows_over[:10],
        "rtol": rtol,
        "atol": atol,
        "bitwise_equal": ops.same_bits(ours, ref),
    }


def moved_past(moves: Any, declared: dict[str, Any], ref: Any, where: tuple[int, ...]) -> dict[str, Any]:
    allowed = float(declared["atol"]) + float(declared["rtol"]) * abs(float(ref[where]))
    return {"atol + rtol*|ref|": moves.nudged(ref, where, 1.5 * allowed)}


def numbers(verdict: dict[str, Any]) -> dict[str, float] | None:
    if "max_abs" not in verdict:
        return None
    return {"max_abs": float(verdict["max_abs"]), "allclose_ratio": float(verdict["max_ratio_to_allowed"])}


def axes(tolerance: dict[str, float]) -> list[tuple[str, str, float | None]]:
    # |a-b| / (atol + rtol*|ref|) at its largest: 1.0 is the declared bound; a proposal scales atol and rtol
    return [("allclose_ratio", "allclose ratio: max of abs(a-b) / (atol + rtol*abs(ref))", 1.0),
            ("max_abs", "max abs (shown for reading; the ratio is judged)", None)]


def proposal(
    tolerance: dict[str, float], got: dict[str, float], sig: Callable[[float], float]
) -> dict[str, float] | None:
    k = got["allclose_ratio"]
    return {"rtol": sig(tolerance["rtol"] * k), "atol": sig(tolerance["atol"] * k)}


def calibrate_note(axis: Any, margin: dict[str, Any]) -> str | None:
    return None


def cell_text(nums: dict[str, float]) -> str:
    return f"abs {nums['max_abs']:.2g} ({nums['allclose_ratio']:.2g} of tol)"


def short_text(nums: dict[str, float]) -> str:
    return f"{nums['max_abs']:.1e}"


def allowed(verdict: dict[str, Any]) -> str:
    return f"abs(a-b) <= {verdict.get('atol')} + {verdict.get('rtol')}*abs(ref)"
