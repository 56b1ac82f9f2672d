"""The determinism step: the entry rerun in this process (a fixed subset for large samples), bitwise identical on CPU
and within the declared tolerance elsewhere; then, making a reference or asked (``verify -- --settings-cost``), once
without the settings, to record what they cost (calibrate's ``nondeterministic`` variation measures the same in a
process of its own). The first
rerun loads the project's code afresh, and no rerun may read what the application wrote before it: a memo of the
first run's outputs would otherwise pass for a repeat. One fresh load is enough for the claim: that rerun's outputs,
computed from nothing the earlier calls left, are compared with the others'; the other runs keep the first run's
modules (a model the entry keeps loaded is not loaded again)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

from . import owned, paths, seen, tolerance, verified
from ._common import CheckFailed, Context
from .application import _app_cfg, _call_entry, _ids, _rows_for, sample
from .protocol import ConfigKey

# Determinism reruns the entry twice more (and once without the settings); above this many records it reruns a
# fixed subset (the first records, in sample order), stated in the step's details.
DETERMINISM_RECORDS = 64
Written = dict[str, tuple[Any, list[str]]]  # one run's outputs: name -> (array, ids)


def non_finite_runs(runs: dict[str, Written]) -> list[str]:
    """``run: output (N values)`` for each rerun's output holding NaN or Inf: named, never a silent difference."""
    from . import controls

    found = []
    for run_name, written in runs.items():
        for name, (arr, _) in written.items():
            count = controls.non_finite(arr)
            if count:
                found.append(f"{run_name}: {name} ({count} values)")
    return found


def _project_modules(ctx: Context) -> dict[str, Any]:
    """The application's own modules in sys.modules: its files loaded by path, what it imported from its verified
    bytes, and any other module whose file lies in the project (loaded by the application's own means), never the
    env's, the standard library's or Kernodeck's."""
    roots = tuple(form.rstrip(os.sep) + os.sep for form in paths.forms(str(ctx.config["project_root"])))

    def own(module: Any) -> bool:
        file = getattr(module, "__file__", None)
        return verified.from_project(module) or (
            isinstance(file, str) and file.startswith(roots) and not paths.trusted(os.path.normpath(file)))

    return {name: module for name, module in list(sys.modules.items()) if own(module)}


# What the last _afresh put back, with the project root and sys.modules as it left them: the criterion's first sight
# loads the project afresh three times in a row, and the determinism step once more later.
_PUT_BACK: list[tuple[str, dict[str, Any], dict[str, Any]]] = []


def _kept(ctx: Context) -> dict[str, Any]:
    """The project's modules now (:func:`_project_modules`): the ones the last :func:`_afresh` put back when
    ``sys.modules`` still holds exactly what it left (the same names, each the same module object), else a scan of
    every module (6 ms with sentence-transformers loaded). A module an application's call changed in place since (its
    ``__file__`` moved into the project) stays then, as the env's code it was loaded as; a memo in a library's module
    is not reset either way (docs/application.md)."""
    if _PUT_BACK:
        root, modules, kept = _PUT_BACK[0]
        now = sys.modules
        if (root == str(ctx.config["project_root"]) and dict.keys(now) == modules.keys()
                and all(dict.get(now, name) is module for name, module in modules.items())):
            return dict(kept)
    return _project_modules(ctx)


@contextlib.contextmanager
def _afresh(ctx: Context) -> Iterator[None]:
    """A rerun from the project's code loaded afresh: its modules leave sys.modules, so the entry's file and what it
    imports from the project load again from their verified bytes as new modules (a memo in a module global, an
    ``lru_cache``, starts empty); afterwards the first run's modules are put back (the other runs, the later steps)."""
    kept = _kept(ctx)
    _PUT_BACK.clear()
    for name in kept:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in _project_modules(ctx):
            del sys.modules[name]
        sys.modules.update(kept)
        _PUT_BACK[:] = [(str(ctx.config["project_root"]), dict.copy(sys.modules), kept)]


def _rerun(ctx: Context, subset: list[dict[str, Any]]) -> Written:
    """One call of the entry on ``subset``, refused a read of a file the application wrote before it (seen.EARLIER:
    its earlier results, a cache of them, are inputs here)."""
    seen.earlier(list(owned.WRITTEN))
    try:
        return _rows_for(subset, _call_entry(ctx, subset, None).written)
    finally:
        seen.earlier(())


def _reruns(ctx: Context, subset: list[dict[str, Any]]) -> dict[str, Any]:
    """The entry twice more with the settings, the first time from the project's code loaded afresh (_afresh: a memo
    of the first run's outputs cannot pass for a repeat), then, where the settings' cost is asked
    (``ConfigKey.SETTINGS_COST``), once without them (both timed in the first run's modules, as the entry's own runs
    are), then the settings restored and read back."""
    from . import settings

    start = time.perf_counter()
    with _afresh(ctx):
        second = _rerun(ctx, subset)
    t_fresh = time.perf_counter() - start
    start = time.perf_counter()
    third = _rerun(ctx, subset)
    t_det = time.perf_counter() - start
    got = {"second": second, "third": third, "free": None, "t_det": t_det, "t_free": None, "t_fresh": t_fresh,
           "differ": {}}
    if not ctx.config.get(ConfigKey.SETTINGS_COST):
        return got
    ctx.state["deterministic"] = False
    try:
        start = time.perf_counter()
        free = _rerun(ctx, subset)
        t_free = time.perf_counter() - start
    finally:
        ctx.state["deterministic"] = True
        restored = settings.apply(deterministic=True)
    import torch

    differ = settings.differences(restored, settings.read_back(torch))  # what the later steps (resume) rely on
    return {**got, "free": free, "t_free": t_free, "differ": differ}


def _per_output(ctx: Context, runs: list[Written], free: Written | None) -> tuple[dict[str, Any], bool]:
    """Each output's repeats against the first rerun: bitwise identical, and how far apart (with and, where it ran,
    without the settings); and whether every output was identical."""
    second = runs[0]
    per_output: dict[str, Any] = {}
    identical = True
    for name in _app_cfg(ctx)["outputs"]:
        base = second[name][0]
        same = all(tolerance.same_bits(r[name][0], base) for r in runs[1:])
        identical &= same
        per_output[name] = {
            "bitwise_identical": same,
            "max_abs_between_runs": max(tolerance.max_abs(r[name][0], base) for r in runs[1:]),
        }
        if free is not None:
            per_output[name]["max_abs_without_settings"] = tolerance.max_abs(free[name][0], base)
    return per_output, identical


def _judge_repeats(ctx: Context, runs: list[Written], subset: list[dict[str, Any]], details: dict[str, Any]) -> None:
    """On CPU the repeats must be bitwise identical; on a device, within each output's declared tolerance."""
    device = details["device"]
    if device == "cpu" and not details["bitwise_identical"]:
        moved = [n for n, v in details["outputs"].items() if not v["bitwise_identical"]]
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
                verdict = tolerance.compare(declared[name], other[name][0], runs[0][name][0], ids)
                if not verdict["passed"]:
                    raise CheckFailed(
                        f"repeat runs on {device} differ beyond the declared tolerance of {name}: {verdict['summary']}",
                        "operator",
                        details,
                    )


def _cost(t_det: float, t_free: float | None) -> dict[str, Any]:
    """What the settings cost (the repeat's seconds against the run without them), or where it is measured."""
    if t_free is None:
        return {"settings_cost": "not measured in this run: a reference records it; verify -- --settings-cost, or "
                                 "nox -s calibrate (its nondeterministic variation)"}
    ratio = round(t_det / t_free, 3) if t_free > 0 else None
    return {"seconds_without_settings": round(t_free, 4), "cost_ratio": ratio}


def run(ctx: Context) -> dict[str, Any]:
    """Rerun the entry twice in this process (a fixed subset for large samples): on CPU, bitwise identical outputs.

    Then, where asked (a reference; ``verify -- --settings-cost``), once without the determinism settings, to record
    what they cost.
    """
    items = sample(ctx)
    limit = int(ctx.config.get("determinism_records", DETERMINISM_RECORDS))
    subset = items[:limit]
    whole = len(subset) == len(items)
    got = _reruns(ctx, subset)
    second, third, free, t_det, t_free = got["second"], got["third"], got["free"], got["t_det"], got["t_free"]
    runs = [second, third] + ([{n: (a, []) for n, a in ctx.state["first_run"].items()}] if whole else [])
    bad = non_finite_runs({"rerun 1": second, "rerun 2": third,
                           **({"the run without the settings": free} if free is not None else {})})
    if bad:
        raise CheckFailed(
            f"determinism: non-finite values (NaN/Inf) in {'; '.join(bad)}", "operator", {"non_finite": bad}
        )
    per_output, identical = _per_output(ctx, runs, free)
    details = {
        "device": str(ctx.state.get("device", "cpu")),
        "records": len(subset),
        "of": len(items),
        "subset": "the whole sample" if whole else f"the first {len(subset)} records in sample order",
        "repeats": len(runs),
        "bitwise_identical": identical,
        "outputs": per_output,
        "seconds_afresh": round(got["t_fresh"], 4),  # the first rerun, the project's code loaded again
        "seconds_deterministic": round(t_det, 4),
        **_cost(t_det, t_free),
    }
    _judge_repeats(ctx, runs, subset, details)
    if got["differ"]:
        differ = got["differ"]
        shown = "; ".join(f"{k}: applied {v['applied']!r}, read back {v['read_back']!r}" for k, v in differ.items())
        raise CheckFailed(
            f"determinism settings did not hold after the cost run: {shown}",
            "environment",
            {**details, "differences": differ},
        )
    return details
