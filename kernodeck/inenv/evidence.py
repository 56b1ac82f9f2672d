"""The evidence an in-env step's record must hold for the claims its row names (kernodeck/inenv/steptable.py).

Each claim a pass stands on is tied to one step and one key of its ``details``; the test of that evidence is a pure
function of the step's whole details (the standard library only, the key known to be present), called by the
orchestrator's claims (kernodeck/verify/claims.py, docs/claims.md), never in the env.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

BOTH = frozenset({"verify", "reference"})
VERIFY = frozenset({"verify"})


@dataclass(frozen=True)
class ClaimRow:
    """One claim a step establishes: its id and text, the key of the step's details holding the evidence, its test
    (given the step's whole details; the key is known to be present), the modes it is claimed in, whether a declared
    variant (``--python``) may leave it unestablished, and the step (named by the claims table, from the row of the
    step table that lists the claim: kernodeck/verify/claims.py)."""

    id: str
    text: str
    key: str
    holds: Callable[[dict[str, Any]], bool]
    modes: frozenset[str] = BOTH
    # A declared variant (verify --python: an existing interpreter, not a rebuild) may leave this claim
    # unestablished; the verdict is then passed-unlocked, naming what was not established.
    variant: bool = False
    step: str = ""


def _finite_at_most(v: Any, limit: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v <= limit


def all_outputs_passed(d: dict[str, Any]) -> bool:
    """Every declared output within its tolerance (one output's verdict is repeated at the top level: it must agree)."""
    outputs = d.get("outputs")
    return (
        d.get("passed", True) is True
        and isinstance(outputs, dict)
        and bool(outputs)
        and all(isinstance(o, dict) and o.get("passed") is True for o in outputs.values())
    )


def code_unchanged(code: Any) -> bool:
    """The in-env reference step's record of the declared code files against the reference's fingerprints."""
    return isinstance(code, dict) and bool(code.get("files")) and code.get("changed") == []


def deterministic(d: dict[str, Any]) -> bool:
    repeats, outputs = d.get("repeats"), d.get("outputs")
    if not isinstance(repeats, int) or repeats < 2 or not isinstance(outputs, dict) or not outputs:
        return False
    # On CPU a pass means bitwise identical runs; elsewhere the step held each output to its declared tolerance.
    return d.get("device") != "cpu" or d.get("bitwise_identical") is True


def extensions_sound(d: dict[str, Any]) -> bool:
    """Every compiled extension found imported each of its modules, and every declared smoke check recorded its
    comparison (an env with none records empty lists: nothing to break)."""
    found, smoke = d["extensions"], d.get("smoke", {})
    return (
        isinstance(found, list)
        and isinstance(smoke, dict)
        and all(isinstance(e, dict) and isinstance(e.get("objects"), list)
                and all(o.get("imported") is True for o in e["objects"] if isinstance(o, dict) and o.get("module"))
                for e in found)
        and all(isinstance(s, dict) and _finite_at_most(s.get("max_abs"), float("inf")) for s in smoke.values())
    )


def backend_works(d: dict[str, Any]) -> bool:
    return (
        isinstance(d.get("device"), str)
        and bool(d["device"])
        and bool(d.get("expected_backend"))
        and d.get("matmul_max_abs_error") == 0.0
        and _finite_at_most(d.get("softmax_max_abs_error"), 1e-6)
    )
