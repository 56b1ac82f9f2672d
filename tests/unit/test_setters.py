"""A recorded determinism setting turned off and back on inside one call of the application fails its step
(kernodeck/inenv/setters.py; the seventh red-team pass of issue 29, /work/notes/redteam7.md section 7).

The read-back before and after each call (application.settings_held) cannot see a transient change; the setters are
watched while the call runs. The stand-in torch is test_verified's FAKE_TORCH, which holds its bindings as torch does:
in ``torch._C`` (looked up at each call by the Python-level setters and ``cuda.matmul``), re-exported as themselves
(``torch.set_num_threads``) and kept by the cuDNN module's properties since its class was made.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from kernodeck.inenv._common import CheckFailed
from kernodeck.inenv.protocol import Layer
from tests.helpers.closedworld import _run, _settings_project

TRANSIENT = {  # the entry turns a verified setting off around its computation and back on before it returns
    "deterministic_algorithms":
        "torch.use_deterministic_algorithms(False); x = 1; torch.use_deterministic_algorithms(True)",
    "cudnn.deterministic":
        "torch.backends.cudnn.deterministic = False; x = 1; torch.backends.cudnn.deterministic = True",
    "cuda.matmul.allow_tf32 (legacy flag)":
        "torch.backends.cuda.matmul.allow_tf32 = True; x = 1; torch.backends.cuda.matmul.allow_tf32 = False",
    "float32_matmul_precision":
        'torch.set_float32_matmul_precision("medium"); x = 1; torch.set_float32_matmul_precision("highest")',
    # torch.backends.cudnn.flags()'s defaults: deterministic=False, allow_tf32=True, set back on leaving
    "cudnn.flags (its default deterministic=False)": "with torch.backends.cudnn.flags(enabled=False): x = 1",
    "default_dtype": "torch.set_default_dtype(torch.float64); x = 1; torch.set_default_dtype(torch.float32)",
}
NAMED = {"cudnn.flags (its default deterministic=False)": "cudnn.deterministic"}  # the setting the verdict names
RECORDED = {  # the controls: the same setters, given the recorded values (a defensive call), pass
    "use_deterministic_algorithms(True)": "torch.use_deterministic_algorithms(True)",
    "cudnn.deterministic = True": "torch.backends.cudnn.deterministic = True",
    "cuda.matmul.allow_tf32 = False": "torch.backends.cuda.matmul.allow_tf32 = False",
    'set_float32_matmul_precision("highest")': 'torch.set_float32_matmul_precision("highest")',
    "cudnn.flags at the recorded values":
        "with torch.backends.cudnn.flags(enabled=False, deterministic=True, allow_tf32=False): x = 1",
    "set_num_threads(4)": "torch.set_num_threads(4)",
    # an application pinning its own thread count inside its call and setting it back (examples/digits: the
    # reduction order whatever the machine's cores) is its code's choice, checked by the read-back after the call
    "threads pinned inside the call and set back": "torch.set_num_threads(1); x = 1; torch.set_num_threads(4)",
}


@pytest.mark.parametrize("case", sorted(TRANSIENT))
def test_a_setting_turned_off_and_back_within_a_call_fails_the_step(tmp_path: Path, case: str) -> None:
    """Before setters.py: passed, and settings.json said the setting was verified for outputs computed without it."""
    config, fake = _settings_project(tmp_path, entry=TRANSIENT[case])
    result = _run(tmp_path, config, "--torch", str(fake))
    assert result["status"] == "failed", result
    setting = NAMED.get(case, case)
    assert result["error"].startswith("the entry changed determinism settings the run records as verified: ")
    assert f"{setting}: recorded " in result["error"] and "inside its call" in result["error"], result["error"]
    assert list(result["details"]["changed_settings"]) == [setting]


def test_a_transient_change_in_the_criterion_fails_even_through_the_controls(tmp_path: Path) -> None:
    """The controls count any error of the criterion as a rejection: the setter's verdict is pending all the same."""
    config, fake = _settings_project(tmp_path, criterion=TRANSIENT["deterministic_algorithms"])
    for flags in ((), ("--controls",)):
        result = _run(tmp_path, config, "--torch", str(fake), *flags)
        assert result["status"] == "failed", result
        assert "the criterion changed determinism settings" in result["error"], result["error"]
        assert "deterministic_algorithms: recorded True, set False" in result["error"]


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_a_setter_given_the_recorded_value_passes(tmp_path: Path, case: str) -> None:
    config, fake = _settings_project(tmp_path, entry=RECORDED[case])
    assert _run(tmp_path, config, "--torch", str(fake)) == {"status": "passed"}


FORKED_WORKER = '''import os
def _forked_worker():
    pid = os.fork()
    if pid == 0:
        try:
            torch.set_num_threads(1)  # as each DataLoader worker does (torch/utils/data/_utils/worker.py)
        except BaseException:
            os._exit(3)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0, "the worker's set_num_threads was refused"
'''


def test_a_forked_worker_setting_its_own_threads_passes(tmp_path: Path) -> None:
    """A DataLoader worker (a process forked in the window) sets its own threads to 1: the thread counts are its own
    choice. Any other setting it changes is judged there (red-team pass 48, SET7: tests/e2e/test_redteam48_sessions.py
    with real torch)."""
    config, fake = _settings_project(tmp_path, entry="_forked_worker()", top=FORKED_WORKER)
    assert _run(tmp_path, config, "--torch", str(fake)) == {"status": "passed"}


def test_a_verdict_raised_in_a_pool_child_reaches_the_parent_whole() -> None:
    """A child forked in a window is judged where it runs (SET7): its CheckFailed travels back through the Pool's
    pickle. Rebuilt from its message alone (the default) it would fail in the parent's result thread, which then
    waits forever; it arrives with its layer and details."""
    verdict = CheckFailed("the entry, in a process it forked, changed determinism settings", Layer.APPLICATION,
                          {"setter": "torch._C.set_flush_denormal(True)"})
    back = pickle.loads(pickle.dumps(verdict))
    assert (type(back), str(back), back.layer, back.details) == (
        CheckFailed, str(verdict), Layer.APPLICATION, verdict.details)
