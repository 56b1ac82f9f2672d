"""Inventories: ``pip freeze --all`` is an observation, compared with the lock (the contract) or another inventory."""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from .lockfile import Lockfile

# What a venv holds by construction (its installer), not by the lock's choice.
BOOTSTRAP = frozenset({"pip", "setuptools", "wheel"})


def parse_freeze(text: str) -> dict[str, str]:
    """``name==version`` lines -> {canonical name: version}; direct references keep their ``@ url`` form."""
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "==" in line:
            name, _, version = line.partition("==")
            found[canonicalize_name(name)] = version.strip()
        elif " @ " in line:
            name, _, ref = line.partition(" @ ")
            found[canonicalize_name(name)] = "@ " + ref.strip()
    return found


@dataclass
class InventoryDiff:
    added: dict[str, str] = field(default_factory=dict)  # in the observed, not the expected
    removed: dict[str, str] = field(default_factory=dict)  # expected, not observed
    changed: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (expected, observed)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def as_dict(self) -> dict[str, object]:
        return {
            "added": self.added,
            "removed": self.removed,
            "changed": {k: {"expected": a, "observed": b} for k, (a, b) in self.changed.items()},
        }

    def summary(self) -> str:
        parts = [f"+{n}=={v}" for n, v in sorted(self.added.items())]
        parts += [f"-{n}=={v}" for n, v in sorted(self.removed.items())]
        parts += [f"{n} {a} -> {b}" for n, (a, b) in sorted(self.changed.items())]
        return ", ".join(parts) if parts else "identical"


def diff(expected: dict[str, str], observed: dict[str, str], ignore: frozenset[str] = frozenset()) -> InventoryDiff:
    result = InventoryDiff()
    for name in sorted(set(expected) | set(observed)):
        if name in ignore:
            continue
        exp, obs = expected.get(name), observed.get(name)
        if exp is None and obs is not None:
            result.added[name] = obs
        elif obs is None and exp is not None:
            result.removed[name] = exp
        elif exp != obs and exp is not None and obs is not None:
            result.changed[name] = (exp, obs)
    return result


def expected_from_lock(lock: Lockfile, environment: dict[str, str] | None = None) -> dict[str, str]:
    """The pins that apply to an environment (markers evaluated; default: this interpreter's)."""
    out = {}
    for pin in lock.pins:
        if pin.marker and not Marker(pin.marker).evaluate(environment):
            continue
        out[pin.name] = pin.version
    return out
