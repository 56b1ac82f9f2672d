"""The one run builder: what the in-env runner is given, for each caller (verify, reference, calibrate, bisect,
upgrade).

Every caller starts from verify's configuration (the application and the reference, the resume and determinism
settings, the declared foreign libraries, the in-env inputs it checks its code against) and states, as a typed list
of :class:`Change`, what it changes; nothing else differs (``tests/unit/test_runbuild.py`` compares each caller's
configuration with verify's). The platform's lock is held the same way by each (:func:`holding`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, assert_never

from kernodeck._fs import inenv_fingerprints, sha256_file
from kernodeck.env import start
from kernodeck.env.envdirs import platform_lock
from kernodeck.inenv.protocol import ConfigKey
from kernodeck.platform_lock import acquire
from kernodeck.project import app_contract
from kernodeck.project.assets import SourceKind
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify.context import Declaration

__all__ = ["NO_CHANGE", "WHO", "Change", "Changes", "ReferenceConfig", "add_in_env_inputs", "holding", "prefetch",
           "runner_config"]


class ReferenceConfig(Protocol):
    """A reference as the runner needs it (``kernodeck.runformat.manifest.Reference``): its part of the config."""

    def run_config(self, project: Project, declared: app_contract.Application | None = None) -> dict[str, Any]: ...


class Change(StrEnum):
    """What a caller changes from verify's runner configuration, each with the keys it may touch."""

    MAKE_REFERENCE = "make-reference"  # reference: the declared application run, no reference to compare with
    DECLARED_TOLERANCES = "declared-tolerances"  # calibrate: the outputs judged under the tolerance declared now
    ALLOW_CODE_CHANGE = "allow-code-change"  # verify --allow-code-change: checks on code the reference did not run
    SETTINGS_COST = "settings-cost"  # verify --settings-cost: the entry run once more, without the settings
    VARIATION = "variation"  # calibrate: each process varies one legitimate setting (the first: margins too)
    EXTRA_CONFIG = "extra-config"  # the benchmark's own keys (Options.extra_config)

    def keys(self, extra: dict[str, Any]) -> frozenset[str]:
        """The top-level keys of the configuration this change may make differ from verify's."""
        match self:
            case Change.MAKE_REFERENCE:
                return frozenset({ConfigKey.MODE, ConfigKey.REFERENCE, ConfigKey.CRITERION, ConfigKey.APPLICATION,
                                  ConfigKey.ALLOW_CODE_CHANGE, ConfigKey.SETTINGS_COST})
            case Change.DECLARED_TOLERANCES:
                return frozenset({ConfigKey.APPLICATION})
            case Change.VARIATION:
                return frozenset({ConfigKey.VARIATION, ConfigKey.MARGIN_FILE})
            case Change.ALLOW_CODE_CHANGE:
                return frozenset({ConfigKey.ALLOW_CODE_CHANGE})
            case Change.SETTINGS_COST:
                return frozenset({ConfigKey.SETTINGS_COST})
            case Change.EXTRA_CONFIG:
                return frozenset(extra)
            case _:
                assert_never(self)


@dataclass(frozen=True)
class Changes:
    """A caller's declared changes: the members of :class:`Change` and, for ``EXTRA_CONFIG``, the keys it adds."""

    changes: tuple[Change, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def keys(self) -> frozenset[str]:
        return frozenset().union(*(c.keys(self.extra) for c in self.changes))


NO_CHANGE = Changes()  # verify's own run
# Keys that say who runs the configuration, not how: each caller's own, never a change of what the steps do.
WHO = frozenset({ConfigKey.SESSION})


def runner_config(project: Project, declaration: Declaration, reference: ReferenceConfig | None, backend: str,
                  changes: Changes = NO_CHANGE, *, session: str = "verify") -> dict[str, Any]:
    """What the in-env runner is given: verify's configuration, changed only as ``changes`` declares; ``session``:
    the nox session that runs it, which the in-env TIPs name (not a setting: it changes nothing the steps do).

    ``reference`` is None only with ``Change.MAKE_REFERENCE`` (a reference is being made, nothing to compare with).
    """
    app = declaration.application()
    making = Change.MAKE_REFERENCE in changes.changes
    if making:
        config: dict[str, Any] = {ConfigKey.APPLICATION: app.run_config(), ConfigKey.REFERENCE: None}
    else:
        if reference is None:
            raise ValueError("a run against the reference needs the reference (or Change.MAKE_REFERENCE)")
        config = reference.run_config(project, app)
    if Change.DECLARED_TOLERANCES in changes.changes:  # measured under the tolerance judged, whatever was recorded
        config[ConfigKey.APPLICATION]["outputs"] = {n: o.declared() for n, o in app.outputs.items()}
    if not making:
        config[ConfigKey.ALLOW_CODE_CHANGE] = Change.ALLOW_CODE_CHANGE in changes.changes
    # what the settings cost is recorded with a reference, and by a verify that asks (its own run of the entry)
    config[ConfigKey.SETTINGS_COST] = making or Change.SETTINGS_COST in changes.changes
    prefetch(app, config[ConfigKey.APPLICATION])
    resume, det = declaration.resume, declaration.determinism
    config[ConfigKey.RESUME] = {
        "steps": resume.get("steps", 12),
        "checkpoint_at": resume.get("checkpoint-at", 5),
        "gpu_tolerance": resume.get("gpu-tolerance", 1e-5),
    }
    if declaration.app_resume is not None:
        config[ConfigKey.RESUME_APPLICATION] = declaration.app_resume.run_config()
    if "max-records" in det:
        config[ConfigKey.DETERMINISM_RECORDS] = int(det["max-records"])
    config[ConfigKey.LIBRARIES] = start.declared_libraries(project.tool)
    config[ConfigKey.VARIABLES] = start.declared_variables(project.tool)
    config.update({ConfigKey.PROJECT_ROOT: str(project.root), ConfigKey.EXPECT_BACKEND: backend,
                   ConfigKey.MODE: "reference" if making else "verify", ConfigKey.SESSION: session})
    if Change.EXTRA_CONFIG in changes.changes:
        config.update(changes.extra)
    add_in_env_inputs(config, project.root, app)
    return config


def in_env_sources(run_config: dict[str, Any], root: Path, app: app_contract.Application) -> dict[str, str]:
    """The sources the in-env side runs, by their fingerprints read now: the declared ones (``code``, ``files``) and
    the application's train file when it declares a resume (its run compares with itself, not with the reference,
    so the reference's identity does not hold it, but its bytes are checked as any code's)."""
    sources = app.fingerprints(root)
    resumed = (run_config.get("resume_application") or {}).get("entry")
    if isinstance(resumed, dict):
        rel = str(resumed["file"])
        sources.setdefault(rel, sha256_file(root / rel) if (root / rel).is_file() else "")
    return sources


def add_in_env_inputs(run_config: dict[str, Any], root: Path, app: app_contract.Application) -> None:
    """What the in-env side checks the code it runs against (verified bytes, a closed world): the sources'
    fingerprints (``application.sources``) and Kernodeck's own in-env files' (``inenv_sha256``).

    Against a reference (without ``--allow-code-change``) a file the reference fingerprinted is held to the
    reference's digest, never to a second read: the orchestrator already checked it against that digest, and a file
    swapped between that check and this read could otherwise run bytes the reference never described (red-team pass
    22, LEAD1). Made a reference, or with ``--allow-code-change``, they are read now."""
    sources = in_env_sources(run_config, root, app)
    if run_config.get(ConfigKey.MODE) == "verify" and not run_config.get(ConfigKey.ALLOW_CODE_CHANGE):
        recorded = (run_config.get(ConfigKey.REFERENCE) or {}).get("code") or {}
        sources.update({rel: str(digest) for rel, digest in recorded.items() if rel in sources and digest})
    run_config["application"]["sources"] = sources
    run_config.update(inenv_sha256=inenv_fingerprints())


def prefetch(app: app_contract.Application, config: dict[str, Any]) -> None:
    """A url source missing from the cache is fetched now (where the network allows); why it could not be is handed
    to the in-env side, which fails in the source's layer with it (a wrong hash: at ``weights``)."""
    found = [(app.weights, config.get("weights"))] if app.weights is not None else []
    found += [(src, (config.get("data") or {}).get(name)) for name, src in app.data.items()]
    urls = [(src, cfg) for src, cfg in found if src.kind is SourceKind.URL and isinstance(cfg, dict)]
    if not urls:  # no url source: urllib.request, http.client and ssl are not imported (7 ms of every verify)
        return
    from kernodeck.project import fetch

    for src, cfg in urls:
        try:
            fetch.fetch_one(src)
        except fetch.FetchError as exc:
            cfg["fetch_error"] = f"{exc} (TIP: {exc.tip})"


@contextmanager
def holding(project: Project, plat: Platform) -> Iterator[None]:
    """The platform's lock, held for the run (one run of a platform at a time; another one waits, said once)."""
    plock = platform_lock(project, plat)
    acquire(plock, plat)
    try:
        yield
    finally:
        plock.release()

