"""The recorded reference's tolerance bound (kernodeck/runformat/recording.py)."""

from __future__ import annotations

import pytest

from kernodeck.runformat import recording


def test_tolerance_bound_refuses_loose_tolerance() -> None:
    assert recording.tolerance_bound(1e-4, 384) == pytest.approx(2 * 384**0.5 * 1e-4)
