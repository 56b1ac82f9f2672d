"""The run's dossier, written from the run context and the steps' records (no input read again), then reviewed.

It is assembled in a staging folder (outdir.Staged) and swapped in only when complete; every text file passes the
review (no credential, no source of this machine, no home or project path) before it is put in place.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from kernodeck import outdir, sources, tips
from kernodeck._fs import write_atomic, write_json
from kernodeck.env import inventory
from kernodeck.errors import DossierError, KernodeckError
from kernodeck.inenv.protocol import COLLECT_ENV, SYSTEM_FILES, Status
from kernodeck.project.assets import SourceKind
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.runformat import review as dossier_review
from kernodeck.runformat import sbom
from kernodeck.runformat.refdelta import vs_reference
from kernodeck.verify.context import Options, RunContext
from kernodeck.verify.pipeline import Run
from kernodeck.verify.record import Step
from kernodeck.verify.report import Report
from kernodeck.verify.steps.in_env import RUNNER_ENV

SBOM = "sbom.cdx.json"


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def prepare_out(project: Project, out: Path | None, plat: Platform, session: str = "verify"
                ) -> tuple[Path, outdir.Staged]:
    """The dossier's final folder and its staging folder (refused: a folder Kernodeck may not write over, the TIP
    naming the ``session`` that refused it)."""
    final = (out or project.runs / f"{_stamp()}-{plat.id}").resolve()
    if out is not None:
        final = outdir.check(
            out,
            what="the dossier",
            tip=f"{tips.nox(session, '--out', os.path.relpath(project.runs, project.root) + '/NAME')}  "
            "(or a new or empty folder outside the project)",
            root=project.root,
            allowed=(project.runs,),
        )
    try:
        stage = outdir.Staged.begin(final, "dossier")
    except OSError as exc:
        raise DossierError(f"cannot write the output folder {final}: {exc.strerror or exc}") from None
    return final, stage


def index_procedure(plat: Platform, opts: Options) -> dict[str, str]:
    """How procedure.md names the variant's index: the declared URL, or a mirror by its variable only."""
    if opts.wheelhouse is not None:
        return {"index_args": "--no-index --find-links WHEELHOUSE", "index_note": "none: a wheelhouse"}
    index = sources.variant_index(plat.variant.name, plat.variant.index)
    if index.is_pypi:
        return {"index_args": "", "index_note": "PyPI itself"}
    note = index.describe() if index.mirror else f"{index.describe()} (a mirror may replace it: {index.var})"
    shown = f'"{index.shown()}"' if index.mirror else index.shown()
    return {"index_args": f"--extra-index-url {shown}", "index_note": note}


def _vs_reference_inventory(ctx: RunContext, report: Report) -> None:
    """inventory-vs-reference.json: this run's observed inventory against the reference's recorded one."""
    seen = ctx.staging / "inventory.txt"
    if ctx.reference_inventory is None or not seen.exists():
        return
    delta = inventory.diff(inventory.parse_freeze(ctx.reference_inventory),
                           inventory.parse_freeze(seen.read_text(encoding="utf-8")))
    variant = bool(ctx.opts.python) or report.platform != ctx.reference_platform
    write_json(ctx.staging / "inventory-vs-reference.json", {
        **delta.as_dict(),
        "summary": delta.summary(),
        "intentional": variant,
        "why": "a declared variant (another platform or an existing interpreter)" if variant else "",
    })


def _procedure(ctx: RunContext, run: Run, report: Report) -> str:
    result = run.result
    return dossier_review.procedure(
        list(result.commands) if result else [],
        run.meta.runner_command or "(checks not run)",
        RUNNER_ENV,
        result.installer if result else "none",
        os.path.relpath(ctx.lock.path, ctx.project.root),
        report.platform,
        bool(result and result.reused),
        **index_procedure(ctx.plat, ctx.opts),
        sources=_source_lines(ctx),
    )


def _source_lines(ctx: RunContext) -> tuple[str, ...]:
    """Each declared weights or data source's fetch command, its access as a comment (the variable's name only)."""
    app = ctx.declaration.app
    if app is None:
        return ()
    lines = []
    for src in app.assets:
        if src.kind is SourceKind.PACKAGE:
            continue  # installed with the lock: the commands above
        access = src.access()
        lines.append(f"# {src.role}: {src.provenance()}" + (f" ({access['for']})" if access else ""))
        lines.append(src.fetch_command())
    return tuple(lines)


class LockFiles:
    """``lock.txt`` and ``sbom.cdx.json`` rendered and reviewed in a thread while the checks run: they need only the
    lock as read into the context, and the orchestrator only waits meanwhile (0.1 s of a reused-env verify's tail, the
    SBOM's 350 kB the largest text the review reads). The dossier writes the texts once the checks ended; a failure
    here (a secret in the lock) leaves them to the dossier's own review, which fails the write as it does for any
    file.

    With ``start=False`` the thread starts at :meth:`start` (the in-env phase calls it as the check process starts):
    before that the orchestrator's own steps run in pure Python, and a second Python thread only takes the GIL from
    them (its 0.06 s of CPU added to the lock check's and inventory's wall time, before the in-env process could
    start). :meth:`texts` renders them itself when nothing started the thread (a run that stopped earlier)."""

    def __init__(self, ctx: RunContext, platform: str, *, start: bool = True) -> None:
        self._texts: dict[str, str] = {}
        self._thread = threading.Thread(target=self._render, args=(ctx, platform), name="kernodeck-lock-files",
                                        daemon=True)
        if start:
            self.start()

    def start(self) -> None:
        """Start rendering (once; a second call does nothing)."""
        if self._thread.ident is None:
            self._thread.start()

    def _render(self, ctx: RunContext, platform: str) -> None:
        lock = ctx.lock
        if lock.raw is None:
            return
        review = _reviewer(ctx)
        try:
            texts = {"lock.txt": dossier_review.reviewed_text(lock.raw.decode("utf-8"), "lock.txt", review)}
            if lock.parsed is not None:
                document = sbom.build(lock.path, platform, lock.twin_path if lock.twin is not None else None,
                                      lock=lock.parsed, digest=lock.digest, twin=lock.twin)
                texts[SBOM] = dossier_review.reviewed_text(sbom.render(document), SBOM, review)
        except Exception:  # the dossier's own review then names it (or renders and reviews them itself)
            return
        self._texts = texts

    def texts(self) -> dict[str, str]:
        """The reviewed texts (none when rendering failed: the dossier renders and reviews them itself)."""
        self.start()
        self._thread.join()
        return self._texts


def _reviewer(ctx: RunContext) -> dossier_review.Reviewer:
    public = [v.index for v in ctx.project.variants.values()]  # declared, committed: they may be named
    return dossier_review.reviewer(ctx.project.root, ctx.secrets, public=public)


def write_dossier(ctx: RunContext, run: Run, report: Report, lock_files: LockFiles | None = None) -> None:
    """Every file of the dossier beside the steps' own (outputs, step files), then the report; then the review."""
    staging = ctx.staging
    ready = lock_files.texts() if lock_files is not None else {}
    if not (staging / COLLECT_ENV).exists():
        stopped = next((s.name for s in run.steps if s.status is Status.FAILED), "?")
        write_atomic(staging / COLLECT_ENV, "not collected: the check process did not reach its system step (the "
                                            f"run stopped at {stopped})\n")
    steps = {s.name: s for s in report.steps}
    for name, file in (("system", "system.json"), ("settings", "settings.json")):
        if name in steps and steps[name].details:
            write_json(staging / file, _system_record(steps) if name == "system" else steps[name].details)
    written: list[str] = []  # from text the review passed already (LockFiles)
    if ctx.lock.raw is not None:
        write_atomic(staging / "lock.txt", ready.get("lock.txt", ctx.lock.raw))
        written += ["lock.txt"] if "lock.txt" in ready else []
        if "lock-check" in steps and steps["lock-check"].status is Status.PASSED:
            # an SBOM only of a lock that passed its check (a refused one is named in the report instead)
            # of the lock, its digest and its twin as read into the context (neither file read again)
            lock = ctx.lock
            if SBOM in ready:
                write_atomic(staging / SBOM, ready[SBOM])
                written.append(SBOM)
            else:
                sbom.write(lock.path, report.platform, staging / SBOM,
                           lock.twin_path if lock.twin is not None else None,
                           lock=lock.parsed, digest=lock.digest, twin=lock.twin)
    _vs_reference_inventory(ctx, report)
    write_atomic(staging / "procedure.md", _procedure(ctx, run, report))
    read = None if isinstance(ctx.reference, KernodeckError) else ctx.reference.manifest  # as this run read it, once
    report.meta["vs_reference"] = vs_reference(ctx.project.reference, staging, manifest=read)
    report.write(staging)
    review(ctx, written)


def review(ctx: RunContext, reviewed: list[str] | None = None) -> None:
    """Every text file of the staged dossier through the dossier's review, with the project's declared indexes (from
    the Project as loaded) and the secrets read once into the context: nothing is read again. ``reviewed``: the files
    written from text already reviewed (LockFiles)."""
    dossier_review.review_folder(ctx.staging, ctx.project.root, _reviewer(ctx), reviewed=reviewed or ())


def _system_record(steps: dict[str, Step]) -> dict[str, Any]:
    """The system step's record, with the system's own files every step's windows read (their sha256): the system
    chain's, compared with the reference's file by file (inenv/systemfiles.py)."""
    record = dict(steps["system"].details)
    read: dict[str, Any] = {}
    for step in steps.values():
        found = step.details.get(SYSTEM_FILES) if isinstance(step.details, dict) else None
        if isinstance(found, dict):
            read.update(found)
    if read:
        record[SYSTEM_FILES] = dict(sorted(read.items()))
    return record
