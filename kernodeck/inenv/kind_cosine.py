"""The ``cosine`` tolerance kind (embeddings): per-row cosine >= cosine-min AND max |a-b| <= max-abs.

Everything about the kind, for every consumer (kinds.py: the table and what each member is for). It imports only
the standard library: the in-env side hands it numpy (``ops.np``, ``moves.np``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

DOC = "every row's cosine ≥ `cosine-min` AND max |a−b| ≤ `max-abs`"  # passes when (docs/application.md)
USE = "embeddings"  # for which outputs (docs/application.md)
MOVED = {  # what moved_past does, per bound (docs/verdict-rules.md)
    "max-abs": "the largest value of the reference moved by 1.5 × max-abs (at least one representable step)",
    "cosine-min": "the first row turned (same norm) to a cosine of cosine-min − (1 − cosine-min)/2 against itself",
}
MEASURED = (  # calibrate's numbers, and the declared bound in their units (docs/calibration.md)
    "max abs; 1 − min cosine over the rows",
    "`max-abs`; 1 − `cosine-min`",
)
KEYS = {"cosine-min": (-1.0, 1.0), "max-abs": (0.0, float("inf"))}
SUMMARY = (("max_abs", "max_abs_allowed", "max abs", "≤"), ("min_cosine", "cosine_min_allowed", "min cosine", "≥"))
PROPOSES = True
FLIP_BOUND = True


def compare(ops: Any, declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    np = ops.np
    a, b = ops.rows(ours).astype(np.float64), ops.rows(ref).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(norms > 0, (a * b).sum(axis=1) / np.where(norms > 0, norms, 1.0), 0.0)
    # Two zero rows are equal: cosine 1 by convention (one zero row against a non-zero one is 0).
    cos = np.where((norms == 0) & (np.abs(a - b).max(axis=1) == 0), 1.0, cos)
    worst_abs = ops.max_abs(a, b)
    worst = int(np.argmin(cos)) if cos.size else 0
    need_cos, need_abs = float(declared["cosine-min"]), float(declared["max-abs"])
    if not np.isfinite(cos).all() or not np.isfinite(worst_abs):
        return {"kind": "cosine", "passed": False, "non_finite": {"cosine": True},
                "summary": "non-finite cosine or difference (values too large for float64?)"}
    # written so that a NaN can only fail: `not (x <= limit)`, never `x > limit`
    passed = bool(np.all(cos >= need_cos)) and bool(worst_abs <= need_abs)
    min_cos = float(cos.min()) if cos.size else 1.0
    return {
        "kind": "cosine",
        "passed": passed,
        "summary": f"min cosine {min_cos:.9f} (allowed >= {need_cos}) at {ids[worst]!r}, "
        f"max abs {worst_abs:.3g} (allowed <= {need_abs})",
        "min_cosine": min_cos,
        "max_abs": worst_abs,
        "worst_id": ids[worst] if ids else None,
        "cosine_min_allowed": need_cos,
        "max_abs_allowed": need_abs,
        "bitwise_equal": ops.same_bits(ours, ref),
        "per_item_cosine": {i: round(float(c), 9) for i, c in zip(ids, cos, strict=True)},
    }


def moved_past(moves: Any, declared: dict[str, Any], ref: Any, where: tuple[int, ...]) -> dict[str, Any]:
    max_abs, cos_min = float(declared["max-abs"]), float(declared["cosine-min"])
    past = cos_min - max(0.5 * (1.0 - cos_min), 1e-6)
    return {"max-abs": moves.nudged(ref, where, 1.5 * max_abs), "cosine-min": moves.rotated(ref, past)}


def numbers(verdict: dict[str, Any]) -> dict[str, float] | None:
    if "min_cosine" not in verdict:
        return None
    return {"max_abs": float(verdict["max_abs"]), "one_minus_cos": max(0.0, 1.0 - float(verdict["min_cosine"]))}


def axes(tolerance: dict[str, float]) -> list[tuple[str, str, float | None]]:
    return [("max_abs", "max abs", float(tolerance["max-abs"])),
            ("one_minus_cos", "1 - min cosine", 1.0 - float(tolerance["cosine-min"]))]


def proposal(
    tolerance: dict[str, float], got: dict[str, float], sig: Callable[[float], float]
) -> dict[str, float] | None:
    # rounded towards the noise (a tighter cosine floor is 1 - a rounded-down distance)
    return {"max-abs": sig(got["max_abs"]), "cosine-min": 1.0 - sig(got["one_minus_cos"])}


def calibrate_note(axis: Any, margin: dict[str, Any]) -> str | None:
    return None


def cell_text(nums: dict[str, float]) -> str:
    return f"abs {nums['max_abs']:.2g}, 1 - cos {nums['one_minus_cos']:.2g}"


def short_text(nums: dict[str, float]) -> str:
    return f"{nums['max_abs']:.1e}"


def allowed(verdict: dict[str, Any]) -> str:
    return f"cosine >= {verdict.get('cosine_min_allowed')}, max abs <= {verdict.get('max_abs_allowed')}"
