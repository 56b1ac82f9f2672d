"""Compare one output with its reference under its declared kind (numpy only; no torch, nothing of Kernodeck).

The shape and non-finite checks are the same for every kind; the comparison itself is the kind's (kinds.py: the
table, kind_NAME.py: each kind), handed numpy and the shared helpers (:data:`OPS`). A non-finite value on either side
is counted and named as such: it fails the comparison and never disappears into a min or a max.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .kinds import Ops, get


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


def same_bits(a: Any, b: Any) -> bool:
    """The same bytes: dtype, shape and every value's bits (``array_equal`` is value equality: ``-0.0 == 0.0``, and
    two NaNs are unequal; red-team pass 51, DET1). What "bitwise" means wherever a record says it."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.hasobject:  # object arrays hold references, not values: their bytes say nothing
        return bool(np.array_equal(a, b))
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def dtypes_differ(declared: dict[str, Any], a: Any, b: Any) -> str | None:
    """Why two dossiers' arrays of one output cannot be compared as the same output: B's dtype is not A's, or either
    is not the declared one (verify refuses such an output before any number; compare and drift say so too). None
    when both hold the declared dtype (or none is declared and they agree)."""
    want, got = declared.get("dtype"), {"A": str(np.asarray(a).dtype), "B": str(np.asarray(b).dtype)}
    if got["A"] == got["B"] and want in (None, got["A"]):
        return None
    return f"dtype {got['B']} in B, {got['A']} in A" + (f" (declared {want})" if want else "")


def shapes_differ(a: Any, b: Any) -> str | None:
    """Why two dossiers' arrays of one output are not the same output by shape, naming both (a scalar is not a
    one-element array: each dossier keeps the shape its application wrote); None when the shapes agree."""
    sa, sb = np.shape(a), np.shape(b)
    return None if sa == sb else f"shape {sb} in B, {sa} in A"


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
    compared = get(kind)  # an unknown kind is refused before anything is compared
    if ours.shape != ref.shape:
        return {"kind": kind, "passed": False, "summary": f"shape {ours.shape} against the reference's {ref.shape}"}
    bad = _non_finite(ours, ref, ids)
    if bad:
        where = "; ".join(f"{side} rows {bad[side]}" for side in ("output", "reference") if side in bad)
        return {"kind": kind, "passed": False, "non_finite": bad, "summary": f"non-finite values (NaN/Inf): {where}"}
    return compared.compare(OPS, declared, ours, ref, ids)


def equal_rows(ours: Any, ref: Any, ids: list[str]) -> tuple[float, list[str]]:
    """The share of rows equal in both, and the ids of the others (the exact and agreement kinds)."""
    equal = (_rows(ours) == _rows(ref)).all(axis=1)
    unequal = [ids[i] for i in np.flatnonzero(~equal)]
    return (float(equal.mean()) if equal.size else 1.0), unequal


def _max(values: Any) -> float:
    return float(values.max()) if values.size else 0.0


OPS = Ops(np=np, rows=_rows, max_abs=max_abs, largest=_max, equal_rows=equal_rows, same_bits=same_bits)
