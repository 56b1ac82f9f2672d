"""The small training run the resume check checkpoints and continues, and everything its checkpoint must hold.

A small model with dropout, AdamW, an LR scheduler, a shuffled DataLoader with its own generator, and numpy/python
randomness in the data pipeline. Its state is the whole compute state and progress: weights, optimizer, scheduler,
every RNG (torch, every CUDA/ROCm device, MPS, numpy, python), the loader generator's state at the start of the epoch
and how many batches of that epoch were consumed. RNG states are CPU ByteTensors wherever the model runs: a
checkpoint is loaded onto the CPU and only the model's tensors are moved to the device.

Module level imports only the standard library (numpy and torch on first use).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

PARTS = ("rng", "optimizer", "sampler")  # what a restore may leave out (resume.py --drop: negative controls)
SEED = 2024


class Trainer:
    """The run, one ``train_step`` at a time; ``state()`` is its checkpoint, ``restore`` continues from one."""

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
