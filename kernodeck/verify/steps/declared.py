"""The declared contract: the application declared in pyproject and the reference it is checked against.

Judged before anything is built: a reference whose copy of the contract differs from the declaration, or whose code
fingerprints no longer describe the code, is refused (``reference-manifest`` fails; nothing else runs). Its product
is the in-env runner's configuration.
"""

from __future__ import annotations

import os
from typing import Any

from kernodeck import tips
from kernodeck._fs import sha256_file
from kernodeck.errors import CodeChanged, KernodeckError, ManifestError
from kernodeck.inenv.protocol import Status
from kernodeck.project import app_contract
from kernodeck.project.config import Project
from kernodeck.runformat import lineage, manifest, recording
from kernodeck.verify import runbuild
from kernodeck.verify.context import Options, RunContext
from kernodeck.verify.pipeline import Run, StepFailed
from kernodeck.verify.record import Step


def require_declared_contract(project: Project, ref: manifest.Reference, app: app_contract.Application) -> None:
    """The application DECLARED in pyproject is the contract; the manifest only records a copy.

    A manifest whose copy differs (an output's kind, dtype, tolerance or justification, the entry, criterion, params
    or sample) is refused: it could have been loosened and its id recomputed. Where the flip-bound rule applies (a
    criterion judging nearest neighbours of a cosine output), it is applied again with the declared tolerance.
    """
    where = os.path.relpath(ref.folder / "manifest.toml", project.root)
    differ = manifest.declaration_differences(ref.manifest, app)
    if differ:
        raise ManifestError(
            f"{where}: the reference's contract is not the one declared in pyproject.toml "
            f"([tool.kernodeck.application]): {'; '.join(differ)}",
            tip=f"make a reference under the declared contract: {tips.NEW_REFERENCE}",
        )
    bound = (ref.manifest.get("criterion") or {}).get("flip_bound")
    if isinstance(bound, dict):
        name = str(bound.get("output"))
        shapes = {n: list(rec["shape"]) for n, rec in ref.manifest["outputs"].items()}
        try:
            recording.flip_bound(app, {"margin": bound.get("reference_min_margin"), "neighbours_of": name}, shapes)
        except ManifestError as exc:
            raise ManifestError(f"{where}: {exc}", tip=exc.tip) from None


def require_reference_code(
    project: Project, ref: manifest.Reference, app: app_contract.Application, *, allow: bool
) -> list[str]:
    """The declared code files (entry, criterion, ``code``) that differ from the reference's fingerprints, sorted: a
    file changed or missing, or declared now but not fingerprinted by the reference (a missing one is named so, its
    TIP to restore it rather than to make a new reference).

    Refused (CodeChanged, before anything is built) unless ``allow``: then they are returned for the verdict, which
    names them and is never ``passed``. The in-env reference step checks the same fingerprints again.
    """
    recorded = manifest.code_expected(ref.manifest, app)
    moved = sorted(
        f for f, d in recorded.items() if not (project.root / f).is_file() or sha256_file(project.root / f) != d
    )
    if moved and not allow:
        missing = [f for f in moved if not (project.root / f).is_file()]
        raise CodeChanged(os.path.relpath(ref.folder / "manifest.toml", project.root), moved, missing)
    return moved


def _reference_meta(ctx: RunContext, run: Run, app: app_contract.Application) -> None:
    """Verify mode: the reference must be sound and hold the declared contract and code; what the report says of it."""
    if isinstance(ctx.reference, KernodeckError):
        raise ctx.reference
    ref = ctx.reference
    require_declared_contract(ctx.project, ref, app)
    run.meta.reference_id = ref.id
    # its id, date and lock, and a newer reference in its history: named in the report's differences
    run.meta.reference_lineage = lineage.lineage(ref, ctx.lock.digest).as_dict()
    moved = require_reference_code(ctx.project, ref, app, allow=ctx.opts.allow_code_change)
    run.changed_code = moved
    run.meta.reference_code = ("same as the reference's" if not moved
                                else "changed since the reference (--allow-code-change): " + ", ".join(moved))
    run.meta.application = {"entry": str(app.entry), "outputs": sorted(app.outputs),
                             "code": list(ref.manifest["application"]["code"])}


def changes(opts: Options, mode: str) -> runbuild.Changes:
    """What a verify (or reference) run changes from verify's runner configuration, as its options say."""
    declared = [runbuild.Change.MAKE_REFERENCE] if mode == "reference" else []
    if opts.allow_code_change:
        declared.append(runbuild.Change.ALLOW_CODE_CHANGE)
    if opts.settings_cost and mode != "reference":  # a reference records it anyway
        declared.append(runbuild.Change.SETTINGS_COST)
    if opts.extra_config:
        declared.append(runbuild.Change.EXTRA_CONFIG)
    return runbuild.Changes(tuple(declared), dict(opts.extra_config))


def runner_config(ctx: RunContext, run: Run) -> dict[str, Any]:
    """What the in-env runner is given: the application, the reference (verify mode) and the checks' settings."""
    app = ctx.declaration.application()
    reference = None
    if ctx.mode == "reference":
        run.meta.application = {"entry": str(app.entry), "outputs": sorted(app.outputs),
                                 "code": list(app.sources)}
    else:
        _reference_meta(ctx, run, app)
        assert not isinstance(ctx.reference, KernodeckError)  # _reference_meta raised it
        reference = ctx.reference
    return runbuild.runner_config(ctx.project, ctx.declaration, reference, ctx.backend, changes(ctx.opts, ctx.mode),
                                  session=ctx.opts.session or ctx.mode)


def declared_contract(ctx: RunContext, run: Run) -> Step | None:
    """The ``reference-manifest`` step: shown only when it fails (its success is the reference id in the report)."""
    try:
        run.run_config = runner_config(ctx, run)
    except CodeChanged as exc:  # any other error: the step fails with it alone (pipeline.drive)
        changed = {"changed_code": exc.changed}
        raise StepFailed(exc, Step("reference-manifest", Status.FAILED, details=changed)) from None
    return None
