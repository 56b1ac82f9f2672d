"""verify's steps, in the order they run: each a function of the run context and the run's state (pipeline.Entry).

lock-check -> the declared contract (``reference-manifest``, shown only when it fails) -> rebuild -> inventory ->
the in-env checks (one process, one step each). Data flows one way: each reads what an earlier one handed on.
"""

from __future__ import annotations

from kernodeck.inenv.protocol import Layer
from kernodeck.verify.context import RunContext
from kernodeck.verify.pipeline import Entry
from kernodeck.verify.steps.build import build
from kernodeck.verify.steps.declared import declared_contract
from kernodeck.verify.steps.in_env import checks
from kernodeck.verify.steps.inventory_check import inventory_entry
from kernodeck.verify.steps.lock_check import lock_check


def _none(ctx: RunContext) -> tuple[str, ...]:
    return ()


def _in_env(ctx: RunContext) -> tuple[str, ...]:
    return ctx.names


STEPS: tuple[Entry, ...] = (
    # an error other than the lock's own (a declared input missing) ends the run before anything is written
    Entry("lock-check", lock_check, Layer.LOCK, lambda ctx: ("lock-check",), fails_on=()),
    Entry("reference-manifest", declared_contract, Layer.REFERENCE, _none, announce=False),
    Entry("rebuild", build, Layer.INSTALL, lambda ctx: ("rebuild",)),
    Entry("inventory", inventory_entry, Layer.INSTALL, lambda ctx: ("inventory",)),
    # a check's failure is its own step's (from its result file); an error of the phase itself ends the run
    Entry("checks", checks, Layer.ENVIRONMENT, _in_env, announce=False, fails_on=()),
)
