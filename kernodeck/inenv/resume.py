"""Training resume check: N steps uninterrupted == K steps, checkpoint, restore in a NEW process, continue to N.

The training run and its checkpoint are trainer.py's (the whole compute state and progress: weights, optimizer,
scheduler, every RNG, the loader's place in its epoch). ``--drop`` restores without a part of it (negative
controls). The worker process applies the same determinism settings as the runner.

Run as a script by the runner's interpreter (the worker, or the whole check by hand with ``--folder``); module level
imports only the standard library and its siblings, loaded as the package ``kernodeck_inenv`` by _package.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import runpy
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
runpy.run_path(str(HERE / "_package.py"))  # HERE as the package kernodeck_inenv (the one loader)
from kernodeck_inenv import leftover  # noqa: E402
from kernodeck_inenv._common import end, same_float  # noqa: E402
from kernodeck_inenv.trainer import PARTS, Trainer, describe, load_checkpoint  # noqa: E402


def apply_settings() -> dict[str, Any]:
    """The runner's determinism settings, applied in this process too; fail when they do not hold."""
    import torch
    from kernodeck_inenv import settings

    applied = settings.apply(deterministic=True)
    differ = settings.differences(applied, settings.read_back(torch))
    if differ:
        raise SystemExit(f"determinism settings did not hold in the resume worker: {sorted(differ)}")
    return applied


def _continue(checkpoint: Path, steps: int, device: str, drop: tuple[str, ...], out: Path,
              applied: dict[str, Any]) -> None:
    """The NEW process: restore from the checkpoint and continue to ``steps``."""
    import torch

    trainer = Trainer(device)
    trainer.restore(load_checkpoint(checkpoint, device), drop)
    losses = [trainer.train_step() for _ in range(steps - trainer.step)]
    torch.save(trainer.model.state_dict(), out.with_suffix(".pt"))
    out.write_text(json.dumps({"trace": losses, "settings_applied": sorted(applied)}), encoding="utf-8")


PIPES_WAIT_S = 60.0  # after the worker exited and its group ended: the rest of its pipes read


class Worker:
    """The check's NEW process, started before there is a checkpoint: it imports torch and applies the determinism
    settings (seconds) while this process works (the runner starts it as the application step begins), then waits
    for its one order on stdin: the checkpoint's path, how far to train, what to drop. Nothing else passes to it:
    every trainer state it uses comes from the checkpoint, and its Trainer is made after the order arrives.
    """

    def __init__(self, script: Path | None = None) -> None:
        # ``script``: another in-env script served the same way (resume_app.py, the application's own resume): every
        # new process of a resume check starts here, started as the runner was (-s -P, no PYTHON* variable but the
        # hash seed): the seed holds here too
        # the environment and interpreter from before the project's code ran: what it set (LD_PRELOAD,
        # sys.executable) stays its own
        environ, python = leftover.kernodecks_start()
        # -B: it writes no bytecode (the runner, which imported torch before it started, wrote what it reads), so
        # ending it at once (close) never leaves a half-written file in the env
        self.cmd = [python, "-s", "-P", "-u", "-B", str(script or Path(__file__).resolve()), "--serve"]
        self.out = ""
        env = {k: v for k, v in environ.items() if not k.startswith("PYTHON") or k == "PYTHONHASHSEED"}
        # its own process group, ended whole once it has answered: nothing it forked outlives its call (red-team pass
        # 31, FP1: a child the uninterrupted call left running filled a file the resumed run made); the supervisor
        # still finds it by the run's mark in its environment (supervise.py)
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            start_new_session=True,
        )

    def _end_group(self) -> None:
        if hasattr(os, "killpg"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def run(self, order: dict[str, Any]) -> tuple[int, str]:
        """Give the order and wait: (exit status, stderr). A worker that already died reports its own error."""
        said: dict[str, str] = {}

        def talk() -> None:  # the order written, what it says read to the end, beside the wait below
            seen = sys.modules.get("kernodeck_inenv.seen")
            if seen is not None:
                seen.own_thread()  # Kernodeck's: never the application's thread left running
            said["out"], said["err"] = self.proc.communicate(json.dumps(order) + "\n")

        talking = threading.Thread(target=talk, name="kernodeck-worker-pipes", daemon=True)
        talking.start()
        self.proc.wait()
        self._end_group()  # as it exits: what it forked may hold its pipes, and would outlive its call
        talking.join(PIPES_WAIT_S)  # a holder that escaped both (none should): no answer, never a hang
        self.out = said.get("out", "")  # what it answered (resume_app's result)
        return self.proc.returncode, said.get("err", "")

    def close(self) -> None:
        """No order will come (an earlier step failed): the worker is ended at once, untrained, its torch import cut
        short (a failed run no longer waits for it, nor pays for the rest of it: about 1.5 CPU-s)."""
        self._end_group()
        self.proc.communicate()


def _serve() -> int:
    """(worker) Import torch and apply the settings now; then restore and continue as the order on stdin says."""
    import torch  # noqa: F401  (the cost this process is started early for)

    applied = apply_settings()
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # closed without an order: the runner stopped before the resume step
    order = json.loads(line)
    # the runner's fingerprints of Kernodeck's in-env files: this process's too (_package.py)
    sys.modules["kernodeck_inenv"].__loader__.check(Path(__file__).resolve(), order.get("inenv_sha256"))
    _continue(Path(order["checkpoint"]), int(order["steps"]), str(order["device"]), tuple(order["drop"]),
              Path(order["result"]), applied)
    return 0


def check(
    device: str, steps: int, at: int, folder: Path, drop: tuple[str, ...] = (), tolerance: float = 0.0,
    worker: Worker | None = None,
) -> dict[str, Any]:
    """Run the whole comparison; return a verdict with the first diverging step (1-based) or None.

    ``worker``: the new process, if the caller started it earlier; otherwise it is started here, first, so that its
    start overlaps the uninterrupted run. Either way it is the same kind of process and order.
    """
    worker = worker or Worker()
    try:
        import torch

        folder.mkdir(parents=True, exist_ok=True)
        straight = Trainer(device)
        reference = [straight.train_step() for _ in range(steps)]
        final_ref = {k: v.detach().cpu() for k, v in straight.model.state_dict().items()}
        first = Trainer(device)
        head = [first.train_step() for _ in range(at)]
        ckpt_path = folder / "checkpoint.pt"
        state = first.state()
        torch.save(state, ckpt_path)
        out = folder / ("continued" + ("-without-" + "-".join(drop) if drop else "") + ".json")
        order = {"checkpoint": str(ckpt_path), "steps": steps, "device": device, "result": str(out), "drop": list(drop)}
        expected = getattr(getattr(sys.modules.get("kernodeck_inenv"), "__loader__", None), "expected", None)
        if expected:
            order["inenv_sha256"] = expected
    except BaseException:
        worker.close()
        raise
    code, err = worker.run(order)
    if code != 0:
        lines = [x for x in err.splitlines() if x.strip()]
        return {"passed": False, "error": lines[-1] if lines else f"exit {code}",
                "command": [*worker.cmd, "<", json.dumps(order)]}
    worker = json.loads(out.read_text(encoding="utf-8"))
    tail = [tuple(pair) for pair in worker["trace"]]
    resumed = head + tail
    final = torch.load(out.with_suffix(".pt"), map_location="cpu", weights_only=True)
    diverged = first_divergence(reference, resumed, tolerance)
    weight_diffs = [float((final[k].double() - final_ref[k].double()).abs().max()) for k in final_ref]
    weights_ok = weights_within(weight_diffs, tolerance) and (
        bool(tolerance) or all(torch.equal(final[k], final_ref[k]) for k in final_ref))
    weight_diff = worst(weight_diffs)
    bad = non_finite_steps(reference, resumed, weight_diffs)
    return {
        "passed": diverged is None and weights_ok and not bad,
        "non_finite": bad,
        "steps": steps,
        "checkpoint_at": at,
        "device": device,
        "dropped": list(drop),
        "first_diverging_step": diverged,
        "final_weights_max_abs": weight_diff,
        "comparison": "bitwise" if not tolerance else f"abs <= {tolerance}",
        "losses_uninterrupted": [a[0] for a in reference],
        "losses_resumed": [b[0] for b in resumed],
        "checkpoint": describe(state),
        "new_process": True,
        "worker_settings_verified": worker["settings_applied"],
    }


def first_divergence(
    reference: list[tuple[float, float]], resumed: list[tuple[float, float]], tolerance: float
) -> int | None:
    """The first step (1-based) whose loss or weight checksum differs; a NaN or Inf on either side diverges.

    A step diverges when its loss or the weights after its update differ (a lost optimizer state shows in the update
    of the first resumed step, before any loss does). Written ``not (|x-y| <= tol)``: NaN never compares within.
    """
    for index, (a, b) in enumerate(zip(reference, resumed, strict=True)):
        for x, y in zip(a, b, strict=True):
            same = (abs(x - y) <= tolerance) if tolerance else same_float(x, y)
            if not (math.isfinite(x) and math.isfinite(y) and same):
                return index + 1
    return None


def worst(values: list[float]) -> float:
    """The largest value, NaN if any is NaN (Python's max() depends on the order where a NaN is)."""
    return float("nan") if any(math.isnan(v) for v in values) else max(values, default=0.0)


def weights_within(diffs: list[float], tolerance: float) -> bool:
    """Every final weight difference is finite and within ``tolerance`` (0: exactly equal)."""
    return all(math.isfinite(d) and d <= tolerance for d in diffs)


def non_finite_steps(
    reference: list[tuple[float, float]], resumed: list[tuple[float, float]], weight_diffs: list[float]
) -> list[str]:
    """Where a NaN or Inf appeared: which run and step (loss or weight checksum), or the final weights."""
    found = [
        f"{name} step {index + 1}"
        for name, trace in (("uninterrupted", reference), ("resumed", resumed))
        for index, pair in enumerate(trace)
        if not all(math.isfinite(v) for v in pair)
    ]
    if not all(math.isfinite(d) for d in weight_diffs):
        found.append("the final weights")
    return found[:10]


def run(ctx: Any) -> dict[str, Any]:
    from ._common import CheckFailed, progress

    cfg = ctx.config.get("resume", {})
    device = str(ctx.state.get("device", "cpu"))
    tolerance = 0.0 if device == "cpu" else float(cfg.get("gpu_tolerance", 1e-5))
    progress(f"training {cfg.get('steps', 12)} steps, then resuming from step {cfg.get('checkpoint_at', 5)} "
             "in a new process")
    verdict = check(
        device, int(cfg.get("steps", 12)), int(cfg.get("checkpoint_at", 5)), ctx.out / "resume", (), tolerance,
        worker=ctx.state.pop("resume_worker", None),
    )
    if "error" in verdict:
        raise CheckFailed(f"resume worker failed: {verdict['error']}", "operator:resume", verdict)
    if verdict["non_finite"]:
        raise CheckFailed(f"resume: non-finite values (NaN/Inf) in {verdict['non_finite']}", "comparison", verdict)
    if not verdict["passed"]:
        where = verdict["first_diverging_step"]
        raise CheckFailed(
            f"resumed training diverges from the uninterrupted run at step {where} "
            f"(final weights max abs {verdict['final_weights_max_abs']:.3g})",
            "comparison",
            verdict,
        )
    return verdict


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--continue", dest="cont", type=Path, help="(worker) checkpoint to restore from")
    parser.add_argument("--serve", action="store_true", help="(worker) start now, read the order from stdin")
    parser.add_argument("--result", type=Path)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--at", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--drop", action="append", choices=PARTS, default=[])
    parser.add_argument("--folder", type=Path, help="run the whole check here and print its verdict as JSON")
    args = parser.parse_args(argv)
    if args.serve:
        return _serve()
    if args.cont:  # by hand: the worker's work with its order as arguments
        _continue(args.cont, args.steps, args.device, tuple(args.drop), args.result, apply_settings())
        return 0
    if args.folder is None:
        parser.error("give --folder (whole check) or --continue (worker)")
    apply_settings()
    verdict = check(args.device, args.steps, args.at, args.folder, tuple(args.drop))
    verdict.pop("losses_uninterrupted", None)
    verdict.pop("losses_resumed", None)
    print(json.dumps(verdict), flush=True)  # the process ends by os._exit, which flushes nothing
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    # registered for its stacks by _package.py at import (kernodeck/supervise.py asks it too)
    # the result and the weights are written: tearing down torch and the libraries loaded
    # (a second or more, which the caller waits for) checks nothing, so the process ends here.
    end(main())
