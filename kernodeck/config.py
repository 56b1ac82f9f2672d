"""The project's declared configuration: ``[tool.kernodeck]`` in pyproject.toml (platforms as data)."""

from __future__ import annotations

import enum
import json
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError, UnknownVariant


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

    def variant(self, name: str) -> Variant:
        try:
            return self.variants[name]
        except KeyError:
            raise UnknownVariant(name, list(self.variants)) from None

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(json.dumps(asdict(self), default=str))
        return data


def _pins(groups: dict[str, Any]) -> dict[str, str]:
    pins: dict[str, str] = {}
    for items in groups.values():
        for item in items:
            if isinstance(item, str) and "==" in item:
                name, _, version = item.partition("==")
                pins[name.strip().lower()] = version.strip()
    return pins


def load_project(root: Path | None = None) -> Project:
    """Read ``[tool.kernodeck]`` from ``root/pyproject.toml`` (root defaults to the current folder)."""
    root = (root or Path.cwd()).resolve()
    pyproject = root / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no pyproject.toml in {root}", tip="run from the project's root folder") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject}: {exc}") from None
    tool = data.get("tool", {}).get("kernodeck")
    if not isinstance(tool, dict):
        raise ConfigError(f"{pyproject} has no [tool.kernodeck] table")
    try:
        variants = {
            name: Variant(name, Backend(v["backend"]), v["torch-layer"], v["index"])
            for name, v in tool["variants"].items()
        }
        platforms = tuple(
            DeclaredPlatform(str(p["python"]), p["os-arch"], p["variant"], p.get("runner", ""),
                             bool(p.get("lock-on-runner", False)))
            for p in tool.get("platforms", [])
        )
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"{pyproject}: bad [tool.kernodeck] variant or platform entry: {exc}") from None
    for plat in platforms:
        if plat.variant not in variants:
            raise UnknownVariant(plat.variant, list(variants))
    return Project(
        root=root,
        requirements=tuple(tool.get("requirements", [])),
        lockfiles=root / tool.get("lockfiles", "lockfiles"),
        reference=root / tool.get("reference", "dossier/reference"),
        venv_root=root / tool.get("venv-root", ".venv-rebuild"),
        runs=root / tool.get("runs", "runs"),
        variants=variants,
        default_variant=dict(tool.get("default-variant", {})),
        platforms=platforms,
        tool_pins=_pins(data.get("dependency-groups", {})),
        resolve_as_of=str(tool["resolve-as-of"]) if "resolve-as-of" in tool else None,
    )
