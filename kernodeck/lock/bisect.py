"""``nox -s bisect -- --good OLD_LOCK --bad NEW_LOCK``: which changed pins move the outputs out of tolerance.

The search (:func:`search`) is pure: it is given the number of change groups and a ``probe(subset) -> Outcome``, and
returns the smallest set of groups found responsible with every subset it tried. :func:`bisect_locks` gives it the
real probe: an env built from the OLD lock with the subset's pins taken from the NEW lock (their lines and hashes as
the new lock has them), in a scratch folder under ``runs/``, where only the application and the comparison with the
reference run (the in-env runner with a subset of its steps).

Bound: the new lock's env first (all changes: within tolerance means "no culprit"), then a bisection over the ordered
groups for the first one whose addition leaves the tolerance: ``1 + ceil(log2(n))`` rebuilds for one culprit among
``n`` groups, plus one to confirm that the culprit alone suffices when the bisection did not already build it alone.
Groups that must move together (a new version that requires another new version) are kept together; a combination
that cannot be installed consistently is skipped and said so, never guessed.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

from packaging.markers import InvalidMarker, UndefinedComparison, UndefinedEnvironmentName
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kernodeck._fs import sha256_file, write_atomic, write_json
from kernodeck._proc import log
from kernodeck.errors import KernodeckError
from kernodeck.lock import lockdiff, lockfile
from kernodeck.lock.upgrade import Drift, cell, render_drift
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform

# The in-env steps a bisection needs: settings and backend (the run's device and pinned knobs), the reference read
# back, the application, its outputs reread and compared, and the criterion.
STEPS = ("settings", "backend", "reference", "application", "reread", "compare", "criterion")


class Outcome(enum.StrEnum):
    GOOD = "within tolerance"
    BAD = "out of tolerance"
    SKIPPED = "inconsistent, skipped"


class Verdict(enum.StrEnum):
    FOUND = "found"
    NO_CULPRIT = "no culprit"  # the new lock's env is within tolerance
    NO_CHANGES = "no changes"  # the two locks pin the same packages
    BAD_UNBUILDABLE = "new lock unbuildable"  # the new lock's own env could not be built
    AMBIGUOUS = "ambiguous"  # skipped combinations left more than one candidate
    OVER_BUDGET = "over budget"


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


def search(n: int, probe: Callable[[frozenset[int]], Outcome], *, budget: int | None = None) -> SearchResult:
    """The smallest set of groups (``0..n-1``, in order) whose moving to the new lock leaves the tolerance.

    The old lock (no group moved) is the reference's env: assumed within tolerance, never rebuilt. Each round bisects
    the groups not yet chosen for the first prefix that, on top of those chosen, leaves the tolerance; its last group
    joins the culprit set; the set alone is then tried, and the search ends when it leaves the tolerance alone.
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
            case Outcome.BAD:
                pass
            case _:
                assert_never(whole)
        pool = list(range(n))  # chosen + pool is known to leave the tolerance
        while True:
            if chosen:
                alone = test(frozenset(chosen))
                if alone is Outcome.BAD:
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
                if result is Outcome.BAD:
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


_METADATA_SCRIPT = r"""
import importlib.metadata as m, json, os, platform, sys
env = {"implementation_name": sys.implementation.name,
       "implementation_version": ".".join(str(p) for p in sys.implementation.version[:3]),
       "os_name": os.name, "platform_machine": platform.machine(), "platform_release": platform.release(),
       "platform_system": platform.system(), "platform_version": platform.version(),
       "python_full_version": platform.python_version(),
       "platform_python_implementation": platform.python_implementation(),
       "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform}
dists = {d.metadata["Name"]: d.requires or [] for d in m.distributions() if d.metadata["Name"]}
print(json.dumps({"env": env, "requires": dists}))
"""


def env_requirements(python: Path) -> tuple[dict[str, list[str]], dict[str, str]]:
    """Each installed distribution's Requires-Dist (by canonical name) and the env's marker environment."""
    argv = [str(python), "-I", "-c", _METADATA_SCRIPT]
    log("$ " + " ".join([str(python), "-I", "-c", "<read each distribution's Requires-Dist>"]))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise KernodeckError(f"reading the packages' requirements in {python} failed: {proc.stderr.strip()[-400:]}")
    data = json.loads(proc.stdout)
    return {canonicalize_name(k): list(v) for k, v in data["requires"].items()}, dict(data["env"])


# --- intermediate locks ---------------------------------------------------------------------------------------------


def _pin_text(pin: lockfile.Pin) -> str:
    marker = f" ; {pin.marker}" if pin.marker else ""
    return f"{pin.name}=={pin.version}{marker}" + "".join(f" \\\n    --hash=sha256:{h}" for h in pin.hashes) + "\n"


def intermediate_lock(good: lockfile.Lockfile, bad: lockfile.Lockfile, names: set[str], note: str) -> str:
    """The old lock with the pins of ``names`` as the new lock has them (added, removed or changed), sealed."""
    new_pins = {p.name: p for p in bad.pins}
    pins = {p.name: p for p in good.pins if p.name not in names}
    pins.update({name: new_pins[name] for name in names if name in new_pins})
    body = "".join(_pin_text(pins[name]) for name in sorted(pins))
    header = [(k, v) for k, values in good.header.items() if k not in (lockfile.BODY_DIGEST, "packages")
              for v in values]
    header += [("bisect", note), ("packages", str(len(pins)))]
    return lockfile.render(header, body)


# --- the real probe -------------------------------------------------------------------------------------------------


@dataclass
class TrialRecord:
    number: int
    moved: tuple[str, ...]  # the names whose pins came from the new lock
    outcome: Outcome
    seconds: float
    note: str
    drift: Drift | None
    rebuilt: bool = True  # False: the platform's current env was the new lock's and was used as it is


@dataclass(frozen=True)
class BisectResult:
    search: SearchResult
    groups: tuple[Group, ...]
    records: tuple[TrialRecord, ...]
    folder: Path
    markdown: str


def _outcome_of(drift: Drift) -> Outcome:
    return Outcome.GOOD if drift.holds else Outcome.BAD


def bisect_locks(project: Project, plat: Platform, good_path: Path, bad_path: Path, *, installer: str | None = None,
                 out: Path | None = None) -> BisectResult:
    """Find the changes from ``good_path`` to ``bad_path`` that move the application's outputs out of tolerance."""
    from kernodeck import outdir
    from kernodeck.dossier import reference as refmod
    from kernodeck.env.rebuild import MARKER, current_env, env_python, platform_lock, rebuild
    from kernodeck.project import application
    from kernodeck.verify import Run, require_declared_contract, run_checks

    good, bad = lockfile.read(good_path), lockfile.read(bad_path)
    for name, lock in (("--good", good), ("--bad", bad)):
        if lock.first("platform") != plat.id:  # another platform's pins would build an env for nothing here
            raise KernodeckError(f"{name} {lock.path} is the lock of {lock.first('platform') or 'no platform'}, "
                                 f"not of {plat.id}", tip=f"nox -s bisect -- --platform {lock.first('platform')} ...")
    d = lockdiff.diff(good, bad, old_label=str(good_path), new_label=str(bad_path))
    ref = refmod.load(project)
    require_declared_contract(project, ref, application.load(project.root))
    config: dict[str, Any] = {**ref.run_config(project), "project_root": str(project.root),
                              "expect_backend": str(plat.variant.backend), "mode": "verify", "sample_repeat": 1}
    folder = outdir.check(out or project.runs / f"bisect-{time.strftime('%Y%m%d-%H%M%S')}-{plat.id}",
                          what="the bisect's folder", tip="nox -s bisect -- ... --out NEW-FOLDER",
                          root=project.root, allowed=(project.runs,))
    if folder.exists():
        shutil.rmtree(folder)  # outdir.check accepted it: a folder Kernodeck made, or an empty one
    folder.mkdir(parents=True)
    outdir.mark(folder, "bisect")
    changes = d.changes
    groups: list[Group] = [Group((c,)) for c in changes]  # until the new env's metadata regroups them
    records: list[TrialRecord] = []
    limit = bound(max(len(changes), 1))

    def names_of(subset: frozenset[int]) -> set[str]:
        return {name for i in subset for name in groups[i].names}

    bad_digest = "sha256:" + sha256_file(bad_path)

    def new_lock_env() -> Path | None:
        """The platform's current env when it was built from the new lock (as ``upgrade`` leaves it): used as it is."""
        env = current_env(project, plat)
        if env is None:
            return None
        try:
            marker = json.loads((env / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return env if marker.get("lock_digest") == bad_digest else None

    def probe(subset: frozenset[int]) -> Outcome:
        number = len(records) + 1
        names = names_of(subset)
        whole = len(subset) == len(groups)
        shown = f"all {len(names)} changes (the new lock)" if whole else ", ".join(sorted(names))
        trial = folder / f"try-{number:02d}"
        (trial / "lockfiles").mkdir(parents=True)
        lock_path = trial / "lockfiles" / plat.lock_name
        write_atomic(lock_path, intermediate_lock(good, bad, names, f"old lock + new pins of {shown}"))
        reuse = new_lock_env() if whole else None
        log(f"kernodeck: bisect [{number}/≤{limit}]: old lock + {shown}: "
            f"{'the current env (built from the new lock)' if reuse else 'rebuild'} + application + compare")
        scratch = dataclasses.replace(project, venv_root=trial / "venv", lockfiles=trial / "lockfiles", runs=trial)
        t0 = time.perf_counter()
        guard = platform_lock(project if reuse else scratch, plat)
        guard.acquire()
        try:
            try:
                if reuse is not None:
                    python = env_python(reuse)
                else:
                    python = rebuild(scratch, plat, lock_path, installer=installer, fresh=True,
                                     observe_reused=False).python
            except KernodeckError as exc:
                note = f"cannot be installed consistently: {str(exc).splitlines()[0][:300]}"
                records.append(TrialRecord(number, tuple(sorted(names)), Outcome.SKIPPED,
                                           time.perf_counter() - t0, note, None))
                log(f"kernodeck: bisect [{number}]: skipped: {note}")
                return Outcome.SKIPPED
            if number == 1 and whole:
                regroup(python)
            run_ = Run(project, plat, trial)
            run_checks(run_, python, STEPS, config)
        finally:
            guard.release()
            shutil.rmtree(trial / "venv", ignore_errors=True)  # the env is not kept: its lock is, beside its steps
        drift = Drift.from_steps([s.as_dict() for s in run_.steps])
        outcome = _outcome_of(drift)
        numbers = "; ".join(o.summary for o in drift.outputs) or drift.failure
        records.append(TrialRecord(number, tuple(sorted(names)), outcome, time.perf_counter() - t0, numbers, drift,
                                   rebuilt=reuse is None))
        log(f"kernodeck: bisect [{number}]: {outcome} ({time.perf_counter() - t0:.1f}s): {numbers}")
        return outcome

    def regroup(python: Path) -> None:
        """After the new lock's env: groups from its packages' requirements (the first probe tried them all)."""
        requires, marker_env = env_requirements(python)
        groups[:] = group_changes(changes, good.versions(), requires, marker_env)
        joined = [g.label() for g in groups if len(g.changes) > 1]
        log(f"kernodeck: bisect: {len(changes)} changed packages in {len(groups)} groups"
            + (f"; moving together: {'; '.join(joined)}" if joined else ""))

    log(f"kernodeck: bisect {plat.id}: {len(changes)} changed packages between {good_path} and {bad_path}")
    # The first probe is the whole set whatever the grouping; the search is told the groups' count after it.
    first = probe(frozenset(range(len(groups)))) if changes else None
    cached = {frozenset(range(len(groups))): first} if first is not None else {}

    def probe_cached(subset: frozenset[int]) -> Outcome:
        return cached[subset] if subset in cached else probe(subset)

    result = search(len(groups), probe_cached)
    markdown = render(result, groups, records, d, plat.id)
    write_atomic(folder / "bisect.md", markdown)
    write_json(folder / "bisect.json", {
        "version": 1, "platform": plat.id, "verdict": str(result.verdict),
        "culprit": [list(groups[i].names) for i in result.culprit], "alone": result.alone,
        "candidates": [list(groups[i].names) for i in result.candidates], "envs": len(records),
        "rebuilds": sum(r.rebuilt for r in records),
        "bound": bound(max(len(groups), 1)),
        "groups": [list(g.names) for g in groups],
        "trials": [{"number": r.number, "moved": list(r.moved), "outcome": str(r.outcome),
                    "seconds": round(r.seconds, 2), "note": r.note, "rebuilt": r.rebuilt} for r in records],
    })
    return BisectResult(result, tuple(groups), tuple(records), folder, markdown)


def render(result: SearchResult, groups: list[Group], records: list[TrialRecord], d: lockdiff.LockDiff,
           platform: str) -> str:
    """The bisect's report: the verdict, the culprit with its numbers, and every env tried."""
    lines = [f"## Bisect of {platform}", "",
             f"From `{d.old.label}` to `{d.new.label}`: {len(d.changes)} changed packages in {len(groups)} groups; "
             f"{len(records)} env(s) tried, {sum(r.rebuilt for r in records)} rebuilt (bound for one culprit: "
             f"{bound(max(len(groups), 1))}, or one less when the current env is the new lock's).", ""]
    match result.verdict:
        case Verdict.FOUND:
            names = " + ".join(groups[i].label() for i in result.culprit)
            how = {True: "alone, on the old lock, it leaves the tolerance",
                   False: "it leaves the tolerance with the changes before it in the search, not alone",
                   None: "alone it could not be installed consistently"}[result.alone]
            lines.append(f"**Culprit: {names}** ({how}).")
            wanted = {n for i in result.culprit for n in groups[i].names}
            culprit_record = next((r for r in records if set(r.moved) == wanted), None)
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
        case _:
            assert_never(result.verdict)
    lines += ["", "| env | moved to the new lock | outcome | seconds | numbers |", "|---|---|---|---|---|"]
    every = {c.name for c in d.changes}
    for r in records:
        moved = "all (the new lock)" if set(r.moved) == every else ", ".join(r.moved)
        lines.append(f"| try-{r.number:02d} | {moved} | {r.outcome} | {r.seconds:.1f} | {cell(r.note)} |")
    return "\n".join(lines) + "\n"
