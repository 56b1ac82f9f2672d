"""The bisection itself, pure: given the number of change groups and a ``probe(subset) -> Outcome``, the smallest
set of groups found responsible, with every subset it tried; and the grouping of changes that must move together.

Nothing here builds an env or reads a file: :func:`kernodeck.upgrade.bisect.bisect_locks` gives :func:`search` the real
probe (tests/unit/test_bisect_search.py gives it made-up ones).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import assert_never

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kernodeck.lock import lockdiff


class Outcome(enum.StrEnum):
    GOOD = "within tolerance"
    BAD = "out of tolerance"
    FAILED = "failed before the comparison"  # the application (or a check before compare) failed: bad, not numbers
    SKIPPED = "inconsistent, skipped"
    FLAKY = "flaky: failed, then ran on its rerun"  # in the same env: no culprit signal

    @property
    def leaves(self) -> bool:
        """The env does not compute what the reference did: its numbers moved, or the application no longer runs."""
        return self in (Outcome.BAD, Outcome.FAILED)


class Verdict(enum.StrEnum):
    FOUND = "found"
    NO_CULPRIT = "no culprit"  # the new lock's env is within tolerance
    NO_CHANGES = "no changes"  # the two locks pin the same packages
    BAD_UNBUILDABLE = "new lock unbuildable"  # the new lock's own env could not be built
    AMBIGUOUS = "ambiguous"  # skipped combinations left more than one candidate
    OVER_BUDGET = "over budget"
    FLAKY = "flaky"  # a trial failed, then ran on its rerun: the search stops rather than guess


@dataclass(frozen=True)
class Trial:
    subset: frozenset[int]
    outcome: Outcome


@dataclass(frozen=True)
class SearchResult:
    verdict: Verdict
    culprit: tuple[int, ...]  # group indices, in order
    alone: bool | None  # the culprit set alone (on the old lock) was built and left tolerance
    candidates: tuple[int, ...]  # when ambiguous: the groups the culprit is among
    trials: tuple[Trial, ...]

    @property
    def rebuilds(self) -> int:
        return len(self.trials)


def bound(n: int) -> int:
    """The most rebuilds the search needs for one culprit among ``n`` groups, the confirmation included when the
    bisection did not build the culprit alone: ``ceil(log2 n) + 1`` (the new lock's env, then the bisection) + 1."""
    return (math.ceil(math.log2(n)) if n > 1 else 0) + 2


def settle(first: Outcome, rerun: Callable[[], Outcome]) -> tuple[Outcome, Outcome | None]:
    """A trial's outcome for the search, and its rerun's (None: not rerun). Only a failure before the comparison is
    run once more (``rerun``, in the same env): failing again it stands; running then (within or out of tolerance),
    the first failure was flaky, and a flaky failure is not the change under search (one flaky run would otherwise
    send the bisection to the wrong half and name the wrong culprit)."""
    if first is not Outcome.FAILED:
        return first, None
    again = rerun()
    return (Outcome.FAILED if again is Outcome.FAILED else Outcome.FLAKY), again


def rerun_words(outcome: Outcome) -> str:
    """What a failed trial's rerun did, as the record says it: ``trial N failed, rerun: failed`` (or passed)."""
    return {Outcome.FAILED: "failed", Outcome.GOOD: "passed", Outcome.BAD: "ran, out of tolerance"}.get(
        outcome, str(outcome))


def search(n: int, probe: Callable[[frozenset[int]], Outcome], *, budget: int | None = None) -> SearchResult:
    """The smallest set of groups (``0..n-1``, in order) whose moving to the new lock leaves the tolerance.

    The old lock (no group moved) is the reference's env: assumed within tolerance, never rebuilt. Each round bisects
    the groups not yet chosen for the first prefix that, on top of those chosen, leaves the tolerance; its last group
    joins the culprit set; the set alone is then tried, and the search ends when it leaves the tolerance alone. A
    flaky trial (:func:`settle`) stops it: verdict FLAKY, no culprit named.
    """
    budget = budget if budget is not None else 3 * bound(max(n, 1)) + 2
    seen: dict[frozenset[int], Outcome] = {}
    order: list[Trial] = []

    def test(subset: frozenset[int]) -> Outcome:
        if subset not in seen:
            if len(order) >= budget:
                raise _OverBudget
            seen[subset] = probe(subset)
            order.append(Trial(subset, seen[subset]))
        return seen[subset]

    def done(verdict: Verdict, culprit: Iterable[int] = (), alone: bool | None = None,
             candidates: Iterable[int] = ()) -> SearchResult:
        return SearchResult(verdict, tuple(sorted(culprit)), alone, tuple(candidates), tuple(order))

    if n == 0:
        return done(Verdict.NO_CHANGES)
    chosen: set[int] = set()
    try:
        whole = test(frozenset(range(n)))
        match whole:
            case Outcome.GOOD:
                return done(Verdict.NO_CULPRIT)
            case Outcome.SKIPPED:
                return done(Verdict.BAD_UNBUILDABLE)
            case Outcome.FLAKY:
                return done(Verdict.FLAKY)
            case Outcome.BAD | Outcome.FAILED:
                pass
            case _:
                assert_never(whole)
        pool = list(range(n))  # chosen + pool is known to leave the tolerance
        while True:
            if chosen:
                alone = test(frozenset(chosen))
                if alone is Outcome.FLAKY:
                    return done(Verdict.FLAKY)
                if alone.leaves:
                    return done(Verdict.FOUND, chosen, True)
                if alone is Outcome.SKIPPED or not pool:
                    return done(Verdict.FOUND, chosen, None if alone is Outcome.SKIPPED else False)
            lo, hi = 0, len(pool)  # prefix lo (with chosen) within tolerance (lo = 0: assumed), prefix hi out
            skipped: set[int] = set()
            while hi - lo > 1:
                left = [k for k in range(lo + 1, hi) if k not in skipped]
                if not left:
                    break
                middle = (lo + hi) / 2
                k = min(left, key=lambda c: (abs(c - middle), c))
                result = test(frozenset(chosen | set(pool[:k])))
                if result is Outcome.FLAKY:
                    return done(Verdict.FLAKY)
                if result.leaves:
                    hi = k
                elif result is Outcome.GOOD:
                    lo = k
                else:
                    skipped.add(k)
            if hi - lo > 1:
                return done(Verdict.AMBIGUOUS, chosen, None, pool[lo:hi])
            chosen.add(pool[hi - 1])
            pool = pool[: hi - 1]
    except _OverBudget:
        return done(Verdict.OVER_BUDGET, chosen)


class _OverBudget(Exception):
    pass


# --- groups: the changes that must move together ----------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    changes: tuple[lockdiff.PackageChange, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.changes)

    def label(self) -> str:
        return " + ".join(f"{c.name} {c.arrow()}" for c in self.changes)


def _satisfied(req: Requirement, version: str | None) -> bool:
    if version is None:
        return False
    try:
        return req.specifier.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def group_changes(changes: tuple[lockdiff.PackageChange, ...], old_versions: dict[str, str],
                  requires: dict[str, list[str]], marker_env: dict[str, str]) -> list[Group]:
    """Changes joined when one's new version requires another's new version (its old one, or its absence, does not
    satisfy the requirement): ``requires`` maps a name to its NEW version's Requires-Dist lines."""
    changed = {c.name for c in changes}
    parent = {name: name for name in changed}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for change in changes:
        if change.new is None:
            continue
        for line in requires.get(change.name, []):
            try:
                req = Requirement(line)
                if req.marker is not None and not req.marker.evaluate({**marker_env, "extra": ""}):
                    continue
            except (InvalidRequirement, InvalidMarker, UndefinedComparison, UndefinedEnvironmentName):
                continue
            dep = canonicalize_name(req.name)
            if dep in changed and not _satisfied(req, old_versions.get(dep)):
                parent[find(dep)] = find(change.name)
    members: dict[str, list[lockdiff.PackageChange]] = {}
    for change in changes:  # changes come stack first, then by name: groups keep that order
        members.setdefault(find(change.name), []).append(change)
    return [Group(tuple(items)) for items in members.values()]
