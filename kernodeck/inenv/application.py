"""The sample application: embed an identified sample, write it, REREAD it from disk, then judge it.

Steps (each its own result): reference (the committed expected outputs are sound), embed, reread (structure from
the files on disk), compare (declared tolerance), criterion (the business criterion), determinism (repeat runs).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import CheckFailed, Context, Skip, load_sample, progress, sha256_file


def _np() -> Any:
    import numpy as np

    return np


def sample(ctx: Context) -> list[dict[str, Any]]:
    if "sample" not in ctx.state:
        items = load_sample(Path(ctx.config["sample"]), ctx.config.get("sample_sha256"))
        repeat = int(ctx.config.get("sample_repeat", 1))
        if repeat > 1:  # benchmark scaling only: same texts, new ids
            items = [{**it, "id": f"{it['id']}#{r}", "pair": None} for r in range(repeat) for it in items]
        ctx.state["sample"] = items
    return ctx.state["sample"]


def check_array(arr: Any, *, rows: int, dim: int, what: str, layer: str) -> None:
    np = _np()
    if arr.dtype != np.float32:
        raise CheckFailed(f"{what}: dtype {arr.dtype}, expected float32", layer)
    if arr.ndim != 2 or arr.shape != (rows, dim):
        raise CheckFailed(f"{what}: shape {tuple(arr.shape)}, expected ({rows}, {dim})", layer)
    bad = ~np.isfinite(arr)
    if bad.any():
        where = sorted({int(i) for i in np.argwhere(bad)[:, 0]})[:5]
        raise CheckFailed(f"{what}: {int(bad.sum())} non-finite values (NaN/Inf), rows {where}", layer)


def _load_npy(path: Path, what: str, layer: str) -> Any:
    np = _np()
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CheckFailed(f"{what}: cannot read {path.name}: {type(exc).__name__}: {exc}", layer) from exc


def _load_ids(path: Path, what: str, layer: str) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckFailed(f"{what}: cannot read {path.name}: {exc}", layer) from exc
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise CheckFailed(f"{what}: {path.name} is not a list of ids", layer)
    return ids


def check_reference(ctx: Context) -> dict[str, Any]:
    """Refuse an unsound reference BEFORE any comparison: NaN/Inf, wrong shape or dtype, ids not the sample's."""
    ref = Path(ctx.config["reference_dir"])
    if ctx.config.get("mode") == "reference":
        raise Skip("making a new reference: there is no earlier one to check against")
    items = sample(ctx)
    ids = _load_ids(ref / "ids.json", "reference", "reference")
    sample_ids = [i["id"] for i in items]
    if ids != sample_ids:
        first = next(
            (k for k, (a, b) in enumerate(zip(ids, sample_ids, strict=False)) if a != b), min(len(ids), len(sample_ids))
        )
        raise CheckFailed(
            f"reference ids do not match the sample (first difference at row {first}; "
            f"{len(ids)} reference ids, {len(sample_ids)} sample ids)",
            "reference",
        )
    arr = _load_npy(ref / "embeddings.npy", "reference", "reference")
    check_array(
        arr, rows=len(items), dim=int(ctx.config["model"]["dim"]), what="reference embeddings", layer="reference"
    )
    # Sound, and also the very outputs the manifest's identity names (not a file swapped in later).
    expected = ctx.config.get("reference_outputs", {})
    for name, key in (("embeddings.npy", "embeddings_sha256"), ("ids.json", "ids_sha256")):
        if expected.get(key) and sha256_file(ref / name) != expected[key]:
            raise CheckFailed(f"reference {name} differs from the fingerprint in manifest.toml", "reference")
    ctx.state["reference"] = arr
    return {"rows": int(arr.shape[0]), "dim": int(arr.shape[1]), "dtype": str(arr.dtype)}


def _fingerprint(model_dir: Path) -> dict[str, str]:
    out = {}
    for path in sorted(model_dir.rglob("*")):
        if path.is_file() and path.name != ".gitattributes" and "__pycache__" not in path.parts:
            out[path.relative_to(model_dir).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def load_model(ctx: Context) -> Any:
    if "model" in ctx.state:
        return ctx.state["model"]
    cfg = ctx.config["model"]
    try:
        package = importlib.import_module(cfg["package"])
    except ImportError as exc:
        raise CheckFailed(f"ImportError: {exc}", "environment") from exc
    model_dir = Path(package.__file__).resolve().parent / cfg["subdir"]
    found = _fingerprint(model_dir)
    expected = cfg.get("files") or {}
    wrong = sorted(name for name, digest in expected.items() if found.get(name) != digest)
    if wrong:
        raise CheckFailed(f"weights differ from the reference's fingerprint: {', '.join(wrong)}", "weights")
    progress("importing sentence-transformers, loading weights")
    from sentence_transformers import SentenceTransformer

    device = ctx.state.get("device", "cpu")
    try:
        model = SentenceTransformer(str(model_dir), device=device, local_files_only=True)
    except TypeError:  # older sentence-transformers without local_files_only
        model = SentenceTransformer(str(model_dir), device=device)
    model.max_seq_length = int(cfg["max_seq_length"])
    ctx.state["model"] = model
    ctx.state["weights_fingerprint"] = found
    return model


def encode(ctx: Context) -> Any:
    np = _np()
    cfg = ctx.config["model"]
    model = load_model(ctx)
    texts = [i["text"] for i in sample(ctx)]
    batch = int(cfg["batch_size"])
    batches = -(-len(texts) // batch)
    seen = [0]

    def batch_done(*_: Any) -> None:  # a forward hook: counts batches without touching what is computed
        seen[0] += 1
        progress(f"batch {seen[0]}/{batches} ({min(seen[0] * batch, len(texts))}/{len(texts)} items)")

    hook = model[0].register_forward_hook(batch_done) if len(model) else None
    try:
        arr = model.encode(
            texts,
            batch_size=int(cfg["batch_size"]),
            convert_to_numpy=True,
            normalize_embeddings=bool(cfg["normalize"]),
            show_progress_bar=False,
        )
    except Exception as exc:
        raise CheckFailed(f"{type(exc).__name__}: {exc}", "operator:encode") from exc
    finally:
        if hook is not None:
            hook.remove()
    return np.asarray(arr)


def _save_npy(path: Path, arr: Any) -> None:
    np = _np()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npy", dir=path.parent)
    os.close(fd)
    np.save(tmp, arr, allow_pickle=False)
    os.replace(tmp, path)


def embed(ctx: Context) -> dict[str, Any]:
    items = sample(ctx)
    start = time.perf_counter()
    arr = encode(ctx)
    seconds = time.perf_counter() - start
    _save_npy(ctx.outputs / "embeddings.npy", arr)
    (ctx.outputs / "ids.json").write_text(json.dumps([i["id"] for i in items]) + "\n", encoding="utf-8")
    ctx.state["first_run"] = arr
    ctx.state["first_run_seconds"] = seconds
    return {
        "items": len(items),
        "seconds": round(seconds, 4),
        "items_per_s": round(len(items) / seconds, 1),
        "device": ctx.state.get("device", "cpu"),
        "written": ["outputs/embeddings.npy", "outputs/ids.json"],
        "weights_fingerprint": ctx.state.get("weights_fingerprint", {}),
    }


def reread(ctx: Context) -> dict[str, Any]:
    """Structure first, from the files on disk: count, dims, dtype, finite, ids in the input order."""
    items = sample(ctx)
    arr = _load_npy(ctx.outputs / "embeddings.npy", "output", "output")
    ids = _load_ids(ctx.outputs / "ids.json", "output", "output")
    expected_ids = [i["id"] for i in items]
    if len(ids) != len(expected_ids):
        raise CheckFailed(f"output ids: {len(ids)} ids for {len(expected_ids)} inputs", "output")
    if ids != expected_ids:
        first = next(k for k, (a, b) in enumerate(zip(ids, expected_ids, strict=True)) if a != b)
        raise CheckFailed(
            f"output ids are not in input order: row {first} is {ids[first]!r}, expected {expected_ids[first]!r}",
            "output",
        )
    check_array(arr, rows=len(items), dim=int(ctx.config["model"]["dim"]), what="output embeddings", layer="output")
    ctx.state["reread"] = arr
    return {
        "rows": int(arr.shape[0]),
        "dim": int(arr.shape[1]),
        "dtype": str(arr.dtype),
        "finite": True,
        "ids_in_order": True,
    }


def compare(ctx: Context) -> dict[str, Any]:
    np = _np()
    if ctx.config.get("mode") == "reference":
        raise Skip("making a new reference: nothing to compare against")
    ours, ref = ctx.state["reread"], ctx.state["reference"]
    tol = ctx.config["tolerance"]
    cos = np.sum(ours.astype(np.float64) * ref, axis=1) / (
        np.linalg.norm(ours.astype(np.float64), axis=1) * np.linalg.norm(ref.astype(np.float64), axis=1)
    )
    max_abs = float(np.abs(ours.astype(np.float64) - ref).max())
    ids = [i["id"] for i in sample(ctx)]
    worst = int(np.argmin(cos))
    details = {
        "min_cosine": float(cos.min()),
        "max_abs": max_abs,
        "worst_id": ids[worst],
        "cosine_min_allowed": tol["cosine_min"],
        "max_abs_allowed": tol["max_abs"],
        "bitwise_equal": bool(np.array_equal(ours, ref)),
        "per_item_cosine": {i: round(float(c), 9) for i, c in zip(ids, cos, strict=True)},
    }
    if cos.min() < tol["cosine_min"] or max_abs > tol["max_abs"]:
        raise CheckFailed(
            f"embeddings differ from the reference beyond tolerance: min cosine {cos.min():.9f} "
            f"(allowed >= {tol['cosine_min']}) at {ids[worst]!r}, max abs {max_abs:.3g} (allowed <= {tol['max_abs']})",
            "comparison",
            details,
        )
    return details


def neighbours(arr: Any, items: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, float]]:
    """Each paraphrase's nearest neighbour (cosine, itself excluded) and its margin over the runner-up."""
    np = _np()
    unit = arr.astype(np.float64) / np.linalg.norm(arr.astype(np.float64), axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    ids = [i["id"] for i in items]
    nearest, margin = {}, {}
    for row, item in enumerate(items):
        if not item.get("pair"):
            continue
        order = np.argsort(-sims[row])
        nearest[item["id"]] = ids[int(order[0])]
        margin[item["id"]] = float(sims[row, order[0]] - sims[row, order[1]])
    return nearest, margin


def criterion(ctx: Context) -> dict[str, Any]:
    items = sample(ctx)
    nearest, margin = neighbours(ctx.state["reread"], items)
    wrong = {i: n for i, n in nearest.items() if n != next(x["pair"] for x in items if x["id"] == i)}
    details = {
        "criterion": "each labelled paraphrase's nearest neighbour is its pair",
        "pairs_checked": len(nearest),
        "misses": wrong,
        "min_margin": min(margin.values()) if margin else None,
    }
    if not nearest:
        raise CheckFailed("the sample has no labelled paraphrase pairs to judge", "data-loading")
    if wrong:
        first = sorted(wrong)[0]
        raise CheckFailed(
            f"{len(wrong)} of {len(nearest)} paraphrases miss their pair, e.g. {first!r} -> {wrong[first]!r}",
            "comparison",
            details,
        )
    return details


def determinism(ctx: Context) -> dict[str, Any]:
    """Run the sample twice more in this process; on CPU the runs must be bitwise identical. Record the cost."""
    np = _np()
    import torch

    from . import settings

    first = ctx.state["first_run"]
    start = time.perf_counter()
    second = encode(ctx)
    t_det = time.perf_counter() - start
    third = encode(ctx)
    device = str(ctx.state.get("device", "cpu"))
    diff = max(
        float(np.abs(second.astype(np.float64) - first).max()), float(np.abs(third.astype(np.float64) - first).max())
    )
    identical = bool(np.array_equal(first, second) and np.array_equal(first, third))
    # The cost of the settings: the same work with deterministic algorithms off and autotuning on, then restored.
    settings.apply(deterministic=False)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    try:
        start = time.perf_counter()
        free = encode(ctx)
        t_free = time.perf_counter() - start
    finally:
        restored = settings.apply(deterministic=True)
    differ = settings.differences(restored, settings.read_back(torch))  # what the later steps (resume) rely on
    details = {
        "device": device,
        "repeats": 3,
        "bitwise_identical": identical,
        "max_abs_between_runs": diff,
        "seconds_deterministic": round(t_det, 4),
        "seconds_without_settings": round(t_free, 4),
        "cost_ratio": round(t_det / t_free, 3) if t_free > 0 else None,
        "max_abs_without_settings": float(np.abs(free.astype(np.float64) - first).max()),
    }
    if device == "cpu" and not identical:
        raise CheckFailed(
            f"two runs on CPU in one process differ (max abs {diff:.3g}); CPU runs must be bitwise identical",
            "operator:encode",
            details,
        )
    if diff > ctx.config["tolerance"]["max_abs"]:
        raise CheckFailed(
            f"repeat runs on {device} differ by {diff:.3g} > declared {ctx.config['tolerance']['max_abs']}",
            "operator:encode",
            details,
        )
    if differ:
        shown = "; ".join(f"{k}: applied {v['applied']!r}, read back {v['read_back']!r}" for k, v in differ.items())
        raise CheckFailed(
            f"determinism settings did not hold after the cost run: {shown}",
            "environment",
            {**details, "differences": differ},
        )
    return details
