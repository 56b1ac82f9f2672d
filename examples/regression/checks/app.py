"""The regression application: a small MLP fitted from a fixed seed to scikit-learn's Friedman #1 problem.

Kernodeck runs this file inside the rebuilt env (``run`` is the entry, ``criterion`` the business check). The data is
generated, not downloaded: ``sklearn.datasets.make_friedman1`` from the declared ``data-seed``. The sample
(data/sample.jsonl) names the test split, one record per held-out point (``index`` into the generated set and its
``target``); the points not held out (index not a multiple of params ``test-every``) train.
Outputs: the test split's predictions (float32, compared under allclose) and their band, the quartile of the training
targets each prediction falls in (int64, compared under agreement).
"""

from __future__ import annotations

from typing import Any


def _data(records: list[dict[str, Any]], params: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """(train x, train y, test x, test y) as float32 arrays; the split is declared (params ``test-every``), so the
    model does not depend on which records are asked for (determinism reruns ask for a subset)."""
    import numpy as np
    from sklearn.datasets import make_friedman1

    x, y = make_friedman1(n_samples=int(params["points"]), n_features=int(params["features"]),
                          noise=float(params["noise"]), random_state=int(params["data-seed"]))
    every = int(params["test-every"])
    test = np.array([int(r["index"]) for r in records], dtype=np.int64)
    outside = [r["id"] for r, i in zip(records, test, strict=True) if i % every or not 0 <= i < len(y)]
    if outside:
        raise ValueError(f"sample records outside the held-out split (index % {every} == 0): {outside[:3]}")
    wrong = [r["id"] for r, i in zip(records, test, strict=True) if abs(float(y[i]) - float(r["target"])) > 1e-9]
    if wrong:  # this scikit-learn generates other data than the sample was written for
        raise ValueError(f"sample targets differ from make_friedman1's for {len(wrong)} record(s): {wrong[:3]}")
    train = np.arange(len(y))[np.arange(len(y)) % every != 0]
    return (x[train].astype(np.float32), y[train].astype(np.float32),
            x[test].astype(np.float32), y[test].astype(np.float32))


def run(app: Any) -> None:
    """Fit from the declared seed, then write the test split's predictions and their bands.

    Runs on the declared number of CPU threads (``threads``), restored afterwards: the reduction order, and so the
    last bits of every prediction, then do not depend on how many cores the machine has.
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(int(app.params["threads"]))
    try:
        _fit_and_write(app)
    finally:
        torch.set_num_threads(previous)


def _fit_and_write(app: Any) -> None:
    import numpy as np
    import torch
    from torch import nn

    params = app.params
    x_train, y_train, x_test, _ = _data(app.records, params)
    mean, std = float(y_train.mean()), float(y_train.std())
    torch.manual_seed(int(params["seed"]))
    hidden = int(params["hidden"])
    model = nn.Sequential(nn.Linear(x_train.shape[1], hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                          nn.Linear(hidden, 1)).to(app.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=float(params["lr"]))
    xs = torch.from_numpy(x_train).to(app.device)
    ys = torch.from_numpy((y_train - mean) / std).to(app.device)[:, None]
    steps = int(params["steps"])
    for step in range(steps):  # full batch: no shuffling order to seed
        loss = torch.nn.functional.mse_loss(model(xs), ys)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if (step + 1) % 100 == 0 or step + 1 == steps:
            app.progress(step + 1, steps, f"steps (loss {loss.item():.4f})")
    with torch.no_grad():
        scaled = model(torch.from_numpy(x_test).to(app.device)).cpu().numpy()[:, 0]
    predictions = (scaled * std + mean).astype(np.float32)
    edges = np.quantile(y_train, [0.25, 0.5, 0.75])
    ids = [r["id"] for r in app.records]
    app.write("predictions", predictions, ids)
    app.write("band", np.searchsorted(edges, predictions).astype(np.int64), ids)


def criterion(
    outputs: dict[str, Any], ids: list[str], records: list[dict[str, Any]], params: dict[str, Any]
) -> dict[str, Any]:
    """R² of the predictions against the sample's true targets, at least ``min-r2``."""
    import numpy as np

    truth = np.array([float(r["target"]) for r in records], dtype=np.float64)
    pred = np.asarray(outputs["predictions"], dtype=np.float64)
    r2 = 1.0 - float(((truth - pred) ** 2).sum()) / float(((truth - truth.mean()) ** 2).sum())
    floor = float(params["min-r2"])
    return {"passed": r2 >= floor, "summary": f"test R² {r2:.4f} (needs >= {floor})", "margin": r2 - floor}
