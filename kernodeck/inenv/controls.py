"""Negative controls run beside the real checks: a check that cannot fail proves nothing (stdlib + numpy only).

- The criterion is also run on generic corruptions of the reference outputs (:func:`corruptions`): rows permuted
  against their ids, noise of the same scale, a constant. It must fail on the first two (``REQUIRED``), each drawn
  ``DRAWS`` times by fixed seeds, in EVERY draw: a criterion that passes one draw of either cannot see it reliably
  (one bit about one number fails a single draw half the time), and is *unable to fail* even where it fails the
  constant (a check of the spread alone sees that one). Its margin against added noise is measured beside
  (judge.py, with margin.py's search: the one calibrate runs).
- It must also fail half its rows changed, and the rows it does not judge changed at once: power.py.
- Each declared tolerance is shown able to fail: the reference with one value moved just past it
  (:func:`moved_past`) must fail the very comparison code the compare step uses (``tolerance.compare``), and so must
  each draw of the corruptions the criterion must fail (``REQUIRED``: rows permuted against their ids, noise of the
  output's own scale) that changes the output (:func:`blind_to`): a finite bound that passes them sees nothing at the
  output's scale (``atol = 1e30`` on logits of std 3, ``min-share = 0.01``), and is unable to fail like an infinite one.
- Every numeric verdict here and in the other steps treats NaN and Inf as a failure named "non-finite": a
  comparison is written ``not (err <= tol)`` (:func:`exceeds`), never ``err > tol``, which is False for NaN.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .kinds import Moves, get

SEED = 20260  # the corruptions are the same on every machine and every run
CORRUPTIONS = ("permuted", "noise", "constant")
# What a criterion must fail to be able to fail: rows moved against their ids (it must tie each row to its input) and
# the outputs replaced by noise of their own mean and standard deviation (it must judge the values). The constant
# alone is trivial: finiteness, a row count and a spread above zero see it and nothing else.
REQUIRED = ("permuted", "noise")
WHAT = {
    "permuted": "rows permuted against their ids",
    "noise": "the outputs replaced by noise of their own mean and standard deviation",
    "constant": "the outputs replaced by a constant",
}
CANDIDATES = 16  # fixed-seed permutations tried per draw: the one moving the most rows' values is the corruption
# Draws of each REQUIRED corruption (seeds SEED, SEED + 1, ...): the criterion must fail every one. A criterion of one
# bit about one number (the sign of one coordinate) fails one draw about half the time; all ten about once in 1000.
# Every draw is judged (no stop at the first passed one): the report says how many it failed.
DRAWS = 5


def exceeds(value: float, limit: float) -> bool:
    """``value`` is over ``limit``, or is not a finite number at all (NaN compares False with everything)."""
    return not (math.isfinite(value) and value <= limit)


def non_finite(values: Any) -> int:
    """How many entries of ``values`` (an array or a sequence of numbers) are NaN or Inf."""
    arr = np.asarray(values)
    if arr.dtype == object:
        arr = arr.astype(np.float64)
    if not np.issubdtype(arr.dtype, np.inexact):
        return 0
    return int(np.count_nonzero(~np.isfinite(arr)))


def seeded(draw: int) -> Any:
    """The fixed-seed generator of one draw (draw 0: SEED itself)."""
    return np.random.default_rng(SEED + draw)


def _permutation(rows: int, rng: Any) -> Any:
    """A derangement: every row lands on another id (rows left in place by the draw move among themselves)."""
    order = rng.permutation(rows)
    stay = np.flatnonzero(order == np.arange(rows))
    if rows > 1 and stay.size > 1:
        order[stay] = np.roll(stay, 1)
    elif rows > 1 and stay.size == 1:
        i, j = int(stay[0]), (int(stay[0]) + 1) % rows  # swapped with its neighbour's target: neither stays
        order[i], order[j] = order[j], i
    return order


def mean_scale(arr: Any) -> tuple[float, float]:
    """A float output's mean and standard deviation over its finite values (0 and 1 when it has none; a spread of 0
    counts as 1): the scale of the noise corruptions."""
    ref = arr.astype(np.float64)
    finite = ref[np.isfinite(ref)]
    mean = float(finite.mean()) if finite.size else 0.0
    scale = float(finite.std()) if finite.size else 1.0
    return mean, scale or 1.0


def corrupt(arr: Any, how: str, rng: Any) -> Any:
    """One generic corruption of an output: same dtype and shape, no knowledge of what the output means."""
    arr = np.asarray(arr)
    if how == "permuted":
        return arr[_permutation(arr.shape[0], rng)] if arr.ndim else arr.copy()
    if arr.dtype == np.bool_:
        return rng.random(arr.shape) < 0.5 if how == "noise" else np.full_like(arr, not bool(arr.flat[0]))
    if np.issubdtype(arr.dtype, np.integer):
        low, high = (int(arr.min()), int(arr.max())) if arr.size else (0, 1)
        if how == "noise":  # values drawn from the output's own range
            return rng.integers(low, high + 1, size=arr.shape).astype(arr.dtype)
        values, counts = np.unique(arr, return_counts=True)
        return np.full_like(arr, values[int(np.argmax(counts))] if values.size else 0)
    mean, scale = mean_scale(arr)
    if how == "noise":  # the output replaced by noise of its own mean and spread
        return (mean + scale * rng.standard_normal(arr.shape)).astype(arr.dtype)
    if how == "constant":
        return np.full_like(arr, mean)
    raise ValueError(f"unknown corruption {how!r}")


def _moved_rows(outputs: dict[str, Any], order: Any) -> int:
    """How many rows ``order`` gives another value, summed over the outputs (a row swapped with an equal one is not):
    each output counts on its own, so float logits that every permutation moves do not hide labels swapped with
    equal labels beside them."""
    moved = 0
    for arr in outputs.values():
        flat = np.asarray(arr).reshape(len(order), -1)
        moved += int((~(flat[order] == flat).all(axis=1)).sum())
    return moved


def permutation(outputs: dict[str, Any], draw: int = 0) -> Any | None:
    """The rows' permutation of one draw of the ``permuted`` corruption, one for every output: of CANDIDATES
    fixed-seed derangements, the first that moves the most rows' values (:func:`_moved_rows`; it stops at one moving
    every row of every output). Few distinct labels make a random permutation swap many equal rows, which any
    criterion would rightly pass. None: the outputs' rows differ in number (each is then permuted on its own)."""
    sizes = {np.asarray(arr).shape[0] if np.asarray(arr).ndim else -1 for arr in outputs.values()}
    if len(sizes) != 1 or min(sizes) < 1:
        return None
    rows = sizes.pop()
    rng = seeded(draw)
    best, most = None, -1
    for _ in range(CANDIDATES):
        order = _permutation(rows, rng)
        moved = _moved_rows(outputs, order)
        if moved > most:
            best, most = order, moved
        if most == rows * len(outputs):  # every row of every output moved: no candidate can do better
            break
    return best


def corrupted(outputs: dict[str, Any], how: str, draw: int = 0) -> dict[str, Any]:
    """One draw of one corruption applied to every output at once (the same permutation for every output)."""
    if how == "permuted":
        order = permutation(outputs, draw)
        if order is not None:
            return {name: np.asarray(arr)[order] for name, arr in outputs.items()}
        return {name: corrupt(arr, how, seeded(draw)) for name, arr in outputs.items()}
    rng = seeded(draw)
    return {name: corrupt(arr, how, rng) for name, arr in outputs.items()}


def corruptions(outputs: dict[str, Any], draw: int = 0) -> dict[str, dict[str, Any]]:
    """Each corruption of ``outputs``, its draw ``draw``."""
    return {how: corrupted(outputs, how, draw) for how in CORRUPTIONS}


def same(a: Any, b: Any) -> bool:
    """Bitwise the same array (shape, dtype and bytes)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


# --- tolerances ------------------------------------------------------------------------------------------------------


def _cast(values: Any, like: Any) -> Any | None:
    """``values`` (float64) in ``like``'s dtype, or None when it cannot be held there (non-finite, overflow)."""
    if not np.isfinite(values).all():
        return None
    if np.issubdtype(like.dtype, np.integer):
        info = np.iinfo(like.dtype)
        rounded = np.where(values >= like.astype(np.float64), np.ceil(values), np.floor(values))
        if rounded.min() < info.min or rounded.max() > info.max:
            return None
        return rounded.astype(like.dtype)
    cast = values.astype(like.dtype)
    return cast if np.isfinite(cast).all() else None


def _index(arr: Any) -> tuple[int, ...]:
    """The element moved: the one of largest magnitude (moved by a relative tolerance, it moves the most)."""
    flat = np.abs(arr.astype(np.float64)).ravel()
    return tuple(int(i) for i in np.unravel_index(int(np.argmax(flat)) if flat.size else 0, arr.shape))


def _nudged(arr: Any, where: tuple[int, ...], by: float) -> Any | None:
    """``arr`` with one value moved up by ``by`` (at least to the next representable value)."""
    moved = arr.astype(np.float64).copy()
    moved[where] += by
    out = _cast(moved, arr)
    if out is not None and out[where] == arr[where]:  # below the dtype's resolution: the next value up
        out = out.copy()
        out[where] = np.nextafter(arr[where], np.inf) if np.issubdtype(arr.dtype, np.inexact) else arr[where] + 1
    return out


def _different_rows(arr: Any, count: int) -> Any:
    """``arr`` with its first ``count`` rows changed (each value moved to another one)."""
    out = arr.copy()
    if arr.dtype == np.bool_:
        out[:count] = ~arr[:count]
    elif np.issubdtype(arr.dtype, np.integer):
        info = np.iinfo(arr.dtype)
        out[:count] = np.where(arr[:count] == info.max, arr[:count] - 1, arr[:count] + 1)
    else:
        out[:count] = np.nextafter(arr[:count], np.where(arr[:count] > 0, -np.inf, np.inf))
    return out


def _rotated(arr: Any, cosine: float) -> Any | None:
    """``arr`` with its first row turned to ``cosine`` against itself (same norm); None when no row can turn."""
    rows = arr.reshape(arr.shape[0], -1).astype(np.float64)
    if not rows.size:
        return None
    row = rows[0]
    norm = float(np.linalg.norm(row))
    if norm == 0:
        return None
    unit = row / norm
    other = np.random.default_rng(SEED).standard_normal(row.shape)
    other -= other.dot(unit) * unit  # orthogonal to the row (a 1-D row has no such direction: turned over)
    size = float(np.linalg.norm(other))
    cosine = max(-1.0, min(1.0, cosine))
    sine = math.sqrt(max(0.0, 1.0 - cosine * cosine)) if size > 0 else 0.0
    turned = norm * (cosine * unit + (sine * other / size if size > 0 else 0.0))
    out = rows.copy()
    out[0] = turned
    return _cast(out.reshape(arr.shape), arr)


def moved_past(declared: dict[str, Any], ref: Any) -> dict[str, Any | None]:
    """For each declared tolerance of an output, the reference moved just past it (None: no such move exists): the
    kind's own moves (kinds.py), handed :data:`MOVES`."""
    ref = np.asarray(ref)
    if ref.size == 0:
        return {}
    return get(declared["kind"]).moved_past(MOVES, declared, ref, _index(ref))


MOVES = Moves(np=np, nudged=_nudged, rotated=_rotated, different_rows=_different_rows)


def blind_to(
    compare: Callable[[dict[str, Any], Any, Any, list[str]], dict[str, Any]],
    declared: dict[str, Any],
    ref: Any,
    ids: list[str],
) -> dict[str, Any]:
    """``compare`` on each draw of each REQUIRED corruption of one output (the criterion's, :func:`corrupted`), per
    corruption: ``applies`` (a draw changed the output: all rows equal are not permuted), ``draws``, ``passed_draws``
    (the draws compare passed: each one it must fail), ``summary`` (compare's answer on the first it passed, else on
    the first)."""
    results: dict[str, Any] = {}
    for how in REQUIRED:
        verdicts: list[tuple[int, bool, str]] = []
        for draw in range(DRAWS):
            changed = corrupted({"output": ref}, how, draw)["output"]
            if not same(changed, ref):
                verdict = compare(declared, changed, ref, ids)
                verdicts.append((draw, bool(verdict["passed"]), str(verdict.get("summary", ""))[:200]))
        passed = [draw for draw, ok, _ in verdicts if ok]
        shown = next((said for _, ok, said in verdicts if ok), verdicts[0][2] if verdicts else "")
        results[how] = {"applies": bool(verdicts), "draws": len(verdicts), "passed_draws": passed, "summary": shown}
    return results


def tolerance_controls(
    compare: Callable[[dict[str, Any], Any, Any, list[str]], dict[str, Any]],
    declared: dict[str, Any],
    ref: Any,
    ids: list[str],
) -> dict[str, Any]:
    """Each declared tolerance of one output shown able to fail: ``compare`` (the compare step's own code) on the
    reference moved just past it must say not passed, and so on every draw of the corruptions a criterion must fail
    that changes the output (:func:`blind_to`). ``cannot_see``: the corruptions it passed in some draw.
    ``able_to_fail`` is False if any of them passed."""
    results: dict[str, Any] = {}
    for key, moved in moved_past(declared, ref).items():
        if moved is None:
            results[key] = {"failed_compare": False, "summary": "no finite value lies past this tolerance"}
            continue
        verdict = compare(declared, moved, ref, ids)
        results[key] = {"failed_compare": not verdict["passed"], "summary": str(verdict.get("summary", ""))[:200]}
    shown = blind_to(compare, declared, ref, ids) if np.asarray(ref).size else {}
    cannot_see = [how for how, r in shown.items() if r["passed_draws"]]
    able = all(r["failed_compare"] for r in results.values()) and not cannot_see
    return {"moved_past": results, "corruptions": shown, "cannot_see": cannot_see, "able_to_fail": able}
