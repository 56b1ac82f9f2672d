"""verify/summaries.py: a summariser is for a step that exists (the in-env steps, and verify's own)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kernodeck.inenv.steptable import StepName
from kernodeck.verify.steps import STEPS
from kernodeck.verify.summaries import SUMMARISERS


def _orphans(summarisers: Mapping[str, Callable[[dict[str, Any]], str]]) -> set[str]:
    """The summarisers no step of verify would ever call."""
    return set(summarisers) - {entry.name for entry in STEPS} - {name.value for name in StepName}


def test_every_summariser_is_for_a_step_that_exists() -> None:
    assert _orphans(SUMMARISERS) == set()


def test_a_summariser_for_a_step_that_is_gone_is_caught() -> None:
    assert _orphans({**SUMMARISERS, "embed": lambda d: ""}) == {"embed"}  # the step the application step replaced
