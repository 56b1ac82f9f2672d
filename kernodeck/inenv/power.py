"""The criterion's power: what it must fail to count as able to fail (stdlib + numpy only; controls.py makes the
corruptions).

- Each REQUIRED corruption (rows permuted against their ids, noise of the outputs' own scale), in EVERY one of its
  ``DRAWS`` fixed-seed draws (:func:`_drawn`); the constant is recorded, not required.
- Half its rows wrong, the other half as they are. The changed rows are *real* rows: each takes the values of another
  row of the sample (the same donor in every output, so the outputs stay consistent with each other), so a criterion
  that first rejects rows that do not look like its outputs (unit vectors, probabilities) cannot tell them from the
  outputs (red-team pass 19, FP1). Two searches:
  - random halves (:func:`halves`): ``DRAWS`` fixed-seed splits, each half changed in turn;
  - a walk (:func:`walk`): the rows, in a fixed-seed order, gathered into one changed set as long as the criterion
    still passes, in chunks that double while it passes and halve where it fails; a row that fails alone with the
    gathered ones is one the criterion judges and is left out. A spot check of k rows (the first 4 of 8, ``[:5]`` of
    100) leaves every other row to gather, whatever the split (red-team pass 19, FP2); a criterion that judges every
    row fails the first rows tried and the walk stops after ``MISSES`` of them in a row.
  Passing either with ceil(n/2) rows changed means it judges only some rows. An aggregate that judges the sample
  (accuracy >= 0.75, a mean cosine similarity, R²) fails half its rows wrong, as does one that judges each row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .controls import CORRUPTIONS, DRAWS, REQUIRED, SEED, corrupted, mean_scale, same

Judge = Callable[[dict[str, Any]], tuple[bool, str]]
MISSES = 16  # rows in a row the walk finds judged before it stops: the criterion judges (nearly) every row


def judged(judge: Judge, outputs: dict[str, Any]) -> tuple[bool, str]:
    """The criterion's answer on ``outputs``; its own error on garbage counts as failed."""
    try:
        passed, summary = judge(outputs)
    except Exception as exc:  # the criterion's own error on garbage: it did not pass
        passed, summary = False, f"raised {type(exc).__name__}: {exc}"
    return bool(passed), " ".join(str(summary).split())[:200]


def _drawn(judge: Judge, outputs: dict[str, Any], how: str) -> dict[str, Any]:
    """The criterion on each draw of one corruption (DRAWS of a REQUIRED one, one of the constant). A draw that leaves
    every output bitwise unchanged (one row, or all rows equal) does not apply and is not counted. ``passed``: it
    passed at least one draw that applies (``passed_draws``), so it does not see this corruption reliably;
    ``summary``: its answer on the first such draw, else on the first draw."""
    verdicts: list[tuple[int, bool, str]] = []
    for draw in range(DRAWS if how in REQUIRED else 1):
        changed = corrupted(outputs, how, draw)
        if not all(same(changed[name], arr) for name, arr in outputs.items()):
            verdicts.append((draw, *judged(judge, changed)))
    if not verdicts:  # nothing to see: its answer on the unchanged outputs, for the record
        passed, summary = judged(judge, corrupted(outputs, how))
        return {"passed": passed, "summary": summary, "required": how in REQUIRED, "applies": False, "draws": 0,
                "failed_draws": 0, "passed_draws": []}
    passes = [draw for draw, passed, _ in verdicts if passed]
    summary = next((s for draw, _, s in verdicts if draw in passes), verdicts[0][2])
    return {"passed": bool(passes), "summary": summary, "required": how in REQUIRED, "applies": True,
            "draws": len(verdicts), "failed_draws": len(verdicts) - len(passes), "passed_draws": passes}


# --- half the rows wrong -----------------------------------------------------------------------------------------


def _row_bytes(arr: Any) -> Any:
    """Each row of ``arr`` as its bytes (rows compared bitwise: a NaN row equals itself)."""
    arr = np.ascontiguousarray(arr)
    return arr.view(np.uint8).reshape(arr.shape[0], -1) if arr.size else arr.reshape(arr.shape[0], 0)


def _donors(arrays: list[Any], rows: Any) -> Any:
    """For each of ``rows`` (in order), the row whose values it takes: the next of ``rows`` in a cycle (so the changed
    rows stay distinct: no row twice), where that one differs from it in every output; else the first row of the
    sample that does; -1 when none does (every row alike)."""
    keys = [_row_bytes(arr) for arr in arrays]
    n, k = keys[0].shape[0], len(rows)

    def differs(a: Any, b: Any) -> Any:
        return np.logical_and.reduce([(key[a] != key[b]).any(axis=1) for key in keys])

    donors = np.roll(rows, -1) if k > 1 else np.full(k, -1)
    ok = differs(rows, donors) if k > 1 else np.zeros(k, dtype=bool)
    for at in np.flatnonzero(~ok):
        row = rows[at]
        others = np.concatenate([np.roll(rows, -s)[at:at + 1] for s in range(2, k)] + [np.arange(n)])
        fits = others[differs(np.full(len(others), row), others)] if len(others) else others
        donors[at] = fits[0] if len(fits) else -1
    return donors


def _other_values(arr: Any, rows: Any, rng: Any) -> Any:
    """``arr[rows]`` given values of no other row where the sample has none to lend (every row alike): a float row
    noise of the output's own mean and spread, every value of an integer row another value of the output's own (one
    more where it has a single one), a bool flipped."""
    if arr.dtype == np.bool_:
        return ~arr[rows]
    if np.issubdtype(arr.dtype, np.integer):
        values = np.unique(arr)
        if values.size < 2:
            values = np.array([values[0], values[0] - 1 if values[0] == np.iinfo(arr.dtype).max else values[0] + 1])
        picked = arr[rows]
        at = np.searchsorted(values, picked)  # each value's place among the output's values: moved 1..k-1 on
        return values[(at + rng.integers(1, values.size, size=picked.shape)) % values.size]
    mean, scale = mean_scale(arr)
    return (mean + scale * rng.standard_normal(arr[rows].shape)).astype(arr.dtype)


def replaced(outputs: dict[str, Any], chosen: dict[str, Any], rng: Any) -> dict[str, Any]:
    """``outputs`` with the rows ``chosen[name]`` of each output made wrong, the rest as they are: each takes the
    values of its donor row (:func:`_donors`, one donor for every output of the same number of rows), or other values
    where no row can lend (:func:`_other_values`)."""
    arrays = {name: np.asarray(arr) for name, arr in outputs.items()}
    out = {name: arr.copy() for name, arr in arrays.items()}
    groups: dict[int, list[str]] = {}
    for name, arr in arrays.items():
        if arr.ndim and len(chosen[name]):
            groups.setdefault(arr.shape[0], []).append(name)
    for names in groups.values():
        rows = np.asarray(chosen[names[0]], dtype=np.intp)
        donors = _donors([arrays[name] for name in names], rows)
        lent = donors >= 0
        for name in names:
            arr = arrays[name]
            out[name][rows[lent]] = arr[donors[lent]]
            if not lent.all():
                out[name][rows[~lent]] = _other_values(arr, rows[~lent], rng)
    return out


def halves(outputs: dict[str, Any], split: int) -> list[dict[str, Any]]:
    """Split ``split`` of the rows in two halves (a fixed-seed shuffle, cut in the middle; of an odd number of rows
    each half holds ceil(n/2), the middle row in both), and the outputs with each half made wrong (:func:`replaced`),
    the other half as it is: the same rows of every output (an output of fewer than two rows is left as it is: no
    half of it leaves a row alone)."""
    shown: list[dict[str, Any]] = []
    rng = np.random.default_rng(SEED + split)
    for part in range(2):
        chosen = {}
        for name, arr in outputs.items():
            rows = np.asarray(arr).shape[0] if np.asarray(arr).ndim else 0
            order = np.random.default_rng(SEED + split).permutation(rows)
            # each part holds ceil(n/2) rows (an odd sample's two parts share one): "half its rows wrong" is true of
            # both, so a majority criterion on 5 rows is not refused as judging only some (red-team pass 19 FF3)
            half = (rows + 1) // 2
            chosen[name] = np.sort(order[:half] if part == 0 else order[rows - half:]) if rows > 1 else order[:0]
        shown.append(replaced(outputs, chosen, rng))
    return shown


def _rows_seen(judge: Judge, outputs: dict[str, Any]) -> dict[str, Any]:
    """The criterion on each half of each of :data:`DRAWS` splits of the rows (:func:`halves`). ``passed``: it passed
    a half that changes something (``passed_halves``: ``[split, half]``)."""
    verdicts: list[tuple[list[int], bool, str]] = []
    for split in range(DRAWS):
        for part, changed in enumerate(halves(outputs, split)):
            if not all(same(changed[name], arr) for name, arr in outputs.items()):
                verdicts.append(([split, part], *judged(judge, changed)))
    passes = [where for where, passed, _ in verdicts if passed]
    summary = next((s for _, passed, s in verdicts if passed), verdicts[0][2] if verdicts else "")
    return {"passed": bool(passes), "summary": summary, "applies": bool(verdicts), "halves": len(verdicts),
            "failed_halves": len(verdicts) - len(passes), "passed_halves": passes}


def walk(judge: Judge, outputs: dict[str, Any]) -> dict[str, Any]:
    """The rows the criterion does not judge, gathered (see the module's docstring): ``passed``: it passed with
    ``changed`` of its ``rows`` rows made wrong, at least ceil(n/2) (``changed_rows``, the indices; ``summary``, its
    answer then); ``judged_rows``: the rows it failed on alone with the gathered ones; ``calls``: the criterion's
    calls. Applies to outputs of one number of rows, at least two."""
    sizes = {np.asarray(arr).shape[0] if np.asarray(arr).ndim else 0 for arr in outputs.values()}
    rows = sizes.pop() if len(sizes) == 1 else 0
    record: dict[str, Any] = {"applies": rows > 1, "passed": False, "rows": rows, "changed": 0, "changed_rows": [],
                              "judged_rows": [], "calls": 0, "summary": ""}
    if rows < 2:
        return record
    order = np.random.default_rng(SEED).permutation(rows).tolist()
    rng = np.random.default_rng(SEED)
    need = (rows + 1) // 2
    gathered: list[int] = []
    judged_rows: list[int] = []
    at, size, misses = 0, 2, 0
    while len(gathered) < need and misses < MISSES and len(gathered) + rows - at >= need:
        chunk = order[at:at + max(1, min(size, need - len(gathered)))]
        changed = replaced(outputs, {name: sorted(gathered + chunk) for name in outputs}, rng)
        passed, said = judged(judge, changed)
        record["calls"] += 1
        if passed:
            gathered, at, size, misses, record["summary"] = gathered + chunk, at + len(chunk), 2 * len(chunk), 0, said
            continue
        # a failure with nothing gathered yet, or of one row alone, is a miss: a criterion judging every row misses
        # MISSES times in a row (a spot check of a few rows seldom does)
        misses += 1 if len(chunk) == 1 or not gathered else 0
        if len(chunk) > 1:
            size = len(chunk) // 2
        else:  # this row is judged; with nothing gathered, the next try is a pair again (two rows swap values)
            judged_rows.append(chunk[0])
            at, size = at + 1, 1 if gathered else 2
    record.update(passed=len(gathered) >= need, changed=len(gathered), changed_rows=sorted(gathered),
                  judged_rows=sorted(judged_rows))
    if not record["passed"]:
        record["summary"] = ""
    return record


def criterion_controls(judge: Judge, outputs: dict[str, Any]) -> dict[str, Any]:
    """Run ``judge`` (the criterion: outputs -> (passed, summary)) on each draw of each corruption of ``outputs``,
    on the halves of its rows and along the walk.

    A corruption the criterion raises on counts as failed (it did not say passed). ``failed``: the corruptions it
    failed in every draw; ``cannot_see``: the REQUIRED corruptions it passed in at least one draw that applies (one
    that leaves every output bitwise unchanged, e.g. one row permuted, does not apply; a corruption none of whose
    draws applies is not required). ``able_to_fail``: it failed at least one corruption, cannot_see is empty, and it
    passed neither a half nor the walk's gathered rows.
    """
    def unchanged(when: str) -> str:
        """Why the criterion did not pass ``outputs`` themselves ("" when it did)."""
        try:
            passed, summary = judge(outputs)
        except Exception as exc:
            return f"{when}, it raised {type(exc).__name__}: {exc}"
        return "" if passed else f"{when}, it failed them ({' '.join(str(summary).split())[:200]})"

    # The uncorrupted outputs, before and after the corruptions: a criterion that does not pass them both times
    # (state kept between calls, arguments changed in place, randomness) fails the corruptions for another reason
    # than their content, and its failures prove nothing.
    inconsistent = unchanged("judged again before the corruptions")
    results = {how: _drawn(judge, outputs, how) for how in CORRUPTIONS}
    rows = _rows_seen(judge, outputs)
    walked = walk(judge, outputs)
    inconsistent = inconsistent or unchanged("judged again after the corruptions")
    failed = [how for how, r in results.items() if not r["passed"]]
    cannot_see = [how for how in REQUIRED if results[how]["applies"] and results[how]["passed"]]
    able = bool(failed) and not cannot_see and not inconsistent and not rows["passed"] and not walked["passed"]
    return {"corruptions": results, "failed": failed, "cannot_see": cannot_see, "inconsistent": inconsistent,
            "rows": rows, "walk": walked, "able_to_fail": able}
