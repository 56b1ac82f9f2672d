"""Red-team pass 47, the finding that needs the rebuilt env's torch (notes: /work/notes/redteam47.md; the unit ones are
in tests/unit/test_redteam47.py).

SET4 (a setting read back after each call, turned off and back on inside the call: unseen, because its setter is not
watched; the record describes a run that did not happen; inenv/setters.BINDINGS, settings.numerics): pass 45's and
46's fixes read back flush-denormal, oneDNN's ``enabled``, the multi-head attention fast path, the sdp kernels ...
after each call of the application, and their fix ideas said "watch their setters as the others are"; but
setters.BINDINGS still wraps only the determinism, TF32/precision, dtype and thread setters. A call that sets
``torch.set_flush_denormal(True)`` (a setting settings.json lists as ``verified``) or
``torch.backends.mkldnn.enabled = False`` for its computation and sets it back before it returns leaves the read-back
after the call as it was, and no watched setter runs: a real session on this repository, with both lines around the
body of checks/app.py's ``run`` (restored in a ``finally``) and a new reference, gave ``PASSED: 14 passed``, and its
settings.json records ``flush_denormal: false`` (verified) and ``mkldnn.enabled: true``, while every row of its
embeddings differs bitwise from the plain run's (max abs 1.0e-07; oneDNN off moves MiniLM's GELU). The same change
through ``torch.backends.mkldnn.set_flags(False)`` is caught (it calls a watched binding), and
``use_deterministic_algorithms(False)`` then ``(True)`` is (setters.py's own example). Fix idea: wrap the setters of
every read-back value (``torch._C.set_flush_denormal``, ``_set_mkldnn_enabled``, ``_set_mha_fastpath_enabled`` /
``torch.backends.mha.set_fastpath_enabled``, the sdp ``_set_sdp_use_*``, ``_set_cudnn_enabled``, opt_einsum's, the
preferred libraries', ``set_autocast_*`` unless a ``with`` block is meant to stay allowed) as BINDINGS' are, or
derive the watched list from settings.read_back's names. CONTROL: the same change made through a watched setter fails.

FIXED: setters.BINDINGS holds the setter of every switch settings.numerics records (torch._C's, and the Python
setters of PYTHON_SETTERS in their modules, globals and torch.backends' properties); every setter torch._C has is
watched, a with-block's (WITH_BLOCK_SETTERS) or no numerics' (NOT_NUMERICS), so a new one is classified before it can
go unwatched; the read-back records the native switches beside them (settings.NATIVE_SWITCHES).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import switchflips
from tests.helpers.inenv_json import in_env

WATCHED = """
    import contextlib
    import torch
    from kernodeck.inenv import settings, setters
    settings.apply()
    before = settings.read_back(torch)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(16, 32, 3).eval()
    x4 = torch.randn(32, 16, 28, 28)
    small = torch.randn(1000) * 1e-20
    def compute():
        with torch.inference_mode():
            return [conv(x4), torch.nn.functional.gelu(x4), small * small * 1e6]
    plain = compute()
    moved, caught = None, None
    try:
        with setters.watching(torch, before, "the entry") if {watch} else contextlib.nullcontext():
            {on}
            moved = [a.numpy().tobytes() != b.numpy().tobytes() for a, b in zip(plain, compute())]
            {off}
    except Exception as exc:
        caught = f"{{type(exc).__name__}}: {{exc}}"
    after = settings.held(torch, before, before, "the entry")
    print(json.dumps({{"moved": moved, "caught": caught, "held": None if after is None else str(after)}}))
"""
UNWATCHED = {
    "flush-denormal": ("torch.set_flush_denormal(True)", "torch.set_flush_denormal(False)"),
    "mkldnn-enabled": ("torch.backends.mkldnn.enabled = False", "torch.backends.mkldnn.enabled = True"),
}


def _call(project: Path, on: str, off: str, watch: bool = True) -> dict[str, object]:
    """``on``, a computation, then ``off``, as an application's call does (``watch``: inside the window's watch of
    the setters, as the entry's call runs); the settings read back after it, as the bracket around the call does."""
    return in_env(project, WATCHED.format(on=on, off=off, watch=watch))


@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(UNWATCHED))
def test_set4_premise_the_setting_moves_the_bits_and_the_read_back_after_the_call_sees_nothing(
        built_project: Path, setting: str) -> None:
    got = _call(built_project, *UNWATCHED[setting], watch=False)
    assert got["held"] is None, got  # set back before the call returned: the bracket after it is blind to it
    moved = got["moved"]
    assert isinstance(moved, list) and any(moved), got  # what was computed in between ran without the setting


@pytest.mark.slow
@pytest.mark.parametrize("setting", sorted(UNWATCHED))
def test_set4_a_setting_turned_off_and_back_on_inside_the_call_fails_its_step(
        built_project: Path, setting: str) -> None:
    caught = _call(built_project, *UNWATCHED[setting])["caught"]
    assert isinstance(caught, str) and "changed determinism settings" in caught, caught


@pytest.mark.slow
@pytest.mark.parametrize(("on", "off"), [
    ("torch.backends.mkldnn.set_flags(False)", "torch.backends.mkldnn.set_flags(True)"),
    ("torch.use_deterministic_algorithms(False)", "torch.use_deterministic_algorithms(True)"),
], ids=["mkldnn-set-flags", "deterministic-algorithms"])
def test_control_the_same_change_through_a_watched_setter_fails(built_project: Path, on: str, off: str) -> None:
    caught = _call(built_project, on, off)["caught"]
    assert isinstance(caught, str) and "changed determinism settings" in caught, caught


# Each switch the read-back records, set to another value through a public spelling of its setter and set back
# inside one window: each must fail its call (one process for them all; each in a window of its own).
EVERY_SWITCH = Path(switchflips.__file__).read_text(encoding="utf-8") + textwrap.dedent("""
    import torch
    from kernodeck.inenv import settings, setters
    settings.apply()
    found = outcomes(torch, settings, setters, flips(torch))
    print(json.dumps(found))
""")

# On the CPU torch 2.13 without opt_einsum: oneDNN's TF32 reads None (Intel GPUs only), cuDNN's depthwise kernel is a
# name ("auto"), opt_einsum cannot be enabled, and a CPU without float16 arithmetic refuses the fp16 reduction. Their
# setters are watched all the same (the classification test); what each gives here instead:
NO_FLAG_ON_THIS_TORCH = {"onednn.allow_tf32": "not a flag here", "cudnn.depthwise_kernel": "not a flag here",
                         "opt_einsum.enabled": "not a flag here", "opt_einsum.enabled (set_flags)": "not a flag here",
                         "cpu.allow_fp16_reduced_precision_reduction": "RuntimeError: Float16 arithmetic is not "
                                                                       "supported by the CPU",
                         "cudnn.enabled": "unseen"}  # no cuDNN here: its flags compute nothing (pass 48, FF1)


@pytest.mark.slow
def test_set4_every_recorded_switch_set_and_set_back_inside_a_call_fails_it(built_project: Path) -> None:
    found = in_env(built_project, EVERY_SWITCH)
    assert len(found) == 17, found
    for name, outcome in found.items():
        caught = outcome.startswith("CheckFailed: the entry changed determinism settings")
        if name in NO_FLAG_ON_THIS_TORCH and not caught:  # another machine's torch may set it: then caught
            assert outcome.startswith(NO_FLAG_ON_THIS_TORCH[name]), (name, outcome)
            continue
        assert outcome.startswith("CheckFailed: the entry changed determinism settings"), (name, outcome)
        assert name.split(" ")[0] in outcome, (name, outcome)


CLASSIFIED = Path(switchflips.__file__).read_text(encoding="utf-8") + textwrap.dedent("""
    import torch
    from kernodeck.inenv import settings, setters
    print(json.dumps(classified(torch, settings, setters)))
""")


@pytest.mark.slow
def test_set4_every_setter_torch_has_is_watched_a_with_blocks_or_no_numerics(built_project: Path) -> None:
    got = in_env(built_project, CLASSIFIED)
    assert got["unclassified"] == [] and got["getters_without_watched_setter"] == [], got
    assert got["missing_bindings"] == [], got  # this torch has each one the table names
    assert settings_not_available(got["native_read"]) == [], got


def settings_not_available(read: dict[str, object]) -> list[str]:
    return [name for name, value in read.items() if isinstance(value, str) and value.startswith(("not available",
                                                                                              "raises"))]


WITH_BLOCK = """
    import torch
    from kernodeck.inenv import settings, setters
    settings.apply()
    before = settings.read_back(torch)
    caught = None
    try:
        with setters.watching(torch, before, "the entry"):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                torch.set_num_threads(torch.get_num_threads())  # a watched setter called inside the block
                torch.backends.mkldnn.enabled = True  # the value it has
                x = torch.ones(4, 4) @ torch.ones(4, 4)
    except Exception as exc:
        caught = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"caught": caught, "held": str(settings.held(torch, before, before, "the entry"))}))
"""


@pytest.mark.slow
def test_control_a_watched_setter_inside_an_autocast_block_of_the_application_is_no_failure(
        built_project: Path) -> None:
    got = in_env(built_project, WITH_BLOCK)
    assert got == {"caught": None, "held": "None"}, got
