"""The setters of the settings the run records (determinism and numerics), watched while the application's code
runs.

A read-back before and after each call of the application (application.settings_held) cannot see a setting turned
off and back on inside the call: ``torch.use_deterministic_algorithms(False)`` around one operation, then ``(True)``;
``with torch.backends.cudnn.flags(...)``; a TF32 flag set for a matmul and reset. The outputs were then computed
without the setting settings.json calls verified. So, once torch is loaded, every torch binding that sets one of the
recorded settings is wrapped (in ``torch._C``, where each Python-level setter lands, and wherever torch holds the
binding itself: ``torch.set_num_threads`` is ``torch._C.set_num_threads``; the cuDNN module's properties keep the
binding they were made with). While a window is open (:func:`watching`), a setter call that leaves a recorded
setting other than it was when the call began fails the step, restored later or not, naming the setting, its
recorded value and the value set. The check reads the settings back after the call (torch's own rules decide the
value in effect: a precision of "none" inherits), so only setter calls pay, and only inside a window.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

from . import children, paths, seen, settings, world
from ._common import CheckFailed
from .protocol import Layer

# The torch._C bindings that set a setting the settings step records (settings.read_back's names): each Python-level
# setter of them calls one (use_deterministic_algorithms, set_deterministic_debug_mode, set_float32_matmul_precision,
# set_default_dtype, set_default_tensor_type, torch.backends.cudnn's properties and flags(), cuda.matmul's flags, the
# fp32_precision knobs, torch.utils.deterministic.fill_uninitialized_memory); then the setters of the numerics
# switches (settings.numerics: flush-denormal, oneDNN's and cuDNN's enabled and other flags, NNPACK, the preferred
# CUDA libraries, the reduced-precision reductions, FA3, the quantized engine, TorchScript's optimisation): one set and
# set back inside a call is as unseen by the read-back after it as a determinism flag (red-team pass 47, SET4). A name
# this torch lacks is skipped.
BINDINGS = (
    "_set_deterministic_algorithms", "_set_deterministic_fill_uninitialized_memory", "_set_cudnn_deterministic",
    "_set_cudnn_benchmark", "_set_cudnn_allow_tf32", "_set_cublas_allow_tf32", "_set_float32_matmul_precision",
    "_set_fp32_precision_setter", "_set_default_dtype", "_set_default_tensor_type", "set_num_threads",
    "set_num_interop_threads",
    "set_flush_denormal", "_set_mkldnn_enabled", "_set_mkldnn_deterministic", "_set_onednn_allow_tf32",
    "_set_nnpack_enabled", "_set_cudnn_enabled", "_set_cudnn_depthwise_kernel", "_set_miopen_immediate",
    "_set_sm_carveout_experimental", "_set_qengine", "_set_cpu_allow_fp16_reduced_precision_reduction",
    "_set_cublas_allow_fp16_reduced_precision_reduction", "_set_cublas_allow_bf16_reduced_precision_reduction",
    "_set_cublas_allow_fp16_accumulation", "_set_blas_preferred_backend", "_set_linalg_preferred_backend",
    "_set_rocm_fa_preferred_backend", "_set_math_sdp_allow_fp16_bf16_reduction", "_set_sdp_use_fa3",
    "_set_graph_executor_optimize",
)
# The switches torch keeps in a Python module's globals, by the functions there that set them: found through the
# module's own globals by its other functions (opt_einsum's set_flags and flags()) and held by torch.backends'
# properties (``torch.backends.opt_einsum.enabled = False``), each wrapped in all three places.
PYTHON_SETTERS = {"torch.backends.mha": ("set_fastpath_enabled",),
                  "torch.backends.opt_einsum": ("_set_enabled", "_set_strategy")}
# torch._C's other setters: those a ``with`` block of the application's own code sets and sets back (autocast, the
# sdpa_kernel choice: settings.WITH_BLOCKS), by prefix, and those no float32 output depends on (the autograd, tracing,
# dispatch, warning, worker and allocator state). Every setter this torch has is in one of the three lists
# (tests/e2e/test_redteam47_sessions.py; torch 2.11+cu130's too, run on an H200): a new one is classified before it
# can go unwatched.
WITH_BLOCK_SETTERS = ("set_autocast_", "_set_sdp_use_", "_set_sdp_priority_order")
NOT_NUMERICS = (
    "_set_autograd_fallback_mode", "_set_backcompat_broadcast_warn", "_set_backcompat_keepdim_warn",
    "_set_cached_tensors_enabled", "_set_check_sparse_tensor_invariants", "_set_conj", "_set_neg",
    "_set_default_mobile_cpu_allocator", "_set_dispatch_mode", "_set_dtensor_allow_implicit_replication",
    "_set_fwd_grad_enabled", "_set_grad_enabled", "_set_grad_layout_enforcement_enabled", "_set_graph_exec_group",
    "_set_generator_metaclass", "_set_meta_in_tls_dispatch_include", "_set_multithreading_enabled",
    "_set_only_lift_cpu_tensors", "_set_override_stale_capture_stream", "_set_print_stack_traces_on_fatal_signal",
    "_set_should_use_format_with_string_table", "_set_skip_next_torch_function", "_set_storage_access_error_msg",
    "_set_storage_data_ptr_access_error_msg", "_set_tensor_metadata", "_set_thread_name",
    "_set_throw_on_mutable_data_ptr", "_set_torch_function_state", "_set_tracing_state",
    "_set_value_trace", "_set_view_replay_enabled", "_set_warnAlways", "_set_warn_deprecated_on_mutable_data_ptr",
    "_set_warn_on_accumulate_grad_stream_mismatch", "_set_worker_pids", "_set_worker_signal_handlers",
    "set_anomaly_enabled", "set_vital",
)
# The default dtype is also how a library builds a model in the model's own dtype: transformers' from_pretrained sets
# it for the model's construction and back (its dtype="auto" reads the model's config: bfloat16, say). Set by such a
# library (the first caller outside torch is the env's or the standard library's code), it is not judged here; set by
# the application's own code, it is; a lasting change is judged by the read-back after the call in every case.
BUILT_IN_ITS_DTYPE = ("_set_default_dtype", "_set_default_tensor_type")
# The window's settings as they were when it opened (a stack: the entry's file loads inside its call's window),
# who runs, and the process: the last one is the window open now.
OPEN: list[tuple[dict[str, Any], str, int]] = []
# The last window this process opened, and the thread that opened it (Kernodeck's): outside a window, a setter call by
# another thread of this process is the application's (a thread one of its calls left running), and one in a child
# forked while a window was open is the application's too (a DataLoader worker, a Pool child): flush-denormal is per
# thread, so each computes with its own; a change there is judged as the call makes it (red-team pass 48, SET7).
LAST: list[tuple[dict[str, Any], str, int, int]] = []
# Verdicts on a thread's setter calls between windows: the next window's opening, and the running step's end
# (steprun.held), fail on them.
LATE: list[CheckFailed] = []
WRAPPED: dict[int, Any] = {}  # id(torch._C) -> the torch module whose bindings are wrapped


def _verdict(who: str, shown: str, call: str, changed: dict[str, dict[str, Any]]) -> CheckFailed:
    return CheckFailed(
        f"{who} changed determinism settings the run records as verified: {shown} (by {call}, inside its call: "
        "set back later or not, what it computed in between ran without them; leave them to Kernodeck, or declare "
        "the variation with nox -s calibrate)",
        Layer.APPLICATION,
        {"changed_settings": changed, "setter": call},
    )


# The thread counts an application may pin inside its own call (the reduction order whatever the machine's cores:
# this repository's examples do, from a declared param) and set back before it returns, which the read-back after
# the call checks; its code, fingerprinted, says so. A precision or determinism flag turned off is no such choice.
OWN_CHOICE = frozenset({"torch.num_threads", "torch.num_interop_threads"})


def _by_library(torch_home: str) -> bool:
    """Whether the setter's first caller outside torch is a library's code (the env's, the standard library's), not
    the application's."""
    frame = sys._getframe(2)  # the wrapper's caller
    while frame is not None and frame.f_code.co_filename.startswith(torch_home):
        frame = frame.f_back
    return frame is not None and paths.trusted(os.path.normpath(frame.f_code.co_filename))


def _has_cudnn(torch: Any) -> bool:
    """Whether cuDNN can run here. Without it (a CPU run) a ``with torch.backends.cudnn.flags(enabled=False)`` block
    of a library (transformers' CTC loss) changes no op's numerics, and is no failure (red-team pass 48, FF1); the
    read-back after the call still holds the flags to their record."""
    try:
        return bool(torch.backends.cudnn.is_available())
    except (AttributeError, RuntimeError):
        return True


def _judge(torch: Any, before: dict[str, Any], who: str, call: str) -> None:
    """Fail the window's step when the settings read back now differ from the window's (``before``), a with-block's
    switch and the thread counts left out (its own choice); ``call``: what set them, as shown."""
    inert = () if _has_cudnn(torch) else ("cudnn.",)  # no op runs on cuDNN here: its flags compute nothing
    try:
        changed = {k: v for k, v in settings.changed_by_call(before, settings.read_back(torch)).items()
                   if k not in OWN_CHOICE and k not in settings.WITH_BLOCKS and not k.startswith(inert)}
        told = "; ".join(f"{k}: recorded {v['before']!r}, set {v['after']!r}" for k, v in sorted(changed.items()))
    except RuntimeError as exc:  # torch refuses to read its legacy TF32 flags back after some mixes of its APIs
        changed = {"(the read-back)": {"before": "read back", "after": str(exc)}}
        told = f"they can no longer be read back ({exc})"
    if changed:
        verdict = _verdict(who, told, call, changed)
        world.pending(verdict)  # a call that swallows the error still fails the step
        raise verdict


def _open_here() -> tuple[dict[str, Any], str, int] | None:
    top = OPEN[-1:]  # one read: a window another thread closes meanwhile leaves this one as it was
    return top[0] if top and top[0][2] == os.getpid() else None


def _outside() -> tuple[dict[str, Any], str] | None:
    """Outside this process's open window, the application's still: in a child forked while a window was open (that
    window's settings, "who ... in a process it forked") or forked later by a thread a call left running (the last
    window's), or in a thread other than the windows' own, between windows (the last window's). None: Kernodeck's own
    call, or no window has opened yet."""
    top, last = OPEN[-1:], LAST[-1:]
    if top and top[0][2] != os.getpid():
        return top[0][0], f"{top[0][1]}, in a process it forked,"
    if not top and last and last[0][2] != os.getpid():
        return last[0][0], f"{last[0][1]}, in a process a thread its call left running forked,"
    if (not top and last and last[0][2] == os.getpid() and last[0][3] != threading.get_ident()
            and not getattr(seen.MINE, "own", False)):  # Kernodeck's own threads (seen.own_thread) are not judged
        return last[0][0], f"{last[0][1]}, in a thread its call left running,"
    return None


def _judge_outside(torch: Any, outside: tuple[dict[str, Any], str], before_call: dict[str, Any], call: str) -> None:
    """What this call changed (read back before and after it, in its own thread and process: a forked child reads
    some switches otherwise than its parent) to a value other than the window's: refused there; the parent hears of
    a child's verdict through the children's notes (seen.from_children), a thread's through :data:`LATE`."""
    window, who = outside
    inert = () if _has_cudnn(torch) else ("cudnn.",)
    after = settings.read_back(torch)
    changed = {k: v for k, v in settings.changed_by_call(before_call, after).items()
               if k not in OWN_CHOICE and k not in settings.WITH_BLOCKS and not k.startswith(inert)
               and window.get(k) != v["after"]}
    if not changed:
        return
    told = "; ".join(f"{k}: recorded {v['before']!r}, set {v['after']!r}" for k, v in sorted(changed.items()))
    verdict = _verdict(who, told, call, changed)
    if children.forked():
        with contextlib.suppress(OSError):  # refused here whether or not the parent hears of it
            children.send({"kind": "refused", "message": str(verdict), "details": verdict.details})
    else:
        LATE.append(verdict)
    raise verdict


def late() -> None:
    """A setter call a thread the application left running made between windows: the first verdict, raised now."""
    if LATE:
        verdict = LATE[0]
        LATE.clear()
        raise verdict


def _watched(torch: Any, name: str, binding: Any, shown: str) -> Any:
    """``binding`` (shown as ``shown``), judged while a window is open (:func:`_judge`). The wrapper keeps the
    binding only in its closure: no ``__wrapped__`` (functools.wraps would hand any caller the unwatched binding,
    red-team pass 48, SET5); it copies the name and docstring alone."""
    torch_home = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

    def setter(*args: Any, **kwargs: Any) -> Any:
        top = _open_here()
        outside = _outside() if top is None else None
        if (top is None and outside is None) or (name in BUILT_IN_ITS_DTYPE and _by_library(torch_home)):
            return binding(*args, **kwargs)
        before_call = settings.read_back(torch) if outside is not None else {}
        result = binding(*args, **kwargs)
        given = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
        if outside is not None:
            _judge_outside(torch, outside, before_call, f"{shown}({given})")
        elif top is not None:
            _judge(torch, top[0], top[1], f"{shown}({given})")
        return result

    for attribute in ("__name__", "__qualname__", "__doc__"):
        setattr(setter, attribute, getattr(binding, attribute, None) or name)
    return setter


class _Held:
    """A module whose globals or instance hold a switch (torch.backends.mha's ``_is_fastpath_enabled``, opt_einsum's
    ``enabled``): an attribute written on it from outside, while a window is open, is judged as a setter call is
    (red-team pass 48, SET6: the global written without its setter). torch's own module objects under
    torch.backends are held too: ``torch.backends.opt_einsum.enabled = False`` sets an attribute of that object,
    which torch.einsum reads, and no setter runs (the property is a module global there; pass 49, SET8). Its own
    functions write their globals directly, through their setter, which is watched. Mixed into the module's own
    class (:func:`_hold`)."""

    __slots__ = ()

    def __setattr__(self, attribute: str, value: Any) -> None:
        torch = next(iter(WRAPPED.values()), None)
        top = _open_here()
        outside = _outside() if top is None and torch is not None else None
        before_call = settings.read_back(torch) if outside is not None else {}
        super().__setattr__(attribute, value)
        if torch is None or attribute.startswith("__"):
            return
        shown = f"{getattr(self, '__name__', '?')}.{attribute} = {value!r}"
        if top is not None:
            _judge(torch, top[0], top[1], shown)
        elif outside is not None:
            _judge_outside(torch, outside, before_call, shown)


HELD_TYPES: dict[type, type] = {}  # a module's own class -> it with :class:`_Held` mixed in


def _hold(module: Any) -> None:
    """Give ``module`` its class with :class:`_Held` mixed in (once)."""
    kind = type(module)
    if not isinstance(module, types.ModuleType) or isinstance(module, _Held):
        return
    if kind not in HELD_TYPES:
        HELD_TYPES[kind] = type(kind.__name__, (_Held, kind), {"__module__": kind.__module__})
    module.__class__ = HELD_TYPES[kind]


def install(torch: Any) -> None:
    """Wrap the setters of this torch (once): in torch._C, and every other place torch holds the same binding (its
    own namespace, the properties of the modules under torch.backends, made with the binding itself); the Python
    setters of :data:`PYTHON_SETTERS` in their module, its globals and those properties."""
    bindings = getattr(torch, "_C", None)
    if bindings is None or id(bindings) in WRAPPED:
        return
    WRAPPED[id(bindings)] = torch
    wrappers: dict[int, Any] = {}  # id(a binding) -> its wrapper
    for name in BINDINGS:
        binding = getattr(bindings, name, None)
        if binding is not None:
            wrappers[id(binding)] = _watched(torch, name, binding, f"torch._C.{name}")
            setattr(bindings, name, wrappers[id(binding)])
    for name, value in list(vars(torch).items()):
        if id(value) in wrappers:
            setattr(torch, name, wrappers[id(value)])
    for module_name, names in PYTHON_SETTERS.items():
        module = sys.modules.get(module_name)
        for name in names:
            function = getattr(module, name, None)
            if function is None or not hasattr(function, "__globals__"):
                continue
            wrappers[id(function)] = _watched(torch, name, function, f"{module_name}.{name}")
            function.__globals__[name] = wrappers[id(function)]  # the module's own functions call it from there
            setattr(module, name, wrappers[id(function)])
            home = sys.modules.get(function.__module__)  # the module whose globals hold the switch
            for held in (module, getattr(module, "m", None), home):
                _hold(held)
    backends = getattr(torch, "backends", None)
    for held in [backends, *(vars(backends).values() if backends is not None else ())]:
        if getattr(held, "__name__", "").startswith("torch.backends"):
            _hold(held)  # and the module object each wraps (opt_einsum's ``m``), whose globals hold its switches
            _hold(getattr(held, "m", None))
    for owner in [backends, *(vars(backends).values() if backends is not None else ())]:
        for prop in [p for kind in type(owner).__mro__ for p in vars(kind).values()]:  # ContextProp(getter, setter),
            setter = getattr(prop, "setter", None)  # in the module's own class (below a held one: _hold)
            if id(setter) in wrappers:
                prop.setter = wrappers[id(setter)]


@contextlib.contextmanager
def watching(torch: Any, before: dict[str, Any], who: str) -> Iterator[None]:
    """While the application's code runs: a setter call that changes a setting (from ``before``) fails the step."""
    install(torch)
    late()  # a thread the application left running changed one since the last window
    if children.PID[0] != os.getpid():  # a forked child's verdict is handed back through the children's notes
        children.PID[0] = os.getpid()
        children.open_notes()
    OPEN.append((before, who, os.getpid()))
    LAST[:] = [(before, who, os.getpid(), threading.get_ident())]
    try:
        yield
    finally:
        OPEN.pop()
        seen.from_children()  # a child's refusal is the call's first error (world.window reads them first, if open)
