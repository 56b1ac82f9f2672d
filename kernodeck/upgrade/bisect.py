"""``nox -s bisect -- --good OLD_LOCK --bad NEW_LOCK``: which changed pins move the outputs out of tolerance.

The search (:func:`search`) is pure: it is given the number of change groups and a ``probe(subset) -> Outcome``, and
returns the smallest set of groups found responsible with every subset it tried. :func:`bisect_locks` gives it the
real probe: an env built from the OLD lock with the subset's pins taken from the NEW lock (their lines and hashes as
the new lock has them), in a scratch folder under ``runs/``, where only the application and the comparison with the
reference run (the in-env runner with a subset of its steps).

Bound: the new lock's env first (all changes: within tolerance means "no culprit"), then a bisection over the ordered
groups for the first one whose addition leaves the tolerance: ``1 + ceil(log2(n))`` trials for one culprit among
``n`` groups, plus one to build the culprit alone when the bisection did not, plus the trials that decide the answer
run once more (:func:`search`: at most 4 more for one culprit; :func:`bound`). Groups that must move together (a new
version requiring another new version) are kept together; a combination that cannot be installed is skipped, said so.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from kernodeck import outdir, tips
from kernodeck._fs import sha256_file, write_atomic, write_json
from kernodeck._proc import log
from kernodeck.errors import Interrupted, KernodeckError
from kernodeck.inenv import steptable
from kernodeck.lock import lockdiff, lockfile
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.upgrade.bisect_report import TrialRecord, render, summary
from kernodeck.upgrade.bisect_search import (
    Group,
    Outcome,
    SearchResult,
    bound,
    group_changes,
    rerun_words,
    search,
    settle,
)
from kernodeck.upgrade.relock import Drift, DriftVerdict, ended_steps
from kernodeck.verify.context import declaration
from kernodeck.verify.runbuild import Changes, ReferenceConfig, holding, runner_config

# The in-env steps a bisection needs, its rows' ``bisect`` (kernodeck/inenv/steptable.py): settings and backend (the
# run's device and pinned knobs), the reference read back, the application, its outputs reread and compared, and the
# criterion; in run order.
STEPS = tuple(row.name for row in steptable.STEPS if row.bisect)

# A rebuilt trial's env is kept for a later trial of the same lock (a repeat that confirms it): the envs of the last
# KEEP rebuilt trials, so that at most KEEP + 1 envs are on disk while one is built. Reusing one goes through
# rebuild's reuse check, which binds it to the lock: same lock digest and interpreter, the wheels it recorded are
# the lock's, its files unchanged since its build.
KEEP = 2


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


@dataclass(frozen=True)
class BisectResult:
    search: SearchResult
    groups: tuple[Group, ...]
    records: tuple[TrialRecord, ...]
    folder: Path
    markdown: str


# A trial's outcome is its run's verdict, upgrade's word for word (relock.DriftVerdict).
_OUTCOME = {DriftVerdict.HOLDS: Outcome.GOOD, DriftVerdict.OUT: Outcome.BAD, DriftVerdict.NOT_VERIFIED: Outcome.FAILED}


class _Unbuildable(Exception):
    """A trial's env could not be built (its combination of pins is inconsistent): the trial is skipped."""


class _Trials:
    """The real probe: an env built from the old lock with a subset's pins taken from the new lock, in a scratch
    folder of its own under the bisect's folder, where the application runs and is compared with the reference."""

    def __init__(self, project: Project, plat: Platform, good: lockfile.Lockfile, bad: lockfile.Lockfile,
                 changes: tuple[lockdiff.PackageChange, ...], bad_digest: str, folder: Path, config: dict[str, Any],
                 installer: str | None) -> None:
        self.project, self.plat, self.good, self.bad = project, plat, good, bad
        self.changes, self.bad_digest = changes, bad_digest
        self.folder, self.config, self.installer = folder, config, installer
        self.groups: list[Group] = [Group((c,)) for c in changes]  # until the new env's metadata regroups them
        self.records: list[TrialRecord] = []
        self.limit = bound(max(len(changes), 1))
        self.kept: dict[str, tuple[int, Path]] = {}  # lock digest -> the trial that built the kept env, its folder
        self.written: dict[str, str | None] = {}  # what it wrote in its folder, each trial's taken as it ended

    def names_of(self, subset: frozenset[int]) -> set[str]:
        return {name for i in subset for name in self.groups[i].names}

    def new_lock_env(self) -> Path | None:
        """The platform's current env when it was built from the new lock (as ``upgrade`` leaves it): used as it is."""
        from kernodeck.env.envdirs import MARKER, current_env

        env = current_env(self.project, self.plat)
        if env is None:
            return None
        try:
            marker = json.loads((env / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if marker.get("lock_digest") != self.bad_digest:
            return None
        from kernodeck.env.sealing import checked_python

        try:  # its files the build's, checked before its interpreter starts; else the trial rebuilds it
            checked_python(env)
        except KernodeckError as exc:
            log(f"kernodeck: bisect: the current env is not used: {str(exc).splitlines()[0][:300]}")
            return None
        return env

    def probe(self, subset: frozenset[int]) -> Outcome:
        """One trial, its entries taken as it ends (its env's venv/ left out: removed when the bisect ends)."""
        trial = self.folder / f"try-{len(self.records) + 1:02d}"
        try:
            return self._probe(subset)
        finally:
            self.written |= outdir.entries(self.folder, trial, skip="venv")

    def _probe(self, subset: frozenset[int]) -> Outcome:
        number = len(self.records) + 1
        names = self.names_of(subset)
        whole = len(subset) == len(self.groups)
        shown = (f"all {len(names)} changes (the new lock)" if whole else ", ".join(sorted(names)) if names
                 else "no change (the old lock itself)")
        trial = self.folder / f"try-{number:02d}"
        (trial / "lockfiles").mkdir(parents=True)
        lock_path = trial / "lockfiles" / self.plat.lock_name
        write_atomic(lock_path, intermediate_lock(self.good, self.bad, names, f"old lock + new pins of {shown}"))
        reuse = self.new_lock_env() if whole else None
        digest = "sha256:" + sha256_file(lock_path)
        kept = self.kept.get(digest) if reuse is None else None
        repeat_of = next((r.number for r in self.records if set(r.moved) == names and r.repeat_of is None), None)
        env = ("the current env (built from the new lock)" if reuse else
               f"the env of try-{kept[0]:02d} (same lock)" if kept else "rebuild")
        log(f"kernodeck: bisect [{number}/≤{self.limit}]: old lock + {shown}: {env} + application + compare"
            + (f" (again, to confirm try-{repeat_of:02d})" if repeat_of else ""))
        t0 = time.perf_counter()
        try:
            steps, outcome, rerun, env_of = self.run(trial, lock_path, reuse, digest, regroup=number == 1 and whole)
        except _Unbuildable as exc:
            note = str(exc)
            self.records.append(TrialRecord(number, tuple(sorted(names)), Outcome.SKIPPED,
                                            time.perf_counter() - t0, note, None, repeat_of=repeat_of))
            log(f"kernodeck: bisect [{number}]: skipped: {note}")
            return Outcome.SKIPPED
        drift = Drift.from_steps(steps)
        numbers = "; ".join(o.summary for o in drift.outputs) or drift.failure
        if rerun is not None:
            numbers = f"trial {number} failed, rerun: {rerun_words(rerun)} ({trial.name}/rerun/); {numbers}"
        self.records.append(TrialRecord(number, tuple(sorted(names)), outcome, time.perf_counter() - t0, numbers,
                                        drift, rebuilt=reuse is None and env_of is None, rerun=rerun,
                                        repeat_of=repeat_of, env_of=env_of))
        log(f"kernodeck: bisect [{number}]: {outcome} ({time.perf_counter() - t0:.1f}s): {numbers}")
        return self.for_search(outcome, drift) if number > 1 and names else outcome

    def for_search(self, outcome: Outcome, drift: Drift) -> Outcome:
        """A failure the new lock's env does not show (it computed, out of tolerance; or it failed otherwise) is a
        combination of pins that does not work, not the change under search: skipped, like an inconsistent one."""
        whole = self.records[0]
        if outcome is not Outcome.FAILED or whole.drift is None:
            return outcome
        if whole.outcome is Outcome.FAILED and _first_line(whole.drift.failure) == _first_line(drift.failure):
            return outcome
        log(f"kernodeck: bisect: this failure is not the new lock's ({whole.outcome}): skipped as inconsistent")
        return Outcome.SKIPPED

    def run(self, trial: Path, lock_path: Path, reuse: Path | None, digest: str, *,
            regroup: bool) -> tuple[list[dict[str, Any]], Outcome, Outcome | None, int | None]:
        """The trial's env (``reuse``; the kept env of an earlier trial of the same lock, when rebuild's reuse check
        accepts it for ``lock_path``; or rebuilt from it), the application's steps run in it (again into ``rerun/``
        after a failure: :func:`settle`): the steps, the outcome for the search, the rerun's, and the earlier trial
        whose env was used. Raises :class:`_Unbuildable` when the env cannot be built; the env is kept for a later
        trial of the same lock (:data:`KEEP`), its lock beside its steps."""
        from kernodeck.env.envdirs import env_python
        from kernodeck.env.rebuild import rebuild

        earlier = self.kept.pop(digest, None) if reuse is None else None
        home = earlier[1] if earlier else trial  # the folder whose venv/ holds the trial's env
        scratch = dataclasses.replace(self.project, venv_root=home / "venv", lockfiles=trial / "lockfiles", runs=trial)
        env_of, keep = None, False
        try:
            with holding(self.project if reuse else scratch, self.plat):
                try:
                    if reuse is not None:
                        python = env_python(reuse)
                    else:  # a kept env is observed against the lock (observe_reused), like any reused env
                        built = rebuild(scratch, self.plat, lock_path, installer=self.installer, fresh=earlier is None,
                                        observe_reused=earlier is not None)
                        python = built.python
                        env_of = earlier[0] if earlier and built.reused else None
                except KernodeckError as exc:
                    raise _Unbuildable(f"cannot be installed consistently: {str(exc).splitlines()[0][:300]}") from exc
                if regroup:
                    self.regroup(python)
                steps = self.checks(python, trial)

                def again() -> Outcome:
                    log("kernodeck: bisect: failed before the comparison: run once more in the same env "
                        "(a flaky failure is no culprit)")
                    return _OUTCOME[Drift.from_steps(self.checks(python, trial / "rerun")).verdict]

                outcome, rerun = settle(_OUTCOME[Drift.from_steps(steps).verdict], again)
            keep = reuse is None
        finally:
            if keep:
                self.keep(digest, env_of or int(trial.name.split("-")[1]), home)
            else:
                shutil.rmtree(home / "venv", ignore_errors=True)
        return steps, outcome, rerun, env_of

    def keep(self, digest: str, number: int, home: Path) -> None:
        """Keep ``home``'s env (built by trial ``number``) for a later trial of the same lock; drop the oldest kept
        beyond :data:`KEEP`."""
        self.kept[digest] = (number, home)
        while len(self.kept) > KEEP:
            shutil.rmtree(self.kept.pop(next(iter(self.kept)))[1] / "venv", ignore_errors=True)

    def close(self) -> None:
        """The kept envs removed (the trials' locks and steps stay)."""
        while self.kept:
            shutil.rmtree(self.kept.popitem()[1][1] / "venv", ignore_errors=True)

    def checks(self, python: Path, folder: Path) -> list[dict[str, Any]]:
        """The application's steps run once in ``python``'s env, into ``folder``: their records."""
        from kernodeck.verify.pipeline import Run
        from kernodeck.verify.steps.in_env import run_checks

        folder.mkdir(parents=True, exist_ok=True)
        run_ = Run(self.project, self.plat, folder)
        run_checks(run_, python, STEPS, self.config)
        if run_.meta.interrupted:  # a signal: no further trial; this one's steps and stacks stay
            raise Interrupted(f"the bisect was interrupted ({run_.meta.interrupted['signal']}) during trial "
                              f"{folder.name}; its steps and stacks are in {folder / 'steps'}",
                              tip=tips.nox("bisect", "--good", "OLD_LOCK", "--bad", "NEW_LOCK"))
        return ended_steps([s.as_dict() for s in run_.steps], run_.meta.runner_end)

    def regroup(self, python: Path) -> None:
        """After the new lock's env: groups from its packages' requirements (the first probe tried them all)."""
        requires, marker_env = env_requirements(python)
        self.groups[:] = group_changes(self.changes, self.good.versions(), requires, marker_env)
        joined = [g.label() for g in self.groups if len(g.changes) > 1]
        log(f"kernodeck: bisect: {len(self.changes)} changed packages in {len(self.groups)} groups"
            + (f"; moving together: {'; '.join(joined)}" if joined else ""))


def _folder(project: Project, plat: Platform, out: Path | None) -> Path:
    """The bisect's folder, new (or one Kernodeck made before, emptied), marked as Kernodeck's."""
    folder = outdir.check(out or project.runs / f"bisect-{time.strftime('%Y%m%d-%H%M%S')}-{plat.id}",
                          what="the bisect's folder", tip=tips.nox("bisect", "...", "--out", "NEW-FOLDER"),
                          root=project.root, allowed=(project.runs,))
    if folder.exists():
        shutil.rmtree(folder)  # outdir.check accepted it: a folder Kernodeck made, or an empty one
    folder.mkdir(parents=True)
    outdir.mark(folder, "bisect")
    return folder


# What bisect changes from verify's runner configuration: nothing (each trial's env is another lock's, and only the
# application's steps run in it: STEPS, handed to the runner as verify hands it its steps).
CHANGES = Changes()


def trial_config(project: Project, ref: ReferenceConfig, backend: str) -> dict[str, Any]:
    """The runner configuration of every trial: verify's, with :data:`CHANGES`."""
    return runner_config(project, declaration(project), ref, backend, CHANGES, session="bisect")


def bisect_locks(project: Project, plat: Platform, good_path: Path, bad_path: Path, *, installer: str | None = None,
                 out: Path | None = None) -> BisectResult:
    """Find the changes from ``good_path`` to ``bad_path`` that move the application's outputs out of tolerance."""
    from kernodeck.runformat import manifest
    from kernodeck.verify.steps.declared import require_declared_contract

    good, bad = lockfile.read(good_path), lockfile.read(bad_path)
    for name, lock in (("--good", good), ("--bad", bad)):
        if lock.first("platform") != plat.id:  # another platform's pins would build an env for nothing here
            raise KernodeckError(f"{name} {lock.path} is the lock of {lock.first('platform') or 'no platform'}, "
                                 f"not of {plat.id}",
                                 tip=tips.nox("bisect", "--platform", lock.first("platform"), "..."))
    d = lockdiff.diff(good, bad, old_label=str(good_path), new_label=str(bad_path))
    ref = manifest.load(project)
    require_declared_contract(project, ref, declaration(project).application())
    config = trial_config(project, ref, str(plat.variant.backend))
    folder = _folder(project, plat, out)
    trials = _Trials(project, plat, good, bad, d.changes, "sha256:" + sha256_file(bad_path), folder, config, installer)
    log(f"kernodeck: bisect {plat.id}: {len(d.changes)} changed packages between {good_path} and {bad_path}")
    return _bisect(trials, d, plat, folder)


def _bisect(trials: _Trials, d: lockdiff.LockDiff, plat: Platform, folder: Path) -> BisectResult:
    """:func:`bisect_locks`' search over ``trials`` and its report; then the kept envs removed and the folder signed
    again with the entries its trials and report wrote, finished or stopped, so that the next bisect --out here may
    replace it (pass 39, OUT5), but not a file the user put there meanwhile (pass 40, OUT7)."""
    try:
        return _search(trials, d, plat, folder)
    finally:
        trials.close()
        trials.written |= outdir.entries(folder, folder / "bisect.md") | outdir.entries(folder, folder / "bisect.json")
        outdir.mark(folder, "bisect", trials.written)


def _search(trials: _Trials, d: lockdiff.LockDiff, plat: Platform, folder: Path) -> BisectResult:
    """The search over ``trials``, and its report."""
    # The first probe is the whole set whatever the grouping; the search is told the groups' count after it.
    first = trials.probe(frozenset(range(len(trials.groups)))) if d.changes else None
    if first is Outcome.FAILED:  # a failure the old lock's env shares is no change of pins: nothing to bisect
        _require_old_lock_runs(trials, folder)
    cached = {frozenset(range(len(trials.groups))): first} if first is not None else {}
    numbers: list[int] = []  # the record of each of the search's trials (the old lock's, when tried, is none)

    def probe_cached(subset: frozenset[int]) -> Outcome:  # the first probe once; its repeat is a trial of its own
        outcome = cached.pop(subset) if subset in cached else trials.probe(subset)
        numbers.append(1 if len(numbers) == 0 and first is not None else trials.records[-1].number)
        return outcome

    result = search(len(trials.groups), probe_cached)
    groups, records = trials.groups, trials.records
    markdown = render(result, groups, records, d, plat.id, numbers)
    write_atomic(folder / "bisect.md", markdown)
    write_json(folder / "bisect.json", summary(result, groups, records, plat.id, numbers, d))
    return BisectResult(result, tuple(groups), tuple(records), folder, markdown)


def _first_line(failure: str) -> str:
    return failure.strip().splitlines()[0] if failure.strip() else ""


def _require_old_lock_runs(trials: _Trials, folder: Path) -> None:
    """The old lock's own env (never rebuilt otherwise: it is the reference's) when the new lock's env failed before
    the comparison; raises when it fails too, naming its failure."""
    old = trials.probe(frozenset())
    if old is Outcome.GOOD:
        return
    note = trials.records[-1].note
    if old is Outcome.FLAKY:
        raise KernodeckError(f"the application is flaky on the old lock's env ({note[:400]}): a bisect needs runs that "
                             f"repeat, nothing to bisect (the trials: {folder})",
                             tip=tips.nox("verify") + " (make the application's run repeat, then bisect again)")
    raise KernodeckError(f"the application fails on the old lock's env too ({note[:400]}): the search needs the old "
                         f"lock's env to run, nothing to bisect (the trials: {folder})",
                         tip=tips.nox("verify") + " (fix what fails, then bisect again)")
