"""Run deadlines: how long each in-env step may take, and how long the in-env process may go without progress.

``[tool.kernodeck.deadlines]`` in pyproject.toml, in seconds: one key per in-env step (``application = 1800``) and
``stall`` (no progress event for that long: a phase line of the runner, each ``app.progress(...)`` of the
application). Every value is multiplied by the scale (``--deadline-scale`` or ``$KERNODECK_DEADLINE_SCALE``) for
slower hardware. Deadlines are run policy, not part of the reference's identity: changing them needs no new
reference. The schema checks each value is a number > 0; the names are checked here against the in-env steps.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck import tips
from kernodeck.errors import ConfigError
from kernodeck.inenv import steptable

SCALE_ENV = "KERNODECK_DEADLINE_SCALE"
# The commands that run the application in the env: each takes --deadline-scale; their nox sessions hand a signal on
# (noxsessions.RUN_THE_APPLICATION, which imports nothing of Kernodeck, holds the same names: tested).
COMMANDS = ("verify", "reference", "replay", "calibrate", "upgrade", "bisect")
STALL = "stall"
DEFAULT_STEP_S = steptable.LONGEST_S
DEFAULT_STALL_S = 900.0
DEFAULTS: Mapping[str, float] = {str(row.name): row.deadline_s for row in steptable.STEPS}  # each in-env step's row


@dataclass(frozen=True)
class Deadlines:
    """The seconds each step may take and the longest silence, already scaled."""

    steps: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))
    stall: float = DEFAULT_STALL_S
    scale: float = 1.0

    def step(self, name: str) -> float:
        """A step's deadline (a step with none of its own, e.g. a new one: the longest default)."""
        return self.steps.get(name, DEFAULT_STEP_S * self.scale)

    def as_dict(self) -> dict[str, Any]:
        return {"scale": self.scale, "stall_s": self.stall, "steps_s": dict(self.steps)}


def scale_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``$KERNODECK_DEADLINE_SCALE`` (what ``--deadline-scale`` sets), 1 when unset."""
    raw = (os.environ if environ is None else environ).get(SCALE_ENV, "").strip()
    if not raw:
        return 1.0
    return parse_scale(raw, f"${SCALE_ENV}")


def parse_scale(raw: str, where: str = "--deadline-scale") -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where} must be a number > 0 (e.g. 2 for a machine twice as slow), not {raw!r}",
                          tip=tips.nox("verify", "--deadline-scale", "2"))
    return value


def check_names(table: Mapping[str, Any], pyproject: Path | None) -> None:
    """Each key of ``[tool.kernodeck.deadlines]`` names an in-env step or ``stall`` (the schema checks the values)."""
    known = sorted({*steptable.BY_NAME, STALL})
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"tool.kernodeck.deadlines.{unknown[0]}: not an in-env step nor stall; expected one of "
                          f"{', '.join(known)}",
                          tip=f"fix tool.kernodeck.deadlines in {pyproject or 'pyproject.toml'}")


def load(tool: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Deadlines:
    """The deadlines a run keeps: pyproject's table (validated by the schema) over the defaults, scaled."""
    table = dict(tool.get("deadlines") or {})
    check_names(table, None)
    scale = scale_from_env(environ)
    steps = {name: float(table.get(name, DEFAULTS.get(name, DEFAULT_STEP_S))) * scale for name in steptable.BY_NAME}
    return Deadlines(steps, float(table.get(STALL, DEFAULT_STALL_S)) * scale, scale)
