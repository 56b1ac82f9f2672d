"""Determinism settings, applied before any compute, then read back: the step fails when torch reports otherwise."""

from __future__ import annotations

import functools
import os
import random
import sys
import types
from typing import Any

from . import leftover
from ._common import CheckFailed, Context, progress
from .protocol import HASH_SEED

SEED = 1234
TF32_OFF = "ieee"  # the fp32_precision value that means full float32 (TF32 off)
# torch >= 2.9: fp32_precision knobs beside the legacy TF32 flags (names below torch.backends), one per backend and
# one per backend and operator (torch 2.13: the generic one, cudnn's, mkldnn's, and cuda.matmul, cudnn.conv/rnn,
# mkldnn.matmul/conv/rnn). Every one this torch has (precision_knobs) is SET to "ieee" and read back, so that an entry
# setting any of them (``torch.backends.mkldnn.conv.fp32_precision = "bf16"``, PyTorch's way to run oneDNN
# convolutions in bf16) changes a value the read-back holds (red-team pass 44, SET1). These are the ones a torch
# >= 2.9 is expected to have: one it lacks is recorded as not available, never a failure.
PRECISION_KNOBS = ("fp32_precision", "cuda.matmul.fp32_precision", "cudnn.conv.fp32_precision")
NOT_AVAILABLE = "not available in this torch"
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")  # the two values cuBLAS documents as deterministic
_SCALARS = (str, bytes, int, float, bool, type(None))


def _has_knob(obj: Any) -> bool:
    try:
        return hasattr(obj, "fp32_precision")
    except Exception:  # an attribute whose getter raises (cuda.cufft_plan_cache without CUDA): no knob there
        return False


def _members(obj: Any) -> dict[str, Any]:
    """What an object holds by name: its class's attributes and its own, as stored (no getter runs), and a module's
    submodules as the module gives them (torch's backend modules forward to the module they replace:
    ``torch.backends.cudnn.rnn`` is reached only so)."""
    found: dict[str, Any] = {}
    for table in (getattr(type(obj), "__dict__", {}), getattr(obj, "__dict__", {})):
        found.update((name, value) for name, value in table.items() if isinstance(name, str))
    if isinstance(obj, types.ModuleType):
        prefix = f"{obj.__name__}."
        for full in [name for name in sys.modules if name.startswith(prefix) and "." not in name[len(prefix):]]:
            try:
                found[full[len(prefix):]] = getattr(obj, full[len(prefix):])
            except Exception:  # a submodule its parent does not give: not below torch.backends as a user reaches it
                continue
    return found


@functools.cache
def precision_knobs(torch: Any) -> tuple[str, ...]:
    """Every ``fp32_precision`` knob below torch.backends, by its dotted name, the generic one first and each
    backend's before its operators': found in torch's own objects (a backend module's ``fp32_precision``, its
    operators' objects and modules holding one), not from a list, so that a knob a newer torch adds is set and read
    back too. Found once per process (the walk takes ~10 ms; the read-back runs around every call of the
    application): a knob's object the application replaces later is then read as not available, a change."""
    found: list[str] = []

    def visit(obj: Any, prefix: str, depth: int) -> None:
        if _has_knob(obj):
            found.append(f"{prefix}fp32_precision")
        if depth == 2:
            return
        for name, value in sorted(_members(obj).items()):
            if name.startswith("_") or isinstance(value, _SCALARS) or callable(value):
                continue
            if isinstance(value, types.ModuleType) and value.__name__ != f"{getattr(obj, '__name__', '')}.{name}":
                continue  # only a module's own submodule (not torch, sys, or the module a backend's replaces)
            visit(value, f"{prefix}{name}.", depth + 1)

    visit(torch.backends, "", 0)
    return tuple(sorted(dict.fromkeys(found), key=lambda name: (name.count("."), name)))


def _knob_owner(torch: Any, name: str) -> Any | None:
    """The object under torch.backends that holds the knob ``name``, or None when this torch lacks it."""
    obj: Any = torch.backends
    for part in name.split(".")[:-1]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if _has_knob(obj) else None


def _read(getter: Any) -> Any:
    """A getter's value, or what it raised as a value of its own: torch's getters raise on a mix of the legacy flags
    and the new knobs (``cudnn.allow_tf32`` when cudnn.conv and cudnn.rnn differ), which is a setting moved, not a
    crash of the check; a getter this torch lacks reads as not available."""
    try:
        return getter()
    except AttributeError:
        return NOT_AVAILABLE
    except RuntimeError as exc:
        return f"raises RuntimeError: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


AUTOCAST_DEVICES = ("cpu", "cuda")
# The switches torch keeps natively and reads back through its own getter (torch._C), recorded by these names: each
# one decides which kernel (or which precision inside it) a float32 op runs on some machine, beside the ones
# numerics() reads through torch.backends (red-team pass 47, SET4: every setter of these is watched, setters.py).
NATIVE_SWITCHES = {
    "mkldnn.deterministic": "_get_mkldnn_deterministic", "onednn.allow_tf32": "_get_onednn_allow_tf32",
    "nnpack.enabled": "_get_nnpack_enabled", "cudnn.depthwise_kernel": "_get_cudnn_depthwise_kernel",
    "miopen.immediate": "_get_miopen_immediate", "cuda.sm_carveout": "_get_sm_carveout_experimental",
    "quantized.engine": "_get_qengine", "sdp.priority_order": "_get_sdp_priority_order",
    "cpu.allow_fp16_reduced_precision_reduction": "_get_cpu_allow_fp16_reduced_precision_reduction",
    "jit.graph_executor_optimize": "_get_graph_executor_optimize",
}
# The switches a ``with`` block of the application's own code sets and sets back (``torch.autocast(...)``,
# ``torch.nn.attention.sdpa_kernel(...)``): its fingerprinted choice, judged only as the call ends (numerics()).
WITH_BLOCKS = frozenset({*(f"autocast.{device}{dtype}" for device in AUTOCAST_DEVICES for dtype in ("", ".dtype")),
                         "sdp.flash", "sdp.mem_efficient", "sdp.math", "sdp.cudnn", "sdp.priority_order"})


def _plain(value: Any) -> Any:
    """A getter's value as a record holds it (an enum or a list of them as its text)."""
    return value if isinstance(value, (bool, int, float, str)) or value is None else str(value)


def flushes_denormals(torch: Any) -> bool:
    """Whether the CPU flushes denormals to zero (``torch.set_flush_denormal(True)``: FTZ/DAZ), probed (torch has no
    getter): a float32 denormal times one is zero only then, told by its bits (a float read would flush it too)."""
    return bool(torch.tensor([1e-39], dtype=torch.float32).mul(1.0).view(torch.int32).item() == 0)


def numerics(torch: Any) -> dict[str, Any]:
    """The process-wide switches beside the determinism knobs that change what a float32 run computes (red-team pass
    45, SET2; pass 46, SET3): autocast per device (on, an entry's matmuls and attention run in its dtype), the
    scaled-dot-product attention kernels (``enable_flash_sdp(False)`` picks another CPU kernel too), flush-denormal,
    the multi-head attention fast path (off, TransformerEncoderLayer's and MultiheadAttention's float32 bits move),
    oneDNN, cuDNN, opt_einsum, the CUDA BLAS, linear-algebra and ROCm attention libraries preferred, and the CUDA
    matmuls' reduced-precision reductions. Autocast and flush-denormal are set off (settings.apply); the
    rest are torch's defaults, recorded; all are read back after each call, so that a call leaving one changed fails
    its step. A ``with torch.autocast(...)`` or ``sdpa_kernel(...)`` block inside the application's code is its own
    fingerprinted choice, set back as the block ends (:data:`WITH_BLOCKS`): its setters are not
    watched; every other switch's setter is (setters.py; red-team pass 47, SET4)."""
    back = torch.backends
    rec: dict[str, Any] = {}
    for device in AUTOCAST_DEVICES:
        rec[f"autocast.{device}"] = _read(lambda device=device: bool(torch.is_autocast_enabled(device)))
        rec[f"autocast.{device}.dtype"] = _read(lambda device=device: str(torch.get_autocast_dtype(device)))
    for kernel in ("flash", "mem_efficient", "math", "cudnn"):
        rec[f"sdp.{kernel}"] = _read(lambda kernel=kernel: bool(getattr(back.cuda, f"{kernel}_sdp_enabled")()))
    rec["sdp.math_fp16_bf16_reduction"] = _read(lambda: bool(back.cuda.fp16_bf16_reduction_math_sdp_allowed()))
    rec["sdp.fa3"] = _read(lambda: bool(torch._C._get_fa3_sdp_enabled()))
    rec["flush_denormal"] = _read(lambda: flushes_denormals(torch))
    rec["mha.fastpath"] = _read(lambda: bool(back.mha.get_fastpath_enabled()))
    rec["mkldnn.enabled"] = _read(lambda: bool(back.mkldnn.enabled))
    rec["cudnn.enabled"] = _read(lambda: bool(back.cudnn.enabled))
    for library in ("blas", "linalg", "rocm_fa"):
        rec[f"cuda.preferred_{library}_library"] = _read(
            lambda library=library: str(getattr(back.cuda, f"preferred_{library}_library")()))
    rec["opt_einsum.enabled"] = _read(lambda: bool(back.opt_einsum.enabled))
    rec["opt_einsum.strategy"] = _read(lambda: back.opt_einsum.strategy)
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
                 "allow_fp16_accumulation"):
        rec[f"cuda.matmul.{flag}"] = _read(lambda flag=flag: getattr(back.cuda.matmul, flag))
    for name, getter in NATIVE_SWITCHES.items():
        rec[name] = _read(lambda getter=getter: _plain(getattr(torch._C, getter)()))
    return rec


def started_with() -> dict[str, str]:
    """The environment as it was before any of the project's code ran (leftover.at_start, at the runner's start).
    The interpreter reads the ``PYTHON*`` variables only as it starts, and the processes Kernodeck starts later get
    this environment (leftover.kernodecks_start): one the project sets in ``os.environ`` afterwards (the common
    ``seed_everything``'s ``os.environ["PYTHONHASHSEED"] = str(seed)``, ``PYTHONWARNINGS``) changes nothing the
    settings describe, so they are read from here, not from ``os.environ`` now (red-team pass 14). So is
    ``OMP_NUM_THREADS``: the OpenMP runtime (and numpy's BLAS) read it as they load, at ``import torch``/``numpy``
    before any of the project's code; an entry's ``os.environ["OMP_NUM_THREADS"] = "1"`` afterwards changes no thread
    count (the counts in effect are read back as ``torch.num_threads``), so it is no changed setting (red-team pass
    15). ``CUBLAS_WORKSPACE_CONFIG`` is read from ``os.environ``: cuBLAS and torch read it later, as CUDA starts."""
    return leftover.kernodecks_start()[0]


def hash_seed_in_effect() -> str:
    """The str/bytes hash seed this interpreter uses, as it reports it: "0" when hash randomisation is off (the
    variable read, not ignored by -E/-I), a nonzero seed the interpreter read as it started, else "random"."""
    if not sys.flags.hash_randomization:
        return "0"
    value = started_with().get("PYTHONHASHSEED", "")
    return value if value.isdigit() and not sys.flags.ignore_environment else "random"


def process_start() -> dict[str, Any]:
    """What the process's start applied (the orchestrator's -s -P and environment), read back from the interpreter."""
    return {
        "hash_seed": hash_seed_in_effect(),
        "isolation.no_user_site": bool(sys.flags.no_user_site),
        "isolation.safe_path": bool(sys.flags.safe_path),
        # what -E would have ignored: the start leaves none but the seed, so none is read
        "PYTHON* variables besides PYTHONHASHSEED": sorted(
            k for k in started_with() if k.startswith("PYTHON") and k != "PYTHONHASHSEED"),
    }


PROCESS_START = {"hash_seed": HASH_SEED, "isolation.no_user_site": True, "isolation.safe_path": True,
                 "PYTHON* variables besides PYTHONHASHSEED": []}


def read_back(torch: Any) -> dict[str, Any]:
    back = torch.backends
    rec: dict[str, Any] = {
        "seed": torch.initial_seed(),
        "PYTHONHASHSEED": started_with().get("PYTHONHASHSEED", "(unset)"),  # as the interpreter read it
        **process_start(),
        "hash_randomization": sys.flags.hash_randomization,
        "CUBLAS_WORKSPACE_CONFIG": os.environ.get("CUBLAS_WORKSPACE_CONFIG", "(unset)"),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
        "cudnn.deterministic": back.cudnn.deterministic,
        "cudnn.benchmark": back.cudnn.benchmark,
        "cudnn.allow_tf32 (legacy flag)": _read(lambda: back.cudnn.allow_tf32),
        "cuda.matmul.allow_tf32 (legacy flag)": _read(lambda: back.cuda.matmul.allow_tf32),
        "float32_matmul_precision": _read(torch.get_float32_matmul_precision),
        "fill_uninitialized_memory": getattr(torch.utils.deterministic, "fill_uninitialized_memory", NOT_AVAILABLE),
        "torch.num_threads": torch.get_num_threads(),
        "torch.num_interop_threads": torch.get_num_interop_threads(),
        "OMP_NUM_THREADS": started_with().get("OMP_NUM_THREADS", "(unset)"),  # read by the OpenMP runtime at load
        "default_dtype": str(torch.get_default_dtype()),
        **numerics(torch),
    }
    # Every knob this torch has (each one set), and the expected ones it lacks, so recorded.
    for name in (*precision_knobs(torch), *PRECISION_KNOBS):
        owner = _knob_owner(torch, name)
        rec[name] = NOT_AVAILABLE if owner is None else _read(lambda owner=owner: owner.fp32_precision)
    return rec


def apply(deterministic: bool = True) -> dict[str, Any]:
    """Seed every generator and pin every knob; return what was applied, by the read-back record's names."""
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
    torch.set_default_dtype(torch.float32)
    applied: dict[str, Any] = {
        **PROCESS_START,  # applied by how the process was started (kernodeck/env/start.py), read back like the rest
        "seed": SEED,
        "deterministic_algorithms": deterministic,
        "deterministic_warn_only": False,
        "cudnn.deterministic": deterministic,
        "cudnn.benchmark": not deterministic,
        "cudnn.allow_tf32 (legacy flag)": False,
        "cuda.matmul.allow_tf32 (legacy flag)": False,
        "float32_matmul_precision": "highest",
        "default_dtype": "torch.float32",
    }
    if hasattr(torch, "set_autocast_enabled"):  # full float32: no autocast left on, no denormal flushed
        for device in AUTOCAST_DEVICES:
            torch.set_autocast_enabled(device, False)
            applied[f"autocast.{device}"] = False
    if hasattr(torch, "set_flush_denormal"):
        torch.set_flush_denormal(False)
        applied["flush_denormal"] = False
    if hasattr(torch.utils, "deterministic"):
        torch.utils.deterministic.fill_uninitialized_memory = deterministic
        applied["fill_uninitialized_memory"] = deterministic
    for name in precision_knobs(torch):  # the generic knob first: each backend's, then its operators', after it
        owner = _knob_owner(torch, name)
        if owner is not None:
            owner.fp32_precision = TF32_OFF
            applied[name] = TF32_OFF
    return applied


# Not a setting the application must leave alone: an entry that seeds its own generators (torch.manual_seed(0))
# stays deterministic, and the settings step's seed is then simply not the one in effect (recorded as applied).
RESEEDABLE = ("seed",)


def changed_by_call(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every read-back value an application call changed (``torch.use_deterministic_algorithms(False)``,
    ``torch.set_num_threads``, the cuDNN and TF32 flags, the default dtype, ...): ``{name: {"before", "after"}}``."""
    return {
        name: {"before": before[name], "after": value}
        for name, value in after.items()
        if name not in RESEEDABLE and name in before and before[name] != value
    }


def held(torch: Any, before: dict[str, Any], recorded: dict[str, Any], who: str) -> CheckFailed | None:
    """The settings read back again after an application call: the verdict naming each one it changed (its
    recorded value and the value after the call), or None. settings.json's "verified" is true of the whole run only
    if no call changed what the settings step read back."""
    changed = changed_by_call(before, read_back(torch))
    if not changed:
        return None
    shown = "; ".join(f"{name}: recorded {recorded.get(name, v['before'])!r}, after the call {v['after']!r}"
                      for name, v in sorted(changed.items()))
    return CheckFailed(
        f"{who} changed determinism settings the run records as verified: {shown} (settings.json would describe a "
        "run that did not happen: leave them to Kernodeck, or declare the variation with nox -s calibrate)",
        "application",
        {"changed_settings": changed},
    )


# What settings.apply(deterministic=False) changes: the determinism step's run without the settings (recorded as
# that run's, never as the record's) is not held to the record for these.
WITHOUT_SETTINGS = ("deterministic_algorithms", "cudnn.deterministic", "cudnn.benchmark", "fill_uninitialized_memory")


def not_in_effect(ctx: Context, now: dict[str, Any], where: str) -> CheckFailed | None:
    """The settings read back ``now`` against the settings step's record (``ctx.state["settings"]``), RESEEDABLE
    excepted: each window of the project's code starts with them and each step ends with them. A change made between
    (outside any window: an env module the extensions step imports pinning torch's threads, which settings.apply does
    not set) would leave settings.json recording settings the outputs were not computed with (red-team pass 13)."""
    recorded = ctx.state.get("settings")
    if not isinstance(recorded, dict):
        return None  # no settings step ran (nothing recorded to hold)
    skip = {*RESEEDABLE, *(() if ctx.state.get("deterministic", True) else WITHOUT_SETTINGS)}
    moved = {name: {"recorded": recorded[name], "now": value} for name, value in now.items()
             if name not in skip and name in recorded and recorded[name] != value}
    if not moved:
        return None
    shown = "; ".join(f"{name}: recorded {v['recorded']!r}, now {v['now']!r}" for name, v in sorted(moved.items()))
    return CheckFailed(
        f"determinism settings the run records are not in effect {where}: {shown}: changed since the settings step "
        "outside the project's code (by the env's code: an extension module the extensions step imported, say); "
        "settings.json would describe a run that did not happen",
        "environment",
        {"changed_settings": moved},
    )


def differences(applied: dict[str, Any], record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every knob whose read-back differs from what was applied (and a cuBLAS workspace that is not deterministic)."""
    differ = {
        name: {"applied": value, "read_back": record.get(name, NOT_AVAILABLE)}
        for name, value in applied.items()
        if record.get(name, NOT_AVAILABLE) != value
    }
    if record.get("CUBLAS_WORKSPACE_CONFIG") not in CUBLAS_DETERMINISTIC:
        differ["CUBLAS_WORKSPACE_CONFIG"] = {
            "applied": " or ".join(CUBLAS_DETERMINISTIC),
            "read_back": record.get("CUBLAS_WORKSPACE_CONFIG"),
        }
    return differ


def run(ctx: Context) -> dict[str, Any]:
    if "torch" not in sys.modules:
        progress("importing torch")  # seconds on a cold start: the longest silence of a first verify
    import torch

    applied = apply(deterministic=True)
    record = read_back(torch)
    differ = differences(applied, record)
    record["verified"] = [*sorted(applied), "CUBLAS_WORKSPACE_CONFIG"]
    record["not_available"] = [name for name in PRECISION_KNOBS if name not in applied]
    ctx.state["settings"] = record
    if differ:
        shown = "; ".join(f"{k}: applied {v['applied']!r}, read back {v['read_back']!r}" for k, v in differ.items())
        raise CheckFailed(
            f"determinism settings did not hold: {shown}", "environment", {**record, "differences": differ}
        )
    return record
