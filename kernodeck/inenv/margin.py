"""The margin of use of each output, searched inside the rebuilt env: the smallest perturbation of the reference
outputs that makes the application's criterion fail, and the numbers both sides of the wall measure with.

Gaussian noise scaled by bisection on a fixed seed for float outputs; rows changed for label outputs. Every candidate
is measured with ``numbers`` (the distances of ``tolerance.compare``'s verdict), the way calibrate measures the
noise of each variation and drift each pair of dossiers. Run by calibrate.py's first variation, which has the
reference and the criterion loaded anyway.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from . import application, tolerance
from ._common import progress, set_step
from .arrays import _np
from .kinds import get

SEED = 20260  # the fixed seed of every perturbation: the same direction in every run
GRID = 10.0  # the coarse search multiplies the scale by this until the criterion fails
FIRST_SCALE = 1e-9  # in units of the output's RMS: below float32's resolution
LAST_SCALE = 1e3  # 1000x the output's RMS: no legitimate use survives it; past it "no margin found"
BISECTIONS = 24  # halvings of the log-bracket after the coarse search (bracket ratio < 1.0002)


# --- the numbers of one output against its reference (noise and margin alike) ---------------------------------------


def numbers(verdict: dict[str, Any]) -> dict[str, float]:
    """The distances a verdict of ``tolerance.compare`` holds, each growing with the difference (0 = equal)."""
    found = get(verdict.get("kind")).numbers(verdict)  # the kind's own (kinds.py)
    return {"unmeasurable": 1.0} if found is None else found  # a shape or a non-finite value: no distance


# --- perturbations ---------------------------------------------------------------------------------------------------


def is_float(arr: Any) -> bool:
    import numpy as np

    return bool(np.issubdtype(arr.dtype, np.inexact))


def direction(ref: Any, seed: int = SEED) -> Any:
    """Fixed-seed Gaussian noise, one value per element, in units of the reference's RMS (float64)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rms = float(np.sqrt(np.mean(np.square(ref.astype(np.float64))))) if ref.size else 1.0
    return rng.standard_normal(ref.shape) * (rms if rms > 0 else 1.0)


def add_noise(ref: Any, noise: Any, scale: float) -> Any:
    """The reference plus ``scale`` times the noise, in the reference's dtype (what a run would have written)."""
    np = _np()
    return (ref.astype(np.float64) + scale * noise).astype(ref.dtype)


def change_rows(ref: Any, count: int, seed: int = SEED) -> Any:
    """``count`` rows (chosen by a fixed-seed permutation) given another value from the reference's own values."""
    np = _np()
    out = ref.copy()
    rows = np.random.default_rng(seed).permutation(ref.shape[0])[:count]
    values = np.unique(ref)
    for row in rows:
        if ref.dtype == np.bool_:
            out[row] = ~ref[row]
            continue
        current = ref[row]
        if values.size > 1:
            index = np.searchsorted(values, current.reshape(-1)[0])
            out[row] = values[(index + 1) % values.size]
        else:
            out[row] = current + 1
    return out


def resolution(ref: Any) -> Any:
    """The smallest change the dtype can express: one unit in the last place up (float), one row changed (labels)."""
    np = _np()
    if is_float(ref):
        return np.nextafter(ref, np.array(np.inf, dtype=ref.dtype))
    return change_rows(ref, 1)


def top1(arr: Any) -> Any:
    np = _np()
    return np.argmax(arr.reshape(arr.shape[0], -1), axis=1)


def top1_worst_case(ref: Any) -> Any:
    """The smallest change that flips a row's top-1 column: in the row whose lead is smallest, the leader lowered and
    the runner-up raised by just over half the lead each (the worst case random noise rarely finds)."""
    np = _np()
    rows = ref.reshape(ref.shape[0], -1).astype(np.float64)
    order = np.argsort(rows, axis=1)
    first, second = order[:, -1], order[:, -2]
    lead = rows[np.arange(rows.shape[0]), first] - rows[np.arange(rows.shape[0]), second]
    row = int(np.argmin(lead))
    step = lead[row] / 2 * (1 + 1e-6) + float(np.spacing(np.abs(rows[row]).max()))
    out = rows.copy()
    out[row, first[row]] -= step
    out[row, second[row]] += step
    return out.reshape(ref.shape).astype(ref.dtype)


def bisect_scale(
    fails: Callable[[float], bool], *, first: float = FIRST_SCALE, bisections: int = BISECTIONS
) -> dict[str, Any]:
    """The smallest noise scale at which ``fails`` holds: a coarse x10 search from ``first``, then ``bisections``
    halvings of the bracket in log space.

    ``fails(0)`` must be False (checked by the caller). Returns the bracket ``passes``/``fails`` (None: not found
    up to LAST_SCALE) and how many evaluations it took.
    """
    passes, scale, calls = 0.0, first, 0
    while scale <= LAST_SCALE:
        calls += 1
        if fails(scale):
            break
        passes, scale = scale, scale * GRID
    else:
        return {"passes": passes, "fails": None, "evaluations": calls}
    low, high = (passes if passes > 0 else scale / GRID), scale
    for _ in range(bisections):
        mid = math.sqrt(low * high)
        calls += 1
        if fails(mid):
            high = mid
        else:
            low = mid
    return {"passes": low, "fails": high, "evaluations": calls}


def bisect_rows(fails: Callable[[int], bool], rows: int) -> dict[str, Any]:
    """The smallest number of changed rows at which ``fails`` holds (binary search), or None up to every row."""
    calls = 1
    if not fails(rows):
        return {"passes": rows, "fails": None, "evaluations": calls}
    low, high = 0, rows
    while high - low > 1:
        mid = (low + high) // 2
        calls += 1
        if fails(mid):
            high = mid
        else:
            low = mid
    return {"passes": low, "fails": high, "evaluations": calls}


def margin_of(
    name: str,
    declared: dict[str, Any],
    refs: dict[str, Any],
    ids: list[str],
    use: Callable[[dict[str, Any]], bool] | None,
    *,
    stand_in: bool = True,
    first: float = FIRST_SCALE,
    bisections: int = BISECTIONS,
) -> dict[str, Any]:
    """The margin of use of one output: the smallest perturbation of its reference that ``use`` rejects.

    ``use(outputs)`` is True when the outputs still serve (the application's criterion); the other outputs stay at
    their reference. A float output whose criterion never reacts falls back to a stand-in (unless ``stand_in`` is
    False: the criterion's own power is measured): the top-1 column of each row unchanged (the decision a label would
    be derived from), said so in ``test``. ``first`` and ``bisections``: where the noise search starts and how finely
    it brackets (:func:`bisect_scale`).
    """
    ref = refs[name]
    record: dict[str, Any] = {"output": name, "kind": declared["kind"], "seed": SEED, "rows": int(ref.shape[0])}

    def judged(test: Callable[[dict[str, Any]], bool]) -> Callable[[Any], bool]:
        def fails(candidate: Any) -> bool:
            try:
                return not test({**refs, name: candidate})
            except Exception:  # a criterion that breaks on the perturbed output rejects it
                return True

        return fails

    tests: list[tuple[str, Callable[[dict[str, Any]], bool]]] = []
    if use is not None:
        tests.append(("the application's criterion", use))
    if stand_in and is_float(ref) and ref.ndim == 2 and ref.shape[1] > 1:
        base = top1(ref)
        tests.append(
            (
                "stand-in: the top-1 column of each row unchanged (no criterion reacts to this output)",
                lambda outs: bool((top1(outs[name]) == base).all()),
            )
        )
    record["resolution"] = numbers(tolerance.compare(declared, resolution(ref), ref, ids))
    for test_name, test in tests:
        fails_at = judged(test)
        if fails_at(ref):
            record.update(test=test_name, found=False, why="the reference outputs themselves fail this test")
            return record
        noise = direction(ref) if is_float(ref) else None

        def make(amount: float, noise: Any = noise) -> Any:
            return add_noise(ref, noise, amount) if noise is not None else change_rows(ref, int(amount))

        if noise is not None:
            search = bisect_scale(lambda s, f=fails_at: f(make(s)), first=first, bisections=bisections)
            unit = "scale of added Gaussian noise, in units of the reference's RMS"
        else:
            search = bisect_rows(lambda k, f=fails_at: f(make(k)), ref.shape[0])
            unit = "rows given another label"
        if search["fails"] is None:
            record.setdefault("not_found", []).append(f"{test_name}: still passes at {search['passes']} ({unit})")
            continue
        record.update(
            test=test_name,
            found=True,
            perturbation=unit,
            search=search,
            fails=numbers(tolerance.compare(declared, make(search["fails"]), ref, ids)),
            passes=numbers(tolerance.compare(declared, make(search["passes"]), ref, ids)),
        )
        if test_name.startswith("stand-in"):
            worst = top1_worst_case(ref)
            if fails_at(worst):  # a smaller change than random noise needs: each number the smaller of the two
                record["worst_case"] = numbers(tolerance.compare(declared, worst, ref, ids))
                record["fails"] = {k: min(v, record["worst_case"].get(k, v)) for k, v in record["fails"].items()}
                record["perturbation"] += "; and the worst case: the smallest top-1 lead closed (whichever is smaller)"
        return record
    record.update(found=False, why="; ".join(record.get("not_found", [])) or "no test of use applies to this output",
                  test="; ".join(test_name for test_name, _ in tests))
    return record


def margins(ctx: Any) -> dict[str, Any]:
    """Each declared output's margin of use under the application's criterion (on the reference outputs)."""
    set_step("margin")
    cfg = ctx.config["application"]
    items = application.sample(ctx)
    ids = [str(i["id"]) for i in items]
    use = None
    if cfg.get("criterion"):
        func = application.criterion_function(ctx)
        params = dict(cfg.get("params") or {})

        def use(outputs: dict[str, Any]) -> bool:
            copies = {k: v.copy() for k, v in outputs.items()}
            return bool(func(copies, list(ids), [dict(r) for r in items], dict(params))["passed"])

    refs = dict(ctx.state["reference"])
    found = {}
    for name, decl in cfg["outputs"].items():
        progress(f"searching the margin of use of {name}")
        start = time.perf_counter()
        found[name] = margin_of(name, decl, refs, ids, use)
        found[name]["seconds"] = round(time.perf_counter() - start, 3)
    np = _np()
    stats = {
        name: {"max_abs_value": float(np.abs(arr.astype(np.float64)).max()) if arr.size else 0.0,
               "rows": int(arr.shape[0]), "dtype": str(arr.dtype), "shape": list(arr.shape)}
        for name, arr in refs.items()
    }
    return {"outputs": found, "reference": stats, "criterion": bool(use)}
