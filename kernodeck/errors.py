"""Errors the user can act on. The CLI's single boundary turns them into one ``ERROR:`` line and one ``TIP:`` line.

Every error class of the package lives here (but ``env.pythons.PythonNotFound``, whose TIP names that module's
variables), each TIP's command from :mod:`kernodeck.tips`; the modules that raise them import them from here.
"""

from __future__ import annotations

from typing import Any

from kernodeck import tips


class KernodeckError(Exception):
    """Base for errors the user can act on; ``tip`` names the next command to run."""

    tip: str = ""

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        if tip:
            self.tip = tip


class UsageError(KernodeckError):
    """A command line argparse refuses (an unknown option, a value not among the choices): one ERROR line, not the
    usage text."""

    def __init__(self, command: str | None, problem: str) -> None:
        super().__init__(f"kernodeck{' ' + command if command else ''}: {problem}")
        self.tip = tips.usage(command)


class ConfigError(KernodeckError):
    tip = "check [tool.kernodeck] in pyproject.toml"


class VariantChoice(ConfigError):
    """A variant to choose (an unknown one named, or none declared for this machine): its TIP is the command being
    run with a declared variant (:func:`kernodeck.project.platforms.for_command`); alone, the declared platforms."""

    def __init__(self, message: str, known: list[str]) -> None:
        super().__init__(message)
        self.known = sorted(known)
        self.tip = f"{tips.nox('matrix')}  (lists the declared platforms; variants: {', '.join(self.known)})"


class UnknownVariant(VariantChoice):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown variant {name!r}; known variants: {', '.join(sorted(known))}", known)


class Interrupted(KernodeckError):
    """SIGTERM/SIGINT stopped a command that runs the application; what it ran so far is recorded (with stacks)."""


class MissingLockfile(KernodeckError):
    def __init__(self, platform_id: str, path: str) -> None:
        super().__init__(f"no lockfile for platform {platform_id} (expected {path})")
        self.tip = tips.nox("lock", "--platform", platform_id)


class LockfileError(KernodeckError):
    """A lockfile that cannot be trusted: broken syntax, a pin without hash, a missing header."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {problem}")
        self.tip = f"regenerate it: {tips.LOCK}"


class StaleLock(KernodeckError):
    def __init__(self, path: str, changes: list[str], platform_id: str) -> None:
        super().__init__(f"lockfile {path} is stale: {'; '.join(changes)}")
        self.changes = changes
        self.tip = tips.nox("lock", "--platform", platform_id)


class SourceUnreachable(KernodeckError):
    pass


class LockFailed(KernodeckError):
    tip = f"read the resolver's error above, fix requirements/*.in, then: {tips.LOCK}"


class CommandFailed(KernodeckError):
    """A subprocess failed; ``first_error`` keeps its first error line verbatim."""

    def __init__(self, argv: list[str], returncode: int, first_error: str, output: str = "") -> None:
        super().__init__(f"command failed (exit {returncode}): {first_error}")
        self.argv = argv
        self.returncode = returncode
        self.first_error = first_error
        self.output = output


class RebuildFailed(KernodeckError):
    tip = f"the previous good environment is untouched; fix the cause, then: {tips.REBUILD_FRESH}"


class ManifestError(KernodeckError):
    tip = f"fix dossier/reference/manifest.toml or make a new reference: {tips.NEW_REFERENCE}"


class DossierError(KernodeckError):
    tip = f"check that the output folder is writable and has free space, then rerun: {tips.VERIFY}"


class Busy(KernodeckError):
    tip = "wait for the other run to finish, then rerun"


class DirtyTree(KernodeckError):
    """replay refused: tracked files differ from the commit it would replay."""

    tip = ("commit (or stash) them first: a replay of uncommitted work proves nothing; or: "
           + tips.nox("replay", "--allow-dirty"))


class WouldOverwrite(KernodeckError):
    """init refused: files it would write exist (nothing was written)."""

    def __init__(self, paths: list[str]) -> None:
        super().__init__(f"kernodeck init would overwrite {', '.join(paths)}; nothing was written")
        self.tip = "kernodeck init --force   (overwrites them; commit or move your versions first)"


class SchemaViolation(ValueError):
    """Raised by the generated ``[tool.kernodeck]`` validator (project/_tool_schema.py, fastjsonschema's code and
    its exception's signature); :func:`kernodeck.project.config.schema_error` turns it into one :class:`ConfigError`."""

    def __init__(self, message: str, value: object = None, name: str | None = None,
                 definition: object = None, rule: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.value = value
        self.name = name
        self.definition = definition
        self.rule = rule

    @property
    def rule_definition(self) -> Any:
        if not self.rule or not isinstance(self.definition, dict):
            return None
        return self.definition.get(self.rule)


class UnsafeOut(KernodeckError):
    """An output path Kernodeck would have to destroy something it did not make to use."""


class WheelhouseError(KernodeckError):
    """A wheelhouse that cannot serve the lock: a file missing, or the download failed."""


class MalformedSource(KernodeckError):
    """A source variable or configuration entry whose URL does not parse: named, its value never shown."""


class SecretInText(KernodeckError):
    """A source or credential of this machine ended up in a text about to be written or shown."""

    tip = ("nothing was written; this is a Kernodeck bug: report it with the file's name "
           "(never the value); meanwhile unset the variable or source named above")


class DamagedDossier(KernodeckError):
    """A dossier file compare cannot read: named, with what is wrong with it."""

    tip = f"compare takes two dossier folders written by `{tips.VERIFY}`; rerun the verify that made the damaged one"


class CodeChanged(ManifestError):
    """Declared code files that are not the reference's: changed (the reference no longer describes the code), or
    missing here (the checkout or a container's image lacks a file the reference describes: restore it; a new
    reference would describe code that is not there)."""

    def __init__(self, where: str, changed: list[str], missing: list[str] | tuple[str, ...] = ()) -> None:
        differ = [f for f in changed if f not in missing]
        said = ([f"code differs from the reference's fingerprint: {', '.join(differ)} (verify -- "
                 "--allow-code-change runs the checks anyway, never as a pass)"] if differ else []) + (
            [f"code the reference fingerprints is missing: {', '.join(missing)}"] if missing else [])
        super().__init__(f"{where}: {'; '.join(said)}")
        self.changed = changed
        self.missing = list(missing)
        if missing:
            self.tip = (f"git checkout -- {' '.join(missing)}   (restore the missing files; a container's image: "
                        f"export it again, {tips.nox('export', '--format', 'dockerfile')}, which copies every declared "
                        f"source; if they are gone on purpose: {tips.NEW_REFERENCE})")
        else:
            self.tip = f"{tips.NEW_REFERENCE}   (if the change is intended: a new reference for this code)"
