"""Determinism settings, applied before any compute and recorded as applied (read back, not as requested)."""

from __future__ import annotations

import os
import random
import sys
from typing import Any

from ._common import Context, progress

SEED = 1234


def _read_back(torch: Any) -> dict[str, Any]:
    back = torch.backends
    rec: dict[str, Any] = {
        "seed": SEED,
        "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "(unset)"),
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "(unset)"),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn.deterministic": back.cudnn.deterministic,
        "cudnn.benchmark": back.cudnn.benchmark,
        "cudnn.allow_tf32 (legacy flag)": back.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32 (legacy flag)": back.cuda.matmul.allow_tf32,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "fill_uninitialized_memory": getattr(torch.utils.deterministic, "fill_uninitialized_memory", "unavailable"),
        "torch.num_threads": torch.get_num_threads(),
        "torch.num_interop_threads": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "(unset)"),
    }
    # torch >= 2.9 adds per-backend fp32_precision knobs beside the legacy TF32 flags.
    for label, obj in (
        ("cuda.matmul", back.cuda.matmul),
        ("cudnn", back.cudnn),
        ("cudnn.conv", getattr(back.cudnn, "conv", None)),
        ("mkldnn", getattr(back, "mkldnn", None)),
    ):
        value = getattr(obj, "fp32_precision", None) if obj is not None else None
        rec[f"{label}.fp32_precision"] = value if value is not None else "unavailable in this torch"
    return rec


def apply(deterministic: bool = True) -> dict[str, Any]:
    """Seed every generator and pin every knob; return what torch reports back."""
    # CUBLAS_WORKSPACE_CONFIG must be set before CUDA initialises: the orchestrator sets it in the process env.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import numpy as np
    import torch

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    if hasattr(torch.utils, "deterministic"):
        torch.utils.deterministic.fill_uninitialized_memory = deterministic
    return _read_back(torch)


def run(ctx: Context) -> dict[str, Any]:
    if "torch" not in sys.modules:
        progress("importing torch")  # seconds on a cold start: the longest silence of a first verify
    record = apply(deterministic=True)
    ctx.state["settings"] = record
    return record
