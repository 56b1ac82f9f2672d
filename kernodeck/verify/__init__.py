"""verify: lock check, rebuild (or reuse), inventory, then the in-env checks in ONE process; report and dossier.

A run reads its inputs once into a :class:`~kernodeck.verify.context.RunContext` (context.py); its steps
(steps/, in order) each take that context and the run's state, driven by one small loop (pipeline.py) that stops at
the first failure and shows the rest not-run; the dossier is written from the same objects (writer.py), in a staging
folder swapped in only when complete. Outside steps run here; inside steps run in ``kernodeck/inenv/runner.py``
(shipped in this distribution, run by path) by the env's explicit interpreter and come back as one JSON file each.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

from kernodeck import tips
from kernodeck._proc import log
from kernodeck.errors import DossierError, KernodeckError
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify import context
from kernodeck.verify.context import Options
from kernodeck.verify.pipeline import Run, drive
from kernodeck.verify.report import Report
from kernodeck.verify.runbuild import holding
from kernodeck.verify.steps import STEPS
from kernodeck.verify.steps.build import interpreter_platform
from kernodeck.verify.steps.in_env import IN_ENV_STEPS, REFERENCE_STEPS, early_start
from kernodeck.verify.writer import LockFiles, prepare_out, write_dossier

__all__ = ["verify"]


def _read_failed(exc: OSError, staging: Path, final: Path) -> KernodeckError:
    """An OSError of a run as the user reads it: a file the run read (named), or the dossier's write."""
    where = Path(str(exc.filename)) if exc.filename else None
    # a copy names its source first and its destination second (shutil.copyfile on a full disk): either one
    # inside the dossier makes it a dossier write
    named = [Path(str(f)) for f in (exc.filename, getattr(exc, "filename2", None)) if f]
    into_dossier = any(staging in p.parents or final in (p, *p.parents) for p in named)
    if where is not None and not into_dossier:
        # not the dossier: a file the run read (an env's, the project's); name it, not the output folder
        return KernodeckError(
            f"reading {where} failed: {exc.strerror or exc}; no dossier was written",
            tip=f"{tips.REBUILD_FRESH}  (if the file belongs to the environment), then: {tips.VERIFY}",
        )
    return DossierError(f"writing the dossier {final} failed: {exc.strerror or exc}; the earlier one is untouched")


def verify(project: Project, plat: Platform, opts: Options, *, mode: str = "verify") -> tuple[Report, Path]:
    """Run every step; return the report and the dossier folder."""
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if opts.python:
        plat = interpreter_platform(project, opts.python, plat)
    final, stage = prepare_out(project, opts.out, plat, mode)
    run_ = Run(project, plat, stage.path)
    names = opts.steps or (REFERENCE_STEPS if mode == "reference" else IN_ENV_STEPS)
    run_.meta.started, run_.meta.mode, run_.meta.session = started, mode, opts.session or mode
    run_.meta.expect_backend = opts.expect_backend or str(plat.variant.backend)
    with holding(project, plat):
        try:
            ctx = context.load(project, plat, opts, mode=mode, staging=stage.path, names=names)
            lock_files = LockFiles(ctx, plat.id, start=False)  # rendered and reviewed while the checks run
            run_.during_checks.append(lock_files.start)
            run_.during_inventory.append(functools.partial(early_start, ctx, run_))
            try:
                drive(ctx, run_, STEPS)
            finally:
                run_.drop_early()  # a runner started early that no step gave its word (an earlier step failed)
            report = Report(plat.id, run_.steps,
                            {**run_.meta.as_dict(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
                            not_established=run_.not_established, changed_code=run_.changed_code)
            write_dossier(ctx, run_, report, lock_files)
            stage.commit()  # signed with the list of its files, then swapped in whole
        except OSError as exc:
            stage.abandon()
            raise _read_failed(exc, stage.path, final) from None
        except BaseException:
            stage.abandon()
            raise
    log(f"kernodeck: report: {final / 'report.md'}")
    if run_.error is not None:
        raise run_.error
    return report, final
