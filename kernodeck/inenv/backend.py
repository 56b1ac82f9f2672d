"""Backend probe: the EXPECTED device must be usable, and a small computation on it must match an independent result.

No CPU fallback: if the variant expects cuda, rocm or mps and that device is not there, this step fails and every
later step is not-run, so that no CPU number is ever mistaken for a GPU one.
"""

from __future__ import annotations

import math
from typing import Any

from ._common import CheckFailed, Context

SOFTMAX_TOLERANCE = 1e-6


def judge(device: str, details: dict[str, Any]) -> None:
    """Fail on a broken kernel: any matmul error (integer inputs: the float32 product is exact), a softmax error over
    its tolerance, or a NaN/Inf anywhere (named non-finite: ``nan > 1e-6`` is False and must never pass)."""
    matmul_err, softmax_err = details["matmul_max_abs_error"], details["softmax_max_abs_error"]
    for op, err in (("matmul", matmul_err), ("softmax", softmax_err)):
        if not math.isfinite(err):
            raise CheckFailed(
                f"{op} on {device}: non-finite result (NaN/Inf; max abs error {err})", f"operator:{op}", details
            )
    if not (matmul_err == 0.0):
        raise CheckFailed(
            f"matmul on {device} differs from the numpy result by {matmul_err}", "operator:matmul", details
        )
    if not (softmax_err <= SOFTMAX_TOLERANCE):
        raise CheckFailed(
            f"softmax on {device} differs from numpy by {softmax_err} (> {SOFTMAX_TOLERANCE})", "operator:softmax",
            details,
        )


def device_for(expected: str, torch: Any) -> tuple[str, str]:
    """(torch device string, reason it is unusable or "")."""
    if expected == "cpu":
        return "cpu", ""
    if expected in ("cuda", "rocm"):
        build = torch.version.cuda if expected == "cuda" else getattr(torch.version, "hip", None)
        if not build:
            field, other = ("cuda", "hip") if expected == "cuda" else ("hip", "cuda")
            return "", (
                f"this torch ({torch.__version__}) is not a {expected} build: torch.version.{field} is None "
                f"(torch.version.{other}={getattr(torch.version, other, None)})"
            )
        if not torch.cuda.is_available():
            return "", f"torch.cuda.is_available() is False: no usable {expected} device (driver or visibility)"
        return "cuda:0", ""
    if expected == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            return "", "torch.backends.mps.is_available() is False"
        return "mps", ""
    return "", f"unknown backend {expected!r}"


def run(ctx: Context) -> dict[str, Any]:
    import numpy as np
    import torch

    expected = ctx.config["expect_backend"]
    device, why = device_for(expected, torch)
    if not device:
        raise CheckFailed(
            f"expected backend {expected} is not usable: {why}",
            "device",
            {"expected_backend": expected, "torch": torch.__version__},
        )
    # Independent reference: numpy float64 on the host, from integer-valued inputs (exact in float32 too).
    rng = np.random.default_rng(7)
    a = rng.integers(-8, 8, size=(64, 48)).astype(np.float32)
    b = rng.integers(-8, 8, size=(48, 32)).astype(np.float32)
    expected_result = a.astype(np.float64) @ b.astype(np.float64)
    try:
        ta = torch.from_numpy(a).to(device)
        tb = torch.from_numpy(b).to(device)
    except Exception as exc:
        raise CheckFailed(f"{type(exc).__name__}: {exc}", "transfer-to-device") from exc
    try:
        product = (ta @ tb).cpu().numpy()
        softmax = torch.softmax(ta[:4, :8] / 10, dim=1).cpu().numpy().astype(np.float64)
    except Exception as exc:
        raise CheckFailed(f"{type(exc).__name__}: {exc}", "operator:matmul") from exc
    logits = a[:4, :8].astype(np.float64) / 10
    soft_ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    soft_ref /= soft_ref.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        # a NaN anywhere makes the max NaN (np.max propagates it), then judge() names it non-finite
        matmul_err = float(np.abs(product.astype(np.float64) - expected_result).max())
        softmax_err = float(np.abs(softmax - soft_ref).max())
    details = {
        "expected_backend": expected,
        "device": device,
        "torch": torch.__version__,
        "torch_version_cuda": torch.version.cuda,
        "torch_version_hip": getattr(torch.version, "hip", None),
        "matmul_max_abs_error": matmul_err,
        "softmax_max_abs_error": softmax_err,
    }
    judge(device, details)
    ctx.state["device"] = device
    return details
