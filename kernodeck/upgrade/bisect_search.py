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
    FLAKY = "flaky"  # a trial and its repeat (or its rerun after a failure) disagree: the search stops, no guess
    UNCONFIRMED = "not confirmed"  # a confirming trial, twice alike, contradicts the culprit found: none is named


@dataclass(frozen=True)
class Trial:
    subset: frozenset[int]
    outcome: Outcome
    repeat: bool = False  # the same subset's trial run once more, to confirm an outcome that decides the answer


@dataclass(frozen=True)
class SearchResult:
    verdict: Verdict
    culprit: tuple[int, ...]  # group indices, in order
    alone: bool | None  # the culprit set alone (on the old lock) was built and left tolerance
    candidates: tuple[int, ...]  # when ambiguous (or not confirmed): the groups the culprit is among (was found as)
    trials: tuple[Trial, ...]
    clash: tuple[int, int] | None = None  # FLAKY: a trial and its repeat that disagree; UNCONFIRMED: the confirming
    # trial and its repeat, alike, that contradict the culprit (indices into ``trials``)

    @property
    def rebuilds(self) -> int:
        return len(self.trials)


def bound(n: int) -> int:
    """The most trials the search needs for one culprit among ``n`` groups: the new lock's env and its repeat (2), the
    bisection (``ceil(log2 n)``), the culprit alone when the bisection did not build it alone and its repeat (2), the
    other groups without it when the bisection did not build them and its repeat (2). One group: the new lock's env
    is the culprit alone, and without it is the old lock's env, built and repeated (BISECT1): 4."""
    return math.ceil(math.log2(n)) + 6 if n > 1 else 4


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


def search(n: int, probe: Callable[[frozenset[int]], Outcome], *, budget: int | None = None,
           confirm: bool = True) -> SearchResult:
    """The smallest set of groups (``0..n-1``, in order) whose moving to the new lock leaves the tolerance.

    The old lock (no group moved) is the reference's env: assumed within tolerance while the bisection runs, measured
    where the answer would rest on it alone (C's complement empty: one changed group; red-team pass 56, BISECT1: a
    group was named the culprit of an old lock out of tolerance itself). Each round bisects
    the groups not yet chosen for the first prefix that, on top of those chosen, leaves the tolerance; its last group
    joins the culprit set; the set alone is then tried, and the search ends when it leaves the tolerance alone. A
    flaky trial (:func:`settle`) stops it: verdict FLAKY, no culprit named.

    The trials that decide the answer are run once more (``confirm``; :func:`_found`): the new lock's env, then for
    a culprit set C: C alone, the other groups without C, and, C of several groups, the trial within tolerance that
    made each join (the bisection's step before it) and C without each of its groups (twice more). A
    repeat that disagrees with its trial stops the search as FLAKY; a confirming trial that, twice alike, contradicts
    C (the others without C, or C without one of its groups, leave the tolerance) names none: UNCONFIRMED.
    """
    runs = _Runs(probe, budget if budget is not None else 3 * bound(max(n, 1)) + 2, confirm)
    done, test, sure = runs.done, runs.test, runs
    if n == 0:
        return done(Verdict.NO_CHANGES)
    chosen: set[int] = set()
    decided: list[frozenset[int]] = []  # for each group chosen, the trial within tolerance just before it joined
    try:
        whole = sure(frozenset(range(n)))
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
                    return _found(runs, n, chosen, True, decided)
                if alone is Outcome.SKIPPED or not pool:
                    return _found(runs, n, chosen, None if alone is Outcome.SKIPPED else False, decided)
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
            decided.append(frozenset(chosen | set(pool[: hi - 1])))
            chosen.add(pool[hi - 1])
            pool = pool[: hi - 1]
    except _OverBudget:
        return done(Verdict.OVER_BUDGET, chosen)
    except _Disagree as clash:
        return done(Verdict.FLAKY, clash=clash.pair)


def _found(sure: _Runs, n: int, chosen: set[int], alone: bool | None, decided: list[frozenset[int]]) -> SearchResult:
    """C = ``chosen`` named once its confirming trials agree with it (:func:`search`); ``decided``: for each group
    chosen, the trial within tolerance just before it joined."""
    done = sure.done
    if not sure.confirm:
        return done(Verdict.FOUND, chosen, alone)
    if alone:
        sure(frozenset(chosen))
    several = len(chosen) > 1
    for subset in decided if several else []:  # within tolerance: a repeat out is a disagreement (FLAKY)
        if subset:
            sure(subset)
    rest = frozenset(range(n)) - chosen
    for subset, repeats in [(rest, 1)] + [(frozenset(chosen - {c}), 2) for c in sorted(chosen) if several]:
        got = sure(subset, repeats)  # the empty set too: the old lock's env, built and run (BISECT1)
        if got is Outcome.FLAKY:  # failed, then ran on its rerun (settle): it confirms nothing
            return done(Verdict.FLAKY)
        if got.leaves:
            return done(Verdict.UNCONFIRMED, (), alone, sorted(chosen), sure.last)
    return done(Verdict.FOUND, chosen, alone)


class _Runs:
    """The search's trials: ``test`` (a subset's outcome, its trial run once), and, called, a trial that decides the
    answer confirmed: its outcome, and once more (``run``) until it has ``repeats`` repeats; a repeat that disagrees
    raises :class:`_Disagree`. A skipped trial (it cannot be installed) or a flaky one is not repeated;
    ``confirm=False`` repeats nothing (the search before confirmation)."""

    def __init__(self, probe: Callable[[frozenset[int]], Outcome], budget: int, confirm: bool) -> None:
        self.probe, self.budget, self.confirm = probe, budget, confirm
        self.order: list[Trial] = []
        self.seen: dict[frozenset[int], Outcome] = {}
        self.repeats: dict[frozenset[int], int] = {}  # a subset's repeats so far
        self.last: tuple[int, int] | None = None  # the trial last confirmed and its last repeat (indices)

    def run(self, subset: frozenset[int], repeat: bool) -> Outcome:
        if len(self.order) >= self.budget:
            raise _OverBudget
        self.order.append(Trial(subset, self.probe(subset), repeat))
        return self.order[-1].outcome

    def test(self, subset: frozenset[int]) -> Outcome:
        if subset not in self.seen:
            self.seen[subset] = self.run(subset, False)
        return self.seen[subset]

    def done(self, verdict: Verdict, culprit: Iterable[int] = (), alone: bool | None = None,
             candidates: Iterable[int] = (), clash: tuple[int, int] | None = None) -> SearchResult:
        return SearchResult(verdict, tuple(sorted(culprit)), alone, tuple(candidates), tuple(self.order), clash)

    def __call__(self, subset: frozenset[int], repeats: int = 1) -> Outcome:
        first = self.test(subset)
        if not self.confirm or first in (Outcome.SKIPPED, Outcome.FLAKY):
            return first
        index = next(i for i, t in enumerate(self.order) if t.subset == subset and not t.repeat)
        while self.repeats.get(subset, 0) < repeats:
            self.repeats[subset] = self.repeats.get(subset, 0) + 1
            again = self.run(subset, True)
            self.last = (index, len(self.order) - 1)
            if again is not first:
                raise _Disagree(self.last)
        self.last = (index, max(i for i, t in enumerate(self.order) if t.subset == subset))
        return first


class _Disagree(Exception):
    def __init__(self, pair: tuple[int, int]) -> None:
        super().__init__(pair)
        self.pair = pair


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
