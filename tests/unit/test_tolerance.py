"""What "bitwise" means in every record (kernodeck/inenv/tolerance.py's same_bits, _common.py's same_float): the same
bytes, not equal values (red-team pass 51, DET1: ``array_equal`` holds for -0.0 against 0.0, and a determinism step
said "bitwise identical" over runs whose zeros changed sign)."""

from __future__ import annotations

import numpy as np
import pytest

from kernodeck.inenv._common import same_float
from kernodeck.inenv.tolerance import OPS, same_bits


def test_same_bits_holds_for_the_same_bytes() -> None:
    a = np.array([[0.0, 1.5], [-2.0, 3.25]], dtype=np.float32)
    assert same_bits(a, a.copy()) and same_bits(a.T.copy().T, a)  # layout aside, the same values' bytes
    nan = np.array([np.nan, 1.0])
    assert same_bits(nan, nan.copy())  # the same NaN bits are the same bits (value equality says otherwise)


@pytest.mark.parametrize(("a", "b"), [
    (np.array([0.0, 1.0]), np.array([-0.0, 1.0])),  # equal values, another sign bit
    (np.array([1.0, 2.0], dtype=np.float32), np.array([1.0, 2.0], dtype=np.float64)),  # another dtype
    (np.array([1.0, 2.0]), np.array([[1.0, 2.0]])),  # another shape
    (np.array([1.0, 2.0]), np.array([1.0, np.nextafter(2.0, 3.0)])),  # one ulp
])
def test_same_bits_refuses_what_value_equality_lets_through_or_not(a: np.ndarray, b: np.ndarray) -> None:
    assert not same_bits(a, b) and not OPS.same_bits(a, b)


def test_the_premise_value_equality_calls_signed_zeros_equal() -> None:
    assert np.array_equal(np.array([0.0]), np.array([-0.0]))


def test_same_float_is_equal_value_and_sign() -> None:
    assert same_float(0.25, 0.25) and same_float(-0.0, -0.0)
    assert not same_float(0.0, -0.0) and not same_float(1.0, 1.0000000000000002)
