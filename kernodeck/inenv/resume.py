"""Training resume check: N steps uninterrupted == K steps, checkpoint, restore in a NEW process, continue to N.

A small model with dropout, AdamW, an LR scheduler, a shuffled DataLoader with its own generator, and numpy/python
randomness in the data pipeline. The checkpoint holds the whole compute state and progress: weights, optimizer,
scheduler, every RNG (torch, every CUDA/ROCm device, MPS, numpy, python), the loader generator's state at the start of
the epoch and how many batches of that epoch were consumed. ``--drop`` restores without a part of it (negative
controls). RNG states are CPU ByteTensors wherever the model runs: the checkpoint is loaded onto the CPU and only the
model's tensors are moved to the device. The worker process applies the same determinism settings as the runner.

Run as a script by the runner's interpreter; module level imports only the standard library.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

PARTS = ("rng", "optimizer", "sampler")
SEED = 2024


class Trainer:
    def __init__(self, device: str, seed: int = SEED) -> None:
        import numpy as np
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, Dataset

        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        data_rng = np.random.RandomState(0)
        features = data_rng.normal(size=(96, 16)).astype(np.float32)
        labels = (features[:, :4].argmax(axis=1)).astype(np.int64)

        class Noisy(Dataset):  # type: ignore[type-arg]
            """numpy and python randomness in the data pipeline, as augmentation does."""

            def __len__(self) -> int:
                return len(features)

            def __getitem__(self, index: int) -> tuple[Any, Any]:
                noise = np.random.normal(scale=0.05, size=16).astype(np.float32)
                scale = np.float32(1.0 + 0.1 * (random.random() - 0.5))
                return torch.from_numpy(features[index] * scale + noise), torch.tensor(labels[index])

        self.torch = torch
        self.device = device
        self.model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4)).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=3e-2, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=4, gamma=0.6)
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        self.loader = DataLoader(Noisy(), batch_size=16, shuffle=True, generator=self.generator, num_workers=0)
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.epoch_generator_state: Any = None
        self._batches: Any = None

    def _start_epoch(self) -> None:
        self.epoch_generator_state = self.generator.get_state().clone()
        self._batches = iter(self.loader)
        self.batch_in_epoch = 0

    def train_step(self) -> tuple[float, float]:
        """One step; returns (loss before the update, checksum of the weights after it)."""
        import torch.nn.functional as F

        if self._batches is None:
            self._start_epoch()
        try:
            x, y = next(self._batches)
        except StopIteration:
            self.epoch += 1
            self._start_epoch()
            x, y = next(self._batches)
        self.batch_in_epoch += 1
        self.model.train()
        loss = F.cross_entropy(self.model(x.to(self.device)), y.to(self.device))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.step += 1
        with self.torch.no_grad():
            checksum = float(sum(p.double().sum() for p in self.model.parameters()))
        return float(loss.item()), checksum

    def state(self) -> dict[str, Any]:
        torch = self.torch
        return {
            "step": self.step,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_state(torch),
            "sampler": {
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "generator_state_at_epoch_start": self.epoch_generator_state,
            },
        }

    def restore(self, ckpt: dict[str, Any], drop: tuple[str, ...] = ()) -> None:
        torch = self.torch
        self.model.load_state_dict({k: v.to(self.device) for k, v in ckpt["model"].items()})
        self.step = ckpt["step"]
        if "optimizer" not in drop:
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.scheduler.load_state_dict(ckpt["scheduler"])
        if "sampler" not in drop:
            sampler = ckpt["sampler"]
            self.epoch = sampler["epoch"]
            self.generator.set_state(sampler["generator_state_at_epoch_start"])
            self._start_epoch()
            for _ in range(sampler["batch_in_epoch"]):  # replay the consumed batches of this epoch
                next(self._batches)
            self.batch_in_epoch = sampler["batch_in_epoch"]
        if "rng" not in drop:  # after the replay, which consumed numpy/python randomness
            restore_rng(torch, ckpt["rng"])


def _mps_available(torch: Any) -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def rng_state(torch: Any) -> dict[str, Any]:
    """Every generator's state, each a CPU ByteTensor (as torch returns them) or a plain Python/numpy value."""
    import numpy as np

    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,  # every device (ROCm too)
        "mps": torch.mps.get_rng_state() if _mps_available(torch) else None,
    }


def restore_rng(torch: Any, rng: dict[str, Any]) -> None:
    """Set every generator back. torch.set_rng_state and friends take CPU ByteTensors only."""
    import numpy as np

    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if rng.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    if rng.get("mps") is not None and _mps_available(torch):
        torch.mps.set_rng_state(rng["mps"])


def load_checkpoint(path: Path, device: str) -> dict[str, Any]:
    """Load onto the CPU (RNG and generator states must stay CPU ByteTensors), then move the model to ``device``.

    The optimizer's state stays on the CPU here: Optimizer.load_state_dict casts it to each parameter's device
    (keeping AdamW's ``step`` counters where the optimizer expects them).
    """
    import torch

    ckpt: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False)  # our own file, just written
    ckpt["model"] = {k: v.to(device) for k, v in ckpt["model"].items()}
    return ckpt


def apply_settings() -> dict[str, Any]:
    """The runner's determinism settings, applied in this process too; fail when they do not hold.

    Loaded by explicit path (this file runs as a script with -I): no project folder is put on sys.path.
    """
    here = Path(__file__).resolve().parent
    name = "_kernodeck_checks"  # a private name: never an installed package's
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, here / "__init__.py", submodule_search_locations=[str(here)]
        )
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules[name] = package
        spec.loader.exec_module(package)
    settings = importlib.import_module(f"{name}.settings")
    import torch

    applied = settings.apply(deterministic=True)
    differ = settings.differences(applied, settings.read_back(torch))
    if differ:
        raise SystemExit(f"determinism settings did not hold in the resume worker: {sorted(differ)}")
    return applied


def describe(ckpt: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": ckpt["step"],
        "model_tensors": len(ckpt["model"]),
        "optimizer_state_entries": len(ckpt["optimizer"]["state"]),
        "scheduler": ckpt["scheduler"],
        "rng": sorted(k for k, v in ckpt["rng"].items() if v is not None),
        "sampler": {
            "epoch": ckpt["sampler"]["epoch"],
            "batch_in_epoch": ckpt["sampler"]["batch_in_epoch"],
            "generator_state_bytes": int(ckpt["sampler"]["generator_state_at_epoch_start"].numel()),
        },
    }


def _continue(checkpoint: Path, steps: int, device: str, drop: tuple[str, ...], out: Path,
              applied: dict[str, Any]) -> None:
    """The NEW process: restore from the checkpoint and continue to ``steps``."""
    import torch

    trainer = Trainer(device)
    trainer.restore(load_checkpoint(checkpoint, device), drop)
    losses = [trainer.train_step() for _ in range(steps - trainer.step)]
    torch.save(trainer.model.state_dict(), out.with_suffix(".pt"))
    out.write_text(json.dumps({"trace": losses, "settings_applied": sorted(applied)}), encoding="utf-8")


class Worker:
    """The check's NEW process, started before there is a checkpoint: it imports torch and applies the determinism
    settings (seconds) while this process works (the runner starts it when the settings step ends), then waits
    for its one order on stdin: the checkpoint's path, how far to train, what to drop. Nothing else passes to it:
    every trainer state it uses comes from the checkpoint, and its Trainer is made after the order arrives.
    """

    def __init__(self) -> None:
        self.cmd = [sys.executable, "-I", str(Path(__file__).resolve()), "--serve"]
        self.proc = subprocess.Popen(
            self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def run(self, order: dict[str, Any]) -> tuple[int, str]:
        """Give the order and wait: (exit status, stderr). A worker that already died reports its own error."""
        _, err = self.proc.communicate(json.dumps(order) + "\n")
        return self.proc.returncode, err

    def close(self) -> None:
        """No order will come (an earlier step failed): end of input, and the worker exits without training."""
        if self.proc.poll() is None:
            try:
                self.proc.communicate("", timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()


def _serve() -> int:
    """(worker) Import torch and apply the settings now; then restore and continue as the order on stdin says."""
    import torch  # noqa: F401  (the cost this process is started early for)

    applied = apply_settings()
    line = sys.stdin.readline()
    if not line.strip():
        return 0  # closed without an order: the runner stopped before the resume step
    order = json.loads(line)
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
            same = (abs(x - y) <= tolerance) if tolerance else (x == y)
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
    print(json.dumps(verdict))
    return 0 if verdict["passed"] else 1


if __name__ == "__main__":
    status = main()
    # the result and the weights are written: tearing down torch and the libraries loaded
    # (a second or more, which the caller waits for) checks nothing, so the process ends here.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
