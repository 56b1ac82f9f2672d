"""verify's steps, in the order they run: each a function of the run context and the run's state (pipeline.Entry).

lock-check -> the declared contract (``reference-manifest``, shown only when it fails) -> rebuild -> inventory ->
the in-env checks (one process, one step each). Data flows one way: each reads what an earlier one handed on. The
steps outside the env are their rows (kernodeck/verify/outside.py: the report's modules read the same rows, and may
not import the steps), each naming its function here by module and name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from kernodeck.errors import KernodeckError
from kernodeck.inenv.protocol import Layer
from kernodeck.verify.context import RunContext
from kernodeck.verify.outside import OUTSIDE_STEPS, OutsideRow
from kernodeck.verify.pipeline import Entry
from kernodeck.verify.steps.in_env import checks


def _in_env(ctx: RunContext) -> tuple[str, ...]:
    return ctx.names


def _shows(names: tuple[str, ...]) -> Callable[[RunContext], tuple[str, ...]]:
    return lambda ctx: names


def entry(row: OutsideRow) -> Entry:
    """The pipeline's entry of a step outside the env: its row's function, from ``kernodeck/verify/steps/MODULE.py``."""
    act = getattr(importlib.import_module(f"{__name__}.{row.module}"), row.function)
    if not callable(act):
        raise TypeError(f"{row.name}: {row.module}.{row.function} is not a function")
    return Entry(row.name, act, row.layer, _shows(() if row.quiet else (row.name,)), announce=not row.quiet,
                 fails_on=() if row.errors_end_run else (KernodeckError,))


STEPS: tuple[Entry, ...] = (
    *map(entry, OUTSIDE_STEPS),
    # a check's failure is its own step's (from its result file); an error of the phase itself ends the run
    Entry("checks", checks, Layer.ENVIRONMENT, _in_env, announce=False, fails_on=()),
)
