"""The run context: everything one verify (or reference) run reads, read ONCE, into typed records.

pyproject's ``[tool.kernodeck]`` tables (the application declaration, resume, determinism: from the Project, which
holds the table as the CLI read it), the platform's lock (its bytes, parsed pins and digest) and its PEP 751 twin
(:func:`kernodeck.lock.check.read_lock`), the reference manifest and its inventory, and the secret
needles every written file is scanned for. The steps and the dossier writer take these objects, never a path to read
again. A missing or broken input is not an error here: it is kept (as ``None`` or as the error) for the step that
judges it, so each failure is still reported by its own step, in the order the steps run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck import sources
from kernodeck.errors import KernodeckError
from kernodeck.inenv.steptable import StepName
from kernodeck.lock import check
from kernodeck.project import app_contract, resume_contract
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.runformat import manifest


@dataclass
class Options:
    out: Path | None = None
    rebuild: bool = True
    python: str | None = None
    expect_backend: str | None = None
    installer: str | None = None
    fresh: bool = False
    wheelhouse: Path | None = None
    extra_config: dict[str, Any] = field(default_factory=dict)
    steps: tuple[str, ...] | None = None  # only these in-env steps (the benchmark); default: all of the mode's
    strict: bool = False  # with --python: any difference from the lock (or no lock) fails instead of being recorded
    allow_code_change: bool = False  # run the checks on code that differs from the reference's; never a pass
    settings_cost: bool = False  # the determinism step also runs the entry without the settings (a reference does)
    session: str | None = None  # the nox session that runs it, as its TIPs name it (default: the mode's)


@dataclass(frozen=True)
class Declaration:
    """pyproject's ``[tool.kernodeck]`` tables a run uses, parsed from the one read of pyproject.toml."""

    app: app_contract.Application | None  # None: the declaration is refused (``error`` says why)
    error: KernodeckError | None
    resume: dict[str, Any]
    determinism: dict[str, Any]
    # [tool.kernodeck.application.resume]: the application's own resume (None: not declared, or refused with app)
    app_resume: resume_contract.ResumeContract | None = None

    def application(self) -> app_contract.Application:
        """The declared application, or the error that refused it (raised by the step that needs it)."""
        if self.app is None:
            raise self.error or KernodeckError("no application declared in pyproject.toml")
        return self.app

    def project_paths(self) -> tuple[str, ...]:
        """Every file or folder of the project the declared application reads (:attr:`Application.project_paths`),
        and the file of its resume's ``train`` (checked as any code's: ``runbuild.in_env_sources``); none when the
        declaration is refused."""
        if self.app is None:
            return ()
        resumed = [self.app_resume.entry.file] if self.app_resume is not None else []
        return tuple(dict.fromkeys([*self.app.project_paths, *resumed]))


@dataclass(frozen=True)
class RunContext:
    """One run's inputs, read once after the platform's lock is held (nothing changes them while the run holds it)."""

    project: Project
    plat: Platform
    opts: Options
    mode: str  # "verify" or "reference"
    staging: Path  # the dossier being written (swapped in whole when complete)
    names: tuple[str, ...]  # the in-env steps this run asks for, in order
    backend: str  # the backend the probe must find
    declaration: Declaration
    lock: check.LockRead  # the lock and its twin as read (the lock check takes them, reading neither again)
    reference: manifest.Reference | KernodeckError  # the error: refused or missing (the declared-contract step says)
    reference_inventory: str | None  # the reference's recorded inventory.txt, when it has one
    secrets: sources.Secrets  # what the dossier's files are scanned for (the project's declared indexes public)
    install_secrets: sources.Secrets  # what the env's records are scanned for (the variant's declared index)

    @property
    def reference_platform(self) -> str:
        """The platform the reference was made on ("" when there is no usable reference)."""
        if isinstance(self.reference, KernodeckError):
            return ""
        return str(self.reference.manifest["environment"]["platform"])


def declaration(project: Project) -> Declaration:
    """The declaration's tables from ``[tool.kernodeck]`` as the CLI's load of the Project read it (not read again)."""
    tool = project.tool

    def table(name: str) -> dict[str, Any]:
        found = tool.get(name, {})
        return dict(found) if isinstance(found, dict) else {}

    try:
        app = app_contract.from_tool(tool, project.root)
        raw = tool.get("application")
        resumed = resume_contract.from_table(raw.get("resume") if isinstance(raw, dict) else None)
        return Declaration(app, None, table("resume"), table("determinism"), resumed)
    except KernodeckError as exc:
        return Declaration(None, exc, table("resume"), table("determinism"))


def _reference(project: Project) -> tuple[manifest.Reference | KernodeckError, str | None]:
    try:
        ref: manifest.Reference | KernodeckError = manifest.load(project)
    except KernodeckError as exc:
        ref = exc
    inv = project.reference / "inventory.txt"
    return ref, inv.read_text(encoding="utf-8") if inv.is_file() else None


def load(project: Project, plat: Platform, opts: Options, *, mode: str, staging: Path,
         names: tuple[str, ...]) -> RunContext:
    """Read every input of a run, once. The caller holds the platform's lock."""
    ref, ref_inventory = _reference(project)
    vindex = sources.variant_index(plat.variant.name, plat.variant.index)
    declared = declaration(project)
    if declared.app_resume is None:  # no [tool.kernodeck.application.resume]: the step is not asked for at all
        names = tuple(n for n in names if n != StepName.RESUME_APPLICATION)
    return RunContext(
        project=project, plat=plat, opts=opts, mode=mode, staging=staging, names=names,
        backend=opts.expect_backend or str(plat.variant.backend),
        declaration=declared, lock=check.read_lock(project, plat),
        reference=ref, reference_inventory=ref_inventory,
        secrets=sources.secrets([v.index for v in project.variants.values()]),
        install_secrets=sources.secrets([sources.public_url(vindex.declared)], [vindex.declared]),
    )
