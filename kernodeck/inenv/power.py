"""The criterion's power: what it must fail to count as able to fail (stdlib + numpy only; controls.py makes the
corruptions).

- Each REQUIRED corruption (rows permuted against their ids, noise of the outputs' own scale), in EVERY one of its
  ``DRAWS`` fixed-seed draws (:func:`_drawn`); the constant is recorded, not required.
- Half its rows wrong, the other half as they are. The changed rows are *real* rows: each takes the values of another
  row of the sample (the same donor in every output, so the outputs stay consistent with each other), the farthest
  from it of those that differ from it in every output not alike on every row (:class:`Rows`): a criterion that
  first rejects rows that do not look like its outputs (unit vectors, probabilities) cannot tell them from the
  outputs (red-team pass 19, FP1), and a classifier's changed row takes a row of the other class, whatever output
  tells the class (passes 20 FF9, 21 FF1). Two searches:
  - random halves (:func:`halves`): ``DRAWS`` fixed-seed splits, each half changed in turn;
  - a search by blocks (:func:`search`): the rows, in a fixed-seed order, cut in two blocks, each changed alone; a
    block the criterion passes is loose, one it fails is cut in two again, down to single rows (the rows it judges),
    for at most ``BUDGET`` calls. Then every loose row is changed at once: a spot check of k rows (the first 4 of 8,
    ``[:5]`` of 100) passes that, whatever the split (pass 19, FP2). An aggregate with a threshold fails it (each
    block it passed was a part of what it tolerates; all of them together are not), and a binary classifier's rows
    it had wrong, which a change makes right, are changed together with the others (pass 20, FF4).
  Passing a half, or the loose rows when they are at least ceil(n/2), means it does not judge every row. An
  aggregate that judges the sample (accuracy >= 0.75, a mean cosine similarity, R²) fails half its rows changed, as
  does one that judges each row. Limits (docs/verdict-rules.md): a criterion that checks each row against its own
  input (a tagger's tags end where the sentence ends) rejects every moved row; one that refuses repeated rows sees
  the repeats; a spot check of a share of a large sample that the budget cannot sort out is not seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .controls import CORRUPTIONS, DRAWS, REQUIRED, SEED, corrupted, mean_scale, same

Judge = Callable[[dict[str, Any]], tuple[bool, str]]
BUDGET = 256  # the search's calls of the criterion at most
UNLIKELY = 1e-3  # the chance, at most, that every block of a level fails a criterion ignoring half the rows


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


class Rows:
    """The outputs of one number of rows, ready to have rows made wrong: each output's rows as codes (equal rows, equal
    code: rows compared bitwise), a float output's class as a classifier would read it (argmax, or sign), and all
    outputs' values standardised side by side (for how far apart two rows are). A code alike on every row is left
    out (a flag, a count: no row differs in it)."""

    POOL = 256  # donors weighed per changed row at most (a fixed-seed pool of the sample beyond that)

    def __init__(self, arrays: dict[str, Any]) -> None:
        self.arrays = arrays
        first = next(iter(arrays.values()))
        self.n = int(first.shape[0])
        self.codes = []
        parts = []
        for arr in arrays.values():
            flat = np.ascontiguousarray(arr).reshape(self.n, -1)
            if np.iscomplexobj(flat):
                flat = flat.view(flat.real.dtype)
            codes = np.unique(flat.view(np.uint8).reshape(self.n, -1), axis=0, return_inverse=True)[1].reshape(-1)
            values = np.nan_to_num(flat.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
            # what a float row decides, as a classifier's would: its argmax (logits, probabilities), or its sign (a
            # score): a donor of another class, not one of the same class that leaves the item right (pass 21, FF1)
            classes = [values.argmax(axis=1) if flat.shape[1] > 1 else (values[:, 0] > 0).astype(np.intp)] \
                if flat.dtype.kind in "fc" and flat.shape[1] else []
            for each in (codes, *classes):
                if each.min(initial=0) != each.max(initial=0):  # alike on every row: no one's to differ in (20, FP2)
                    self.codes.append(each)
            spread = values.std(axis=0)
            parts.append((values - values.mean(axis=0)) / np.where(spread > 0, spread, 1.0) / np.sqrt(flat.shape[1]))
        self.values = np.concatenate(parts, axis=1) if parts else np.zeros((self.n, 0))

    def donors(self, rows: Any) -> Any:
        """For each of ``rows``, the row whose values it takes: of the rows of the sample, one that differs from it in
        the most codes (each output's rows, and a float output's argmax or sign: a classifier's row of another class,
        whether labels, logits, probabilities or a score tell the class: red-team passes 20 FF9 and 21 FF1), the
        farthest of those (a regression's value at the other end); -1 where no row differs from it. Rows may repeat a
        row of the sample (a criterion that refuses repeated rows sees that: pass 20 FP11, a stated limit)."""
        rows = np.asarray(rows, dtype=np.intp)
        donors = np.full(len(rows), -1, dtype=np.intp)
        if not self.codes or not len(rows):
            return donors
        pool = np.arange(self.n) if self.n <= self.POOL else np.sort(
            np.random.default_rng(SEED).choice(self.n, self.POOL, replace=False))
        for start in range(0, len(rows), self.POOL):
            part = rows[start:start + self.POOL]
            differing = np.add.reduce([codes[part][:, None] != codes[pool][None, :] for codes in self.codes])
            a, b = self.values[part], self.values[pool]
            far = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2 * a @ b.T  # squared distances
            # the most codes differing first, then the farthest: distances squeezed below 1 break the ties only
            scored = np.where(differing > 0, differing + np.clip(far, 0, None) / (1.0 + np.clip(far, 0, None).max()),
                              -1.0)
            best = scored.argmax(axis=1)
            found = scored[np.arange(len(part)), best] >= 0
            donors[start:start + len(part)][found] = pool[best[found]]
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


def groups(outputs: dict[str, Any]) -> list[Rows]:
    """The outputs grouped by their number of rows (two rows at least), each group a :class:`Rows`."""
    by_rows: dict[int, dict[str, Any]] = {}
    for name, arr in outputs.items():
        arr = np.asarray(arr)
        if arr.ndim and arr.shape[0] > 1:
            by_rows.setdefault(arr.shape[0], {})[name] = arr
    return [Rows(arrays) for arrays in by_rows.values()]


def replaced(outputs: dict[str, Any], chosen: dict[int, Any], grouped: list[Rows], rng: Any) -> dict[str, Any]:
    """``outputs`` with the rows ``chosen[n]`` of each output of ``n`` rows made wrong, the rest as they are: each
    takes its donor's values (:meth:`Rows.donors`, one donor for every output of the group, so they stay consistent
    with each other), or other values where no row can lend (:func:`_other_values`)."""
    out = {name: np.asarray(arr).copy() for name, arr in outputs.items()}
    for group in grouped:
        rows = np.asarray(chosen.get(group.n, []), dtype=np.intp)
        if not len(rows):
            continue
        donors = group.donors(rows)
        lent = donors >= 0
        for name, arr in group.arrays.items():
            out[name][rows[lent]] = arr[donors[lent]]
            if not lent.all():
                out[name][rows[~lent]] = _other_values(arr, rows[~lent], rng)
    return out


def halves(outputs: dict[str, Any], split: int, grouped: list[Rows] | None = None) -> list[dict[str, Any]]:
    """Split ``split`` of the rows in two halves (a fixed-seed shuffle, cut in the middle; of an odd number of rows
    each half holds ceil(n/2), the middle row in both), and the outputs with each half made wrong (:func:`replaced`),
    the other half as it is: the same rows of every output (an output of fewer than two rows is left as it is: no
    half of it leaves a row alone)."""
    grouped = groups(outputs) if grouped is None else grouped
    rng = np.random.default_rng(SEED + split)
    shown: list[dict[str, Any]] = []
    for part in range(2):
        chosen = {}
        for group in grouped:
            order = np.random.default_rng(SEED + split).permutation(group.n)
            # each part holds ceil(n/2) rows (an odd sample's two parts share one): "half its rows wrong" is true of
            # both, so a majority criterion on 5 rows is not refused as judging only some (red-team pass 19 FF3)
            half = (group.n + 1) // 2
            chosen[group.n] = np.sort(order[:half] if part == 0 else order[group.n - half:])
        shown.append(replaced(outputs, chosen, grouped, rng))
    return shown


def _rows_seen(judge: Judge, outputs: dict[str, Any], grouped: list[Rows] | None = None) -> dict[str, Any]:
    """The criterion on each half of each of :data:`DRAWS` splits of the rows (:func:`halves`). ``passed``: it passed
    a half that changes something (``passed_halves``: ``[split, half]``)."""
    verdicts: list[tuple[list[int], bool, str]] = []
    for split in range(DRAWS):
        for part, changed in enumerate(halves(outputs, split, grouped)):
            if not all(same(changed[name], arr) for name, arr in outputs.items()):
                verdicts.append(([split, part], *judged(judge, changed)))
    passes = [where for where, passed, _ in verdicts if passed]
    summary = next((s for _, passed, s in verdicts if passed), verdicts[0][2] if verdicts else "")
    return {"passed": bool(passes), "summary": summary, "applies": bool(verdicts), "halves": len(verdicts),
            "failed_halves": len(verdicts) - len(passes), "passed_halves": passes}


def _everywhere(blocks: int, size: int) -> bool:
    """Every one of ``blocks`` blocks of ``size`` rows or more failed: so unlikely for a criterion that ignores half
    the rows (each block then passes with chance 2^-size or more) that the search may stop: (1 - 2^-size)^blocks is
    below :data:`UNLIKELY`."""
    return bool(blocks * math.log1p(-(0.5 ** size)) < math.log(UNLIKELY))


def search(judge: Judge, outputs: dict[str, Any], grouped: list[Rows] | None = None) -> dict[str, Any]:
    """The rows the criterion does not judge (see the module's docstring): ``passed``: it passed with every such row
    (``changed`` of its ``rows``, at least ceil(n/2); ``changed_rows``) made wrong at once (``summary``, its answer);
    ``judged_rows``: the rows it failed on alone; ``calls``: the criterion's calls; ``stopped``: "everywhere" where
    every block of a level failed, too many to be chance (:func:`_everywhere`), "calls" where BUDGET was spent
    before every block was sorted out (the loose rows found so far then decide). Applies to outputs
    of one number of rows, at least two."""
    grouped = groups(outputs) if grouped is None else grouped
    rows = grouped[0].n if len(grouped) == 1 and all(np.asarray(a).ndim for a in outputs.values()) else 0
    record: dict[str, Any] = {"applies": rows > 1, "passed": False, "rows": rows, "changed": 0, "changed_rows": [],
                              "judged_rows": [], "calls": 0, "summary": "", "stopped": ""}
    if rows < 2:
        return record
    rng = np.random.default_rng(SEED)

    def passes(chosen: list[int]) -> tuple[bool, str]:
        record["calls"] += 1
        return judged(judge, replaced(outputs, {rows: sorted(chosen)}, grouped, rng))

    order = np.random.default_rng(SEED).permutation(rows).tolist()
    blocks = [order[: rows // 2], order[rows // 2:]]  # the whole sample changed is the permuted corruption's work
    loose: list[int] = []
    while blocks and not record["stopped"]:
        failing = []
        for block in blocks:
            if record["calls"] >= BUDGET:
                record["stopped"] = "calls"
                break
            if passes(block)[0]:
                loose += block
            elif len(block) == 1:
                record["judged_rows"].append(block[0])
            else:
                failing.append(block)
        if failing and len(failing) == len(blocks) and _everywhere(len(blocks), min(len(b) for b in blocks)):
            record["stopped"] = "everywhere"
        blocks = [half for block in failing for half in (block[: len(block) // 2], block[len(block) // 2:])]
    if len(loose) >= (rows + 1) // 2:
        passed, said = passes(loose)
        record.update(passed=passed, summary=said if passed else "")
    record.update(changed=len(loose), changed_rows=sorted(loose), judged_rows=sorted(record["judged_rows"]))
    return record


def criterion_controls(judge: Judge, outputs: dict[str, Any]) -> dict[str, Any]:
    """Run ``judge`` (the criterion: outputs -> (passed, summary)) on each draw of each corruption of ``outputs``,
    on the halves of its rows and in the search by blocks.

    A corruption the criterion raises on counts as failed (it did not say passed). ``failed``: the corruptions it
    failed in every draw; ``cannot_see``: the REQUIRED corruptions it passed in at least one draw that applies (one
    that leaves every output bitwise unchanged, e.g. one row permuted, does not apply; a corruption none of whose
    draws applies is not required). ``able_to_fail``: it failed at least one corruption that applies (or, where
    none applies, every half), cannot_see is empty, and it passed neither a half nor the search's loose rows.
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
    grouped = groups(outputs)
    rows = _rows_seen(judge, outputs, grouped)
    found = search(judge, outputs, grouped)
    inconsistent = inconsistent or unchanged("judged again after the corruptions")
    failed = [how for how, r in results.items() if not r["passed"] and r["applies"]]
    cannot_see = [how for how in REQUIRED if results[how]["applies"] and results[how]["passed"]]
    # what shows it able to fail: a corruption that applies, failed in every draw, or every half failed (a sample of
    # one class: no corruption changes it, its halves do; red-team pass 20, FF5)
    evidence = bool(failed) or (rows["applies"] and not rows["passed"])
    able = evidence and not cannot_see and not inconsistent and not rows["passed"] and not found["passed"]
    return {"corruptions": results, "failed": failed, "cannot_see": cannot_see, "inconsistent": inconsistent,
            "rows": rows, "search": found, "able_to_fail": able}
