"""The declared application, run generically: its entry on the identified sample, its outputs written.

The steps over the application, each its own result, live beside it: reference.py (the committed expected outputs
sound), this module's ``run_entry`` (the application step), judge.py (reread from disk, compare, criterion) and
determinism.py (the entry rerun in this process). This module calls the application's own code (its entry, its
criterion: ``_judge``), loaded by file path, and keeps its failures in their layer. Nothing here knows what the
application computes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _common, cached, children, declared_files, links, seen, verified, world
from ._common import CheckFailed, Context, current_step, load_file, load_sample, progress, user_traceback
from .arrays import _np, _save_npy, _write_text
from .locate import locate


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
    data: dict[str, Path]
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
        # a copy, as written: the application may change its own array afterwards (normalised in place, a buffer
        # reused); the checks judge what was written (red-team pass 44, WRITE1), as resume_app's copies do
        arr, ids = np.array(array, copy=True), [str(i) for i in ids]
        self.written[name] = (arr, ids)
        if self.folder is None:
            return
        _save_npy(self.folder / f"{name}.npy", arr)
        _write_text(self.folder / f"{name}.ids.json", json.dumps(ids) + "\n")


def _function(ctx: Context, target: dict[str, str], what: str) -> Any:
    """The application's function, from its file loaded by path (each file once per process, but for the determinism
    reruns, which load it afresh: determinism._afresh)."""
    path = Path(ctx.config["project_root"]) / target["file"]
    name = verified.APP_PREFIX + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    if not path.is_file():
        raise CheckFailed(f"the {what} file {target['file']} does not exist", "application")
    sha256 = declared_files.declared(ctx).get(os.path.normpath(path)) or None
    try:
        with settings_held(ctx, f"the {what}'s file"), world.window(ctx, f"the {what}"):
            module = load_file(path, name, sha256, target["file"])
    except CheckFailed:
        raise
    except ImportError as exc:
        raise CheckFailed(f"{target['file']}: ImportError: {exc}", "environment") from exc
    except Exception as exc:
        raise CheckFailed(f"{target['file']} failed to load: {type(exc).__name__}: {exc}", "application") from exc
    func = getattr(module, target["function"], None)
    if not callable(func):
        raise CheckFailed(f"{target['file']} has no function {target['function']}", "application")
    return _recorded(ctx, func, f"the {what}", keep=what != "entry")


def _recorded(ctx: Context, func: Any, who: str, *, keep: bool = True) -> Any:
    """The application's function, each call inside a closed-world window (world.py): whoever calls it (the entry's
    runs, the criterion's, its controls and margin search), what it opens or imports is recorded and judged. Its
    answer leaves the window as plain data (a copy through JSON; ``keep`` False: dropped, the entry's): no method of
    an object of the application's (``__del__``, a dict's ``get``, an exception's ``__str__``: :func:`_verdict`) runs
    later on Kernodeck's thread, unwatched."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        raised: CheckFailed | None = None
        plain = None
        with settings_held(ctx, who), world.window(ctx, who):
            try:
                answer = func(*args, **kwargs)
            except CheckFailed:
                raise
            except BaseException as exc:  # made a verdict here; raised once the window judged what the call read
                if not isinstance(failure := _common.as_failure(exc), Exception):
                    raise  # a Ctrl-C: the run's own (sys.exit: the application's failure, as an exception is)
                raised = _verdict(who, failure, Path(ctx.config["project_root"]))
                raised.__cause__ = exc
            else:
                plain = _plain(answer, who) if keep else None
                del answer
        if raised is not None:
            raise raised
        return plain

    return call


# the layer an exception's kind names, by caller (any other: the application's, at the user's frame: _raised)
_LAYERS: dict[str, tuple[tuple[type[BaseException], str], ...]] = {
    "the entry": ((ImportError, "environment"), (MemoryError, "device")),
    "the resume entry": ((ImportError, "environment"),)}


def _verdict(who: str, exc: Exception, root: Path) -> CheckFailed:
    """An exception of the application's call as its verdict, made inside the window: its message is the
    application's code (``__str__``), run where what it reads is judged."""
    for kind, layer in _LAYERS.get(who, ()):
        if isinstance(exc, kind):
            return CheckFailed(f"{kind.__name__}: {exc}", layer)
    return _raised(who, exc, root)


def _scalar(value: Any) -> Any:
    """json's fallback: a 0-d value of an array library (a numpy scalar, a 0-d torch tensor: ``(labels ==
    truth).mean() >= floor`` is the criterion's 'passed') as its Python value through its ``item()``, anything else
    as its text. It runs inside the call's window: ``item`` is the application's libraries' code."""
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        got = value.item()
        if isinstance(got, bool | int | float | str) or got is None:
            return got
    return str(value)


def _plain(answer: Any, who: str) -> Any:
    try:
        return json.loads(json.dumps(answer, default=_scalar))
    except (TypeError, ValueError, RecursionError) as exc:
        raise CheckFailed(f"{who} returned what is not plain data ({type(exc).__name__}: {exc})",
                          "application") from exc


@contextlib.contextmanager
def settings_held(ctx: Context, who: str) -> Iterator[None]:
    """The determinism settings read back before and again after the application's code runs (its file loaded, each
    call): before, they must be the settings step's record (settings.not_in_effect: a change made outside any window
    is named with the step it was made in); after, one the code changed (use_deterministic_algorithms(False),
    set_num_threads, a TF32 flag, the default dtype) fails the step, since settings.json's "verified" would then be
    untrue of this run. In between, a setter call that changes one fails it too, set back before the call returns or
    not (setters.py)."""
    from . import setters, settings

    torch = sys.modules.get("torch")
    before = settings.read_back(torch) if torch is not None else ctx.state.get("settings")
    if torch is not None and before is not None:
        # the window starts with the settings step's record: a change made outside any window is named here
        step = f" (changed during the {current_step()} step)" if current_step() else ""
        moved = settings.not_in_effect(ctx, before, f"as {who} starts{step}")
        if moved is not None:
            world.pending(moved)
            raise moved
        with setters.watching(torch, before, who):
            yield
    else:
        yield
    torch = sys.modules.get("torch")
    if torch is not None and before is not None:
        verdict = settings.held(torch, before, dict(ctx.state.get("settings") or before), who)
        if verdict is not None:
            world.pending(verdict)  # a control that swallows the criterion's errors still fails the step
            raise verdict


def weights(ctx: Context) -> Path | None:
    """The declared weights (any source kind: locate.py), fingerprinted file by file against the reference."""
    cfg = _app_cfg(ctx).get("weights")
    if not cfg:
        return None
    if "weights" in ctx.state:
        return Path(ctx.state["weights"])
    folder, found = locate(cfg, Path(ctx.config["project_root"]), "weights", "weights", links.held(ctx))
    version = "unknown"
    if cfg.get("kind", "package") == "package":
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            version = importlib.metadata.version(cfg["package"])
    ctx.state.update(weights=str(folder), weights_fingerprint=found, weights_version=version)
    return folder


def data(ctx: Context) -> dict[str, Path]:
    """The declared data sources (``app.data[NAME]``), each fingerprinted file by file against the reference."""
    if "data" not in ctx.state:
        found: dict[str, Path] = {}
        prints: dict[str, dict[str, str]] = {}
        for name, cfg in sorted((_app_cfg(ctx).get("data") or {}).items()):
            found[name], prints[name] = locate(cfg, Path(ctx.config["project_root"]), f"data {name}", "data-loading",
                                               links.held(ctx))
        ctx.state.update(data=found, data_fingerprint=prints)
    return dict(ctx.state["data"])


def criterion_function(ctx: Context) -> Any:
    """The declared criterion, loaded from its verified bytes and handed ``data=`` where it takes it: the one way
    every caller gets it (the criterion step, its controls, calibrate's margin search), so that each judges with the
    criterion verify judges with (red-team pass 27, FF2: the margin search called it without ``data``)."""
    return with_data(_function(ctx, _app_cfg(ctx)["criterion"], "criterion"), ctx)


# What the runner located and fingerprinted of the weights and data sources (weights, data), and the links it holds
# on their way (links.py): handed to another process of the run (the resumed run's, resume_app.py), whose closed world
# judges its reads against the same sources (red-team pass 27, FF1: a train that reads a declared source was refused
# there as undeclared).
SOURCES = ("weights", "weights_fingerprint", "weights_version", "data", "data_fingerprint", "links_held")


def located(ctx: Context) -> dict[str, Any]:
    """(runner) The located sources, as the order carries them (JSON)."""
    found = {key: ctx.state[key] for key in SOURCES if key in ctx.state}
    if "data" in found:
        found["data"] = {name: str(where) for name, where in found["data"].items()}
    return found


def adopt(ctx: Context, sources: dict[str, Any]) -> None:
    """(worker) The runner's located sources, as its own: nothing located or taken again."""
    found = dict(sources)
    if "data" in found:
        found["data"] = {name: Path(where) for name, where in found["data"].items()}
    if "links_held" in found:
        found["links_held"] = {link: tuple(then) for link, then in found["links_held"].items()}
    ctx.state.update(found)


def with_data(func: Any, ctx: Context) -> Any:
    """The criterion, handed ``data=`` (``app.data``'s mapping, name -> Path) when it takes that keyword; a criterion
    of four arguments is called as before."""
    try:
        takes = "data" in inspect.signature(func).parameters
    except (TypeError, ValueError):
        return func
    return functools.partial(func, data=data(ctx)) if takes else func


def declared_paths(ctx: Context) -> tuple[Path, ...]:
    """Every folder or file the declared weights and data resolved to: what the application may open beyond its
    code and sample (a closed-world check asks here)."""
    paths = [Path(ctx.state["weights"])] if "weights" in ctx.state else []
    return (*paths, *dict(ctx.state.get("data") or {}).values())


def _raised(what: str, exc: Exception, root: Path) -> CheckFailed:
    """The application's own exception as a verdict that keeps its place: the user's file:line in the message, the
    last frames of its traceback (trimmed of Kernodeck's) in the details."""
    where = user_traceback(exc, root)
    at = f" at {where['raised_at']}" if "raised_at" in where else ""
    how = "ended: " if isinstance(exc, _common.ApplicationExit) else f"raised {type(exc).__name__}: "
    return CheckFailed(f"{what} {how}{exc}{at}", "application", where)


def _call_entry(ctx: Context, records: list[dict[str, Any]], folder: Path | None) -> App:
    """Seed and pin every knob (the same state for every call), then run the entry; its failures keep their layer."""
    from . import settings

    cfg = _app_cfg(ctx)
    # the sources are located and checked before any of the application's code runs (its file's own top level
    # included): nothing it did could have changed them, or the record their check relies on
    found_weights, found_data = weights(ctx), data(ctx)
    entry = _function(ctx, cfg["entry"], "entry")
    ctx.state["entry_file_read"] = [*seen.READ, *children.READ]  # what its file's load read (a cache loaded there)
    app = App(  # copies all the way down: nothing the entry is handed outlives its call (the determinism reruns)
        records=copy.deepcopy(records),
        params=copy.deepcopy(dict(cfg.get("params") or {})),
        device=str(ctx.state.get("device", "cpu")),
        root=Path(ctx.config["project_root"]),
        weights=found_weights,
        declared=cfg["outputs"],
        data=found_data,
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
    # what the call read, its forked workers' reads too (a DataLoader's): an output that is a declared file's content
    cached.refuse(ctx, [*ctx.state["entry_file_read"], *seen.READ, *children.READ], app.written)
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
    if ctx.state.get("data_fingerprint"):
        details["data_fingerprint"] = ctx.state["data_fingerprint"]
    if ctx.state.get("cached_code"):  # the modules cache's copies of declared files the entry ran (declared_files.py)
        details["cached_code"] = dict(sorted(ctx.state["cached_code"].items()))
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
    passed = result.get("passed") if isinstance(result, dict) else None
    if not isinstance(passed, bool):
        got = (f"'passed' of type {type(passed).__name__}" if isinstance(result, dict) and "passed" in result
               else "a dict without 'passed'" if isinstance(result, dict) else f"a {type(result).__name__}")
        if isinstance(passed, str):  # the text of what is no plain data (an array of bools) reads as a str here
            got += f" ({passed[:80]!r}: a str, or the text of a value that is not plain data, as an array's)"
        raise CheckFailed(f"the criterion must return a dict with a bool 'passed' and a 'summary'; it returned {got}: "
                          "return {'passed': bool(...), 'summary': '...'}", "application")
    return result


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

