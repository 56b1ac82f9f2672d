"""The outputs judged: reread from disk (structure first), compared with the reference under each declared tolerance
kind, then the application's own criterion on them; each tolerance and the criterion shown able to fail."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from . import owned, tolerance
from ._common import CheckFailed, Context, Skip
from .application import _app_cfg, _ids, _judge, criterion_function, sample
from .arrays import _first_difference, _load_ids, _load_npy, check_structure
from .kinds import flip_bound


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


TOLERANCE_TIP = ("declare a tolerance a moved output can exceed, and the output's rows permuted or replaced by noise "
                 "of its own scale ([tool.kernodeck.application.outputs]), then: nox -s reference -- --new")


def tolerance_controls(ctx: Context, base: dict[str, Any]) -> dict[str, Any]:
    """Each declared tolerance shown able to fail: the reference moved just past it, and each draw of the rows
    permuted against their ids and of noise of the output's own scale, fail ``tolerance.compare``."""
    from . import controls

    ids = _ids(sample(ctx))
    found = {
        name: controls.tolerance_controls(tolerance.compare, decl, base[name], ids)
        for name, decl in _app_cfg(ctx)["outputs"].items()
    }
    unable = [
        f"{name} {key}: the reference moved just past it still passes compare ({r['summary']})"
        for name, f in found.items()
        for key, r in f["moved_past"].items()
        if not r["failed_compare"]
    ]
    unable += [
        f"{name}: it cannot see {controls.WHAT[how]} (compare passed {len(r['passed_draws'])} of {r['draws']} "
        f"fixed-seed draws, each of which it must fail: {r['summary'] or 'passed'})"
        for name, f in found.items()
        for how, r in f["corruptions"].items()
        if how in f["cannot_see"]
    ]
    if unable:
        raise CheckFailed(
            "a declared tolerance is unable to fail: " + "; ".join(unable), "reference",
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


CRITERION_TIP = (
    "make the criterion judge the outputs against the sample (it must fail on rows permuted against their ids and on "
    "noise of the outputs' own scale, not only on a constant), then: nox -s reference -- --new"
)
# The criterion's margin against added noise (margin.py's search, the one calibrate runs): from 1e-6 x the output's
# RMS (float32's resolution is ~1e-7 of it), bracketed within 2% (7 halvings of a x10 bracket): ~15 criterion calls
# per output.
POWER_FIRST = 1e-6
POWER_BISECTIONS = 7


def _noise_margins(ctx: Context, judge: Any, base: dict[str, Any]) -> dict[str, Any]:
    """Each output's smallest perturbation (the others as they are) that breaks the criterion: added Gaussian noise
    in units of the output's RMS for a float output, rows given another value for a label output."""
    from . import margin

    ids = _ids(sample(ctx))
    found: dict[str, Any] = {}
    for name, decl in _app_cfg(ctx)["outputs"].items():
        rec = margin.margin_of(name, decl, base, ids, lambda outputs: bool(judge(outputs)[0]), stand_in=False,
                               first=POWER_FIRST, bisections=POWER_BISECTIONS)
        if rec.get("found"):
            found[name] = {"found": True, "perturbation": rec["perturbation"], "breaks_at": rec["search"]["fails"],
                           "passes_at": rec["search"]["passes"], "evaluations": rec["search"]["evaluations"],
                           "distances": rec["fails"]}
        else:
            found[name] = {"found": False, "why": rec.get("why", "")}
    return found


def _passed_draws(result: dict[str, Any]) -> str:
    """How often the criterion passed a corruption drawn several times (each draw it must fail), or "it passed them"."""
    draws = result.get("draws") or 0
    if draws <= 1:
        return "it passed them"
    return f"it passed {len(result.get('passed_draws') or ())} of {draws} draws"


def _unable(found: dict[str, Any]) -> str:
    """What a criterion unable to fail cannot see, each with its own answer, and the little it does see."""
    from . import controls

    results, failed = found["corruptions"], found["failed"]
    if found.get("inconsistent"):
        return ("the criterion is unable to fail: it does not pass the same outputs it passed (the reference's, "
                f"unchanged) when {found['inconsistent']}: its answer is not a function "
                "of the outputs (state kept between calls, arguments changed in place, randomness), so its failures "
                "on corrupted outputs prove nothing")
    first = found.get("first_sight") or {}
    if first.get("passed") and not found["cannot_see"]:
        said = first.get("summary") or "passed"
        which = " and ".join(controls.WHAT[how] for how in first.get("shown_passed") or ("noise",))
        return (f"the criterion is unable to fail: loaded afresh and shown {which} before any other outputs, it "
                f"passed them ({said}): its verdict is whatever it saw first (a memo), not a judgement of the outputs")
    blind = [how for how, r in results.items() if r["passed"] and (how in found["cannot_see"] or not failed)]
    parts = [f"{controls.WHAT[how]} ({_passed_draws(results[how])}: {results[how]['summary'] or 'passed'})"
             for how in blind]
    rows, loose = found.get("rows") or {}, found.get("search") or {}
    if rows.get("passed"):
        parts.append(f"half its rows changed, each to another row's values, the other half as they are (it passed "
                     f"{len(rows['passed_halves'])} of {rows['halves']} halves: {rows['summary'] or 'passed'}): it "
                     "does not judge every row")
    if loose.get("passed"):
        judged_rows = _listed(loose["judged_rows"]) or "none found"
        parts.append(f"{loose['changed']} of its {loose['rows']} rows changed at once, each to another row's values "
                     f"(rows {_listed(loose['changed_rows'])}: {loose['summary'] or 'passed'}): it does not judge "
                     f"them (the rows it failed on alone: {judged_rows})")
    text = "the criterion is unable to fail: it cannot see " + "; ".join(parts)
    if any((results[how].get("draws") or 0) > 1 for how in blind):
        text += (f" (the permuted rows and the noise are each drawn {controls.DRAWS} times by fixed seeds: it must "
                 "fail every draw)")
    if rows.get("passed"):
        text += (f" (the rows are split in two halves {controls.DRAWS} times by fixed seeds, each half changed in "
                 "turn, each of its rows given another row's values in every output: it must fail every half)")
    if failed:
        what = ", ".join(controls.WHAT[how] for how in failed)
        text += f"; it fails only {what}" if blind else f"; it fails {what}, each of which changes the rows"
    margins = found.get("noise_margin") or {}
    if margins and not any(m.get("found") for m in margins.values()):
        text += "; no perturbation of an output breaks it (added noise up to 1000x its RMS, or every label changed)"
    return text


def _listed(rows: list[int]) -> str:
    """Row indices as a short list: the first ten, then how many more."""
    shown = ", ".join(str(r) for r in rows[:10])
    return shown + (f" and {len(rows) - 10} more" if len(rows) > 10 else "")


def _first_sight(ctx: Context, base: dict[str, Any], real: dict[str, Any], items: list[dict[str, Any]],
                 params: dict[str, Any], root: Path, before: dict[str, Any]) -> dict[str, Any]:
    """The criterion, loaded afresh (determinism._afresh: the project's modules anew) for each REQUIRED corruption
    that applies, shown that corruption (draw 0) before any other outputs, and then loaded afresh once more and shown
    this run's outputs (``real``), each through the very same call (:func:`_afresh_answer`, same function, same
    frames, the same files refused): nothing in the process tells a first sight from the call on the real outputs,
    which it must pass (red-team pass 18, FP6: a criterion that answered "failed" whenever the first sight's function
    was on its stack kept the real outputs as its truth). A criterion that takes the first outputs it sees as the
    truth (a memo: red-team pass 10) passes one of the corruptions, whatever the later controls show; one that judges
    the outputs fails each, as it must fail every draw of the controls. The permuted rows are real rows, so a memo
    that first rejects what does not look like its outputs (rows of another norm, another range) takes them as its
    truth (red-team pass 17, FP6); noise alone is not enough. A read of a file the criterion wrote in its earlier
    calls (``before``: what the application had written before its first call; a memo kept on disk, pass 11) is
    refused here, as the determinism reruns refuse the entry's (seen.earlier). ``passed``: it passed one of the
    corruptions (``shown``: each one's answer); ``real_outputs``: its answer on this run's outputs."""
    from . import controls

    corruptions = {how: controls.corrupted(base, how) for how in controls.REQUIRED}
    names = [how for how, changed in corruptions.items()
             if not all(controls.same(changed[name], arr) for name, arr in base.items())]  # one row: nothing shown
    answers = [_afresh_answer(ctx, outputs, items, params, root, before)
               for outputs in [*(corruptions[how] for how in names), real]]
    shown = dict(zip(names, answers[:-1], strict=True))
    passed = [how for how, answer in shown.items() if answer["passed"]]
    first = shown[passed[0]] if passed else next(iter(shown.values()), {"summary": ""})
    return {"passed": bool(passed), "shown_passed": passed, "summary": first["summary"],
            "shown": {how: {"passed": a["passed"], "summary": a["summary"]} for how, a in shown.items()},
            "real_outputs": answers[-1]}


def _afresh_answer(ctx: Context, outputs: dict[str, Any], items: list[dict[str, Any]], params: dict[str, Any],
                   root: Path, before: dict[str, Any]) -> dict[str, Any]:
    """The criterion's answer on ``outputs``, loaded afresh and refused its own earlier files (see _first_sight):
    ``passed``, ``summary`` and, where it answered, its whole answer (``result``)."""
    from . import seen
    from .determinism import _afresh

    seen.earlier([path for path in owned.WRITTEN if path not in before or owned.state(path) != before[path]])
    result: dict[str, Any] | None = None
    with contextlib.ExitStack() as undo:
        undo.callback(seen.earlier, ())
        undo.enter_context(_afresh(ctx))
        fresh = criterion_function(ctx)
        refused = len(seen.PENDING)
        try:
            result = _judge(fresh, outputs, items, params, root)
            passed, summary = bool(result["passed"]), str(result.get("summary", ""))
        except Exception as exc:  # its own error on garbage: it did not pass
            if len(seen.PENDING) > refused:  # the closed world's refusal, not the criterion's error: it fails the step
                raise seen.PENDING[refused] from None
            passed, summary = False, f"raised {type(exc).__name__}: {exc}"
    return {"passed": passed, "summary": " ".join(summary.split())[:200], "result": result}


def _answered(result: dict[str, Any]) -> dict[str, Any]:
    """The criterion's answer as the step records it: JSON-safe, its margin a finite number or None."""
    details: dict[str, Any] = json.loads(json.dumps(result, default=str))
    margin = details.get("margin")
    if margin is not None and (isinstance(margin, bool) or not isinstance(margin, int | float)):
        raise CheckFailed(f"the criterion's margin must be a number or None, not {margin!r}", "application")
    if margin is not None and not math.isfinite(margin):
        raise CheckFailed(f"the criterion's margin is non-finite ({margin!r})", "application", details)
    return details


def criterion(ctx: Context) -> dict[str, Any]:
    """The application's own check (the business criterion), on the outputs REREAD from disk; then shown able to fail.

    The same criterion runs on generic corruptions of the reference outputs (controls.py): one that passes rows
    permuted against their ids or the outputs replaced by noise of their own scale is unable to fail, and fails this
    step; its margin against added noise is measured for the report (:func:`_noise_margins`). Where the criterion
    judges nearest neighbours of a cosine output (it returns ``neighbours_of`` and a margin), the flip bound is
    derived here again from the declared max-abs, the output's dimension and the smaller of this run's and the
    reference's margin, whatever the manifest says.
    """
    from . import power

    cfg = _app_cfg(ctx)
    if not cfg.get("criterion"):
        raise Skip("no criterion declared ([tool.kernodeck.application] criterion)")
    # what the application wrote before its criterion's first call, each file as it was then: one the criterion
    # writes, or rewrites after the entry wrote it (red-team pass 12), is the criterion's own
    before = {path: owned.state(path) for path in owned.WRITTEN}
    func = criterion_function(ctx)
    items = sample(ctx)
    params = dict(cfg.get("params") or {})
    root = Path(ctx.config["project_root"])
    result = _judge(func, ctx.state["reread"], items, params, root)
    details = _answered(result)
    if not result["passed"]:
        raise CheckFailed(f"criterion failed: {result.get('summary', '')}", "comparison", details)
    # Corruptions of the reference outputs (this run's when making the reference): each must be judged by the code.
    base = ctx.state.get("reference") or ctx.state["reread"]

    def judge(outputs: dict[str, Any]) -> tuple[bool, str]:
        answer = _judge(func, outputs, items, params, root)
        return bool(answer["passed"]), str(answer.get("summary", ""))

    found = power.criterion_controls(judge, base)
    found["first_sight"] = _first_sight(ctx, base, ctx.state["reread"], items, params, root, before)
    afresh = found["first_sight"].pop("real_outputs")
    if found["first_sight"]["passed"]:
        found["able_to_fail"] = False
    found["noise_margin"] = _noise_margins(ctx, judge, base)
    # the verdict on this run's outputs is the afresh call's, made as each first sight is (its details recorded)
    found["first_sight"]["outputs"] = {"passed": afresh["passed"], "summary": afresh["summary"]}
    if afresh["passed"]:
        details = _answered(afresh["result"])
    details["controls"] = found
    if not afresh["passed"]:
        raise CheckFailed(
            "the criterion is unable to fail: loaded afresh and shown this run's outputs, as it is shown each "
            f"corruption first, it did not pass them ({afresh['summary'] or 'failed'}), though its call in the step "
            "passed them: its answer is not a function of the outputs (it tells its calls apart), so its failures on "
            "corrupted outputs prove nothing", "application", {**details, "tip": CRITERION_TIP})
    if not found["able_to_fail"]:
        raise CheckFailed(_unable(found), "application", {**details, "tip": CRITERION_TIP})
    bound = _flip_bound(ctx, details)
    if bound is not None:
        details["flip_bound"] = bound
    return details


def _flip_bound(ctx: Context, details: dict[str, Any]) -> dict[str, Any] | None:
    """2*sqrt(dim)*max-abs < margin/2 for the output the criterion judges by nearest neighbours, of a kind held to it
    (``FLIP_BOUND``: cosine) (the twin of kernodeck.runformat.recording.flip_bound, which the orchestrator applies when
    it writes the manifest)."""
    name, margin = details.get("neighbours_of"), details.get("margin")
    declared = _app_cfg(ctx)["outputs"]
    if not name or margin is None or not flip_bound(declared.get(name, {}).get("kind")):
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

