"""The skipped-step rule is said once (SKIPPABLE) and the page that states it lists exactly its steps and reasons."""

from __future__ import annotations

import re
from pathlib import Path

from kernodeck.verify.claims import SKIPPABLE

PAGE = Path(__file__).parents[2] / "docs" / "claims.md"


def _documented() -> dict[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    block = text.split("<!-- skippable:begin", 1)[1].split("<!-- skippable:end -->", 1)[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", row).group(1): row.rsplit("|", 2)[1].strip() for row in rows}  # type: ignore[union-attr]


def test_the_page_lists_every_allowed_skip_with_its_reason() -> None:
    assert _documented() == SKIPPABLE


def test_an_allowed_skip_never_excuses_a_claim_and_an_unlisted_one_fails() -> None:
    from kernodeck.inenv.protocol import Status
    from kernodeck.verify.record import Step
    from kernodeck.verify.report import Report
    from tests.helpers.reports import complete_steps

    def run(name: str, mode: str = "verify") -> Report:
        steps = [s for s in complete_steps() if s.name != name] + [Step(name, Status.SKIPPED, reason="why")]
        return Report("p", steps, meta={"mode": mode})

    assert run("rebuild").status is Status.PASSED
    assert run("reference").status is Status.FAILED  # verify: the reference-current claim rests on it
    assert run("reference", mode="reference").status is Status.PASSED
    assert run("application").status is Status.FAILED  # no claim rests on it, and the rule does not allow it
