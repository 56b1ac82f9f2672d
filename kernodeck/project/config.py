"""The project's declared configuration: ``[tool.kernodeck]`` in pyproject.toml (platforms as data)."""

from __future__ import annotations

import enum
import json
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernodeck.errors import ConfigError, SchemaViolation, UnknownVariant
from kernodeck.sources import malformed, require_valid_sources
from kernodeck.sources.installer_config import config_bytes


class Backend(enum.StrEnum):
    CPU = "cpu"
    CUDA = "cuda"
    ROCM = "rocm"
    MPS = "mps"


@dataclass(frozen=True)
class Variant:
    """An accelerator variant: which torch layer, from which index, and what the backend probe must find."""

    name: str
    backend: Backend
    torch_layer: str
    index: str

    def digest_record(self) -> str:
        return json.dumps(
            {"name": self.name, "backend": str(self.backend), "torch-layer": self.torch_layer, "index": self.index},
            sort_keys=True,
        )


@dataclass(frozen=True)
class DeclaredPlatform:
    python: str
    os_arch: str
    variant: str
    runner: str
    # Its lock can be made only on its own runner (its index is reachable only there): `lock --check --all`
    # reports a missing lock for it as pending instead of failing.
    lock_on_runner: bool = False
    # The container base `nox -s export` writes (NAME:TAG or NAME@sha256:DIGEST); "" for the platform's Python image.
    image: str = ""
    # Its env is installed from wheels only (pip --only-binary :all:, uv --no-build): a pin with no wheel for it fails
    # the rebuild instead of being built here from its sdist.
    only_binary: bool = False

    @property
    def id(self) -> str:
        return f"cp{self.python.replace('.', '')}-{self.os_arch}-{self.variant}"


@dataclass(frozen=True)
class Project:
    root: Path
    requirements: tuple[str, ...]
    lockfiles: Path
    reference: Path
    venv_root: Path
    runs: Path
    variants: dict[str, Variant]
    default_variant: dict[str, str]
    platforms: tuple[DeclaredPlatform, ...]
    tool_pins: dict[str, str]
    # `resolve-as-of`: resolve only what was uploaded before this date (kernodeck.lock.as_of_instant checks it).
    resolve_as_of: str | None = None
    # The ``[tool.kernodeck]`` table as read (validated): a run takes its other tables (application, resume,
    # determinism) from here instead of reading pyproject.toml again.
    tool: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def variant(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            raise UnknownVariant(name, list(self.variants)) from None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(asdict(self), default=str))
        data.pop("tool")  # the table as read, not a setting of its own
        return data


# the folders Kernodeck writes inside the project, by their [tool.kernodeck] key, with their defaults
OWNED_DEFAULTS = {"reference": "dossier/reference", "venv-root": ".venv-rebuild", "runs": "runs"}


def owned_folders(tool: dict[str, Any]) -> tuple[str, ...]:
    """The folders Kernodeck writes inside the project as ``[tool.kernodeck]`` names them (relative paths; one outside
    the project matches no file of it): a glob of ``code``/``files`` never descends into them."""
    return tuple(str(tool.get(key, default)) for key, default in OWNED_DEFAULTS.items())


OWNED = owned_folders({})


def _pins(groups: dict[str, Any]) -> dict[str, str]:
    pins: dict[str, str] = {}
    for items in groups.values():
        for item in items:
            if isinstance(item, str) and "==" in item:
                name, _, version = item.partition("==")
                pins[name.strip().lower()] = version.strip()
    return pins


SCHEMA = "schema/tool-kernodeck.schema.json"  # inside the package: the published shape of [tool.kernodeck]
_TYPES = {"string": "a string", "integer": "a whole number", "number": "a number", "boolean": "true or false",
          "array": "an array", "object": "a table"}


def schema() -> dict[str, Any]:
    """The JSON Schema of ``[tool.kernodeck]`` shipped in the package (editors and validate-pyproject can use it)."""
    from importlib import resources

    data: dict[str, Any] = json.loads((resources.files("kernodeck.project") / SCHEMA).read_text(encoding="utf-8"))
    return data


def _shown(value: object) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def _expected(definition: dict[str, Any], rule: str) -> str:
    """What a schema node expects, in words: its type (or values) and its description."""
    description = str(definition.get("description", ""))
    if rule == "type":
        kind = _TYPES.get(str(definition.get("type")), str(definition.get("type")))
        return f"{kind} ({description})" if description and not description.startswith(kind) else description or kind
    return description or f"a value that satisfies {rule}"


def schema_error(exc: SchemaViolation, pyproject: Path) -> ConfigError:
    """One fastjsonschema error as one line: the key path, the value and what is expected; the TIP names the file."""
    key = "tool.kernodeck" + str(exc.name).removeprefix("data")
    definition: dict[str, Any] = exc.definition if isinstance(exc.definition, dict) else {}
    value = exc.value
    if exc.rule == "required" and isinstance(value, dict):
        missing = next((k for k in exc.rule_definition if k not in value), "?")
        wanted = definition.get("properties", {}).get(missing, {})
        expected = _expected(wanted, "type") if "type" in wanted else str(wanted.get("description", "a value"))
        message = f"{key}: {missing} is missing: expected {expected}"
    elif exc.rule == "additionalProperties" and isinstance(value, dict):
        extra = sorted(set(value) - set(definition.get("properties", {})))
        known = ", ".join(definition.get("properties", {}))
        message = f"{key}: unknown key {', '.join(extra)} (known: {known})"
    elif exc.rule == "propertyNames" and isinstance(value, dict):
        pattern = re.compile(str(exc.rule_definition.get("pattern", ".*")))
        bad = next((k for k in value if not pattern.search(str(k))), "?")
        message = f"{key}: the name {bad!r} is not allowed: expected letters, digits, '-' or '_' ({pattern.pattern})"
    elif exc.rule == "minProperties":
        message = f"{key} = {_shown(value)}: expected {_expected(definition, 'minProperties')}, at least one"
    else:
        message = f"{key} = {_shown(value)}: expected {_expected(definition, exc.rule or '')}"
    return ConfigError(message, tip=f"fix {key.split('[')[0]} in {pyproject} (the schema: kernodeck/project/{SCHEMA})")


def toml_error(exc: tomllib.TOMLDecodeError, path: Path) -> ConfigError:
    """A TOML syntax error as one line naming the file, the line and the column."""
    text = str(exc)
    where = re.search(r"\(at line (\d+), column (\d+)\)", text)
    reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", text)
    at = f"line {where.group(1)}, column {where.group(2)}" if where else "end of file" if "end of" in text else ""
    return ConfigError(f"{path}{', ' + at if at else ''}: invalid TOML: {reason}",
                       tip=f"fix the TOML syntax {'at ' + at + ' ' if at else ''}of {path}, then rerun")


def validate(tool: object, pyproject: Path) -> None:
    """Check ``[tool.kernodeck]`` against the shipped schema, then what a schema cannot say (an index URL that does
    not parse). Raises one :class:`ConfigError` for the first problem."""
    from kernodeck.project import (
        _tool_schema,  # the schema compiled to code (tests/helpers/schema_code.py): no compile at each load
    )

    try:
        _tool_schema.validate(tool)
    except SchemaViolation as exc:
        raise schema_error(exc, pyproject) from None
    assert isinstance(tool, dict)
    from kernodeck.project import assets  # what a schema cannot say of a source: one kind, a commit, a sha256

    assets.check_declared(tool, pyproject)
    for name, variant in tool["variants"].items():
        why = malformed(variant["index"]) if "://" in variant["index"] else ""
        if why:
            raise ConfigError(f"tool.kernodeck.variants.{name}.index = {_shown(variant['index'])}: a malformed URL "
                              f"({why}): expected an index URL",
                              tip=f"fix tool.kernodeck.variants.{name}.index in {pyproject}")
    from kernodeck.project.deadlines import check_names

    check_names(tool.get("deadlines") or {}, pyproject)


def load_project(root: Path | None = None) -> Project:
    """Read ``[tool.kernodeck]`` from ``root/pyproject.toml`` (root defaults to the current folder), validated against
    the shipped schema; then refuse a malformed URL in any package source pip or uv would read."""
    root = (root or Path.cwd()).resolve()
    pyproject = root / "pyproject.toml"
    # read once: through the sources' content cache, where the check of uv's [tool.uv] below finds it again
    raw = config_bytes(pyproject) if pyproject.is_file() else None
    if raw is None:
        raise ConfigError(f"no pyproject.toml in {root}", tip="run from the project's root folder") from None
    try:
        data = tomllib.loads(raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"))
    except tomllib.TOMLDecodeError as exc:
        raise toml_error(exc, pyproject) from None
    tool = data.get("tool", {}).get("kernodeck")
    if not isinstance(tool, dict):
        raise ConfigError(f"{pyproject} has no [tool.kernodeck] table")
    validate(tool, pyproject)
    require_valid_sources()
    variants = {
        name: Variant(name, Backend(v["backend"]), v["torch-layer"], v["index"]) for name, v in tool["variants"].items()
    }
    platforms = tuple(
        DeclaredPlatform(p["python"], p["os-arch"], p["variant"], p.get("runner", ""), p.get("lock-on-runner", False),
                         p.get("image", ""), p.get("only-binary", False))
        for p in tool.get("platforms", [])
    )
    for plat in platforms:
        if plat.variant not in variants:
            raise UnknownVariant(plat.variant, list(variants))
    return Project(
        root=root,
        requirements=tuple(tool.get("requirements", [])),
        lockfiles=root / tool.get("lockfiles", "lockfiles"),
        reference=root / tool.get("reference", OWNED_DEFAULTS["reference"]),
        venv_root=root / tool.get("venv-root", OWNED_DEFAULTS["venv-root"]),
        runs=root / tool.get("runs", OWNED_DEFAULTS["runs"]),
        variants=variants,
        default_variant=dict(tool.get("default-variant", {})),
        platforms=platforms,
        tool_pins=_pins(data.get("dependency-groups", {})),
        resolve_as_of=str(tool["resolve-as-of"]) if "resolve-as-of" in tool else None,
        tool=tool,
    )
