"""The digits application: a small convolutional classifier trained from a fixed seed on scikit-learn's 8x8 digits.

Kernodeck runs this file inside the rebuilt env (``run`` is the entry, ``criterion`` the business check). The data
ships inside scikit-learn (``sklearn.datasets.load_digits``: no download). The sample (data/sample.jsonl) names the
test split, one record per held-out image (``index`` into the data set and its ``label``); the images not held out
(index not a multiple of params ``test-every``) train.
Outputs: the test split's logits (float32, compared under allclose) and predicted labels (int64, agreement).
"""

from __future__ import annotations

from typing import Any


def _data(records: list[dict[str, Any]], every: int) -> tuple[Any, Any, Any, Any]:
    """(train images, train labels, test images, test labels) as float32 / int64 arrays, images scaled to [0, 1].

    The split is declared (params ``test-every``): images whose index is a multiple of it are held out, the rest
    train. So the model does not depend on which records are asked for (determinism reruns ask for a subset).
    """
    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]  # (n, 1, 8, 8)
    target = digits.target.astype(np.int64)
    test = np.array([int(r["index"]) for r in records], dtype=np.int64)
    outside = [r["id"] for r, i in zip(records, test, strict=True) if i % every or not 0 <= i < len(target)]
    if outside:
        raise ValueError(f"sample records outside the held-out split (index % {every} == 0): {outside[:3]}")
    wrong = [r["id"] for r, i in zip(records, test, strict=True) if int(target[i]) != int(r["label"])]
    if wrong:  # the bundled data set is not the one the sample was written for
        raise ValueError(f"sample labels differ from scikit-learn's digits for {len(wrong)} record(s): {wrong[:3]}")
    train = np.arange(len(target))[np.arange(len(target)) % every != 0]
    return images[train], target[train], images[test], target[test]


def _model(torch: Any) -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # (16, 4, 4)
        nn.Flatten(), nn.Linear(16 * 4 * 4, 10),
    )


def run(app: Any) -> None:
    """Train from the declared seed, then write the test split's logits and predicted labels.

    Runs on the declared number of CPU threads (``threads``), restored afterwards: the reduction order, and so the
    last bits of every logit, then do not depend on how many cores the machine has; and a model this small gains
    nothing from more threads.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(int(app.params["threads"]))
    try:
        _train_and_write(app)
    finally:
        torch.set_num_threads(previous)


def _train_and_write(app: Any) -> None:
    import numpy as np
    import torch
    import torch.nn.functional as F

    params = app.params
    x_train, y_train, x_test, _ = _data(app.records, int(params["test-every"]))
    torch.manual_seed(int(params["seed"]))
    order = torch.Generator().manual_seed(int(params["seed"]))
    model = _model(torch).to(app.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(params["lr"]))
    xs = torch.from_numpy(x_train).to(app.device)
    ys = torch.from_numpy(y_train).to(app.device)
    epochs, batch = int(params["epochs"]), int(params["batch-size"])
    for epoch in range(epochs):
        model.train()
        for rows in torch.randperm(len(xs), generator=order).split(batch):
            rows = rows.to(app.device)
            loss = F.cross_entropy(model(xs[rows]), ys[rows])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        app.progress(epoch + 1, epochs, f"epochs (loss {loss.item():.4f})")
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(x_test).to(app.device)).cpu().numpy().astype(np.float32)
    ids = [r["id"] for r in app.records]
    app.write("logits", logits, ids)
    app.write("labels", logits.argmax(axis=1).astype(np.int64), ids)


def criterion(
    outputs: dict[str, Any], ids: list[str], records: list[dict[str, Any]], params: dict[str, Any]
) -> dict[str, Any]:
    """Test accuracy of the predicted labels against the sample's true labels, at least ``min-accuracy``."""
    import numpy as np

    truth = np.array([int(r["label"]) for r in records], dtype=np.int64)
    accuracy = float((outputs["labels"] == truth).mean())
    floor = float(params["min-accuracy"])
    return {"passed": accuracy >= floor, "summary": f"test accuracy {accuracy:.4f} (needs >= {floor})",
            "margin": accuracy - floor}
