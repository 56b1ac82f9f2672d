"""The declared contract: the application declared in pyproject and the reference it is checked against.

Judged before anything is built: a reference whose copy of the contract differs from the declaration, or whose code
fingerprints no longer describe the code, is refused (``reference-manifest`` fails; nothing else runs). Its product
is the in-env runner's configuration.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kernodeck import tips
from kernodeck._fs import inenv_fingerprints, sha256_file
from kernodeck.dossier import lineage, manifest, recording
from kernodeck.env import start
from kernodeck.errors import CodeChanged, KernodeckError, ManifestError
from kernodeck.inenv.protocol import Status
from kernodeck.project import application
from kernodeck.project.assets import SourceKind
from kernodeck.project.config import Project
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Run, StepFailed
from kernodeck.verify.record import Step


def require_declared_contract(project: Project, ref: manifest.Reference, app: application.Application) -> None:
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
    project: Project, ref: manifest.Reference, app: application.Application, *, allow: bool
) -> list[str]:
    """The declared code files (entry, criterion, ``code``) that differ from the reference's fingerprints, sorted: a
    file changed or missing, or declared now but not fingerprinted by the reference.

    Refused (CodeChanged, before anything is built) unless ``allow``: then they are returned for the verdict, which
    names them and is never ``passed``. The in-env reference step checks the same fingerprints again.
    """
    recorded = manifest.code_expected(ref.manifest, app)
    moved = sorted(
        f for f, d in recorded.items() if not (project.root / f).is_file() or sha256_file(project.root / f) != d
    )
    if moved and not allow:
        raise CodeChanged(os.path.relpath(ref.folder / "manifest.toml", project.root), moved)
    return moved


def _against_reference(ctx: RunContext, run: Run, app: application.Application) -> tuple[dict[str, Any], list[str]]:
    """Verify mode: the reference must be sound and hold the declared contract and code; the runner's config."""
    if isinstance(ctx.reference, KernodeckError):
        raise ctx.reference
    ref = ctx.reference
    require_declared_contract(ctx.project, ref, app)
    run_config = ref.run_config(ctx.project, app)
    run.meta.reference_id = ref.id
    # its id, date and lock, and a newer reference in its history: named in the report's differences
    run.meta.reference_lineage = lineage.lineage(ref, ctx.lock.digest).as_dict()
    moved = require_reference_code(ctx.project, ref, app, allow=ctx.opts.allow_code_change)
    run.changed_code = moved
    run_config["allow_code_change"] = ctx.opts.allow_code_change
    run.meta.reference_code = ("same as the reference's" if not moved
                                  else "changed since the reference (--allow-code-change): " + ", ".join(moved))
    return run_config, list(ref.manifest["application"]["code"])


def runner_config(ctx: RunContext, run: Run) -> dict[str, Any]:
    """What the in-env runner is given: the application, the reference (verify mode) and the checks' settings."""
    app = ctx.declaration.application()
    if ctx.mode == "reference":
        run_config: dict[str, Any] = {"application": app.run_config(), "reference": None}
        code_files = list(app.sources)
    else:
        run_config, code_files = _against_reference(ctx, run, app)
    run.meta.application = {"entry": str(app.entry), "outputs": sorted(app.outputs), "code": code_files}
    _prefetch(app, run_config["application"])
    resume, det = ctx.declaration.resume, ctx.declaration.determinism
    run_config["resume"] = {
        "steps": resume.get("steps", 12),
        "checkpoint_at": resume.get("checkpoint-at", 5),
        "gpu_tolerance": resume.get("gpu-tolerance", 1e-5),
    }
    if ctx.declaration.app_resume is not None:
        run_config["resume_application"] = ctx.declaration.app_resume.run_config()
    if "max-records" in det:
        run_config["determinism_records"] = int(det["max-records"])
    run_config["libraries"] = start.declared_libraries(ctx.project.tool)
    run_config.update(project_root=str(ctx.project.root), expect_backend=ctx.backend, mode=ctx.mode,
                      **ctx.opts.extra_config)
    add_in_env_inputs(run_config, ctx.project.root, app)
    return run_config


def against_reference(project: Project, ref: manifest.Reference, app: application.Application,
                      backend: str) -> dict[str, Any]:
    """The in-env runner's config for the application run against the reference outside verify (calibrate, bisect):
    the reference's declarations, the declared foreign libraries and the in-env inputs, as verify's runner has them."""
    config: dict[str, Any] = {**ref.run_config(project, app), "project_root": str(project.root), "mode": "verify",
                              "expect_backend": backend, "libraries": start.declared_libraries(project.tool)}
    add_in_env_inputs(config, project.root, app)
    return config


def add_in_env_inputs(run_config: dict[str, Any], root: Path, app: application.Application) -> None:
    """What the in-env side checks the code it runs against (verified bytes, a closed world): the declared sources'
    fingerprints (``application.sources``, read now: with ``--allow-code-change`` they may differ from the
    reference's) and Kernodeck's own in-env files' (``inenv_sha256``)."""
    run_config["application"]["sources"] = app.fingerprints(root)
    resumed = (run_config.get("resume_application") or {}).get("entry")
    if isinstance(resumed, dict):  # the application's train: its bytes checked as read now (its run compares with
        rel = str(resumed["file"])  # itself, not with the reference, so the reference's identity does not hold it)
        run_config["application"]["sources"].setdefault(rel, sha256_file(root / rel) if (root / rel).is_file() else "")
    run_config.update(inenv_sha256=inenv_fingerprints())


def _prefetch(app: application.Application, config: dict[str, Any]) -> None:
    """A url source missing from the cache is fetched now (where the network allows); why it could not be is handed
    to the in-env side, which fails in the source's layer with it (a wrong hash: at ``weights``)."""
    from kernodeck.project import fetch

    found = [(app.weights, config.get("weights"))] if app.weights is not None else []
    found += [(src, (config.get("data") or {}).get(name)) for name, src in app.data.items()]
    for src, cfg in found:
        if src.kind is not SourceKind.URL or not isinstance(cfg, dict):
            continue
        try:
            fetch.fetch_one(src)
        except fetch.FetchError as exc:
            cfg["fetch_error"] = f"{exc} (TIP: {exc.tip})"


def declared_contract(ctx: RunContext, run: Run) -> Step | None:
    """The ``reference-manifest`` step: shown only when it fails (its success is the reference id in the report)."""
    try:
        run.run_config = runner_config(ctx, run)
    except CodeChanged as exc:  # any other error: the step fails with it alone (pipeline.drive)
        changed = {"changed_code": exc.changed}
        raise StepFailed(exc, Step("reference-manifest", Status.FAILED, details=changed)) from None
    return None
