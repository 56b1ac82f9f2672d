"""The application's own resume contract: ``[tool.kernodeck.application.resume]`` in pyproject.toml.

Kernodeck calls the application's ``train(app, steps, save_at, resume_from)`` three times: once uninterrupted to
``steps`` (N), once to ``checkpoint-at`` (K) saving a checkpoint through the application's own mechanism into
``app.checkpoint_dir``, then in a NEW process resuming from it to N. The end states (the declared outputs, each under
its tolerance kind) and the progress counters must agree. Each declared control (``app.resume_drop``: optimizer, rng,
loader) must make the check fail, or the declaration is refused: a resume check that cannot see a dropped piece of
state proves nothing. Read and checked here, outside the env; ``kernodeck/inenv/resume_app.py`` runs it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any, assert_never

from kernodeck.errors import ConfigError
from kernodeck.inenv.protocol import RESUME_FILES
from kernodeck.project.app_contract import Output, Target, output_from_table

TABLE = "[tool.kernodeck.application.resume]"
GPU_TOLERANCE = 1e-5  # the loss curve's bound off a CPU when none is declared


class Drop(enum.StrEnum):
    """A piece of training state the application's train leaves out of its restore when asked (a negative control)."""

    OPTIMIZER = "optimizer"  # the optimizer's (and scheduler's) state
    RNG = "rng"  # every random generator's state
    LOADER = "loader"  # the data loader's position (epoch, batch, its shuffling generator)


def describe(drop: Drop) -> str:
    """What dropping the piece means, as the report says it."""
    if drop is Drop.OPTIMIZER:
        return "the optimizer's state (moments, step counts, scheduler)"
    if drop is Drop.RNG:
        return "the random generators' state"
    if drop is Drop.LOADER:
        return "the data loader's position in its epoch"
    assert_never(drop)


@dataclass(frozen=True)
class ResumeContract:
    entry: Target
    steps: int
    checkpoint_at: int
    outputs: dict[str, Output]
    controls: tuple[Drop, ...]
    gpu_tolerance: float

    def run_config(self) -> dict[str, Any]:
        """What the in-env step needs (the entry's path relative to the project root)."""
        return {
            "entry": self.entry.as_config(),
            "steps": self.steps,
            "checkpoint_at": self.checkpoint_at,
            "outputs": {name: out.declared() for name, out in self.outputs.items()},
            "controls": [str(d) for d in self.controls],
            "gpu_tolerance": self.gpu_tolerance,
        }


def _count(raw: dict[str, Any], key: str, low: int) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{TABLE} {key}: a whole number of at least {low}, e.g. {key} = {max(low, 2) * 10}")
    return value


def gpu_tolerance(value: object, where: str) -> float:
    """The loss curve's bound off a CPU, as declared (``where`` names the declaration): a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: {value!r} is not a finite number >= 0 (the loss curve's bound off a CPU), "
                          "e.g. 1e-5")
    return float(value)


def from_table(raw: object) -> ResumeContract | None:
    """The contract, or None when the application declares no resume of its own."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError(f"{TABLE} must be a table")
    entry = Target.parse(raw.get("entry"), "resume.entry")
    steps, at = _count(raw, "steps", 2), _count(raw, "checkpoint-at", 1)
    if not at < steps:
        raise ConfigError(f"{TABLE} checkpoint-at = {at} must be below steps = {steps}: the resumed run needs steps")
    outputs_raw = raw.get("outputs")
    if not isinstance(outputs_raw, dict) or not outputs_raw:
        raise ConfigError(
            f"{TABLE} declares no outputs: add [tool.kernodeck.application.resume.outputs.NAME] with its kind "
            "(the end state the two runs must agree on, e.g. the final weights)"
        )
    taken = sorted(set(outputs_raw) & RESUME_FILES)
    if taken:
        raise ConfigError(f"{TABLE} outputs: {', '.join(taken)} is the name of Kernodeck's own record of each run "
                          "(its loss curve and progress counters, compared beside your outputs): name yours otherwise")
    outputs = {
        name: output_from_table(name, value, f"[tool.kernodeck.application.resume.outputs.{name}]")
        for name, value in outputs_raw.items()
    }
    controls_raw = raw.get("controls", [str(d) for d in Drop])
    try:
        controls = tuple(Drop(str(c)) for c in controls_raw)
    except ValueError:
        raise ConfigError(
            f"{TABLE} controls = {controls_raw!r}: a list of {', '.join(repr(str(d)) for d in Drop)}"
        ) from None
    if not controls or len(set(controls)) != len(controls):
        raise ConfigError(f"{TABLE} controls: at least one piece of state, each once")
    tolerance = gpu_tolerance(raw.get("gpu-tolerance", GPU_TOLERANCE), f"{TABLE} gpu-tolerance")
    return ResumeContract(entry, steps, at, outputs, controls, tolerance)
