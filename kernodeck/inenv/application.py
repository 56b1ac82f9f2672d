"""The declared application, run and judged generically: entry, outputs written, REREAD from disk, then compared.

Steps (each its own result): reference (the committed expected outputs are sound), application (the entry on the
identified sample; outputs written), reread (structure from the files on disk), compare (each output under its
declared tolerance kind), criterion (the application's own check on the reread outputs), determinism (the entry
rerun in this process). Nothing here knows what the application computes.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import tolerance
from ._common import CheckFailed, Context, Skip, load_file, load_sample, progress, sha256_file, user_traceback

# Determinism reruns the entry twice more (and once without the settings); above this many records it reruns a
# fixed subset (the first records, in sample order), stated in the step's details.
DETERMINISM_RECORDS = 64


def _np() -> Any:
    import numpy as np

    return np


def _app_cfg(ctx: Context) -> dict[str, Any]:
    return dict(ctx.config["application"])


def sample(ctx: Context) -> list[dict[str, Any]]:
    if "sample" not in ctx.state:
        cfg = _app_cfg(ctx)
        items = load_sample(Path(cfg["sample"]), cfg.get("sample_sha256"))
        repeat = int(ctx.config.get("sample_repeat", 1))
        if repeat > 1:  # benchmark scaling only: the same records again under new ids
            items = [{**it, "id": f"{it['id']}#{r}"} for r in range(repeat) for it in items]
        ctx.state["sample"] = items
    return ctx.state["sample"]


def _ids(items: list[dict[str, Any]]) -> list[str]:
    return [str(i["id"]) for i in items]


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


def _first_difference(a: list[str], b: list[str]) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def check_structure(arr: Any, *, dtype: str, rows: int, shape: tuple[int, ...] | None, what: str, layer: str) -> None:
    """dtype, shape (rows first) and finiteness, each named when wrong; non-finite values counted, never hidden."""
    np = _np()
    if str(arr.dtype) != dtype:
        raise CheckFailed(f"{what}: dtype {arr.dtype}, expected {dtype}", layer)
    if arr.ndim < 1 or arr.shape[0] != rows or (shape is not None and tuple(arr.shape) != shape):
        expected = shape if shape is not None else f"({rows}, ...)"
        raise CheckFailed(f"{what}: shape {tuple(arr.shape)}, expected {expected}", layer)
    if np.issubdtype(arr.dtype, np.inexact):
        bad = ~np.isfinite(arr)
        if bad.any():
            where = sorted({int(i) for i in np.argwhere(bad)[:, 0]})[:5]
            raise CheckFailed(f"{what}: {int(bad.sum())} non-finite values (NaN/Inf), rows {where}", layer)


# --- the reference -------------------------------------------------------------------------------------------------


def check_reference(ctx: Context) -> dict[str, Any]:
    """Refuse an unsound reference BEFORE any comparison: NaN/Inf, wrong shape or dtype, ids not the sample's."""
    if ctx.config.get("mode") == "reference" or not ctx.config.get("reference"):
        raise Skip("making a new reference: there is no earlier one to check against")
    ref = ctx.config["reference"]
    folder = Path(ref["dir"])
    code = code_check(ctx)
    sample_ids = _ids(sample(ctx))
    declared = _app_cfg(ctx)["outputs"]
    missing = sorted(set(declared) - set(ref["outputs"]))
    if missing:
        raise CheckFailed(f"the reference has no output {', '.join(missing)} (declared in pyproject)", "reference")
    arrays, details = {}, {}
    for name, decl in declared.items():
        rec = ref["outputs"][name]
        ids = _load_ids(folder / rec["ids"], f"reference {name}", "reference")
        if ids != sample_ids:
            raise CheckFailed(
                f"reference {name} ids do not match the sample (first difference at row "
                f"{_first_difference(ids, sample_ids)}; {len(ids)} reference ids, {len(sample_ids)} sample ids)",
                "reference",
            )
        arr = _load_npy(folder / rec["file"], f"reference {name}", "reference")
        check_structure(
            arr,
            dtype=decl["dtype"],
            rows=len(sample_ids),
            shape=tuple(rec["shape"]),
            what=f"reference {name}",
            layer="reference",
        )
        # Sound, and also the very files the manifest's identity names (not a file swapped in later).
        for key, file in (("sha256", rec["file"]), ("ids_sha256", rec["ids"])):
            if sha256_file(folder / file) != rec[key]:
                raise CheckFailed(f"reference {file} differs from the fingerprint in manifest.toml", "reference")
        arrays[name] = arr
        details[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype)}
    ctx.state["reference"] = arrays
    return {"outputs": details, "rows": len(sample_ids), "code": code,
            "sample_sha256": _app_cfg(ctx).get("sample_sha256")}


CODE_TIP = "nox -s reference -- --new   (if the change is intended: a new reference for this code)"


def code_check(ctx: Context) -> dict[str, Any]:
    """The declared code files (entry, criterion, ``code``) are the reference's, by their sha256 fingerprints.

    A changed or missing file fails here, named, unless the run was told ``--allow-code-change``: then the files are
    recorded as changed and the orchestrator's verdict can never be ``passed``.
    """
    recorded: dict[str, str] = dict(ctx.config["reference"].get("code") or {})
    root = Path(ctx.config["project_root"])
    changed = sorted(f for f, digest in recorded.items() if not (root / f).is_file() or sha256_file(root / f) != digest)
    result = {"files": sorted(recorded), "changed": changed, "allowed": bool(ctx.config.get("allow_code_change"))}
    if changed and not result["allowed"]:
        raise CheckFailed(
            f"code differs from the reference's fingerprint: {', '.join(changed)}",
            "reference",
            {"code": result, "tip": CODE_TIP},
        )
    return result


# --- the entry -----------------------------------------------------------------------------------------------------


@dataclass
class App:
    """What the entry is handed: ``run(app)``. It imports nothing of Kernodeck; this object is the whole contract."""

    records: list[dict[str, Any]]
    params: dict[str, Any]
    device: str
    root: Path
    weights: Path | None
    declared: dict[str, Any]
    folder: Path | None  # where outputs are written; None: kept in memory only (determinism reruns)
    written: dict[str, tuple[Any, list[str]]] = field(default_factory=dict)

    def progress(self, done: int, total: int, what: str = "") -> None:
        """A progress line, ``[kernodeck] application: WHAT DONE/TOTAL`` on stderr (the orchestrator forwards it)."""
        progress(f"{what} {done}/{total}".strip())

    def fail(self, message: str, layer: str = "application") -> None:
        """Stop with a verdict attributed to a layer (e.g. "data-loading", "weights", "operator:forward")."""
        raise CheckFailed(message, layer)

    def write(self, name: str, array: Any, ids: list[str]) -> None:
        """Write one declared output: an array with one row per id. Each declared output exactly once."""
        np = _np()
        if name not in self.declared:
            raise CheckFailed(f"the entry wrote {name!r}, which pyproject does not declare", "application")
        if name in self.written:
            raise CheckFailed(f"the entry wrote {name!r} twice", "application")
        arr, ids = np.asarray(array), [str(i) for i in ids]
        self.written[name] = (arr, ids)
        if self.folder is None:
            return
        _save_npy(self.folder / f"{name}.npy", arr)
        _write_text(self.folder / f"{name}.ids.json", json.dumps(ids) + "\n")


def _save_npy(path: Path, arr: Any) -> None:
    np = _np()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npy", dir=path.parent)
    os.close(fd)
    np.save(tmp, arr, allow_pickle=False)
    os.replace(tmp, path)


def _write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


def _function(ctx: Context, target: dict[str, str], what: str) -> Any:
    """The application's function, from its file loaded by path (each file once per process)."""
    path = Path(ctx.config["project_root"]) / target["file"]
    name = "kernodeck_app_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if not path.is_file():
        raise CheckFailed(f"the {what} file {target['file']} does not exist", "application")
    try:
        module = load_file(path, name)
    except CheckFailed:
        raise
    except ImportError as exc:
        raise CheckFailed(f"{target['file']}: ImportError: {exc}", "environment") from exc
    except Exception as exc:
        raise CheckFailed(f"{target['file']} failed to load: {type(exc).__name__}: {exc}", "application") from exc
    func = getattr(module, target["function"], None)
    if not callable(func):
        raise CheckFailed(f"{target['file']} has no function {target['function']}", "application")
    return func


def _fingerprint(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != ".gitattributes" and "__pycache__" not in path.parts:
            out[path.relative_to(folder).as_posix()] = sha256_file(path)
    return out


def weights(ctx: Context) -> Path | None:
    """The declared weights folder, fingerprinted file by file against the reference (found without importing)."""
    cfg = _app_cfg(ctx).get("weights")
    if not cfg:
        return None
    if "weights" in ctx.state:
        return Path(ctx.state["weights"])
    spec = importlib.util.find_spec(cfg["module"])
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        raise CheckFailed(f"the weights package {cfg['module']} is not installed in this env", "environment")
    base = Path(next(iter(spec.submodule_search_locations or [])) if spec.submodule_search_locations else spec.origin)
    folder = (base if base.is_dir() else base.parent) / cfg.get("subdir", ".")
    if not folder.is_dir():
        raise CheckFailed(f"the weights folder {cfg['module']}/{cfg.get('subdir', '.')} does not exist", "weights")
    progress(f"fingerprinting the weights in {cfg['module']}/{cfg.get('subdir', '.')} (loading weights follows)")
    found = _fingerprint(folder)
    expected = cfg.get("files") or {}
    wrong = sorted(name for name, digest in expected.items() if found.get(name) != digest)
    if wrong:
        raise CheckFailed(f"weights differ from the reference's fingerprint: {', '.join(wrong)}", "weights")
    try:
        version = importlib.metadata.version(cfg["package"])
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    ctx.state.update(weights=str(folder), weights_fingerprint=found, weights_version=version)
    return folder


def _raised(what: str, exc: Exception, root: Path) -> CheckFailed:
    """The application's own exception as a verdict that keeps its place: the user's file:line in the message, the
    last frames of its traceback (trimmed of Kernodeck's) in the details."""
    where = user_traceback(exc, root)
    at = f" at {where['raised_at']}" if "raised_at" in where else ""
    return CheckFailed(f"{what} raised {type(exc).__name__}: {exc}{at}", "application", where)


def _call_entry(ctx: Context, records: list[dict[str, Any]], folder: Path | None) -> App:
    """Seed and pin every knob (the same state for every call), then run the entry; its failures keep their layer."""
    from . import settings

    cfg = _app_cfg(ctx)
    entry = _function(ctx, cfg["entry"], "entry")
    app = App(
        records=[dict(r) for r in records],
        params=dict(cfg.get("params") or {}),
        device=str(ctx.state.get("device", "cpu")),
        root=Path(ctx.config["project_root"]),
        weights=weights(ctx),
        declared=cfg["outputs"],
        folder=folder,
    )
    settings.apply(deterministic=ctx.state.get("deterministic", True))
    try:
        entry(app)
    except CheckFailed:
        raise
    except ImportError as exc:
        raise CheckFailed(f"ImportError: {exc}", "environment") from exc
    except MemoryError as exc:
        raise CheckFailed(f"MemoryError: {exc}", "device") from exc
    except Exception as exc:
        raise _raised("the entry", exc, app.root) from exc
    missing = sorted(set(cfg["outputs"]) - set(app.written))
    if missing:
        raise CheckFailed(f"the entry did not write {', '.join(missing)} (declared in pyproject)", "application")
    return app


def run_entry(ctx: Context) -> dict[str, Any]:
    items = sample(ctx)
    start = time.perf_counter()
    app = _call_entry(ctx, items, ctx.outputs)
    seconds = time.perf_counter() - start
    ctx.state["first_run"] = {name: arr for name, (arr, _) in app.written.items()}
    details: dict[str, Any] = {
        "items": len(items),
        "seconds": round(seconds, 4),
        "items_per_s": round(len(items) / seconds, 1) if seconds > 0 else None,
        "device": app.device,
        "written": sorted(f"outputs/{n}.npy" for n in app.written),
    }
    if "weights_fingerprint" in ctx.state:
        details.update(
            weights_fingerprint=ctx.state["weights_fingerprint"], weights_version=ctx.state["weights_version"]
        )
    return details


# --- reread, compare, criterion --------------------------------------------------------------------------------------


def reread(ctx: Context) -> dict[str, Any]:
    """Structure first, from the files on disk: every declared output, dtype, shape, finite, ids in input order."""
    expected_ids = _ids(sample(ctx))
    declared = _app_cfg(ctx)["outputs"]
    ref = ctx.config.get("reference") if ctx.config.get("mode") != "reference" else None
    written = sorted(p.name.removesuffix(".npy") for p in ctx.outputs.glob("*.npy"))
    if sorted(declared) != written:
        raise CheckFailed(f"outputs on disk {written}, declared {sorted(declared)}", "output")
    arrays, details = {}, {}
    for name, decl in declared.items():
        arr = _load_npy(ctx.outputs / f"{name}.npy", f"output {name}", "output")
        ids = _load_ids(ctx.outputs / f"{name}.ids.json", f"output {name}", "output")
        if len(ids) != len(expected_ids):
            raise CheckFailed(f"output {name}: {len(ids)} ids for {len(expected_ids)} inputs", "output")
        if ids != expected_ids:
            first = _first_difference(ids, expected_ids)
            raise CheckFailed(
                f"output {name} ids are not in input order: row {first} is {ids[first]!r}, "
                f"expected {expected_ids[first]!r}",
                "output",
            )
        shape = tuple(ref["outputs"][name]["shape"]) if ref and name in ref["outputs"] else None
        check_structure(
            arr, dtype=decl["dtype"], rows=len(expected_ids), shape=shape, what=f"output {name}", layer="output"
        )
        arrays[name] = arr
        details[name] = {"shape": list(arr.shape), "dtype": str(arr.dtype), "finite": True, "ids_in_order": True}
    ctx.state["reread"] = arrays
    return {"outputs": details, "rows": len(expected_ids)}


TOLERANCE_TIP = "declare a tolerance a moved output can exceed ([tool.kernodeck.application.outputs]), then: " \
    "nox -s reference -- --new"


def tolerance_controls(ctx: Context, base: dict[str, Any]) -> dict[str, Any]:
    """Each declared tolerance shown able to fail: the reference moved just past it fails ``tolerance.compare``."""
    from . import controls

    ids = _ids(sample(ctx))
    found = {
        name: controls.tolerance_controls(tolerance.compare, decl, base[name], ids)
        for name, decl in _app_cfg(ctx)["outputs"].items()
    }
    unable = {
        f"{name} {key}": r["summary"]
        for name, f in found.items()
        for key, r in f["moved_past"].items()
        if not r["failed_compare"]
    }
    if unable:
        raise CheckFailed(
            "a declared tolerance is unable to fail: the reference moved just past it still passes compare ("
            + "; ".join(f"{what}: {why}" for what, why in unable.items())
            + ")",
            "reference",
            {"tolerance_controls": found, "tip": TOLERANCE_TIP},
        )
    return found


def compare(ctx: Context) -> dict[str, Any]:
    """Each output against the reference under its declared kind; first, each tolerance is shown able to fail.

    Making a reference there is nothing to compare with: only the tolerances are shown able to fail, on this run's
    outputs (the reference to be).
    """
    if ctx.config.get("mode") == "reference":
        found = tolerance_controls(ctx, ctx.state["reread"])
        return {"summary": "no reference yet; each declared tolerance shown able to fail", "tolerance_controls": found}
    ids = _ids(sample(ctx))
    declared = _app_cfg(ctx)["outputs"]
    found = tolerance_controls(ctx, ctx.state["reference"])
    verdicts = {
        name: tolerance.compare(decl, ctx.state["reread"][name], ctx.state["reference"][name], ids)
        for name, decl in declared.items()
    }
    details: dict[str, Any] = {"outputs": verdicts}
    if len(verdicts) == 1:  # the one output's numbers at the top level too
        details.update(next(iter(verdicts.values())))
    details["tolerance_controls"] = found
    failed = [name for name, v in verdicts.items() if not v["passed"]]
    if failed:
        raise CheckFailed(
            "; ".join(
                f"{name} differs from the reference beyond tolerance: {verdicts[name]['summary']}" for name in failed
            ),
            "comparison",
            details,
        )
    return details


def _judge(
    func: Any, outputs: dict[str, Any], items: list[dict[str, Any]], params: dict[str, Any], root: Path
) -> dict[str, Any]:
    """One call of the application's criterion on ``outputs``; its answer checked for shape (a dict, bool passed).

    An exception in it carries the user's frame (file:line under ``root``, the project)."""
    try:
        result = func({n: a.copy() for n, a in outputs.items()}, _ids(items), [dict(r) for r in items], dict(params))
    except CheckFailed:
        raise
    except Exception as exc:
        raise _raised("the criterion", exc, root) from exc
    if not isinstance(result, dict) or not isinstance(result.get("passed"), bool):
        raise CheckFailed("the criterion must return a dict with a bool 'passed' and a 'summary'", "application")
    return result


CRITERION_TIP = (
    "make the criterion judge the outputs (it must fail on rows permuted against their ids, noise or a constant), "
    "then: nox -s reference -- --new"
)


def criterion(ctx: Context) -> dict[str, Any]:
    """The application's own check (the business criterion), on the outputs REREAD from disk; then shown able to fail.

    The same criterion runs on generic corruptions of the reference outputs (controls.py): one that passes them all
    is unable to fail, and fails this step. Where the criterion judges nearest neighbours of a cosine output (it
    returns ``neighbours_of`` and a margin), the flip bound is derived here again from the declared max-abs, the
    output's dimension and the smaller of this run's and the reference's margin, whatever the manifest says.
    """
    from . import controls

    cfg = _app_cfg(ctx)
    if not cfg.get("criterion"):
        raise Skip("no criterion declared ([tool.kernodeck.application] criterion)")
    func = _function(ctx, cfg["criterion"], "criterion")
    items = sample(ctx)
    params = dict(cfg.get("params") or {})
    root = Path(ctx.config["project_root"])
    result = _judge(func, ctx.state["reread"], items, params, root)
    details = json.loads(json.dumps(result, default=str))
    margin = details.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, int | float)):
        raise CheckFailed(f"the criterion's margin must be a number or None, not {margin!r}", "application")
    if margin is not None and not math.isfinite(margin):
        raise CheckFailed(f"the criterion's margin is non-finite ({margin!r})", "application", details)
    if not result["passed"]:
        raise CheckFailed(f"criterion failed: {result.get('summary', '')}", "comparison", details)
    # Corruptions of the reference outputs (this run's when making the reference): each must be judged by the code.
    base = ctx.state.get("reference") or ctx.state["reread"]

    def judge(outputs: dict[str, Any]) -> tuple[bool, str]:
        answer = _judge(func, outputs, items, params, root)
        return bool(answer["passed"]), str(answer.get("summary", ""))

    found = controls.criterion_controls(judge, base)
    details["controls"] = found
    if not found["able_to_fail"]:
        raise CheckFailed(
            "the criterion is unable to fail: it passed on every corruption of the reference outputs ("
            + "; ".join(f"{how}: {r['summary'] or 'passed'}" for how, r in found["corruptions"].items())
            + ")",
            "application",
            {**details, "tip": CRITERION_TIP},
        )
    bound = _flip_bound(ctx, details)
    if bound is not None:
        details["flip_bound"] = bound
    return details


def _flip_bound(ctx: Context, details: dict[str, Any]) -> dict[str, Any] | None:
    """2*sqrt(dim)*max-abs < margin/2 for the cosine output the criterion judges by nearest neighbours (the twin of
    kernodeck.dossier.reference.flip_bound, which the orchestrator applies when it writes the manifest)."""
    name, margin = details.get("neighbours_of"), details.get("margin")
    declared = _app_cfg(ctx)["outputs"]
    if not name or margin is None or declared.get(name, {}).get("kind") != "cosine":
        return None
    ref = ctx.config.get("reference") if ctx.config.get("mode") != "reference" else None
    recorded = (ctx.config.get("criterion") or {}).get("margin") if ref else None
    usable = isinstance(recorded, int | float) and not isinstance(recorded, bool) and math.isfinite(recorded)
    margins = [float(margin)] + ([float(recorded)] if usable else [])  # this run's margin is always finite here
    smallest = min(margins)
    shape = ref["outputs"][name]["shape"] if ref and name in ref["outputs"] else list(ctx.state["reread"][name].shape)
    dim = int(math.prod(shape[1:])) if len(shape) > 1 else 1
    max_abs = float(declared[name]["max-abs"])
    bound = 2 * math.sqrt(dim) * max_abs
    record = {
        "output": name,
        "rule": "2*sqrt(dim)*max-abs < margin/2: no nearest neighbour can flip inside the tolerance",
        "dim": dim,
        "bound": bound,
        "margin": smallest,
        "margins": {"this run": float(margin), **({"reference": float(recorded)} if len(margins) > 1 else {})},
    }
    if not (bound < smallest / 2):
        raise CheckFailed(
            f"declared max-abs {max_abs:g} of {name} allows cosine changes up to {bound:.3g}, not below half the "
            f"smallest nearest-neighbour margin ({smallest:.3g}): such a tolerance could flip a nearest neighbour",
            "reference",
            {**details, "flip_bound": record,
             "tip": f"lower max-abs in [tool.kernodeck.application.outputs.{name}], then: nox -s reference -- --new"},
        )
    return record


# --- determinism ---------------------------------------------------------------------------------------------------


def non_finite_runs(runs: dict[str, dict[str, tuple[Any, list[str]]]]) -> list[str]:
    """``run: output (N values)`` for each rerun's output holding NaN or Inf: named, never a silent difference."""
    from . import controls

    found = []
    for run_name, written in runs.items():
        for name, (arr, _) in written.items():
            count = controls.non_finite(arr)
            if count:
                found.append(f"{run_name}: {name} ({count} values)")
    return found


def _rows_for(records: list[dict[str, Any]], written: dict[str, tuple[Any, list[str]]]) -> dict[str, Any]:
    """A rerun's outputs, once each is known to hold one row per given record, in order: an entry that ignores
    ``app.records`` (always the whole sample) would otherwise compare its own full outputs and pass."""
    want = _ids(records)
    for name, (arr, ids) in written.items():
        rows = int(arr.shape[0]) if arr.ndim else 0
        if ids != want or rows != len(want):
            raise CheckFailed(
                f"given {len(want)} records, the entry wrote {rows} rows of {name} for {len(ids)} ids"
                f"{'' if ids == want else ' (not the ids given)'}: it must write one row per record of app.records",
                "application",
                {"output": name, "records_given": len(want), "rows_written": rows, "ids_written": len(ids)},
            )
    return written


def determinism(ctx: Context) -> dict[str, Any]:
    """Rerun the entry twice in this process (a fixed subset for large samples): on CPU, bitwise identical outputs.

    Then once without the determinism settings, to record what they cost.
    """
    from . import settings

    items = sample(ctx)
    limit = int(ctx.config.get("determinism_records", DETERMINISM_RECORDS))
    subset = items[:limit]
    whole = len(subset) == len(items)
    start = time.perf_counter()
    second = _rows_for(subset, _call_entry(ctx, subset, None).written)
    t_det = time.perf_counter() - start
    third = _rows_for(subset, _call_entry(ctx, subset, None).written)
    ctx.state["deterministic"] = False
    try:
        start = time.perf_counter()
        free = _rows_for(subset, _call_entry(ctx, subset, None).written)
        t_free = time.perf_counter() - start
    finally:
        ctx.state["deterministic"] = True
        restored = settings.apply(deterministic=True)
    import torch

    differ = settings.differences(restored, settings.read_back(torch))  # what the later steps (resume) rely on
    device = str(ctx.state.get("device", "cpu"))
    runs = [second, third] + ([{n: (a, []) for n, a in ctx.state["first_run"].items()}] if whole else [])
    bad = non_finite_runs({"rerun 1": second, "rerun 2": third, "the run without the settings": free})
    if bad:
        raise CheckFailed(
            f"determinism: non-finite values (NaN/Inf) in {'; '.join(bad)}", "operator", {"non_finite": bad}
        )
    per_output: dict[str, Any] = {}
    identical = True
    for name in _app_cfg(ctx)["outputs"]:
        base = second[name][0]
        same = all(r[name][0].shape == base.shape and bool(_np().array_equal(r[name][0], base)) for r in runs[1:])
        identical &= same
        per_output[name] = {
            "bitwise_identical": same,
            "max_abs_between_runs": max(tolerance.max_abs(r[name][0], base) for r in runs[1:]),
            "max_abs_without_settings": tolerance.max_abs(free[name][0], base),
        }
    details = {
        "device": device,
        "records": len(subset),
        "of": len(items),
        "subset": "the whole sample" if whole else f"the first {len(subset)} records in sample order",
        "repeats": len(runs),
        "bitwise_identical": identical,
        "outputs": per_output,
        "seconds_deterministic": round(t_det, 4),
        "seconds_without_settings": round(t_free, 4),
        "cost_ratio": round(t_det / t_free, 3) if t_free > 0 else None,
    }
    if device == "cpu" and not identical:
        moved = [n for n, v in per_output.items() if not v["bitwise_identical"]]
        raise CheckFailed(
            f"runs of the entry on CPU in one process differ ({', '.join(moved)}); CPU runs must be bitwise identical",
            "operator",
            details,
        )
    if device != "cpu":
        declared = _app_cfg(ctx)["outputs"]
        ids = _ids(subset)
        for name in declared:
            for other in runs[1:]:
                verdict = tolerance.compare(declared[name], other[name][0], second[name][0], ids)
                if not verdict["passed"]:
                    raise CheckFailed(
                        f"repeat runs on {device} differ beyond the declared tolerance of {name}: {verdict['summary']}",
                        "operator",
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
