"""The bisect's record: one :class:`TrialRecord` per env tried, and ``bisect.md`` (:func:`render`) and
``bisect.json`` (:func:`summary`) from them and the search's result (:mod:`kernodeck.upgrade.bisect`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, assert_never

from kernodeck.lock import lockdiff
from kernodeck.upgrade.bisect_search import Group, Outcome, SearchResult, Verdict, bound, rerun_words
from kernodeck.upgrade.relock import Drift, cell, render_drift


@dataclass
class TrialRecord:
    number: int
    moved: tuple[str, ...]  # the names whose pins came from the new lock
    outcome: Outcome
    seconds: float
    note: str
    drift: Drift | None
    rebuilt: bool = True  # False: the platform's current env was the new lock's, or env_of's, used as it is
    rerun: Outcome | None = None  # a failure before the comparison is run once more in the same env: its outcome
    repeat_of: int | None = None  # the trial (number) this one repeats, to confirm an outcome that decides
    env_of: int | None = None  # the earlier trial (same lock) whose kept env this one ran in, checked against the lock


def repeats(records: list[TrialRecord]) -> list[dict[str, Any]]:
    """The trials run more than once to confirm the answer: each with its repeats' numbers and every outcome."""
    out: list[dict[str, Any]] = []
    for first in records:
        again = [r for r in records if r.repeat_of == first.number]
        if again:
            out.append({"trial": first.number, "moved": list(first.moved), "repeats": [r.number for r in again],
                        "outcomes": [str(r.outcome) for r in [first, *again]]})
    return out


def summary(result: SearchResult, groups: list[Group], records: list[TrialRecord], platform: str,
            numbers: list[int], d: lockdiff.LockDiff) -> dict[str, Any]:
    """bisect.json's content; ``numbers``: the record number of each of the search's trials, in order; ``d``: the
    diff it bisected, whose locks' body digests name the upgrade it belongs to (the relock pull request's row)."""
    return {
        "version": 1, "platform": platform, "verdict": str(result.verdict),
        "body_digest": {"good": d.old.body_digest, "bad": d.new.body_digest},
        "culprit": [list(groups[i].names) for i in result.culprit], "alone": result.alone,
        "candidates": [list(groups[i].names) for i in result.candidates], "envs": len(records),
        "rebuilds": sum(r.rebuilt for r in records),
        "bound": bound(max(len(groups), 1)),
        "groups": [list(g.names) for g in groups],
        "repeated": repeats(records),
        "clash": [numbers[i] for i in result.clash] if result.clash else None,
        "trials": [{"number": r.number, "moved": list(r.moved), "outcome": str(r.outcome),
                    "seconds": round(r.seconds, 2), "note": r.note, "rebuilt": r.rebuilt,
                    "rerun": str(r.rerun) if r.rerun else None, "repeat_of": r.repeat_of,
                    "env_of": r.env_of} for r in records],
    }


def render(result: SearchResult, groups: list[Group], records: list[TrialRecord], d: lockdiff.LockDiff,
           platform: str, numbers: list[int] | None = None) -> str:
    """The bisect's report: the verdict, the culprit with its numbers, and every env tried; ``numbers`` as for
    :func:`summary` (default: the search's trials are the records, in order)."""
    numbers = numbers if numbers is not None else [r.number for r in records]
    lines = [f"## Bisect of {platform}", "",
             f"From `{d.old.label}` to `{d.new.label}`: {len(d.changes)} changed packages in {len(groups)} groups; "
             f"{len(records)} env(s) tried, {sum(r.rebuilt for r in records)} rebuilt (bound for one culprit: "
             f"{bound(max(len(groups), 1))} trials, the repeats that confirm it included).", ""]
    clash = [numbers[i] for i in result.clash] if result.clash else []
    by_number = {r.number: r for r in records}
    match result.verdict:
        case Verdict.FOUND:
            names = " + ".join(groups[i].label() for i in result.culprit)
            wanted = {n for i in result.culprit for n in groups[i].names}
            culprit_record = next((r for r in records if set(r.moved) == wanted), None)
            effect = ("the application fails" if culprit_record and culprit_record.outcome is Outcome.FAILED
                      else "it leaves the tolerance")
            how = {True: f"alone, on the old lock, {effect}",
                   False: "it leaves the tolerance with the changes before it in the search, not alone",
                   None: "alone it could not be installed consistently"}[result.alone]
            lines.append(f"**Culprit: {names}** ({how}).")
            if culprit_record and culprit_record.drift:
                lines += ["", render_drift(culprit_record.drift, title="The culprit alone against the reference")]
        case Verdict.NO_CULPRIT:
            lines.append("No culprit: all within tolerance (the new lock's env computes what the reference did).")
        case Verdict.NO_CHANGES:
            lines.append("No culprit: the two locks pin the same packages.")
        case Verdict.BAD_UNBUILDABLE:
            lines.append("The new lock's env itself could not be built: nothing to bisect (see try-01).")
        case Verdict.AMBIGUOUS:
            among = "; ".join(groups[i].label() for i in result.candidates)
            lines.append(f"Ambiguous: skipped (inconsistent) combinations leave the culprit among: {among}.")
        case Verdict.OVER_BUDGET:
            lines.append("Stopped: the search used its budget of rebuilds before isolating a culprit.")
        case Verdict.FLAKY if clash:
            a, b = by_number[clash[0]], by_number[clash[1]]
            lines.append(f"Stopped, no culprit named: trial {a.number} gave {a.outcome} then its repeat, trial "
                         f"{b.number}, gave {b.outcome} (the same pins). An outcome that does not repeat says nothing "
                         "of the change under search; make the application's run repeat, then bisect again.")
        case Verdict.FLAKY:
            flaky = next(r for r in records if r.outcome is Outcome.FLAKY)
            lines.append(f"Stopped, no culprit named: try-{flaky.number:02d} failed before the comparison, then "
                         f"{rerun_words(flaky.rerun or Outcome.FAILED)} on its rerun in the same env. A flaky "
                         "failure says nothing of the change under search; make the application's run repeat "
                         "(its failure is in the trial's steps), then bisect again.")
        case Verdict.UNCONFIRMED:
            lines.append(_unconfirmed(result, groups, by_number[clash[0]], by_number[clash[-1]]))
        case _:
            assert_never(result.verdict)
    confirmed = repeats(records)
    if confirmed:
        said = "; ".join(f"try-{c['trial']:02d} ({', '.join(c['moved']) or 'none'}): " + " / ".join(c["outcomes"])
                         for c in confirmed)
        lines += ["", f"Repeated to confirm the trials that decide ({sum(len(c['repeats']) for c in confirmed)} "
                  f"extra): {said}."]
    lines += ["", "| env | moved to the new lock | outcome | seconds | numbers |", "|---|---|---|---|---|"]
    every = {c.name for c in d.changes}
    for r in records:
        moved = ("all (the new lock)" if set(r.moved) == every else ", ".join(r.moved) if r.moved
                 else "none (the old lock)")
        outcome = f"{r.outcome} (rerun: {rerun_words(r.rerun)})" if r.rerun else str(r.outcome)
        if r.repeat_of is not None:
            outcome += f" (repeat of try-{r.repeat_of:02d})"
        if r.env_of is not None:
            outcome += f" (in the env of try-{r.env_of:02d})"
        lines.append(f"| try-{r.number:02d} | {moved} | {outcome} | {r.seconds:.1f} | {cell(r.note)} |")
    return "\n".join(lines) + "\n"


def _unconfirmed(result: SearchResult, groups: list[Group], seen: TrialRecord, again: TrialRecord) -> str:
    found = " + ".join(groups[i].label() for i in result.candidates)
    names = {n for i in result.candidates for n in groups[i].names}
    why = ("the other changes, without it, leave the tolerance too: more than one change moves the outputs (pin it "
           "back, or bisect again from an old lock with it applied)" if not names & set(seen.moved) else
           "it leaves the tolerance without one of those groups: the trials contradict the bisection's steps")
    return (f"No culprit named: the search found {found}, but trial {seen.number} (old lock + "
            f"{', '.join(seen.moved)}) gave {seen.outcome}, and so did its repeat, trial {again.number}: {why}.")
