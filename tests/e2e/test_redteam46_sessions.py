"""Red-team pass 46, the finding that needs the rebuilt env's torch (notes: /work/notes/redteam46.md; the unit ones are
in tests/unit/test_redteam46.py).

SET3 (a global switch that changes what a float32 CPU run computes, neither set nor read back; the record describes a
run that did not happen; inenv/settings.numerics, read_back): pass 45's fix reads back autocast, the sdp kernels,
flush-denormal, oneDNN and opt_einsum, but not ``torch.backends.mha.get_fastpath_enabled()``. An entry's
``torch.backends.mha.set_fastpath_enabled(False)`` (PyTorch's documented switch for the fused "fast path" of
``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` in inference) changes the bits of both modules' float32
outputs on the CPU (measured: torch 2.13.0+cpu, AVX2), and ``settings.held`` sees no change. Fix idea: read back
``torch.backends.mha.get_fastpath_enabled()`` in settings.numerics (torch's default, True, recorded) and watch its
setter. CONTROL: the matmul precision set the same way is seen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.inenv_json import in_env

HELD = """
    import torch
    from kernodeck.inenv import settings
    settings.apply()
    before = settings.read_back(torch)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(8, 16, 64)
    def compute():
        with torch.inference_mode():
            return [layer(x), mha(x, x, x, need_weights=False)[0]]
    plain = compute()
    {line}  # the application's line, in its call
    moved = [a.numpy().tobytes() != b.numpy().tobytes() for a, b in zip(plain, compute())]
    verdict = settings.held(torch, before, before, "the entry")
    print(json.dumps({{"moved": moved, "held": None if verdict is None else str(verdict)}}))
"""
FASTPATH_OFF = "torch.backends.mha.set_fastpath_enabled(False)"


@pytest.mark.slow
def test_set3_premise_the_fast_path_switch_changes_what_the_cpu_computes(built_project: Path) -> None:
    assert in_env(built_project, HELD.format(line=FASTPATH_OFF))["moved"] == [True, True]


@pytest.mark.slow
def test_set3_a_call_that_turns_the_fast_path_off_fails_its_step(built_project: Path) -> None:
    held = in_env(built_project, HELD.format(line=FASTPATH_OFF))["held"]
    assert held is not None and "fastpath" in held, held


@pytest.mark.slow
def test_control_the_matmul_precision_set_the_same_way_is_seen(built_project: Path) -> None:
    held = in_env(built_project, HELD.format(line='torch.set_float32_matmul_precision("medium")'))["held"]
    assert held is not None and "float32_matmul_precision" in held, held
