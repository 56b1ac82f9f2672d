"""Red-team pass 44, the finding that needs the rebuilt env's torch (notes: /work/notes/redteam44.md; the unit ones are
in tests/unit/test_redteam44.py).

SET1 (oneDNN's convolution and RNN precision set by the application, unseen; a setting recorded but not in effect;
inenv/settings.read_back, setters.py, application.settings_held): torch 2.9+ has one ``fp32_precision`` knob per
backend and operator: ``mkldnn.{matmul,conv,rnn}``, ``cudnn.{conv,rnn}``, ``cuda.matmul``, each inheriting from its
backend's and the generic one while it says "none". settings.apply sets the generic one (and two others) to "ieee";
read_back reads the generic, ``cuda.matmul``, ``cudnn.conv``, ``cudnn`` and ``mkldnn``, and the watch of the setters
and the bracket around each call of the application judge a change by that read-back. An entry that sets
``torch.backends.mkldnn.conv.fp32_precision = "bf16"`` (PyTorch's documented way to run oneDNN convolutions in bf16 on
a CPU with AMX or AVX512-BF16) or ``mkldnn.rnn``'s changes nothing read back: a real session on this repository, with
those two lines at the top of checks/app.py's ``run`` and a new reference, gave ``PASSED: 13 passed, 1 skipped``, and
its settings.json records every precision knob as "ieee" ("matmul precision highest" in the report), while the
knobs said bf16 through the whole application call (no numeric effect on this AVX2 machine; on a bf16 CPU the
convolutions ran in bf16). (``mkldnn.matmul`` and ``cudnn.rnn`` set so make torch's own read-back raise: a failure,
not a pass.) Fix idea: read back (and set to "ieee") every leaf knob this torch has, each getter's RuntimeError recorded
as a value of its own. CONTROL: the backend's own knob (``mkldnn.fp32_precision``) set so is seen.
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
    for knob in {knobs!r}:
        owner = torch.backends
        for part in knob.split("."):
            owner = getattr(owner, part)
        owner.fp32_precision = "tf32" if knob.startswith("cud") else "bf16"  # the application's line, in its call
    verdict = settings.held(torch, before, before, "the entry")
    print(json.dumps({{"knobs": {{k: eval("torch.backends." + k).fp32_precision for k in {knobs!r}}},
                      "held": None if verdict is None else str(verdict)}}))
"""
UNSEEN = ["mkldnn.conv", "mkldnn.rnn"]


@pytest.mark.slow
def test_set1_premise_the_application_sets_onednns_convolution_and_rnn_precision(built_project: Path) -> None:
    assert in_env(built_project, HELD.format(knobs=UNSEEN))["knobs"] == {"mkldnn.conv": "bf16", "mkldnn.rnn": "bf16"}


@pytest.mark.slow
def test_set1_a_call_that_sets_onednns_convolution_precision_fails_its_step(built_project: Path) -> None:
    held = in_env(built_project, HELD.format(knobs=UNSEEN))["held"]
    assert held is not None and "mkldnn.conv.fp32_precision" in held and "mkldnn.rnn.fp32_precision" in held, held


@pytest.mark.slow
def test_set1_a_knob_that_makes_torchs_own_getters_raise_is_a_change_not_a_crash(built_project: Path) -> None:
    """``mkldnn.matmul`` and ``cudnn.rnn`` set so make ``get_float32_matmul_precision`` and ``cudnn.allow_tf32``
    raise (torch: "a mix of the legacy and new APIs"): the read-back records what they raised, a change it names."""
    held = in_env(built_project, HELD.format(knobs=["mkldnn.matmul", "cudnn.rnn"]))["held"]
    assert held is not None and "mkldnn.matmul.fp32_precision" in held and "cudnn.rnn.fp32_precision" in held, held
    assert "raises RuntimeError" in held, held


@pytest.mark.slow
def test_control_the_backends_own_knob_set_so_is_seen(built_project: Path) -> None:
    held = in_env(built_project, HELD.format(knobs=["mkldnn"]))["held"]
    assert held is not None and "mkldnn.fp32_precision" in held, held
