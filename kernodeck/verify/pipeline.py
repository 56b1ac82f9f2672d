"""One small loop drives verify's steps over one run context, as nox's ``workflow.execute`` drives its tasks.

A step is an :class:`Entry`: a name and a function of the context and the run's state that returns the step it
made (or ``None`` when it added its own, as the in-env phase adds one per check, or has nothing to show). The loop
applies the rules once: a step after a failed one is not run (each step it would have made is shown ``not-run``),
progress is logged when a step starts and ends, and a step that raises one of the errors it may fail with becomes a
``failed`` step holding that error, the first of which the run raises at its end. That failure rule is here only: a
step that fails with more to record than its error (its details, its command) raises :class:`StepFailed` with the
record, and the loop fails it as it fails any other.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernodeck._proc import log
from kernodeck.early import Early
from kernodeck.errors import KernodeckError
from kernodeck.inenv.protocol import Layer, Status
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify.record import Step
from kernodeck.verify.summaries import step_result

if TYPE_CHECKING:
    from kernodeck.env.envfiles import Findings
    from kernodeck.env.rebuild import RebuildResult
    from kernodeck.env.snapshot import Entry as FileEntry
    from kernodeck.lock.lockfile import Lockfile
    from kernodeck.verify.context import RunContext


@dataclass
class RunMeta:
    """What the steps hand the writer for report.json's top level, each field set by one step (None: not learnt)."""

    started: str | None = None  # verify(), with the mode and the backend the probe must find
    expect_backend: str | None = None
    mode: str | None = None
    session: str | None = None  # the nox session that runs it again, as its TIPs name it (an upgrade's: upgrade)
    lock: str | None = None  # lock-check: the lock (relative to the project), its digests
    lock_digest: str | None = None
    lock_inputs_digest: str | None = None
    reference_id: str | None = None  # reference-manifest: the reference, its lineage, its code; the application
    reference_lineage: dict[str, Any] | None = None
    reference_code: str | None = None
    application: dict[str, Any] | None = None
    interpreter: str | None = None  # rebuild: the env's interpreter
    variables: dict[str, str] | None = None  # the in-env phase: the variables its processes get (redacted),
    runner_command: str | None = None  # the runner's command and environment, the deadlines it ran under,
    runner_env: dict[str, str] | None = None
    deadlines: dict[str, Any] | None = None
    interrupted: dict[str, Any] | None = None  # the signal that stopped it, and at which step
    runner_end: dict[str, Any] | None = None  # the in-env process failed after every step reported: code, error

    def as_dict(self) -> dict[str, Any]:
        """The fields learnt, in this order (report.json)."""
        return {k: v for k, v in asdict(self).items() if v is not None}


class Run:
    """One verify (or reference) run's state: the steps so far, what they found, never computed past a failure."""

    def __init__(self, project: Project, plat: Platform, staging: Path) -> None:
        self.project, self.plat, self.staging = project, plat, staging
        self.steps: list[Step] = []
        self.meta = RunMeta()
        self.not_established: list[str] = []  # what a pass of this run would NOT establish (the verdict says it)
        self.changed_code: list[str] = []  # code files that differ from the reference's (--allow-code-change only)
        self._started: set[str] = set()
        self.error: KernodeckError | None = None  # the first error a step failed with (raised at the run's end)
        # What the steps hand on, in the order they run (data flows one way: lock -> env -> checks -> dossier).
        self.lock: Lockfile | None = None  # the lock, once its check passed
        self.run_config: dict[str, Any] = {}  # what the in-env runner is given
        self.python: Path | None = None  # the env's interpreter, once rebuilt, reused or given
        self.result: RebuildResult | None = None  # the rebuild's record, when this run rebuilt (or reused) it
        # the interpreter the env was made from, found on this machine by the rebuild step (not read from the env)
        self.base_python: str | None = None
        # work for the orchestrator's idle time: started by the in-env phase as its process starts (writer.LockFiles)
        self.during_checks: list[Callable[[], None]] = []
        # the runner, started once the inventory has shown the files its start reads the build's (or every file of the
        # env: verify/steps/in_env.py early_start), told to go by the checks
        self.during_inventory: list[Callable[[], None]] = []
        self.early: Early | None = None
        # the entries of the env's folders its interpreter's start reads, once shown the build's (env/startfiles.py)
        self.proven_start: dict[str, FileEntry] | None = None
        # every file of the env as the inventory saw it, once it showed each one the build's (None otherwise)
        self.proven_files: Findings | None = None
        self.t0 = time.perf_counter()  # when the current step started

    @property
    def failed(self) -> bool:
        return any(s.status is Status.FAILED for s in self.steps)

    def elapsed(self) -> float:
        """Seconds since the current step started."""
        return time.perf_counter() - self.t0

    def drop_early(self) -> None:
        """The runner started early and never given its word (an earlier step failed, the run stopped): ended."""
        early, self.early = self.early, None
        if early is not None:
            early.drop()

    def fail(self, error: KernodeckError) -> None:
        """Record the error a step failed with; the first one is what the run raises."""
        self.error = self.error or error

    def start(self, name: str) -> None:
        """Long work shows progress: an outside step says when it starts (in-env steps say it from the runner)."""
        self._started.add(name)
        log(f"kernodeck: {name}: start ({time.strftime('%H:%M:%S')})")

    def add(self, step: Step) -> Step:
        self.steps.append(step)
        mark = {"passed": "ok", "failed": "FAILED", "skipped": "skipped", "not-run": "not-run"}[str(step.status)]
        note = step_result(step)  # what it found, as report.md's line says it
        timing = f"{step.duration_s:.2f}s"
        if step.name in self._started:
            timing += f", ended {time.strftime('%H:%M:%S')}"
        log(f"kernodeck: {step.name}: {mark} ({timing}){' - ' + note if note else ''}")
        trace = step.details.get("traceback") if step.status is Status.FAILED else None
        if isinstance(trace, str):  # the failing line of the user's code, as pytest shows a failing test
            log("\n".join(f"    {line}" for line in trace.splitlines()))
        return step

    def not_run(self, names: tuple[str, ...] | list[str], why: str) -> None:
        for name in names:
            self.steps.append(Step(name, Status.NOT_RUN, reason=f"an earlier step failed: {why}"))


Act = Callable[["RunContext", Run], "Step | None"]


class StepFailed(Exception):
    """Raised by a step that fails with a record of its own (details, command, interpreter) beside the error the run
    raises: :func:`drive` makes the record failed, as it does for any error a step raises."""

    def __init__(self, error: KernodeckError, record: Step) -> None:
        super().__init__(str(error))
        self.error, self.record = error, record


@dataclass(frozen=True)
class Entry:
    """One step of the pipeline."""

    name: str
    act: Act
    layer: Layer  # where a failure it raises belongs
    shows: Callable[[RunContext], tuple[str, ...]]  # the steps it reports (each shown not-run after a failure)
    announce: bool = True  # log when it starts (the in-env steps say it themselves)
    fails_on: tuple[type[KernodeckError], ...] = (KernodeckError,)  # other errors end the run, no report


def drive(ctx: RunContext, run: Run, entries: Sequence[Entry]) -> None:
    """Run ``entries`` in order over ``ctx``; after the first failed step, the rest are shown not-run."""
    for entry in entries:
        if run.failed:
            stopped = next(s.name for s in run.steps if s.status is Status.FAILED)
            run.not_run([n for n in entry.shows(ctx) if n not in {s.name for s in run.steps}], stopped)
            continue
        if entry.announce:
            run.start(entry.name)
        run.t0 = time.perf_counter()
        try:
            step = entry.act(ctx, run)
        except StepFailed as exc:
            step = _failed(entry, run, exc.error, exc.record)
        except entry.fails_on as exc:
            step = _failed(entry, run, exc, Step(entry.name, Status.FAILED))
        if step is not None:
            run.add(step)
        if run.failed:  # the steps this entry would have made after its failed one
            stopped = next(s.name for s in run.steps if s.status is Status.FAILED)
            run.not_run([n for n in entry.shows(ctx) if n not in {s.name for s in run.steps}], stopped)


def _failed(entry: Entry, run: Run, error: KernodeckError, record: Step) -> Step:
    """THE failure rule: the step failed with the error (its layer the entry's unless it names its own, the error's
    tip in its details), the first such error is what the run raises."""
    run.fail(error)
    record.status = Status.FAILED
    record.error = record.error or str(error)
    record.layer = record.layer or entry.layer
    record.duration_s = record.duration_s or run.elapsed()
    if error.tip:
        record.details.setdefault("tip", error.tip)
    return record
