"""Compare one output with its reference under its declared kind (numpy only; no torch, nothing of Kernodeck).

Kinds: ``cosine`` (per-row cosine >= cosine-min AND max |a-b| <= max-abs), ``allclose`` (|a-b| <= atol + rtol*|b|
elementwise), ``exact`` (equal), ``agreement`` (share of equal rows >= min-share). A non-finite value on either side
is counted and named as such: it fails the comparison and never disappears into a min or a max.
"""

from __future__ import annotations

from typing import Any

import numpy as np

KINDS = ("cosine", "allclose", "exact", "agreement")


def max_abs(a: Any, b: Any) -> float:
    """Largest |a-b|: inf when the shapes differ, NaN when any value on either side is NaN or Inf (a non-finite
    difference never hides in a max: callers test it with ``not (value <= limit)`` or name it non-finite)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.size == 0:
        return float("inf") if a.shape != b.shape else 0.0
    if a.dtype == np.bool_ or b.dtype == np.bool_:
        return float(np.count_nonzero(a != b) > 0)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if not np.isfinite(diff).all():
        return float("nan")
    return float(diff.max())


def _rows(arr: Any) -> Any:
    return arr.reshape(arr.shape[0], -1) if arr.ndim > 1 else arr.reshape(-1, 1)


def _non_finite(ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for side, arr in (("output", ours), ("reference", ref)):
        if np.issubdtype(arr.dtype, np.inexact):
            bad = ~np.isfinite(_rows(arr)).all(axis=1)
            if bad.any():
                out[side] = [ids[i] if i < len(ids) else str(i) for i in np.flatnonzero(bad)[:10]]
                out[f"{side}_rows"] = int(bad.sum())
    return out


def compare(declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    """``{"passed", "summary", ...numbers}`` for one output; ``declared`` is its pyproject table (kind, tolerance)."""
    ours, ref = np.asarray(ours), np.asarray(ref)
    kind = declared["kind"]
    if kind not in KINDS:
        raise ValueError(f"unknown tolerance kind {kind!r}")
    if ours.shape != ref.shape:
        return {"kind": kind, "passed": False, "summary": f"shape {ours.shape} against the reference's {ref.shape}"}
    bad = _non_finite(ours, ref, ids)
    if bad:
        where = "; ".join(f"{side} rows {bad[side]}" for side in ("output", "reference") if side in bad)
        return {"kind": kind, "passed": False, "non_finite": bad, "summary": f"non-finite values (NaN/Inf): {where}"}
    if kind == "cosine":
        return _cosine(declared, ours, ref, ids)
    if kind == "allclose":
        return _allclose(declared, ours, ref, ids)
    equal_rows = (_rows(ours) == _rows(ref)).all(axis=1)
    unequal = [ids[i] for i in np.flatnonzero(~equal_rows)]
    share = float(equal_rows.mean()) if equal_rows.size else 1.0
    details: dict[str, Any] = {
        "kind": kind,
        "equal_share": share,
        "unequal_rows": len(unequal),
        "first_unequal": unequal[:10],
    }
    if kind == "exact":
        passed = not unequal
        details["summary"] = "equal" if passed else f"{len(unequal)} of {len(ids)} rows differ, first {unequal[0]!r}"
    else:
        need = float(declared["min-share"])
        passed = bool(share >= need)
        details["min_share_allowed"] = need
        details["summary"] = f"{share:.4f} of rows agree (allowed >= {need})"
    details["passed"] = passed
    details["bitwise_equal"] = bool(np.array_equal(ours, ref))
    return details


def _cosine(declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    a, b = _rows(ours).astype(np.float64), _rows(ref).astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(norms > 0, (a * b).sum(axis=1) / np.where(norms > 0, norms, 1.0), 0.0)
    # Two zero rows are equal: cosine 1 by convention (one zero row against a non-zero one is 0).
    cos = np.where((norms == 0) & (np.abs(a - b).max(axis=1) == 0), 1.0, cos)
    worst_abs = max_abs(a, b)
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
        "bitwise_equal": bool(np.array_equal(ours, ref)),
        "per_item_cosine": {i: round(float(c), 9) for i, c in zip(ids, cos, strict=True)},
    }


def _max(values: Any) -> float:
    return float(values.max()) if values.size else 0.0


def _allclose(declared: dict[str, Any], ours: Any, ref: Any, ids: list[str]) -> dict[str, Any]:
    a, b = _rows(ours).astype(np.float64), _rows(ref).astype(np.float64)
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
            else f"every value within atol {atol} + rtol {rtol}*|ref| (max abs {_max(diff):.3g})"
        ),
        "max_abs": _max(diff),
        "max_ratio_to_allowed": float(excess.max()) if excess.size else 0.0,
        "values_over": int(over.sum()),
        "rows_over": rows_over[:10],
        "rtol": rtol,
        "atol": atol,
        "bitwise_equal": bool(np.array_equal(ours, ref)),
    }
