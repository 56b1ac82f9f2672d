"""resume_calls.py: the resumed run's new process is held to the runner's records (its settings, its libraries, its
sources), as each of the runner's steps is (steprun.held; red-team pass 27, NOTE1: its sources only, before).

The two phases run as the resume check runs them (tests/helpers/closedworld.resume_phases: a closed project, the
in-env package as the runner loads it, a stand-in torch whose settings are applied and read back).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.closedworld import resume_phases

TRAIN = '''

def train(app, steps, save_at, resume_from):
    from pathlib import Path
    here = Path(app.checkpoint_dir)
    w, m, start = 0, 0, 0
    if resume_from is not None:  # a full checkpoint: the state and its momentum
        w = int((Path(resume_from) / "w.txt").read_text())
        m = int((Path(resume_from) / "m.txt").read_text())
        start = 3
    for step in range(start + 1, steps + 1):
        m = m + 1
        w = w + m
        app.log(step, float(w))
        if save_at == step:
            (here / "w.txt").write_text(str(w))
            (here / "m.txt").write_text(str(m))
    app.write("w", [w])
    return {"step": steps, "epoch": 0, "loader": steps}
'''


def test_a_resumable_train_passes_in_a_new_process_holding_the_runners_settings(tmp_path: Path) -> None:
    result = resume_phases(tmp_path, TRAIN)
    assert (result["phase"], result["status"]) == ("worker", "passed"), result


@pytest.mark.parametrize("change", ["torch.set_num_threads(1)", "torch.set_num_interop_threads(1)",
                                    "torch.backends.cudnn.benchmark = True"])
def test_a_setting_not_the_runners_in_the_new_process_fails_its_call(tmp_path: Path, change: str) -> None:
    """What the env's code changed in the new process before the call (outside the project's windows): the resumed
    run computed with other settings than settings.json records, so its call fails, naming them."""
    result = resume_phases(tmp_path, TRAIN, worker_start=change)
    assert (result["phase"], result["status"]) == ("worker", "failed"), result
    assert "not in effect" in result["error"], result
