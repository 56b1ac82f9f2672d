"""One step run in an in-env process, by the one rule every in-env step loop follows (the runner's for verify and
reference, a calibrate variation's): the closed world's earlier verdicts forgotten, the step's function called, a
verdict its own code swallowed still failing it (world.settle), and after a step that did not fail, what must still
hold (:func:`held`): a shared library mapped from outside the env, a declared file or a source's link changed, a
determinism setting no longer in effect each fail the step that was running."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import libraries, setters, settings, systemfiles, world
from ._common import CheckFailed, Context, Skip, set_step
from .protocol import Layer, Status, StepKey


def layer_of(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return Layer.ENVIRONMENT
    if isinstance(exc, MemoryError):
        return Layer.DEVICE
    return Layer.UNKNOWN


def held(ctx: Context, name: str, where: str = "") -> None:
    """What fails a step that passed: a shared library mapped while it ran from outside the env (libraries.py), a
    declared file edited or a link on the way to one replaced meanwhile (the run's fingerprint of it no longer true:
    world.sources_held), a determinism setting no longer the settings step's record (settings.not_in_effect: changed
    by the step's own or the env's code, outside the project's windows), an undeclared file a thread the application
    left running read since its last window (world.late), or a setting such a thread changed (setters.late). The
    resume check's new processes hold their calls by the same rule, against the runner's records (``where`` says
    so)."""
    libraries.check(ctx)
    world.late(ctx)  # what a thread the application left running read since its last window
    setters.late()  # a setting a thread the application left running changed since its last window
    world.sources_held(ctx)
    torch = sys.modules.get("torch")
    if torch is not None and "settings" in ctx.state:
        moved = settings.not_in_effect(ctx, settings.read_back(torch), where or f"after the {name} step")
        if moved is not None:
            raise moved


def _failed(exc: CheckFailed) -> dict[str, Any]:
    return {StepKey.STATUS: Status.FAILED, StepKey.ERROR: str(exc), StepKey.LAYER: exc.layer,
            StepKey.DETAILS: exc.details}


def run(ctx: Context, name: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The step's result (status, and details, reason or error and layer; its duration)."""
    set_step(name)
    start = time.perf_counter()
    result: dict[str, Any]
    system_before = set(ctx.state.get(systemfiles.FILES) or {})
    try:
        world.forget()
        details = call()
        world.settle()  # the closed world's verdict fails the step even where the step's code caught it
        result = {StepKey.STATUS: Status.PASSED, StepKey.DETAILS: details}
    except Skip as exc:
        result = {StepKey.STATUS: Status.SKIPPED, StepKey.REASON: str(exc)}
    except CheckFailed as exc:
        result = _failed(exc)
    except (Exception, SystemExit) as exc:  # sys.exit outside any window (a library's): still the step's record
        tb = traceback.extract_tb(exc.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        result = {StepKey.STATUS: Status.FAILED, StepKey.ERROR: f"{type(exc).__name__}: {exc}",
                  StepKey.LAYER: layer_of(exc),
                  StepKey.DETAILS: {"raised_at": where, "traceback": traceback.format_exc(limit=8)}}
    if result[StepKey.STATUS] != Status.FAILED:
        try:
            held(ctx, name)
        except CheckFailed as exc:
            result = _failed(exc)
    read = systemfiles.read_in(ctx, system_before)
    if read:  # the system's files this step's windows read: system.json gathers every step's (systemfiles.py)
        details = result.get(StepKey.DETAILS)
        result[StepKey.DETAILS] = {**(details if isinstance(details, dict) else {}), systemfiles.FILES: read}
    result[StepKey.DURATION_S] = round(time.perf_counter() - start, 4)
    return result
