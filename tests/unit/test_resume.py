"""The resume checkpoint, unit by unit, with the env's own torch (issue 11, "Resume on GPU").

No GPU here: the ``meta`` device stands in for cuda/mps. ``torch.load(map_location=<device>)`` moves EVERY tensor,
RNG states included, while torch.set_rng_state and Generator.set_state take CPU ByteTensors only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.inenv_json import in_env
from tests.helpers.resumecli import resume_cli

pytestmark = pytest.mark.slow


ROUND_TRIP = """
    from pathlib import Path
    import torch
    from kernodeck.inenv import resume

    path = Path(sys.argv[1])
    first = resume.Trainer("cpu")
    for _ in range(7):  # into the second epoch: the sampler replay is exercised too
        first.train_step()
    torch.save(first.state(), path)
    expected = torch.rand(4).tolist()  # what the torch generator yields right after the checkpoint

    def restore(ckpt):
        trainer = resume.Trainer("meta")  # the model on another device type
        try:
            trainer.restore(ckpt)
        except (TypeError, RuntimeError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    # The old load: every tensor, RNG states included, moved to the device.
    old_error = restore(torch.load(path, map_location="meta", weights_only=False))
    # The fixed load: onto the CPU, then only the model moved.
    ckpt = resume.load_checkpoint(path, "meta")
    new_error = restore(ckpt)
    print(json.dumps({
        "old_error": old_error,
        "new_error": new_error,
        "model_devices": sorted({str(v.device) for v in ckpt["model"].values()}),
        "rng_devices": sorted({str(ckpt["rng"]["torch"].device),
                               str(ckpt["sampler"]["generator_state_at_epoch_start"].device)}),
        "rng_dtype": str(ckpt["rng"]["torch"].dtype),
        "stream_after_restore": torch.rand(4).tolist(),
        "expected_stream": expected,
        "rng_parts": sorted(ckpt["rng"]),
    }))
"""


@pytest.mark.reliability(
    38,
    "a resume checkpoint loaded with map_location of another device type (meta standing in for cuda/mps)",
    "RNG and loader-generator states stay CPU ByteTensors; only the model moves; the torch stream resumes exactly",
)
def test_checkpoint_round_trips_through_another_device_type(built_project: Path, tmp_path: Path) -> None:
    out = in_env(built_project, ROUND_TRIP, str(tmp_path / "checkpoint.pt"))
    # What the old code did fails exactly as the issue reports ...
    assert out["old_error"] is not None and "ByteTensor" in out["old_error"], out["old_error"]
    # ... and the fixed load restores into a model on that device.
    assert out["new_error"] is None
    assert out["model_devices"] == ["meta"] and out["rng_devices"] == ["cpu"] and out["rng_dtype"] == "torch.uint8"
    assert out["stream_after_restore"] == out["expected_stream"]
    assert out["rng_parts"] == ["cuda", "mps", "numpy", "python", "torch"]  # MPS saved beside every CUDA device


def _verdict(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """resume.py's verdict (its last line) when it ran to one (exit 0 or 1), else how it ended."""
    if proc.returncode in (0, 1) and proc.stdout.strip():
        verdict: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return verdict
    return {"exit": proc.returncode, "stderr": proc.stderr[-2000:]}


def test_resume_worker_applies_the_determinism_settings(built_project: Path,
                                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    verdict = _verdict(resume_cli(tmp_path_factory, built_project))  # the run's one (tests/helpers/resumecli.py)
    assert verdict.get("passed") is True, verdict
    assert verdict["first_diverging_step"] is None and verdict["comparison"] == "bitwise"
    for knob in ("deterministic_algorithms", "cudnn.deterministic", "fp32_precision", "cuda.matmul.fp32_precision"):
        assert knob in verdict["worker_settings_verified"], knob


def test_resume_without_rng_state_diverges(built_project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The negative control of the worker: restored without the RNG states, the resumed run must diverge."""
    verdict = _verdict(resume_cli(tmp_path_factory, built_project, "rng"))
    assert verdict.get("passed") is False and verdict["first_diverging_step"] is not None, verdict


HOLDER = r"""
import os, sys, time
sys.stdin.readline()
if os.fork() == 0:  # leaves the group, keeps the pipes open: what end_descendants would end, were it called
    os.setsid()
    time.sleep(20)
    os._exit(0)
print("answer", flush=True)
"""


def test_a_worker_whose_pipes_a_holder_keeps_open_gives_no_answer_instead_of_hanging(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """resume.Worker reads the rest of its pipes for at most PIPES_WAIT_S once the process exited and its group ended:
    a holder that escaped both leaves no answer (the call then fails), never a wait on the holder; the control: the
    same process without the holder answers."""
    from kernodeck.inenv import resume as worker_module

    # long enough for the plain control's last read on a loaded machine (1 s was not, under a parallel suite), well
    # short of the holder's 20 s
    monkeypatch.setattr(worker_module, "PIPES_WAIT_S", 5.0)
    script = tmp_path / "serve.py"
    script.write_text(HOLDER)
    held = worker_module.Worker(script)
    held.run({})
    assert held.out == ""
    (tmp_path / "plain.py").write_text(HOLDER.replace("if os.fork() == 0:", "if False:"))
    plain = worker_module.Worker(tmp_path / "plain.py")
    plain.run({})
    assert plain.out.strip() == "answer"
