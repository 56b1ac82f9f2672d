"""The digits classifier trained with PyTorch Lightning, resumable: Kernodeck's application resume.

``train(app, steps, save_at, resume_from)`` fits a LightningModule for ``steps`` global steps; a callback saves
Lightning's own checkpoint (``trainer.save_checkpoint``) at step ``save_at`` into ``app.checkpoint_dir``; given
``resume_from`` it continues with ``Trainer.fit(ckpt_path=...)``. Lightning restores the weights, the optimizer and
scheduler, and its loops' progress; what it does not hold, this file adds: the torch RNG state (the module's
``on_save_checkpoint`` / ``on_load_checkpoint``) and the loader's position (a DataLoader with ``state_dict`` /
``load_state_dict``, which Lightning saves with its loops: the shuffling generator at the epoch's start, replayed to
the same batch). ``app.resume_drop`` names the piece to leave out (Kernodeck's negative controls).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHECKPOINT = "last.ckpt"


def _parts(app: Any) -> tuple[Any, Any]:
    import lightning as L
    import numpy as np
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    params = app.params
    digits = load_digits()
    keep = np.arange(len(digits.target)) % int(params["test-every"]) != 0  # app.py's split: these train
    x = torch.from_numpy((digits.images[keep] / 16.0).astype(np.float32)[:, None])
    y = torch.from_numpy(digits.target[keep].astype(np.int64))

    class Loader(DataLoader):  # type: ignore[type-arg]
        """Resumable: Lightning saves its state_dict with the loops' and hands it back on a resume."""

        def __init__(self) -> None:
            self.shuffle = torch.Generator().manual_seed(int(params["seed"]))
            super().__init__(TensorDataset(x, y), batch_size=int(params["batch-size"]), shuffle=True,
                             generator=self.shuffle)
            self.at_epoch_start = self.shuffle.get_state()
            self.skip = 0

        def __iter__(self) -> Any:
            self.at_epoch_start = self.shuffle.get_state()  # what this epoch's order is drawn from
            batches = super().__iter__()
            for _ in range(self.skip):  # a resumed epoch: the batches already trained on, replayed
                next(batches)
            self.skip = 0
            return batches

        def state_dict(self) -> dict[str, Any]:
            return {"generator": self.at_epoch_start}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            if app.resume_drop != "loader":
                self.shuffle.set_state(state["generator"])
                self.skip = module.position

    class Digits(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
                nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Dropout(0.2), nn.Linear(16 * 4 * 4, 10),
            )
            self.position = 0  # batches of the current epoch trained on
            self.rng: Any = None

        def training_step(self, batch: Any, index: int) -> Any:
            xb, yb = batch
            loss = F.cross_entropy(self.net(xb), yb)
            app.log(self.global_step + 1, loss.item())
            self.position = index + 1
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.Adam(self.parameters(), lr=float(params["lr"]))
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.7)]

        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["rng"] = torch.get_rng_state()
            checkpoint["position"] = self.position % len(loader)

        def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            self.position = checkpoint["position"]
            if app.resume_drop == "optimizer":  # a fresh optimizer's state, and the schedule from its start
                checkpoint["optimizer_states"] = [torch.optim.Adam(self.parameters()).state_dict()]
                checkpoint["lr_schedulers"] = []
            if app.resume_drop != "rng":
                self.rng = checkpoint["rng"]

        def on_train_start(self) -> None:
            if self.rng is not None:  # after Lightning's own set-up, before the first resumed step
                torch.set_rng_state(self.rng)

    torch.manual_seed(int(params["seed"]))
    module = Digits()
    loader = Loader()
    return module, loader


def train(app: Any, steps: int, save_at: int | None, resume_from: Path | None) -> dict[str, int]:
    """Fit to global step ``steps``; save Lightning's checkpoint at ``save_at``; resume from ``resume_from``."""
    import lightning as L
    import torch

    class SaveAt(L.Callback):  # Lightning's own checkpoint, written from inside the loop at step save_at
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == save_at:
                trainer.save_checkpoint(Path(app.checkpoint_dir) / CHECKPOINT)

    previous = torch.get_num_threads()
    torch.set_num_threads(int(app.params["threads"]))  # the reduction order, whatever the machine's cores
    try:
        module, loader = _parts(app)
        trainer = L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                            default_root_dir=app.checkpoint_dir, deterministic=True, callbacks=[SaveAt()])
        trainer.fit(module, loader, ckpt_path=Path(resume_from) / CHECKPOINT if resume_from else None)
        with torch.no_grad():
            app.write("weights", torch.cat([p.detach().flatten() for p in module.parameters()]).numpy())
        return {"step": trainer.global_step, "epoch": trainer.current_epoch, "loader": module.position % len(loader)}
    finally:
        torch.set_num_threads(previous)
