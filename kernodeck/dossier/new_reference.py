"""The content-addressed reference: what must be reproduced, declared before any comparison.

A new reference is made from a reference-mode run (:func:`create`) and written whole (:func:`install`: staged, then
swapped in; the previous one kept in ``history/`` only when its files match its own manifest). The manifest's model,
identity and loading live in :mod:`kernodeck.runformat.manifest`; building a new one in
:mod:`kernodeck.runformat.recording`; each name is imported from the module that defines it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from kernodeck import outdir, tips
from kernodeck._fs import sha256_file, write_atomic
from kernodeck._proc import log
from kernodeck.errors import Interrupted, KernodeckError, ManifestError
from kernodeck.inenv.protocol import Status
from kernodeck.lock import inputs, lockfile
from kernodeck.project import app_contract
from kernodeck.project.assets import SourceKind
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.runformat import review as dossier_review
from kernodeck.runformat.manifest import (
    RECORD_FILES,
    Reference,
    changes,
    inconsistency,
    load,
    output_files,
    recorded_id,
    render,
)
from kernodeck.runformat.recording import build_manifest
from kernodeck.verify import runbuild
from kernodeck.verify.record import Step, Verdict
from kernodeck.verify.report import Report

GENERATED = ("manifest.toml", *RECORD_FILES.values())


def generated_files(folder: Path) -> tuple[str, ...]:
    """The files of the reference in ``folder`` that Kernodeck wrote: its manifest's, and the fixed ones."""
    try:
        manifest = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        manifest = {}
    names = [*GENERATED, "embeddings.npy", "ids.json"] if not manifest else [*GENERATED]
    names += [name for name, _ in output_files(manifest)]
    return tuple(dict.fromkeys(n for n in names if n and "/" not in n))


def install(
    project: Project,
    manifest: dict[str, Any],
    outputs: Path,
    records: dict[str, str],
    review: Callable[[Path], None] | None = None,
) -> None:
    """Write the new reference whole: staged in a sibling folder, reviewed, then swapped in by renaming folders.

    The previous reference goes to history/<id>/ (``<id>-2``, ... for the same content made again at another time)
    only when its files match its own manifest; otherwise nothing of it
    is copied and ``history/<id>.not-kept.txt`` says why.
    """
    folder = project.reference
    outdir.clean_leftovers(folder)  # a killed earlier run: its staging removed, a parked reference put back
    generated = generated_files(folder)  # what the previous reference's manifest names (Kernodeck wrote them)
    # no marker, no guard: the reference is the project's folder; its other files are carried over just below
    with outdir.staged(folder, "") as staging:
        if folder.is_dir():
            shutil.copytree(
                folder,
                staging,
                dirs_exist_ok=True,
                ignore=lambda where, names: [n for n in names if n in generated] if Path(where) == folder else [],
            )
        old_path = folder / "manifest.toml"
        if old_path.exists():
            try:
                old_id = str(tomllib.loads(old_path.read_text(encoding="utf-8")).get("id", "unknown"))
            except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                old_id = "unknown"
            slug = old_id.replace(":", "-")
            why = inconsistency(folder)
            if why:
                log(f"kernodeck: the previous reference {old_id} is not kept in history: {why}")
                write_atomic(
                    staging / "history" / f"{slug}.not-kept.txt",
                    f"The reference {old_id} was replaced but not kept here: {why}.\n"
                    "Its files did not match its own manifest (a half-written reference), so no copy of them can be "
                    "trusted.\n",
                )
            elif (keep := _kept_at(staging / "history" / slug, old_path.read_bytes())) is not None:
                keep.mkdir(parents=True)
                for name in generated:
                    if (folder / name).exists():
                        shutil.copy2(folder / name, keep / name)
        for rec in manifest["outputs"].values():
            write_atomic(staging / rec["file"], (outputs / rec["file"]).read_bytes())
            write_atomic(staging / rec["ids"], (outputs / rec["ids"]).read_text(encoding="utf-8"))
        for name, text in records.items():  # its inventory, system chain and settings (manifest.RECORD_FILES)
            write_atomic(staging / RECORD_FILES[name], text)
        write_atomic(staging / "manifest.toml", render(manifest))
        if review is not None:
            review(staging)


def _kept_at(keep: Path, manifest: bytes) -> Path | None:
    """Where the replaced reference goes: ``keep``, or the first of ``keep-2``, ``keep-3``, ... not there yet (the
    same content made again at another time, another date and predecessor, is kept beside the first, or a rollback to
    it would leave no trace in history: lineage.replaced, red-team pass 11); None when one of them holds this very
    manifest already."""
    number, found = 1, keep
    while found.exists():
        if (found / "manifest.toml").is_file() and (found / "manifest.toml").read_bytes() == manifest:
            return None
        number += 1
        found = keep.with_name(f"{keep.name}-{number}")
    return found


def current(project: Project, *, new: bool) -> Reference | None:
    """The reference a new one would replace: none, or an unusable one (logged), or, only when asked (``new``), the
    current one; making a new identity is never implicit."""
    if not (project.reference / "manifest.toml").exists():
        return None
    try:
        old = load(project)
    except ManifestError as exc:
        log(f"kernodeck: the current reference is unusable ({exc}); a new one replaces it")
        return None
    if not new:
        raise ManifestError(f"a reference exists ({old.id}); a new identity is made only when asked",
                            tip=tips.NEW_REFERENCE)
    return old


@dataclass(frozen=True)
class Created:
    """What ``create`` did: ``changes`` is empty for a first reference; ``unchanged`` when nothing was written."""

    new_id: str
    old_id: str | None
    unchanged: bool
    changes: tuple[str, ...]

    def lines(self) -> list[str]:
        """What ``reference`` prints: the identity made (or kept) and what changed from the previous one."""
        if self.unchanged:
            return [f"reference unchanged: {self.new_id} (same content; nothing written)"]
        if self.old_id is not None:
            return [f"reference: {self.old_id} -> {self.new_id}", *(f"  changed: {c}" for c in self.changes)]
        return [f"reference: new {self.new_id}"]


def require_sources_as_run(project: Project, app: app_contract.Application, folder: Path) -> None:
    """The declared sources the manifest fingerprints now are the bytes the in-env side ran (the run's
    ``run-config.json``: ``application.sources``, checked file by file before each ran): a file changed during the
    reference run (or declared since) is refused, so the reference never describes code that did not make it."""
    config = folder / "run-config.json"
    run_config = json.loads(config.read_text(encoding="utf-8")) if config.is_file() else {}
    ran = (run_config.get("application") or {}).get("sources") or {}
    # the same set the run was given (runbuild.in_env_sources: with an application resume, its train file too)
    now = runbuild.in_env_sources(run_config, project.root, app)
    moved = sorted(f for f in {*now, *ran} if ran.get(f) != now.get(f))
    if moved:
        raise KernodeckError(
            f"the declared sources changed during the reference run: {', '.join(moved)}; nothing was written to "
            "the reference", tip=tips.NEW_REFERENCE)


def weights_record(
    project: Project, plat: Platform, app: app_contract.Application, steps: dict[str, Step]
) -> dict[str, Any] | None:
    """The declared weights as the lock pins them (exact version, wheel hashes) and as the run fingerprinted them."""
    if app.weights is None:
        return None
    files = steps["application"].details.get("weights_fingerprint", {})
    if app.weights.kind is not SourceKind.PACKAGE:
        return {"files": files}
    lock = lockfile.read(inputs.lock_path(project, plat))
    pin = next((p for p in lock.pins if p.name == canonicalize_name(app.weights.package)), None)
    if pin is None:
        raise ManifestError(f"the lock does not pin {app.weights.package}: weights need an exact version and hash")
    return {"version": pin.version, "wheel_sha256": list(pin.hashes), "files": files}


def create(project: Project, plat: Platform, report: Report, folder: Path, old: Reference | None) -> Created:
    """The new reference from a reference-mode run (``report``, its dossier ``folder``), written whole by ``install``
    when its identity differs from ``old``'s; a failed run writes nothing."""
    if report.status is not Status.PASSED:
        failure = report.first_failure()
        tip = failure.details.get("tip") if failure is not None else None
        error = Interrupted if report.verdict is Verdict.INTERRUPTED else KernodeckError  # exit 130, the table's
        raise error(
            "the reference run failed"
            + (f" at {failure.name}: {' '.join(failure.error.split())}" if failure is not None else "")
            + "; nothing was written to the reference",
            tip=tip if isinstance(tip, str) and tip else f"read {folder / 'report.md'}")
    if report.not_established:  # passed-unlocked (--python): the env and the closed world are not proven
        raise KernodeckError(
            "the reference run passed without establishing "
            + "; ".join(report.not_established)[:600]
            + "; a reference is made only from a run that proves them: nothing was written to the reference",
            tip=tips.nox("reference", "--new") + "  (in the env rebuilt from the lock, without --python)")
    steps = {s.name: s for s in report.steps}
    app = app_contract.load(project.root)
    require_sources_as_run(project, app, folder)
    weights = weights_record(project, plat, app, steps)
    criterion = steps["criterion"].details if "criterion" in steps and steps["criterion"].details else None
    records = {"inventory": (folder / "inventory.txt").read_text(encoding="utf-8")}
    for name in ("system", "settings"):  # the settings it ran with, read back (red-team pass 54, THR1)
        raw = json.loads((folder / RECORD_FILES[name]).read_text(encoding="utf-8"))
        records[name] = json.dumps(raw, indent=2, default=str) + "\n"
    manifest = build_manifest(
        project, outputs=folder / "outputs", criterion=criterion, weights=weights, platform_id=plat.id,
        data=steps["application"].details.get("data_fingerprint"),
        lock_digest="sha256:" + sha256_file(inputs.lock_path(project, plat)),
        device=str(steps["backend"].details.get("device", "cpu")),
        previous=old.id if old else recorded_id(project),
        records={name: _sha256_text(text) for name, text in records.items()})
    if old is not None and old.id == manifest["id"]:
        return Created(new_id=old.id, old_id=old.id, unchanged=True, changes=())
    install(project, manifest, folder / "outputs", records,
            review=lambda staged: dossier_review.review_folder(staged, project.root))
    return Created(new_id=manifest["id"], old_id=old.id if old else None, unchanged=False,
                   changes=tuple(changes(old.manifest, manifest)) if old is not None else ())


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
