"""``nox -s upgrade``: relock (optionally as of a date), show the lock diff, then verify the new env against the
EXISTING reference, so the user reads per output whether the upgrade still computes what the reference computed.

Nothing of the old lock is lost until the user commits: the new lock (and its PEP 751 twin) take the lockfiles' place
(verify, rebuild and CI read them there), and the old pair is kept in the upgrade's folder under ``runs/`` (``old/``),
beside the Markdown diff and the verify dossier. ``git diff lockfiles/`` shows the same change; ``git checkout`` or
the copy in ``old/`` undoes it.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, assert_never

from kernodeck import outdir, tips
from kernodeck._fs import write_atomic, write_json
from kernodeck._proc import log
from kernodeck.errors import Interrupted, KernodeckError, MissingLockfile, UnsafeOut
from kernodeck.inenv import kinds
from kernodeck.lock import lockdiff, lockfile
from kernodeck.lock.compile import compile_lock
from kernodeck.lock.inputs import RESOLVERS, as_of_instant, lock_path, pylock_path
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify.context import Options
from kernodeck.verify.record import reported


@dataclass(frozen=True)
class OutputDrift:
    """One output's numbers against the reference, under its declared tolerance."""

    name: str
    kind: str
    passed: bool
    max_abs: float | None
    min_cosine: float | None
    agreement: float | None  # share of rows equal (agreement and exact kinds)
    allowed: str
    summary: str

    @classmethod
    def from_compare(cls, name: str, d: dict[str, Any]) -> OutputDrift:
        """From one entry of the compare step's ``outputs`` (kernodeck/inenv/tolerance.py's numbers)."""
        kind = str(d.get("kind", "?"))
        allowed = kinds.get(kind).allowed(d) if kind in kinds.KINDS else "equal"  # the kind's words (kinds.py)

        def num(key: str) -> float | None:
            value = d.get(key)
            return float(value) if isinstance(value, int | float) else None

        return cls(name=name, kind=kind, passed=bool(d.get("passed")), max_abs=num("max_abs"),
                   min_cosine=num("min_cosine"), agreement=num("equal_share"), allowed=allowed,
                   summary=str(d.get("summary", "")))


class DriftVerdict(StrEnum):
    """What an upgrade (and a bisect trial) says of the new env's run against the reference: one word each for the
    exit code, ``upgrade.json``, the drift table and the relock pull request's row."""

    HOLDS = "criterion still holds"
    OUT = "OUT OF TOLERANCE"
    NOT_VERIFIED = "NOT VERIFIED"


@dataclass(frozen=True)
class Drift:
    """What a run of the application computed against the reference: per output, the criterion, the verdict."""

    outputs: tuple[OutputDrift, ...]
    criterion: tuple[bool, str] | None  # (passed, summary); None when it did not run (skipped: none declared)
    failure: str  # the first failed step other than compare and criterion, and its error (else "")

    @property
    def compared(self) -> bool:
        """The outputs were compared: compare's numbers are here (a compare that did not run has none)."""
        return bool(self.outputs)

    @property
    def verdict(self) -> DriftVerdict:
        """NOT VERIFIED when a step other than compare and criterion failed (or nothing was compared); OUT when an
        output left its tolerance or the criterion failed (with or without details: a malformed answer is a failed
        criterion, red-team pass 59, DRIFT1); HOLDS otherwise."""
        if self.failure or not self.compared:
            return DriftVerdict.NOT_VERIFIED
        if not all(o.passed for o in self.outputs):
            return DriftVerdict.OUT
        return DriftVerdict.OUT if self.criterion is not None and not self.criterion[0] else DriftVerdict.HOLDS

    @property
    def holds(self) -> bool:
        """Every output within its tolerance and the criterion (if declared) still holds."""
        return self.verdict is DriftVerdict.HOLDS

    @classmethod
    def from_steps(cls, steps: list[dict[str, Any]]) -> Drift:
        """From a report's steps (``report.json``'s ``steps``, or the bisect's in-env steps). Each step's status says
        what it did; its details add numbers, never decide (a failed step whose record has no details is failed)."""
        by_name = {s["name"]: s for s in steps}
        compare = by_name.get("compare", {})
        outputs = (compare.get("details") or {}).get("outputs") or {}
        drifts = tuple(OutputDrift.from_compare(n, d) for n, d in sorted(outputs.items()))
        crit = by_name.get("criterion")
        criterion = None
        if crit is not None and crit.get("status") in ("passed", "failed") and reported(crit):
            said = (crit.get("details") or {}).get("summary") or crit.get("error", "")
            criterion = (crit["status"] == "passed", str(said))
        # a failure of another step, or one of compare or criterion that never gave its result (stopped, crashed:
        # never an answer; red-team pass 60, DRIFT2)
        failed = next((s for s in steps if s.get("status") == "failed" and (
            s["name"] not in ("compare", "criterion") or not reported(s))), None)
        failure = f"{failed['name']}: {failed.get('error', '')}" if failed else ""
        if compare.get("status") == "failed" and drifts and all(o.passed for o in drifts):  # failed for another reason
            failure = failure or f"compare: {compare.get('error', '')}"
        if not drifts and not failure:
            failure = "the outputs were not compared (no compare step ran)"
        return cls(drifts, criterion, failure)


def ended_steps(steps: list[dict[str, Any]], runner_end: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A run's steps as its drift reads them: a check process that failed or hung after its last step (report.json's
    ``runner_end``) is one failure more, never an answer (the run is no pass: red-team pass 63, EXIT1)."""
    if not runner_end:
        return steps
    return [*steps, {"name": "end", "status": "failed", "unreported": "process ended",
                     "error": f"the check process after its last step: {runner_end.get('error', '')}"}]


def cell(text: str) -> str:
    """Text for a Markdown table cell: a ``|`` (as in ``|ref|``) would end the cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def render_drift(drift: Drift, *, title: str = "Against the reference") -> str:
    """The drift table as Markdown: per output max abs / cosine / agreement against its tolerance, then the verdict."""
    lines = [f"### {title}", ""]
    if drift.outputs:
        lines += ["| output | kind | max abs | min cosine | agreement | tolerance | within |",
                  "|---|---|---|---|---|---|---|"]
        for o in drift.outputs:
            lines.append(f"| {o.name} | {o.kind} | {_fmt(o.max_abs, '.3g')} | {_fmt(o.min_cosine, '.9f')} "
                         f"| {_fmt(o.agreement, '.4f')} | {cell(o.allowed)} | {'yes' if o.passed else '**NO**'} |")
        lines.append("")
    if drift.failure:
        lines.append(f"Not compared: {drift.failure}")
    if drift.criterion is not None:
        lines.append(f"Criterion: {'holds' if drift.criterion[0] else '**does not hold**'} ({drift.criterion[1]})")
    step = drift.failure.split(":", 1)[0]
    if drift.verdict is DriftVerdict.HOLDS:
        verdict = "the criterion still holds: every output within tolerance"
    elif drift.verdict is DriftVerdict.NOT_VERIFIED:
        when = "after the outputs were compared" if drift.compared else "before the outputs were compared"
        verdict = f"**not verified: {step} failed {when}**"
    else:
        verdict = "**out of tolerance: the outputs (or the criterion) moved beyond it**"
    lines.append(f"Verdict: {verdict}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class UpgradeResult:
    platform: str
    lock: Path  # the new lock, in the lockfiles folder
    old_lock: Path  # the kept copy of the old one
    folder: Path  # runs/upgrade-…: old/, lock-diff.md, upgrade.md, upgrade.json, verify/
    diff: lockdiff.LockDiff
    drift: Drift
    markdown: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "version": 1, "platform": self.platform, "lock": str(self.lock), "old_lock": str(self.old_lock),
            "holds": self.drift.holds, "verdict": str(self.drift.verdict),
            "changes": [{"name": c.name, "kind": str(c.kind), "old": c.old, "new": c.new} for c in self.diff.changes],
            "body_digest": {"old": self.diff.old.body_digest, "new": self.diff.new.body_digest},
            "outputs": [o.__dict__ for o in self.drift.outputs],
            "criterion": list(self.drift.criterion) if self.drift.criterion else None,
            "failure": self.drift.failure,
        }


def recorded_resolver(lock: lockfile.Lockfile) -> str:
    """The resolver the lock was made with (its header), so the relock is checked against the same input."""
    name = lock.first("resolver").split(" ", 1)[0]
    return name if name in RESOLVERS else "pip-tools"


def _keep_declared_date(project: Project, as_of: str | None, old_dir: Path) -> None:
    """A project that declares ``resolve-as-of`` gets the new date there (its old pyproject kept in ``old/``): the
    declared date binds the drift check, so a lock of another date would be stale the moment it is written."""
    if not as_of or not project.resolve_as_of or project.resolve_as_of == as_of:
        return
    import tomlkit

    path = project.root / "pyproject.toml"
    text = path.read_text(encoding="utf-8")
    write_atomic(old_dir / "pyproject.toml", text)
    doc = tomlkit.parse(text)
    doc["tool"]["kernodeck"]["resolve-as-of"] = as_of
    write_atomic(path, tomlkit.dumps(doc))
    log(f"kernodeck: pyproject.toml: resolve-as-of {project.resolve_as_of} -> {as_of} (the old file is in {old_dir})")


def verify_options(out: Path, installer: str | None) -> Options:
    """The verify upgrade runs on the new lock: verify's own settings (its runner configuration is verify's; the
    run builder's test compares them), its dossier in the upgrade's folder, the env built by ``installer``."""
    return Options(out=out, installer=installer, session="upgrade")


def upgrade(project: Project, plat: Platform, *, as_of: str | None = None, resolver: str | None = None,
            installer: str | None = None, out: Path | None = None) -> UpgradeResult:
    """Relock ``plat`` (every pin re-resolved), diff it against the old lock, verify it against the reference."""
    from kernodeck.verify import verify

    target = lock_path(project, plat)
    if not target.exists():
        raise MissingLockfile(plat.id, str(target.relative_to(project.root)))
    old = lockfile.read(target)  # a broken old lock is named before anything changes
    if as_of:
        as_of_instant(as_of)  # a bad date is refused before anything is written
    folder = out or project.runs / f"upgrade-{time.strftime('%Y%m%d-%H%M%S')}-{plat.id}"
    folder = outdir.check(folder, what="the upgrade's folder", tip=tips.nox("upgrade", "--out", "NEW-FOLDER"),
                          root=project.root, allowed=(project.runs,))
    if folder.exists() and any(folder.iterdir()):  # its old/ must never be overwritten with a newer lock
        raise UnsafeOut(f"{folder} is not empty; an upgrade keeps the old lock in a folder of its own",
                               tip=tips.nox("upgrade", "--out", "NEW-FOLDER") + "  (or leave --out out)")
    old_dir = folder / "old"
    old_dir.mkdir(parents=True, exist_ok=True)
    old_copy = old_dir / target.name
    shutil.copy2(target, old_copy)
    twin = pylock_path(project, plat)
    if twin.exists():
        shutil.copy2(twin, old_dir / twin.name)
    log(f"kernodeck: upgrade {plat.id}: the old lock is kept in {old_copy}")
    _keep_declared_date(project, as_of, old_dir)
    outdir.mark(folder, "upgrade")  # signed again at the end: it lists every file Kernodeck wrote there
    if as_of and project.resolve_as_of:
        from kernodeck.project.config import load_project

        project = load_project(project.root)
    try:
        compile_lock(project, plat, resolver=resolver or recorded_resolver(old), upgrade=True, as_of=as_of)
    except BaseException:
        kept = old_dir / "pyproject.toml"
        if kept.exists():  # the declared date goes back with the lock that failed to change
            write_atomic(project.root / "pyproject.toml", kept.read_text(encoding="utf-8"))
        raise
    rel = str(target.relative_to(project.root))
    d = lockdiff.diff(old, lockfile.read(target), old_label=f"{rel} (before; kept in old/)", new_label=rel)
    diff_md = lockdiff.render_markdown(d, title=f"Lock diff: {plat.id}")
    write_atomic(folder / "lock-diff.md", diff_md)
    print(diff_md)
    report_steps: list[dict[str, Any]]
    interrupted = False
    try:
        with outdir.filling(folder):  # its verify's dossier goes inside the folder signed above
            report, _ = verify(project, plat, verify_options(folder / "verify", installer))
        report_steps = ended_steps([s.as_dict() for s in report.steps], report.meta.get("runner_end"))
        interrupted = bool(report.meta.get("interrupted"))
    except KernodeckError as exc:  # verify wrote its dossier; the drift table says where it stopped
        report_json = folder / "verify" / "report.json"
        written = json.loads(report_json.read_text(encoding="utf-8")) if report_json.exists() else None
        report_steps = (ended_steps(written["steps"], written.get("runner_end")) if written is not None
                        else [{"name": "verify", "status": "failed", "error": str(exc)}])
    drift = Drift.from_steps(report_steps)
    drift_md = render_drift(drift, title=f"Against the reference: {plat.id}")
    markdown = f"## Upgrade of {plat.id}\n\n{diff_md}\n{drift_md}"
    result = UpgradeResult(plat.id, target, old_copy, folder, d, drift, markdown)
    write_atomic(folder / "upgrade.md", markdown)
    write_json(folder / "upgrade.json", result.as_dict())
    outdir.mark(folder, "upgrade")
    if interrupted:  # recorded as far as it ran (the stopped step's stacks in verify/steps/); nothing runs after it
        raise Interrupted(f"the upgrade's verify was interrupted; its dossier is {folder / 'verify'}",
                          tip=tips.nox("upgrade"))
    return result


def outcome(result: UpgradeResult, plat: Platform, root: Path) -> tuple[str, int]:
    """What ``upgrade`` prints and its exit code, by its verdict: 0 when the criterion still holds; 3 when not
    verified (a check failed: the report names it; no bisect of numbers); 1 when out of tolerance, naming the bisect
    to run."""
    drift = result.drift
    state = (f"{drift.verdict} ({drift.failure.split(':', 1)[0]} failed)" if drift.verdict is DriftVerdict.NOT_VERIFIED
             else str(drift.verdict))
    lines = [render_drift(drift, title=f"Against the reference: {plat.id}"),
             f"upgrade {plat.id}: {state}; new lock {result.lock.relative_to(root)}, old one kept in "
             f"{result.old_lock}; report {result.folder / 'upgrade.md'}"]
    match drift.verdict:
        case DriftVerdict.HOLDS:
            return "\n".join(lines), 0
        case DriftVerdict.NOT_VERIFIED:
            return "\n".join([*lines, f"next: read {result.folder / 'verify' / 'report.md'}"]), 3
        case DriftVerdict.OUT:
            lines.append("next: " + tips.nox("bisect", "--platform", plat.id, "--good", str(result.old_lock),
                                             "--bad", str(result.lock.relative_to(root))))
            return "\n".join(lines), 1
        case _:
            assert_never(drift.verdict)
