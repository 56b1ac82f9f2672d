"""The determinism settings' setters, watched while the application's code runs.

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
import functools
import os
import sys
from collections.abc import Iterator
from typing import Any

from . import paths, settings, world
from ._common import CheckFailed
from .protocol import Layer

# The torch._C bindings that set a setting the settings step records (settings.read_back's names): each Python-level
# setter of them calls one (use_deterministic_algorithms, set_deterministic_debug_mode, set_float32_matmul_precision,
# set_default_dtype, set_default_tensor_type, torch.backends.cudnn's properties and flags(), cuda.matmul's flags, the
# fp32_precision knobs, torch.utils.deterministic.fill_uninitialized_memory); a name this torch lacks is skipped.
BINDINGS = (
    "_set_deterministic_algorithms", "_set_deterministic_fill_uninitialized_memory", "_set_cudnn_deterministic",
    "_set_cudnn_benchmark", "_set_cudnn_allow_tf32", "_set_cublas_allow_tf32", "_set_float32_matmul_precision",
    "_set_fp32_precision_setter", "_set_default_dtype", "_set_default_tensor_type", "set_num_threads",
    "set_num_interop_threads",
)
# The default dtype is also how a library builds a model in the model's own dtype: transformers' from_pretrained sets
# it for the model's construction and back (its dtype="auto" reads the model's config: bfloat16, say). Set by such a
# library (the first caller outside torch is the env's or the standard library's code), it is not judged here; set by
# the application's own code, it is; a lasting change is judged by the read-back after the call in every case.
BUILT_IN_ITS_DTYPE = ("_set_default_dtype", "_set_default_tensor_type")
# The window's settings as they were when it opened (a stack: the entry's file loads inside its call's window),
# who runs, and the process: the last one is the window open now. A forked child (a DataLoader worker sets its own
# threads to 1) computes nothing of the outputs' numerics by its settings, and is not judged.
OPEN: list[tuple[dict[str, Any], str, int]] = []
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


def _watched(torch: Any, name: str, binding: Any) -> Any:
    """``binding``, judged while a window is open: the settings read back after it returns, against the window's."""
    torch_home = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep

    @functools.wraps(binding)
    def setter(*args: Any, **kwargs: Any) -> Any:
        top = OPEN[-1:]  # one read: a window another thread closes meanwhile leaves this one as it was
        if not top or top[0][2] != os.getpid() or (name in BUILT_IN_ITS_DTYPE and _by_library(torch_home)):
            return binding(*args, **kwargs)
        result = binding(*args, **kwargs)
        before, who, _ = top[0]
        try:
            changed = {k: v for k, v in settings.changed_by_call(before, settings.read_back(torch)).items()
                       if k not in OWN_CHOICE}
            shown = "; ".join(f"{k}: recorded {v['before']!r}, set {v['after']!r}" for k, v in sorted(changed.items()))
        except RuntimeError as exc:  # torch refuses to read its legacy TF32 flags back after some mixes of its APIs
            changed = {"(the read-back)": {"before": "read back", "after": str(exc)}}
            shown = f"they can no longer be read back ({exc})"
        if changed:
            given = ", ".join([*(repr(a) for a in args), *(f"{k}={v!r}" for k, v in kwargs.items())])
            verdict = _verdict(who, shown, f"torch._C.{name}({given})", changed)
            world.pending(verdict)  # a call that swallows the error still fails the step
            raise verdict
        return result

    return setter


def install(torch: Any) -> None:
    """Wrap the setters of this torch (once): in torch._C, and every other place torch holds the same binding (its
    own namespace, the properties of the modules under torch.backends, made with the binding itself)."""
    bindings = getattr(torch, "_C", None)
    if bindings is None or id(bindings) in WRAPPED:
        return
    WRAPPED[id(bindings)] = torch
    wrappers: dict[int, Any] = {}  # id(a binding) -> its wrapper
    for name in BINDINGS:
        binding = getattr(bindings, name, None)
        if binding is not None:
            wrappers[id(binding)] = _watched(torch, name, binding)
            setattr(bindings, name, wrappers[id(binding)])
    for name, value in list(vars(torch).items()):
        if id(value) in wrappers:
            setattr(torch, name, wrappers[id(value)])
    backends = getattr(torch, "backends", None)
    for owner in [backends, *(vars(backends).values() if backends is not None else ())]:
        for prop in vars(type(owner)).values():  # torch.backends.ContextProp(getter, setter)
            setter = getattr(prop, "setter", None)
            if id(setter) in wrappers:
                prop.setter = wrappers[id(setter)]


@contextlib.contextmanager
def watching(torch: Any, before: dict[str, Any], who: str) -> Iterator[None]:
    """While the application's code runs: a setter call that changes a setting (from ``before``) fails the step."""
    install(torch)
    OPEN.append((before, who, os.getpid()))
    try:
        yield
    finally:
        OPEN.pop()
