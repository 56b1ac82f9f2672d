"""The digits classifier's own training, resumable: Kernodeck's application resume (its resume-application step).

``train(app, steps, save_at, resume_from)`` trains the digits CNN (with dropout, Adam and a step LR schedule, the
batches shuffled by the loader's own generator) for ``steps`` global steps; at step ``save_at`` it saves a checkpoint
into ``app.checkpoint_dir``; given ``resume_from`` (a folder it saved into) it restores everything a resumed run
needs and continues. The plain PyTorch pattern: a checkpoint holds the model, the optimizer and scheduler, every
random generator the training draws from, and the loader's position (its epoch, the batches consumed in it, and its
shuffling generator's state at the start of that epoch, replayed to the same batch). ``app.resume_drop`` names the
piece to leave out of the restore (Kernodeck's negative controls): "optimizer", "rng" or "loader".

It returns the progress counters (step, epoch, loader position) and writes the end state (the final weights).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHECKPOINT = "checkpoint.pt"


def _train_split(every: int) -> tuple[Any, Any]:
    """The images not held out (index not a multiple of ``test-every``), as app.py's split: float32 in [0, 1]."""
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    target = digits.target.astype(np.int64)
    train = np.arange(len(target)) % every != 0
    return images[train], target[train]


def _model() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.2), nn.Linear(16 * 4 * 4, 10),
    )


def train(app: Any, steps: int, save_at: int | None, resume_from: Path | None) -> dict[str, int]:
    """Train to global step ``steps``; save at ``save_at``; resume from ``resume_from``. Returns the progress."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(int(app.params["threads"]))  # the reduction order, whatever the machine's cores
    try:
        return _train(app, steps, save_at, resume_from)
    finally:
        torch.set_num_threads(previous)


def _train(app: Any, steps: int, save_at: int | None, resume_from: Path | None) -> dict[str, int]:
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    params = app.params
    seed = int(params["seed"])
    x, y = _train_split(int(params["test-every"]))
    torch.manual_seed(seed)
    model = _model().to(app.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(params["lr"]))
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.7)
    shuffle = torch.Generator().manual_seed(seed)  # the loader's own generator: its state is the loader's
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=int(params["batch-size"]), shuffle=True, generator=shuffle)
    step, epoch, position = 0, 0, 0
    if resume_from is not None:
        ckpt = torch.load(Path(resume_from) / CHECKPOINT, map_location="cpu", weights_only=False)
        model.load_state_dict(ckpt["model"])
        step = ckpt["step"]
        if app.resume_drop != "optimizer":
            optimizer.load_state_dict(ckpt["optimizer"])
            scheduler.load_state_dict(ckpt["scheduler"])
        if app.resume_drop != "loader":
            epoch, position = ckpt["epoch"], ckpt["loader"]
            shuffle.set_state(ckpt["loader_generator"])
        if app.resume_drop != "rng":
            torch.set_rng_state(ckpt["rng"])
    while step < steps:
        at_epoch_start = shuffle.get_state()  # what the loader's iterator will draw this epoch's order from
        batches = iter(loader)
        for _ in range(position):  # a resumed epoch: the batches already consumed, replayed
            next(batches)
        for xb, yb in batches:
            model.train()
            loss = F.cross_entropy(model(xb.to(app.device)), yb.to(app.device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step, position = step + 1, position + 1
            app.log(step, loss.item())
            if position == len(loader):
                epoch, position = epoch + 1, 0
            if step == save_at:
                torch.save({
                    "step": step, "epoch": epoch, "loader": position,
                    # mid-epoch: the order this epoch was drawn from; at an epoch's end: the next one's
                    "loader_generator": at_epoch_start if position else shuffle.get_state(),
                    "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(),
                }, Path(app.checkpoint_dir) / CHECKPOINT)
            if step == steps or position == 0:
                break
    with torch.no_grad():
        app.write("weights", torch.cat([p.detach().cpu().flatten() for p in model.parameters()]).numpy())
    return {"step": step, "epoch": epoch, "loader": position}
