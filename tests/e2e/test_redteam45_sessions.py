"""Red-team pass 45, the finding that needs the rebuilt env's torch (notes: /work/notes/redteam45.md; the unit ones are
in tests/unit/test_redteam45.py).

SET2 (global numerics state torch reads, set by the application's call, neither recorded nor read back; the record
describes a float32 run that did not happen; inenv/settings.read_back, application.settings_held): after SET1's fix
every ``fp32_precision`` knob is read back, but three other global switches decide what a CPU computes and none is in
the read-back, so the bracket around each call (``settings.held``) sees nothing: ``torch.set_autocast_enabled("cpu",
True)`` (every matmul, linear and attention in bfloat16: PyTorch's documented CPU mixed precision, left on globally),
``torch.backends.cuda.enable_flash_sdp(False)`` (it also decides the CPU ``scaled_dot_product_attention`` kernel:
flash, else math; sentence-transformers' BERT models use sdpa), and ``torch.set_flush_denormal(True)`` (denormals read
as 0). Measured on torch 2.13.0+cpu here (AVX2): each changes the bits of the operation it governs, and the settings
record still says ``float32_matmul_precision`` highest, every precision knob ``ieee``, ``default_dtype`` float32.
Fix idea: read back ``torch.is_autocast_enabled(dev)`` and its dtype per device type, the four sdp switches
(``flash/mem_efficient/math/cudnn_sdp_enabled``), and flush-denormal (no getter: ``torch.tensor([1e-39]) * 1 == 0``),
with mkldnn/opt_einsum ``enabled`` and the CUDA reduced-precision reductions; watch their setters as the others are.
CONTROL: the matmul precision set the same way is seen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.inenv_json import in_env

HELD = """
    import torch
    import torch.nn.functional as F
    from kernodeck.inenv import settings
    settings.apply()
    before = settings.read_back(torch)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 32) for _ in range(3))
    w, x = torch.randn(384, 384), torch.randn(16, 384)
    def compute():
        return [F.scaled_dot_product_attention(q, k, v), x @ w, torch.tensor([1e-39]) * 1.0]
    plain = compute()
    {line}  # the application's line, in its call
    # by their bytes (autocast's are bfloat16, widened exactly): with denormals-are-zero on, every float read (a
    # comparison, a cast to double) takes 1e-39f as 0
    moved = [a.numpy().tobytes() != b.float().numpy().tobytes() for a, b in zip(plain, compute())]
    verdict = settings.held(torch, before, before, "the entry")
    print(json.dumps({{"moved": moved, "held": None if verdict is None else str(verdict)}}))
"""
UNSEEN = {  # the line, and which of (attention, matmul, denormal) it changes
    "autocast": ('torch.set_autocast_enabled("cpu", True)', [True, True, False]),
    "flash-sdp": ("torch.backends.cuda.enable_flash_sdp(False)", [True, False, False]),
    "flush-denormal": ("torch.set_flush_denormal(True)", [False, False, True]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(UNSEEN))
def test_set2_premise_the_line_changes_what_the_cpu_computes(built_project: Path, case: str) -> None:
    line, moves = UNSEEN[case]
    assert in_env(built_project, HELD.format(line=line))["moved"] == moves


NAMED = {"autocast": "autocast.cpu", "flash-sdp": "sdp.flash", "flush-denormal": "flush_denormal"}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(UNSEEN))
def test_set2_a_call_that_changes_the_cpus_numerics_fails_its_step(built_project: Path, case: str) -> None:
    held = in_env(built_project, HELD.format(line=UNSEEN[case][0]))["held"]
    assert held is not None and NAMED[case] in held, held


@pytest.mark.slow
def test_control_an_autocast_block_inside_the_call_is_the_applications_own_choice(built_project: Path) -> None:
    """``with torch.autocast("cpu"):`` in the application's (fingerprinted) code, set back as the block ends: what
    the call leaves is the record's, so the bracket sees no change (its setters are not watched: settings.numerics)."""
    line = 'with torch.autocast("cpu"): _ = compute()'
    assert in_env(built_project, HELD.format(line=line))["held"] is None


@pytest.mark.slow
def test_control_the_matmul_precision_set_the_same_way_is_seen(built_project: Path) -> None:
    held = in_env(built_project, HELD.format(line='torch.set_float32_matmul_precision("medium")'))["held"]
    assert held is not None and "float32_matmul_precision" in held, held
