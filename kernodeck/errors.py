"""Errors the user can act on. The CLI's single boundary turns them into one ``ERROR:`` line and one ``TIP:`` line."""

from __future__ import annotations

from typing import Any


class KernodeckError(Exception):
    """Base for errors the user can act on; ``tip`` names the next command to run."""

    tip: str = ""

    def __init__(self, message: str, tip: str = "") -> None:
        super().__init__(message)
        if tip:
            self.tip = tip


class ConfigError(KernodeckError):
    tip = "check [tool.kernodeck] in pyproject.toml"


class UnknownVariant(ConfigError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown variant {name!r}; known variants: {', '.join(sorted(known))}")
        self.tip = f"nox -s verify -- --variant {sorted(known)[0]}"


class MissingLockfile(KernodeckError):
    def __init__(self, platform_id: str, path: str) -> None:
        super().__init__(f"no lockfile for platform {platform_id} (expected {path})")
        self.tip = f"nox -s lock -- --platform {platform_id}"


class LockfileError(KernodeckError):
    """A lockfile that cannot be trusted: broken syntax, a pin without hash, a missing header."""

    def __init__(self, path: str, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {problem}")
        self.tip = "regenerate it: nox -s lock"


class StaleLock(KernodeckError):
    def __init__(self, path: str, changes: list[str], platform_id: str) -> None:
        super().__init__(f"lockfile {path} is stale: {'; '.join(changes)}")
        self.changes = changes
        self.tip = f"nox -s lock -- --platform {platform_id}"


class SourceUnreachable(KernodeckError):
    pass


class LockFailed(KernodeckError):
    tip = "read the resolver's error above, fix requirements/*.in, then: nox -s lock"


class CommandFailed(KernodeckError):
    """A subprocess failed; ``first_error`` keeps its first error line verbatim."""

    def __init__(self, argv: list[str], returncode: int, first_error: str, output: str = "") -> None:
        super().__init__(f"command failed (exit {returncode}): {first_error}")
        self.argv = argv
        self.returncode = returncode
        self.first_error = first_error
        self.output = output


class RebuildFailed(KernodeckError):
    tip = "the previous good environment is untouched; fix the cause, then: nox -s rebuild -- --fresh"


class ManifestError(KernodeckError):
    tip = "fix dossier/reference/manifest.toml or make a new reference: nox -s reference -- --new"


class DossierError(KernodeckError):
    tip = "check that the output folder is writable and has free space, then rerun: nox -s verify"


class Busy(KernodeckError):
    tip = "wait for the other run to finish, then rerun"


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
