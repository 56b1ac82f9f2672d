"""The bisect's search over change groups with a fake probe, its grouping and its intermediate locks."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from kernodeck.errors import KernodeckError
from kernodeck.lock import lockdiff, lockfile
from kernodeck.upgrade import bisect, bisect_report, bisect_search
from kernodeck.upgrade.bisect_search import Outcome, Verdict
from tests.helpers.lockpair import NEW, OLD, write_lock


def _fake(bad: Callable[[frozenset[int]], bool], skip: Callable[[frozenset[int]], bool] = lambda s: False,
          old_lock: bool = False) -> tuple[Callable[[frozenset[int]], Outcome], list[frozenset[int]]]:
    calls: list[frozenset[int]] = []

    def probe(subset: frozenset[int]) -> Outcome:
        # a trial, its repeat, and (a culprit of several groups without one of them) one more
        assert calls.count(subset) < 3, f"{sorted(subset)} built too often"
        assert subset or old_lock, "the old lock is the reference's env: never rebuilt where other trials confirm it"
        calls.append(subset)
        if skip(subset):
            return Outcome.SKIPPED
        return Outcome.BAD if bad(subset) else Outcome.GOOD

    return probe, calls


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 16, 33])
def test_one_culprit_is_found_alone_within_the_bound(n: int) -> None:
    worst = 0
    for culprit in range(n):
        probe, calls = _fake(lambda s, c=culprit: c in s, old_lock=n == 1)  # type: ignore[misc]
        result = bisect_search.search(n, probe)
        assert (result.verdict, result.culprit, result.alone) == (Verdict.FOUND, (culprit,), True)
        assert (frozenset() in calls) == (n == 1)  # one group: the old lock's env is what the answer rests on
        # the new lock's env, then the bisection (ceil(log2 n)); one more only to build the culprit alone when the
        # bisection did not already build it alone
        first_runs = [t.subset for t in result.trials if not t.repeat]
        search_part = [c for c in first_runs if c not in (frozenset({culprit}), frozenset(range(n)) - {culprit})]
        assert len(search_part) <= math.ceil(math.log2(n)) + 1
        # the trials that decide, each run once more: the new lock's env, the culprit alone, the others without it
        repeated = [t.subset for t in result.trials if t.repeat]
        assert set(repeated) == {frozenset(range(n)), frozenset({culprit}), frozenset(range(n)) - {culprit}} and len(
            repeated) == len(set(repeated)) == (3 if n > 1 else 2)
        assert len(calls) <= bisect_search.bound(n) == (math.ceil(math.log2(n)) + 6 if n > 1 else 4)
        assert result.rebuilds == len(calls)
        worst = max(worst, len(calls))
    assert worst >= bisect_search.bound(n) - 1  # the bound is (nearly) reached: it says what a search may cost


def test_no_culprit_when_the_new_lock_is_within_tolerance() -> None:
    probe, calls = _fake(lambda s: False)
    result = bisect_search.search(6, probe)
    assert result.verdict is Verdict.NO_CULPRIT and result.culprit == () and calls == [frozenset(range(6))] * 2


def test_no_changes_builds_nothing() -> None:
    probe, calls = _fake(lambda s: True)
    assert bisect_search.search(0, probe).verdict is Verdict.NO_CHANGES and calls == []


def test_a_change_that_breaks_the_application_is_a_culprit_named_as_failing() -> None:
    """A trial whose application fails before the comparison leaves what the reference computed, like moved numbers;
    the report says it fails, not that it left the tolerance."""
    def probe(subset: frozenset[int]) -> Outcome:
        return Outcome.FAILED if 3 in subset else Outcome.GOOD

    result = bisect_search.search(6, probe)
    assert (result.verdict, result.culprit, result.alone) == (Verdict.FOUND, (3,), True)
    assert Outcome.FAILED.leaves and Outcome.BAD.leaves and not Outcome.GOOD.leaves and not Outcome.SKIPPED.leaves


def test_a_failure_the_old_lock_shares_stops_the_bisect(tmp_path: Path) -> None:
    """The old lock's env is tried when the new lock's failed before the comparison: failing too, it is no change of
    pins (a culprit would be named for nothing); running, the bisect goes on."""
    class Trials:
        def __init__(self, old: Outcome) -> None:
            self.old, self.asked, self.records = old, [], []

        def probe(self, subset: frozenset[int]) -> Outcome:
            self.asked.append(subset)
            self.records.append(bisect_report.TrialRecord(1, (), self.old, 1.0, "application: the entry raised", None))
            return self.old

    failing = Trials(Outcome.FAILED)
    with pytest.raises(KernodeckError, match=r"fails on the old lock.s env too .application: the entry raised"):
        bisect._require_old_lock_runs(failing, tmp_path)  # type: ignore[arg-type]
    assert failing.asked == [frozenset()]
    running = Trials(Outcome.GOOD)
    bisect._require_old_lock_runs(running, tmp_path)  # type: ignore[arg-type]
    assert running.asked == [frozenset()]


def test_two_changes_needed_together_are_both_named() -> None:
    for a, b in itertools.combinations(range(7), 2):
        probe, _ = _fake(lambda s, a=a, b=b: a in s and b in s)  # type: ignore[misc]
        result = bisect_search.search(7, probe)
        assert (result.verdict, result.culprit, result.alone) == (Verdict.FOUND, (a, b), True)


def test_either_of_two_culprits_is_not_named_the_culprit() -> None:
    """Groups 2 and 5 each leave the tolerance alone: the search finds 2, but the others without 2 (5 among them) leave
    it too, twice: no culprit is named (pinning 2 back would not bring the outputs back), the found group is said."""
    probe, _ = _fake(lambda s: 2 in s or 5 in s)
    result = bisect_search.search(8, probe)
    assert (result.verdict, result.culprit, result.candidates, result.alone) == (Verdict.UNCONFIRMED, (), (2,), True)
    assert result.clash is not None
    first, again = (result.trials[i] for i in result.clash)
    assert first.subset == again.subset == frozenset(range(8)) - {2} and again.repeat
    assert first.outcome is again.outcome is Outcome.BAD
    control = bisect_search.search(8, _fake(lambda s: 2 in s or 5 in s)[0], confirm=False)
    assert (control.verdict, control.culprit) == (Verdict.FOUND, (2,))  # before confirmation: named


def test_an_inconsistent_combination_is_skipped_and_the_search_goes_around_it() -> None:
    probe, calls = _fake(lambda s: 5 in s, skip=lambda s: s == frozenset(range(4)))  # the first half cannot install
    result = bisect_search.search(8, probe)
    assert (result.verdict, result.culprit) == (Verdict.FOUND, (5,))
    assert frozenset(range(4)) in calls
    assert Outcome.SKIPPED in {t.outcome for t in result.trials}


def test_only_skips_between_good_and_bad_leave_it_ambiguous() -> None:
    probe, _ = _fake(lambda s: 3 in s, skip=lambda s: 0 < len(s) < 4 and s != frozenset({3}))
    result = bisect_search.search(4, probe)
    assert result.verdict is Verdict.AMBIGUOUS and result.candidates == (0, 1, 2, 3)


def test_an_unbuildable_new_lock_is_said_so() -> None:
    probe, _ = _fake(lambda s: True, skip=lambda s: len(s) == 5)
    assert bisect_search.search(5, probe).verdict is Verdict.BAD_UNBUILDABLE


def test_the_budget_stops_a_search() -> None:
    probe, calls = _fake(lambda s: 3 in s)
    result = bisect_search.search(16, probe, budget=2)
    assert result.verdict is Verdict.OVER_BUDGET and len(calls) == 2


def _change(name: str, old: str | None, new: str | None) -> lockdiff.PackageChange:
    kind = lockdiff.Kind.ADDED if old is None else lockdiff.Kind.REMOVED if new is None else lockdiff.Kind.UPGRADED
    return lockdiff.PackageChange(name, kind, old, new)


def test_groups_join_a_new_version_with_the_new_version_it_requires() -> None:
    changes = (_change("a", "1", "2"), _change("b", "1", "2"), _change("c", "1", "2"), _change("d", None, "1"),
               _change("e", "1", "2"), _change("f", "1", None))
    requires = {
        "a": ["b>=2", "d"],  # needs the new b, and d which the old lock lacks: together
        "c": ["b>=1"],  # the old b satisfies it: c moves alone
        "e": ["f>=9; python_version < '3'"],  # a marker false here: ignored
    }
    env = {"python_version": "3.11", "python_full_version": "3.11.7", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    groups = bisect_search.group_changes(changes, {"a": "1", "b": "1", "c": "1", "e": "1", "f": "1"}, requires, env)
    assert [g.names for g in groups] == [("a", "b", "d"), ("c",), ("e",), ("f",)]
    assert groups[0].label() == "a 1 → 2 + b 1 → 2 + d — → 1"


def test_an_intermediate_lock_is_the_old_one_with_the_new_pins_of_the_subset(tmp_path: Path) -> None:
    old = lockfile.read(write_lock(tmp_path / "old.txt", OLD))
    new = lockfile.read(write_lock(tmp_path / "new.txt", NEW))
    text = bisect.intermediate_lock(old, new, {"numpy", "triton", "six"}, "old lock + numpy, six, triton")
    lock = lockfile.parse_checked(text, tmp_path / "mid.txt")  # sealed and complete: rebuild reads it as any lock
    versions = lock.versions()
    assert versions["numpy"] == NEW["numpy"] and versions["triton"] == NEW["triton"] and "six" not in versions
    assert versions["torch"] == OLD["torch"] and versions["scipy"] == OLD["scipy"]
    new_hashes = {p.name: p.hashes for p in new.pins}
    assert next(p for p in lock.pins if p.name == "numpy").hashes == new_hashes["numpy"]
    assert lock.first("bisect") == "old lock + numpy, six, triton"
    assert lock.first("platform") == old.first("platform")
    same = lockfile.parse_checked(bisect.intermediate_lock(old, new, set(), "nothing moved"), tmp_path / "s.txt")
    assert same.versions() == old.versions()


def test_a_lock_of_another_platform_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    from kernodeck.errors import KernodeckError
    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform
    from tests.helpers.project import ROOT

    project = load_project(ROOT)
    good, bad = write_lock(tmp_path / "old.txt", OLD), write_lock(tmp_path / "new.txt", NEW)  # cp311 linux cpu
    other = resolve_platform(project, "cp311-macosx_arm64-mps")
    with pytest.raises(KernodeckError, match="is the lock of cp311-linux_x86_64-cpu, not of cp311-macosx_arm64-mps"):
        bisect.bisect_locks(project, other, good, bad, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_failure_the_new_locks_env_does_not_show_is_skipped_not_named() -> None:
    """Against a new lock that computes (out of tolerance), a subset whose application fails is an inconsistent
    combination (an ABI need no Requires-Dist states), not the culprit; against a new lock that fails, only the same
    failure counts."""
    from kernodeck.upgrade.relock import Drift

    def trials(whole: Outcome, failure: str) -> bisect._Trials:
        t = bisect._Trials.__new__(bisect._Trials)
        t.records = [bisect_report.TrialRecord(1, ("a", "b"), whole, 1.0, failure, Drift((), None, failure))]
        return t

    boom = Drift((), None, "application: ImportError: undefined symbol\nmore")
    assert trials(Outcome.BAD, "").for_search(Outcome.FAILED, boom) is Outcome.SKIPPED
    assert trials(Outcome.FAILED, "application: ImportError: undefined symbol").for_search(
        Outcome.FAILED, boom) is Outcome.FAILED
    assert trials(Outcome.FAILED, "application: MemoryError").for_search(Outcome.FAILED, boom) is Outcome.SKIPPED
    assert trials(Outcome.BAD, "").for_search(Outcome.BAD, Drift((), None, "")) is Outcome.BAD  # numbers: as found
    # the search, fed the mapping: group 0 fails alone (an unstated ABI need), group 3 moves the numbers
    whole = trials(Outcome.BAD, "")

    def probe(subset: frozenset[int]) -> Outcome:
        if 0 in subset and 2 not in subset:
            return whole.for_search(Outcome.FAILED, boom)
        return Outcome.BAD if 3 in subset else Outcome.GOOD

    result = bisect.search(5, probe)
    assert result.culprit == (3,), result


# --- a flaky failure: run once more, and named, never a culprit -----------------------------------------------------


def _trial(script: dict[frozenset[int], list[Outcome]], bad: Callable[[frozenset[int]], bool],
           ) -> tuple[Callable[[frozenset[int]], Outcome], list[frozenset[int]]]:
    """A fake trial function: the scripted outcomes of a subset, run after run (a flaky one fails, then runs), else
    out of tolerance when ``bad``."""
    runs: list[frozenset[int]] = []

    def trial(subset: frozenset[int]) -> Outcome:
        runs.append(subset)
        scripted = script.get(subset)
        if scripted:
            return scripted.pop(0)
        return Outcome.BAD if bad(subset) else Outcome.GOOD

    return trial, runs


@pytest.mark.parametrize(("outcomes", "settled"), [
    ([Outcome.FAILED, Outcome.GOOD], (Outcome.FLAKY, Outcome.GOOD)),
    ([Outcome.FAILED, Outcome.BAD], (Outcome.FLAKY, Outcome.BAD)),  # the rerun computed: the failure did not repeat
    ([Outcome.FAILED, Outcome.FAILED], (Outcome.FAILED, Outcome.FAILED)),
    ([Outcome.GOOD], (Outcome.GOOD, None)),  # only a failure is run again
    ([Outcome.BAD], (Outcome.BAD, None)),
    ([Outcome.SKIPPED], (Outcome.SKIPPED, None)),
], ids=["failed-passed", "failed-out", "failed-failed", "good", "bad", "skipped"])
def test_only_a_failed_trial_is_run_once_more(outcomes: list[Outcome], settled: tuple[Outcome, Outcome | None]) -> None:
    trial, runs = _trial({frozenset({1}): list(outcomes)}, lambda s: False)
    assert bisect_search.settle(trial(frozenset({1})), lambda: trial(frozenset({1}))) == settled
    assert len(runs) == len(outcomes)
    assert not Outcome.FLAKY.leaves


def test_a_flaky_failure_names_no_culprit_where_taken_at_face_value_it_named_a_wrong_one() -> None:
    """The culprit is group 5 of 8; the bisection's first half ({0..3}) fails once, then runs within tolerance. Taken
    at face value (the control) the failure sends the search into the wrong half and names groups 0..3, never 5;
    rerun, the trial is flaky and the search stops without a culprit."""
    def flaky_first_half() -> dict[frozenset[int], list[Outcome]]:
        return {frozenset(range(4)): [Outcome.FAILED, Outcome.GOOD]}

    trial, _ = _trial(flaky_first_half(), lambda s: 5 in s)
    taken = bisect_search.search(8, trial, confirm=False)
    assert (taken.verdict, taken.culprit) == (Verdict.FOUND, (0, 1, 2, 3))  # the control: a wrong culprit
    trial, runs = _trial(flaky_first_half(), lambda s: 5 in s)
    result = bisect_search.search(8, lambda s: bisect_search.settle(trial(s), lambda: trial(s))[0])
    assert (result.verdict, result.culprit) == (Verdict.FLAKY, ())
    assert [t.outcome for t in result.trials] == [Outcome.BAD, Outcome.BAD, Outcome.FLAKY]
    assert runs.count(frozenset(range(4))) == 2 and result.clash is None
    # failing twice, it stands: the failure is the change's (group 2 breaks the application)
    trial, _ = _trial({}, lambda s: 2 in s)
    steady = bisect_search.search(8, lambda s: bisect_search.settle(
        Outcome.FAILED if 2 in s else trial(s), lambda: Outcome.FAILED if 2 in s else trial(s))[0])
    assert (steady.verdict, steady.culprit) == (Verdict.FOUND, (2,))


FAILED_STEPS = [{"name": "application", "status": "failed", "error": "RuntimeError: a worker died"}]
PASSED_STEPS = [{"name": "compare", "status": "passed",
                 "details": {"outputs": {"x": {"kind": "exact", "passed": True, "summary": "equal"}}}}]


def test_the_real_probe_reruns_a_failed_trial_in_its_env_and_the_report_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """_Trials (the real probe, its env and runs faked): a trial that fails runs once more into try-NN/rerun/; its
    record, bisect.md's table and verdict say "trial N failed, rerun: passed" and that no culprit is named."""
    import contextlib
    from types import SimpleNamespace

    from kernodeck.project.config import load_project
    from kernodeck.project.platforms import resolve_platform
    from tests.helpers.project import ROOT

    project = load_project(ROOT)
    plat = resolve_platform(project, "cp311-linux_x86_64-cpu")
    good = lockfile.read(write_lock(tmp_path / "old.txt", OLD))
    bad = lockfile.read(write_lock(tmp_path / "new.txt", NEW))
    d = lockdiff.diff(good, bad, old_label="old.txt", new_label="new.txt")
    trials = bisect._Trials(project, plat, good, bad, d.changes, "sha256:none", tmp_path / "b", {}, None)
    monkeypatch.setattr(trials, "new_lock_env", lambda: None)
    monkeypatch.setattr("kernodeck.env.rebuild.rebuild", lambda *a, **k: SimpleNamespace(python=tmp_path / "py",
                                                                                      reused=False))
    monkeypatch.setattr(bisect, "holding", lambda *a: contextlib.nullcontext())
    runs = [FAILED_STEPS, PASSED_STEPS]
    folders: list[str] = []

    def checks(python: Path, folder: Path) -> list[dict[str, object]]:
        folders.append(folder.relative_to(tmp_path / "b").as_posix())
        return runs.pop(0)

    monkeypatch.setattr(trials, "checks", checks)
    assert trials.probe(frozenset({0})) is Outcome.FLAKY
    assert folders == ["try-01", "try-01/rerun"]
    (record,) = trials.records
    assert (record.outcome, record.rerun) == (Outcome.FLAKY, Outcome.GOOD)
    assert record.note.startswith("trial 1 failed, rerun: passed (try-01/rerun/); application: RuntimeError")
    result = bisect_search.SearchResult(Verdict.FLAKY, (), None, (), (bisect_search.Trial(frozenset({0}),
                                                                                          Outcome.FLAKY),))
    text = bisect_report.render(result, trials.groups, trials.records, d, plat.id)
    assert "Stopped, no culprit named: try-01 failed before the comparison, then passed on its rerun" in text
    assert "| flaky: failed, then ran on its rerun (rerun: passed) |" in text
    # a trial that passes is not run again
    runs[:] = [PASSED_STEPS]
    assert trials.probe(frozenset({1})) is Outcome.GOOD and folders[-1] == "try-02" and trials.records[-1].rerun is None
    # the same pins asked again (a repeat that confirms): a trial of its own, recorded as the repeat of try-02
    runs[:] = [PASSED_STEPS]
    assert trials.probe(frozenset({1})) is Outcome.GOOD and folders[-1] == "try-03"
    assert (trials.records[-1].repeat_of, trials.records[1].repeat_of) == (2, None)
    assert bisect_report.repeats(trials.records) == [
        {"trial": 2, "moved": list(trials.records[1].moved), "repeats": [3], "outcomes": ["within tolerance"] * 2}]



# --- flaky trials of every kind: the outcomes that decide are confirmed -----------------------------------------------


def _named(result: bisect_search.SearchResult) -> tuple[int, ...] | None:
    """The culprit a result names (None: none named)."""
    return result.culprit if result.verdict is Verdict.FOUND else None


def _intermittent_failure(seed: int, culprit: int, p_fail: float) -> Callable[[frozenset[int]], Outcome]:
    """The culprit makes the application fail before the comparison in ``p_fail`` of runs (a race), each failure
    rerun once in the same env (:func:`settle`); without it every run is within tolerance."""
    rng = random.Random(seed)

    def once(subset: frozenset[int]) -> Outcome:
        return Outcome.FAILED if culprit in subset and rng.random() < p_fail else Outcome.GOOD

    return lambda s: bisect_search.settle(once(s), lambda: once(s))[0]


def _numeric_noise(seed: int, culprit: int, p_out: float) -> Callable[[frozenset[int]], Outcome]:
    """The culprit moves the numbers out of tolerance; any other env is out of tolerance by chance in ``p_out`` of
    runs (numbers only: no failure, so :func:`settle` never reruns it)."""
    rng = random.Random(seed)
    return lambda s: Outcome.BAD if culprit in s or rng.random() < p_out else Outcome.GOOD


@pytest.mark.parametrize(("make", "p"), [(_intermittent_failure, 0.9), (_numeric_noise, 0.05)],
                         ids=["culprit-fails-90%", "innocent-out-5%"])
def test_flaky_trials_never_name_a_wrong_culprit_where_unconfirmed_they_did(
        make: Callable[[int, int, float], Callable[[frozenset[int]], Outcome]], p: float) -> None:
    """The red team's simulation (redteam4 F6): 8 groups, the culprit group 5, 300 seeded runs. Confirmed, a culprit
    named is always exactly group 5 (else flaky, or no culprit); the control, the same runs with ``confirm=False``
    (the search before confirmation), names a wrong set (an innocent group added, or group 5 missing) in some."""
    n, culprit, runs = 8, 5, 300
    confirmed = [bisect_search.search(n, make(seed, culprit, p)) for seed in range(runs)]
    control = [bisect_search.search(n, make(seed, culprit, p), confirm=False) for seed in range(runs)]
    wrong = [r for r in confirmed if _named(r) not in (None, (culprit,))]
    assert wrong == []
    assert sum(_named(r) == (culprit,) for r in confirmed) > runs // 4  # it still names the culprit, often
    assert {r.verdict for r in confirmed} <= {Verdict.FOUND, Verdict.FLAKY, Verdict.NO_CULPRIT, Verdict.UNCONFIRMED}
    wrong_before = [r for r in control if _named(r) not in (None, (culprit,))]
    assert len(wrong_before) > runs // 20, len(wrong_before)  # 42 (an innocent added) and 23 (5 missing) here
    extra = [sum(t.repeat for t in r.trials) for r in confirmed]
    assert max(extra) <= 3 + 3 * 2  # 3 repeats for one culprit; 3 + 3m for a set of m groups (here at most 2)
    assert all(sum(t.repeat for t in r.trials) == 3 for r in confirmed if _named(r) == (culprit,))


@pytest.mark.parametrize(("script", "clash"), [
    ({frozenset(range(8)): [Outcome.BAD, Outcome.GOOD]}, (0, 1)),  # the new lock's env, then within tolerance
    ({frozenset({5}): [Outcome.BAD, Outcome.GOOD]}, "alone"),  # the culprit alone, then within tolerance
    ({frozenset(range(8)) - {5}: [Outcome.GOOD, Outcome.BAD]}, "rest"),  # the others without it, then out
], ids=["whole", "alone", "rest"])
def test_a_decisive_trial_whose_repeat_disagrees_stops_the_search_as_flaky(
        script: dict[frozenset[int], list[Outcome]], clash: object) -> None:
    trial, _ = _trial(script, lambda s: 5 in s)
    result = bisect_search.search(8, trial)
    assert (result.verdict, result.culprit) == (Verdict.FLAKY, ()) and result.clash is not None
    first, again = (result.trials[i] for i in result.clash)
    assert first.subset == again.subset == next(iter(script)) and again.repeat and not first.repeat
    assert first.outcome is not again.outcome
    if clash == (0, 1):
        assert result.clash == clash and len(result.trials) == 2  # stopped before any bisection
    untouched, _ = _trial({}, lambda s: 5 in s)  # the same search, every run alike: named
    assert _named(bisect_search.search(8, untouched)) == (5,)


def test_a_culprit_of_several_groups_confirms_each_is_needed() -> None:
    """Groups 2 and 6 together leave the tolerance: named, after 2 alone and 6 alone were each within tolerance three
    times and each step that made a group join was repeated. A set with a group that is not needed is not named:
    group 5 fails alone, but its first run alone passed by chance (the search took 0 as its partner)."""
    trial, runs = _trial({}, lambda s: {2, 6} <= s)
    result = bisect_search.search(8, trial)
    assert (result.verdict, result.culprit, result.alone) == (Verdict.FOUND, (2, 6), True)
    assert runs.count(frozenset({2})) == runs.count(frozenset({6})) == 3
    trial, _ = _trial({frozenset({5}): [Outcome.GOOD]}, lambda s: 5 in s)  # then out of tolerance, run after run
    lucky = bisect_search.search(8, trial)
    assert lucky.verdict is Verdict.FLAKY and lucky.culprit == ()
    trial, _ = _trial({frozenset({5}): [Outcome.GOOD]}, lambda s: 5 in s)
    assert _named(bisect_search.search(8, trial, confirm=False)) == (0, 5)  # the control: an innocent named
    # a confirming trial that is flaky itself (failed, then ran on its rerun) confirms nothing: the search stops
    trial, _ = _trial({}, lambda s: {2, 6} <= s)
    result = bisect_search.search(8, lambda s: Outcome.FLAKY if s == frozenset({2}) else trial(s))
    assert (result.verdict, result.culprit) == (Verdict.FLAKY, ()) and result.trials[-1].subset == frozenset({2})


def test_the_record_says_which_trials_were_repeated_and_what_disagreed(tmp_path: Path) -> None:
    """bisect.md and bisect.json from a search that stopped on a repeat that disagrees (the culprit alone out of
    tolerance, then within), and from one whose confirming trial contradicts the culprit found (two culprits)."""
    from kernodeck.upgrade.relock import Drift

    good = lockfile.read(write_lock(tmp_path / "old.txt", OLD))
    bad = lockfile.read(write_lock(tmp_path / "new.txt", NEW))
    d = lockdiff.diff(good, bad, old_label="old.txt", new_label="new.txt")
    groups = [bisect_search.Group((c,)) for c in d.changes]
    n = len(groups)

    def record(trials: tuple[bisect_search.Trial, ...]) -> list[bisect_report.TrialRecord]:
        out: list[bisect_report.TrialRecord] = []
        for number, t in enumerate(trials, start=1):
            moved = tuple(sorted(groups[i].changes[0].name for i in t.subset))
            first = next((r.number for r in out if r.moved == moved), None) if t.repeat else None
            out.append(bisect_report.TrialRecord(number, moved, t.outcome, 1.0, "x", Drift((), None, ""),
                                                 repeat_of=first))
        return out

    trial, _ = _trial({frozenset({1}): [Outcome.BAD, Outcome.GOOD]}, lambda s: 1 in s)
    flaky = bisect_search.search(n, trial)
    records = record(flaky.trials)
    assert flaky.verdict is Verdict.FLAKY and flaky.clash is not None
    a, b = (i + 1 for i in flaky.clash)
    text = bisect_report.render(flaky, groups, records, d, "p")
    assert (f"Stopped, no culprit named: trial {a} gave out of tolerance then its repeat, trial {b}, gave within "
            "tolerance (the same pins)") in text
    assert f"| within tolerance (repeat of try-{a:02d}) |" in text
    assert "Repeated to confirm the trials that decide (" in text
    data = bisect_report.summary(flaky, groups, records, "p", list(range(1, len(records) + 1)), d)
    assert data["clash"] == [a, b] and data["trials"][b - 1]["repeat_of"] == a
    assert {"trial": a, "moved": [groups[1].names[0]], "repeats": [b],
            "outcomes": ["out of tolerance", "within tolerance"]} in data["repeated"]
    two, _ = _fake(lambda s: 0 in s or 2 in s)
    unconfirmed = bisect_search.search(n, two)
    text = bisect_report.render(unconfirmed, groups, record(unconfirmed.trials), d, "p")
    assert f"No culprit named: the search found {groups[0].label()}, but trial" in text
    assert "and so did its repeat" in text and "more than one change moves the outputs" in text
