"""Each numerics switch the settings read-back records, flipped through a public spelling of its setter, by the
read-back's name: run where torch is loaded (tests/e2e/test_redteam47_sessions.py sends this file's text to a built
env's interpreter; tests/device/gpu_checks.py imports it on a GPU machine). Standard library only."""

from typing import Any


def flips(torch: Any) -> dict[str, Any]:
    back = torch.backends
    return {
        "flush_denormal": lambda v: torch.set_flush_denormal(v),
        "mkldnn.enabled": lambda v: setattr(back.mkldnn, "enabled", v),
        "mkldnn.deterministic": lambda v: torch._C._set_mkldnn_deterministic(v),
        "onednn.allow_tf32": lambda v: torch._C._set_onednn_allow_tf32(v),
        "nnpack.enabled": lambda v: back.nnpack.set_flags(v),
        "cudnn.enabled": lambda v: setattr(back.cudnn, "enabled", v),
        "cudnn.depthwise_kernel": lambda v: torch._C._set_cudnn_depthwise_kernel(v),
        "miopen.immediate": lambda v: torch._C._set_miopen_immediate(v),
        "cpu.allow_fp16_reduced_precision_reduction":
            lambda v: torch._C._set_cpu_allow_fp16_reduced_precision_reduction(v),
        "cuda.matmul.allow_fp16_reduced_precision_reduction":
            lambda v: setattr(back.cuda.matmul, "allow_fp16_reduced_precision_reduction", v),
        "cuda.matmul.allow_bf16_reduced_precision_reduction":
            lambda v: setattr(back.cuda.matmul, "allow_bf16_reduced_precision_reduction", v),
        "cuda.matmul.allow_fp16_accumulation": lambda v: setattr(back.cuda.matmul, "allow_fp16_accumulation", v),
        "sdp.math_fp16_bf16_reduction": lambda v: back.cuda.allow_fp16_bf16_reduction_math_sdp(v),
        "mha.fastpath": lambda v: back.mha.set_fastpath_enabled(v),
        "opt_einsum.enabled": lambda v: setattr(back.opt_einsum, "enabled", v),
        "opt_einsum.enabled (set_flags)": lambda v: back.opt_einsum.set_flags(v),
        "jit.graph_executor_optimize": lambda v: torch._C._set_graph_executor_optimize(v),
    }


# The determinism flags' own spellings (the GPU script flips these too: on a CPU torch cuDNN's are inert, FF1).
DETERMINISM = {
    "cudnn.deterministic": lambda torch, v: setattr(torch.backends.cudnn, "deterministic", v),
    "cudnn.benchmark": lambda torch, v: setattr(torch.backends.cudnn, "benchmark", v),
    "cudnn.allow_tf32 (legacy flag)": lambda torch, v: setattr(torch.backends.cudnn, "allow_tf32", v),
    "cuda.matmul.allow_tf32 (legacy flag)": lambda torch, v: setattr(torch.backends.cuda.matmul, "allow_tf32", v),
    "sdp.fa3": lambda torch, v: torch._C._set_sdp_use_fa3(v),
}


def outcomes(torch: Any, settings: Any, setters: Any, cases: dict[str, Any]) -> dict[str, str]:
    """Each case flipped to the other value and back inside a window of its own: what happened ("unseen", the
    verdict, or why it is not a flag here). ``settings``/``setters``: Kernodeck's in-env modules, as loaded there."""
    import contextlib

    found: dict[str, str] = {}
    for name, flip in cases.items():
        before = settings.read_back(torch)
        was = before.get(name, before.get(name.split(" ")[0]))
        if name.startswith("opt_einsum.enabled") and not torch.backends.opt_einsum.is_available():
            was = "opt_einsum is not installed"
        if not isinstance(was, bool):
            found[name] = f"not a flag here: {was!r}"
            continue
        try:
            with setters.watching(torch, before, "the entry"):
                flip(not was)
                flip(was)
            found[name] = "unseen"
        except Exception as exc:
            found[name] = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):
                flip(was)
    return found


def classified(torch: Any, settings: Any, setters: Any) -> dict[str, Any]:
    """Every setter this torch's ``torch._C`` has that the setter watch leaves unclassified (watched, a with-block's,
    or no numerics'), each native getter whose setter is not watched, each watched binding this torch lacks, and what
    the native getters read."""
    here = sorted(n for n in dir(torch._C) if n.startswith(("_set_", "set_")) and callable(getattr(torch._C, n)))
    return {
        "unclassified": [n for n in here if n not in setters.BINDINGS and n not in setters.NOT_NUMERICS
                         and not n.startswith(setters.WITH_BLOCK_SETTERS)],
        "getters_without_watched_setter": [
            getter for name, getter in settings.NATIVE_SWITCHES.items() if name not in settings.WITH_BLOCKS
            and getter.replace("_get_", "_set_", 1) not in setters.BINDINGS],
        "missing_bindings": [n for n in setters.BINDINGS if not hasattr(torch._C, n)],
        "native_read": {name: settings.numerics(torch)[name] for name in settings.NATIVE_SWITCHES},
    }
