"""The in-env judgement of a resumed run (kernodeck/inenv/resume_app.py, issue 36).

No torch here (the test session has numpy): the judgement is fed recorded runs. The real train, its checkpoint and
its new process run in tests/e2e/test_examples.py on the digits example's env.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kernodeck.inenv import resume_app
from kernodeck.inenv._common import CheckFailed, Context, Skip
from kernodeck.inenv.protocol import Status
from kernodeck.verify.record import Step
from kernodeck.verify.summaries import step_result

# --- the judgement ---------------------------------------------------------------------------------------------------

CFG: dict[str, Any] = {
    "steps": 6, "checkpoint_at": 3,
    "outputs": {"weights": {"kind": "allclose", "dtype": "float32", "rtol": 0.0, "atol": 1e-6}},
}
LOSSES = {1: 2.0, 2: 1.5, 3: 1.2, 4: 1.0, 5: 0.9, 6: 0.8}
WEIGHTS = np.linspace(-1, 1, 12, dtype=np.float32)
COUNTERS = {"step": 6, "epoch": 2, "loader": 0}


def _run(losses: dict[int, float], weights: Any = WEIGHTS, **counters: int) -> resume_app.Trained:
    return resume_app.Trained({"weights": np.asarray(weights)}, dict(losses), {**COUNTERS, **counters})


HEAD = _run({s: v for s, v in LOSSES.items() if s <= 3}, step=3, epoch=1, loader=1)


def test_a_faithful_resume_passes_bitwise() -> None:
    verdict = resume_app.judge(CFG, _run(LOSSES), HEAD, _run({s: v for s, v in LOSSES.items() if s > 3}), 0.0)
    assert verdict["passed"] and verdict["bitwise"] and verdict["max_abs_at_end"] == 0.0
    assert verdict["first_parting_step"] is None and verdict["declaration_sees"] == []
    assert verdict["losses_resumed"] == verdict["losses_uninterrupted"]


@pytest.mark.parametrize(
    ("resumed", "parting", "seen"),
    [
        # a lost optimizer state: the first resumed step's loss and the end state move
        (_run({4: 1.0, 5: 0.95, 6: 0.85}, WEIGHTS + 1e-3), 5, "weights"),
        # a lost loader position: other batches, and the progress counters say so
        (_run({4: 1.1, 5: 0.9, 6: 0.8}, WEIGHTS, epoch=1, loader=3), 4, "progress epoch"),
        # a step the resumed run never logged
        (_run({4: 1.0, 6: 0.8}), 5, None),
        # a NaN loss never compares equal
        (_run({4: 1.0, 5: float("nan"), 6: 0.8}), 5, None),
    ],
)
def test_a_resume_that_parts_fails_and_says_where(resumed: resume_app.Trained, parting: int, seen: str | None) -> None:
    verdict = resume_app.judge(CFG, _run(LOSSES), HEAD, resumed, 0.0)
    assert not verdict["passed"] and verdict["first_parting_step"] == parting
    if seen is None:
        assert verdict["declaration_sees"] == []  # only the loss curve saw it: a control would call this blind
    else:
        assert any(s.startswith(seen) for s in verdict["declaration_sees"]), verdict["declaration_sees"]


def test_on_a_gpu_the_curve_is_compared_under_the_declared_tolerance() -> None:
    near = {s: v + (1e-7 if s > 3 else 0.0) for s, v in LOSSES.items() if s > 3}
    assert resume_app.judge(CFG, _run(LOSSES), HEAD, _run(near), 1e-5)["passed"]
    assert resume_app.judge(CFG, _run(LOSSES), HEAD, _run(near), 0.0)["first_parting_step"] == 4


def test_a_scalar_output_keeps_its_shape_through_the_resumed_runs_files(tmp_path: Path) -> None:
    """The resumed run's outputs come back from its process's files (``_keep``, then np.load): a 0-d output stays 0-d
    and agrees with the uninterrupted run's; the same value as shape (1,) is another output, named by its shape."""
    after = {s: v for s, v in LOSSES.items() if s > 3}
    resume_app._keep(tmp_path, _run(after, np.float32(0.5)))
    kept = np.load(tmp_path / "weights.npy", allow_pickle=False)
    assert kept.shape == () and (tmp_path / "weights.ids.json").read_text(encoding="utf-8") == '["0"]'
    assert resume_app.judge(CFG, _run(LOSSES, np.float32(0.5)), HEAD, _run(after, kept), 0.0)["passed"]
    verdict = resume_app.judge(CFG, _run(LOSSES, np.float32(0.5)), HEAD, _run(after, np.atleast_1d(kept)), 0.0)
    assert verdict["declaration_sees"] == ["weights: shape (1,) against the reference's ()"], verdict


def test_the_step_skips_when_nothing_is_declared(tmp_path: Path) -> None:
    ctx = Context(config={"application": {"params": {}}, "project_root": str(tmp_path)}, out=tmp_path)
    with pytest.raises(Skip, match=r"application\.resume"):
        resume_app.run(ctx)


def _step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The step over recorded verdicts (the real and one per control), as check() would return them."""
    monkeypatch.setattr(resume_app, "check", lambda *a, **k: copy.deepcopy(verdicts))
    cfg = {**CFG, "controls": [k for k in verdicts if k != "none"], "entry": {"file": "t.py", "function": "train"}}
    ctx = Context(config={"application": {"params": {}}, "project_root": str(tmp_path),
                          "resume_application": cfg}, out=tmp_path)
    return resume_app.run(ctx)


def _verdict(resumed: resume_app.Trained) -> dict[str, Any]:
    return resume_app.judge(CFG, _run(LOSSES), HEAD, resumed, 0.0)


FAITHFUL = _run({s: v for s, v in LOSSES.items() if s > 3})
NO_OPTIMIZER = _run({4: 1.0, 5: 0.95, 6: 0.85}, WEIGHTS + 1e-3)
NO_LOADER = _run({4: 1.1, 5: 0.9, 6: 0.8}, WEIGHTS, epoch=1, loader=3)
BLIND = _run({4: 1.0, 5: 0.95, 6: 0.85}, WEIGHTS + 1e-7)  # the curve parts, the declared end state cannot see it


def test_the_step_passes_when_each_control_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    details = _step(tmp_path, monkeypatch, {"none": _verdict(FAITHFUL), "optimizer": _verdict(NO_OPTIMIZER),
                                            "loader": _verdict(NO_LOADER)})
    assert {k: v["seen"] for k, v in details["controls"].items()} == {"optimizer": True, "loader": True}
    line = step_result(Step("resume-application", Status.PASSED, details=details))
    assert "end state max diff 0.0 (bitwise)" in line and "loss curves the same" in line
    assert "progress step 6 epoch 2 loader 0" in line and "each dropped piece seen (optimizer, loader)" in line


def test_a_declaration_blind_to_a_dropped_piece_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CheckFailed, match="unable to fail: with the rng state dropped") as caught:
        _step(tmp_path, monkeypatch, {"none": _verdict(FAITHFUL), "optimizer": _verdict(NO_OPTIMIZER),
                                      "rng": _verdict(BLIND)})
    assert caught.value.layer == "reference" and "nox -s reference -- --new" in caught.value.details["tip"]
    assert caught.value.details["controls"]["rng"]["first_parting_step"] == 5  # the curve saw it; the contract not


def test_a_resume_that_differs_fails_at_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CheckFailed, match="differs from its uninterrupted run: weights") as caught:
        _step(tmp_path, monkeypatch, {"none": _verdict(NO_OPTIMIZER), "optimizer": _verdict(NO_OPTIMIZER)})
    assert caught.value.layer == "comparison"


def test_a_resumed_run_that_reads_nothing_of_its_checkpoint_fails(tmp_path: Path) -> None:
    """A train that ignores resume_from and trains again from step 0 ends bitwise where the uninterrupted run ends (and
    can honour app.resume_drop so that its controls differ): the resumed run must have opened a file of the checkpoint
    it was handed (the closed world's record of its call), else the step fails."""
    from kernodeck_inenv import resume_calls, seen

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "state.pt").write_bytes(b"x")
    saved = dict(seen.READ)
    try:
        seen.READ.clear()
        seen.READ[str(tmp_path / "elsewhere.pt")] = "the resume entry"
        from kernodeck_inenv._common import CheckFailed as InEnvCheckFailed  # the class resume_app raises
        with pytest.raises(InEnvCheckFailed, match="read no file of the checkpoint"):
            resume_calls.read_the_checkpoint(checkpoint)
        seen.READ[str(checkpoint / "state.pt")] = "the resume entry"
        resume_calls.read_the_checkpoint(checkpoint)
    finally:
        seen.READ.clear()
        seen.READ.update(saved)


# --- the progress train returns, against what Kernodeck observes of the call -----------------------------------------


def _called(logged: list[int], **counters: int) -> resume_app.TrainApp:
    """A TrainApp after a call of train that logged ``logged`` (in that order)."""
    app = resume_app.TrainApp({}, "cpu", Path("."), Path("."), None, {})
    for step in logged:
        app.log(step, 1.0 / step)
    return app


@pytest.mark.parametrize(
    ("logged", "start", "steps", "returned", "message"),
    [
        # asked for 6, says 6, logged 1..4: it stopped early and claims the rest
        ([1, 2, 3, 4], 0, 6, 6, r"from the start, to step 6\) returned step 6 but logged no loss for step 5\.\.6"),
        # resumed from 3, trained again from step 1: what it returned is right, what it did is not
        ([1, 2, 3, 4, 5, 6], 3, 6, 6, r"resumed from step 3.*logged step 1\.\.3, outside 4\.\.6"),
        # a step trained twice (a loader that went back)
        ([4, 5, 5, 6], 3, 6, 6, r"logged step 5 more than once"),
        # steps skipped
        ([4, 6], 3, 6, 6, r"logged no loss for step 5\b"),
        # the step it returns is not the one it was asked for
        ([1, 2, 3, 4, 5, 6], 0, 6, 5, r"asked for 6 steps and returned step 5"),
    ],
)
def test_progress_that_what_kernodeck_saw_contradicts_fails_the_call(
    logged: list[int], start: int, steps: int, returned: int, message: str
) -> None:
    resume_app.check_progress({**COUNTERS, "step": steps}, _called(list(range(start + 1, steps + 1))), start, steps)
    from kernodeck_inenv._common import CheckFailed as InEnvCheckFailed  # the class resume_app raises
    with pytest.raises(InEnvCheckFailed, match=message) as caught:  # the runner's class (kernodeck_inenv)
        resume_app.check_progress({**COUNTERS, "step": returned}, _called(logged), start, steps)
    assert caught.value.layer == "application"


def test_each_call_of_train_has_its_progress_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """call_train (every call: uninterrupted, to the checkpoint, resumed) checks what train returns against what it saw:
    a train that trains 4 of 6 steps and says 6 fails; the same train logging all 6 passes (the control)."""
    import kernodeck_inenv.application
    import kernodeck_inenv.settings

    def train(app: Any, steps: int, save_at: int | None, resume_from: Path | None) -> dict[str, int]:
        for step in range(1, app.params["trained"] + 1):
            app.log(step, 1.0 / step)
        app.write("weights", WEIGHTS)
        return {"step": steps, "epoch": 1, "loader": 0}

    monkeypatch.setattr(kernodeck_inenv.application, "_function", lambda *a: train)
    monkeypatch.setattr(kernodeck_inenv.settings, "apply", lambda deterministic=True: {})  # no torch here
    ctx = Context(config={"project_root": str(tmp_path)}, out=tmp_path)
    cfg = {**CFG, "entry": {"file": "checks/train.py", "function": "train"}}
    done = resume_app.call_train(cfg, ctx, {"trained": 6}, "cpu", tmp_path / "ok", 6, None, None, None)
    assert done.counters["step"] == 6 and sorted(done.losses) == [1, 2, 3, 4, 5, 6]
    from kernodeck_inenv._common import CheckFailed as InEnvCheckFailed  # the class resume_app raises
    with pytest.raises(InEnvCheckFailed, match=r"returned step 6 but logged no loss for step 5\.\.6"):
        resume_app.call_train(cfg, ctx, {"trained": 4}, "cpu", tmp_path / "short", 6, None, None, None)


def test_a_resume_output_in_another_dtype_than_declared_fails_the_call(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The declared dtype of a resume output holds as an application output's does: float64 weights where float32 is
    declared fail the call, naming the output and both dtypes; the declared dtype passes (the control)."""
    import kernodeck_inenv.application
    import kernodeck_inenv.settings

    def train(app: Any, steps: int, save_at: int | None, resume_from: Path | None) -> dict[str, int]:
        for step in range(1, steps + 1):
            app.log(step, 1.0 / step)
        app.write("weights", WEIGHTS.astype(app.params["dtype"]))
        return {"step": steps, "epoch": 1, "loader": 0}

    monkeypatch.setattr(kernodeck_inenv.application, "_function", lambda *a: train)
    monkeypatch.setattr(kernodeck_inenv.settings, "apply", lambda deterministic=True: {})  # no torch here
    ctx = Context(config={"project_root": str(tmp_path)}, out=tmp_path)
    cfg = {**CFG, "entry": {"file": "checks/train.py", "function": "train"}}
    done = resume_app.call_train(cfg, ctx, {"dtype": "float32"}, "cpu", tmp_path / "ok", 6, None, None, None)
    assert done.outputs["weights"].dtype == np.float32
    from kernodeck_inenv._common import CheckFailed as InEnvCheckFailed  # the class resume_app raises
    with pytest.raises(InEnvCheckFailed, match=r"resume output weights: dtype float64, expected float32"):
        resume_app.call_train(cfg, ctx, {"dtype": "float64"}, "cpu", tmp_path / "wide", 6, None, None, None)


def test_the_call_to_k_runs_first_and_each_other_call_in_a_new_process(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The call to K runs in this process before any other call, its checkpoint sealed; the uninterrupted run and each
    resumed run are orders to new processes (red-team pass 30, FP1/FP2: nothing of the uninterrupted call exists
    before the seal). The uninterrupted run's end state and loss curve are kept in the run's folder only after every
    resumed run (red team)."""
    import kernodeck_inenv.resume
    import kernodeck_inenv.resume_calls

    calls: list[str] = []

    def call_train(cfg: Any, ctx: Any, params: Any, device: str, folder: Path, steps: int, save_at: int | None,
                   resume_from: Path | None, drop: str | None) -> resume_app.Trained:
        calls.append(f"here: to {steps}, save at {save_at}")
        (folder / "state.pt").write_text("checkpoint")
        return HEAD

    class Worker:
        def __init__(self, path: Path) -> None:
            pass

        def close(self) -> None:
            pass

    visible: list[list[str]] = []

    def answered(worker: Any, order: dict[str, Any], ctx: Any = None) -> tuple[Any, ...]:
        Path(order["folder"]).mkdir(parents=True)  # as the worker makes its folder
        if order["resume_from"] is None:
            calls.append("new process: uninterrupted")
            run = _run(LOSSES)
        else:
            sealed = "state.pt" in order["seal"]
            calls.append(f"new process: resumed from {Path(order['resume_from']).name} (sealed: {sealed})")
            visible.append(sorted(p.name for p in (tmp_path / "ra" / "uninterrupted").iterdir()))
            run = _run({s: v for s, v in LOSSES.items() if s > 3})
        return run.outputs, run.losses, run.counters

    monkeypatch.setattr(resume_app, "call_train", call_train)
    monkeypatch.setattr(kernodeck_inenv.resume_calls, "answered", answered)
    monkeypatch.setattr(kernodeck_inenv.resume, "Worker", Worker)
    ctx = Context(config={"project_root": str(tmp_path), "application": {}}, out=tmp_path)
    verdicts = resume_app.check(CFG, ctx, {}, "cpu", tmp_path / "ra", (None, "optimizer"))
    assert calls == ["here: to 3, save at 3", "new process: uninterrupted",
                     "new process: resumed from checkpoint (sealed: True)",
                     "new process: resumed from checkpoint (sealed: True)"]
    assert visible == [[], []]  # nothing of Kernodeck's record of it while the resumed runs ran
    assert verdicts["none"]["passed"]
    kept = sorted(p.name for p in (tmp_path / "ra" / "uninterrupted").iterdir())
    assert any(name.startswith("weights") for name in kept) and len(kept) >= 4  # kept afterwards, for compare
