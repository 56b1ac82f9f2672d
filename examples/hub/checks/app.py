"""The hub example's application: the all-MiniLM-L6-v2 sentence embedding of an identified sample.

Kernodeck's own application, unchanged but for this docstring: here ``app.weights`` is the Hugging Face snapshot the
project pins by commit (pyproject.toml), found in the local cache and checked file by file before ``run(app)`` is
called. After rereading the outputs from disk Kernodeck calls ``criterion(...)``. It imports nothing of Kernodeck.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

_MODELS: dict[tuple[str, str, int], Any] = {}  # loaded once per process: determinism calls run() again


def _model(weights: Path, device: str, max_seq_length: int) -> Any:
    key = (str(weights), device, max_seq_length)
    if key not in _MODELS:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(str(weights), device=device, local_files_only=True)
        model.max_seq_length = max_seq_length
        _MODELS[key] = model
    return _MODELS[key]


def run(app: Any) -> None:
    """Embed each record's ``text``; write ``embeddings`` (float32, one row per id, unit length)."""
    import numpy as np

    texts = []
    for record in app.records:
        if not isinstance(record.get("text"), str):
            app.fail(f"sample record {record['id']!r} has no string field text", "data-loading")
        texts.append(record["text"])
    if app.weights is None:
        app.fail("the MiniLM weights are not declared ([tool.kernodeck.application] weights)", "weights")
    params = app.params
    model = _model(app.weights, app.device, int(params["max-seq-length"]))
    batch = int(params["batch-size"])
    batches = -(-len(texts) // batch)
    seen = [0]

    def batch_done(*_: Any) -> None:  # a forward hook: counts batches without touching what is computed
        seen[0] += 1
        app.progress(seen[0], batches, "batch")

    hook = model[0].register_forward_hook(batch_done) if len(model) else None
    try:
        arr = model.encode(
            texts,
            batch_size=batch,
            convert_to_numpy=True,
            normalize_embeddings=bool(params["normalize"]),
            show_progress_bar=False,
        )
    except Exception as exc:
        app.fail(f"{type(exc).__name__}: {exc}", "operator:encode")
    finally:
        if hook is not None:
            hook.remove()
    app.write("embeddings", np.asarray(arr), [r["id"] for r in app.records])


def neighbours(arr: Any, records: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, float]]:
    """Each paraphrase's nearest neighbour (cosine, itself excluded) and its margin over the runner-up."""
    import numpy as np

    unit = arr.astype(np.float64) / np.linalg.norm(arr.astype(np.float64), axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    ids = [r["id"] for r in records]
    nearest, margin = {}, {}
    for row, record in enumerate(records):
        if not record.get("pair"):
            continue
        order = np.argsort(-sims[row])
        nearest[record["id"]] = ids[int(order[0])]
        margin[record["id"]] = float(sims[row, order[0]] - sims[row, order[1]])
    return nearest, margin


def criterion(
    outputs: dict[str, Any], ids: list[str], records: list[dict[str, Any]], params: dict[str, Any]
) -> dict[str, Any]:
    """Each labelled paraphrase's nearest neighbour is its pair; the margin is the smallest lead over the runner-up."""
    nearest, margin = neighbours(outputs["embeddings"], records)
    pairs = {r["id"]: r.get("pair") for r in records}
    misses = {i: n for i, n in nearest.items() if n != pairs[i]}
    if not nearest:
        return {"passed": False, "summary": "the sample has no labelled paraphrase pairs to judge", "margin": None}
    first = sorted(misses)[0] if misses else ""
    return {
        "passed": not misses,
        "summary": (
            f"{len(misses)} of {len(nearest)} paraphrases miss their pair, e.g. {first!r} -> {misses[first]!r}"
            if misses
            else f"each of {len(nearest)} labelled paraphrases finds its pair as nearest neighbour"
        ),
        "margin": min(margin.values()),
        # The margin is a lead in cosine similarity between nearest neighbours of this output: Kernodeck then
        # refuses a cosine tolerance loose enough to flip one (the flip bound).
        "neighbours_of": "embeddings",
        "pairs_checked": len(nearest),
        "misses": misses,
    }
