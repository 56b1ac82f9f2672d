"""calibrate: a tolerance from measurement, between the noise that must pass and the margin that must fail.

1. The noise: the declared application runs in the rebuilt env under each source of legitimate variation this
   machine offers (threads, the CPU kernel level ``ATEN_CPU_CAPABILITY``, deterministic algorithms, TF32 on a GPU),
   each its own in-env process (``inenv/calibrate.py``) against the reference outputs, each leaving a dossier folder
   that ``drift`` reads. What the machine lacks is listed as unavailable, never skipped silently.
2. The margin of use: the smallest perturbation of the reference outputs that makes the application's criterion fail
   (found in-env by bisection on a fixed seed), measured in the same numbers as the noise; for a nearest-neighbour
   criterion of a cosine output also the flip bound (``reference.flip_bound``'s rule), whichever is smaller.
3. A proposal between them (their geometric mean), and a verdict on the declared tolerance: ok, too tight (below the
   noise: it fails on another machine), too loose (at or above the margin: a wrong output passes), or no room (the
   noise already reaches the margin).

Everything here is the orchestrator's side: it reads the in-env results as JSON and never imports numpy or torch.
This module drives it; beside it: variations.py (the plan, one variation's process), analysis.py (axes, verdicts,
proposals), calibration.py (the record, calibration.md/.svg, the proposal written into pyproject).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kernodeck import outdir, tips
from kernodeck._fs import write_atomic, write_json
from kernodeck._proc import log
from kernodeck.errors import KernodeckError
from kernodeck.inenv import kinds
from kernodeck.lock import check
from kernodeck.measure import svg
from kernodeck.measure.analysis import OutputCalibration, analyse_output
from kernodeck.measure.calibration import Calibration, chart_data, render, write_proposal
from kernodeck.measure.variations import VariationRun, callers_numerics, cpu_flags, plan, run_all
from kernodeck.project import deadlines
from kernodeck.project.app_contract import Application
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.runformat import manifest
from kernodeck.verify.context import declaration
from kernodeck.verify.runbuild import Change, Changes, holding, runner_config


def calibrate(project: Project, plat: Platform, out: Path | None, *, write: bool = False) -> tuple[Calibration, Path]:
    """Rebuild (or reuse) the env, run every available variation and the margin search, write the calibration."""
    from kernodeck.env.rebuild import rebuild
    from kernodeck.verify.steps.declared import require_declared_contract

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    lock_path = check.require_current(project, plat)
    app = declaration(project).application()
    ref = manifest.load(project)
    differ = manifest.declaration_differences(ref.manifest, app)
    if not tolerance_only(differ):
        require_declared_contract(project, ref, app)  # raises: another output, kind, dtype, entry or sample
    elif differ:
        log(f"kernodeck: calibrate: judging the tolerance pyproject declares now (the reference recorded another: "
            f"{'; '.join(differ)})")
    final = (out or project.runs / f"calibrate-{time.strftime('%Y%m%d-%H%M%S')}-{plat.id}").resolve()
    if out is not None:
        final = outdir.check(out, what="the calibration", tip=tips.nox("calibrate", "--out", "runs/NAME"),
                             root=project.root, allowed=(project.runs,))
    with holding(project, plat), outdir.staged(final, "calibration") as staging:  # swapped in whole, signed
        python = rebuild(project, plat, lock_path).python
        base = base_config(project, ref, str(plat.variant.backend))
        variations = plan(cpu_flags(), os.cpu_count() or 1, str(plat.variant.backend), os.uname().machine)
        left_out = callers_numerics(base)
        if left_out:
            log("kernodeck: calibrate: left out of every variation, as the caller had set them: "
                + " ".join(f"{k}={v}" for k, v in left_out.items()))
        runs = run_all(python, staging, base, variations, staging / "margins.json", deadlines.load(project.tool))
        margins = _margins(staging / "margins.json", runs)
        flip = (ref.manifest.get("criterion") or {}).get("flip_bound")
        result = Calibration(plat.id, ref.id, runs, _analyse(app, runs, margins, flip), margins, started, differ,
                             callers_numerics=left_out)
        write_json(staging / "calibration.json", result.as_dict())
        write_atomic(staging / "calibration.md", render(result))
        write_atomic(staging / "calibration.svg", svg.calibration_chart(chart_data(result)))
    if write:
        write_proposal(project.root / "pyproject.toml", result)
    return result, final


# What calibrate changes from verify's runner configuration: the outputs measured under the DECLARED tolerance (the
# one judged, whatever the reference recorded), and each process's variation (the first one's margin search).
CHANGES = Changes((Change.DECLARED_TOLERANCES, Change.VARIATION))


def base_config(project: Project, ref: manifest.Reference, backend: str) -> dict[str, Any]:
    """The runner configuration every variation starts from (``run_all`` adds the variation): verify's, with
    :data:`CHANGES`."""
    return runner_config(project, declaration(project), ref, backend, CHANGES, session="calibrate")


def _margins(margin_file: Path, runs: list[VariationRun]) -> dict[str, Any]:
    """The margin search's records, which the first variation that ran wrote; its failure, named, when it did not."""
    if not margin_file.exists():
        failed = next((r for r in runs if r.status == "failed"), None)
        # calibrate's own run is what to repeat: verify runs another process (the caller's variables kept, no margin
        # search), which may pass (red-team pass 39, MSG4)
        raise KernodeckError(
            f"calibrate's {failed.variation.name if failed else 'declared'} run failed before its margin search "
            f"ended: {failed.error if failed else 'no run'}",
            tip=f"fix what it names, then: {tips.nox('calibrate')}")
    margins: dict[str, Any] = json.loads(margin_file.read_text(encoding="utf-8"))
    return margins


def _analyse(app: Application, runs: list[VariationRun], margins: dict[str, Any], flip: Any) -> list[OutputCalibration]:
    """Each declared output: its noise in every variation that passed against its margin of use (and the reference's
    flip bound, where the criterion judges nearest neighbours of that output)."""
    results = []
    for name, output in app.outputs.items():
        noise = {r.variation.name: r.outputs[name]["numbers"] for r in runs
                 if r.status == "passed" and name in r.outputs}
        results.append(analyse_output(name, output.kind, output.tolerance, noise, margins["outputs"][name],
                                      flip if isinstance(flip, dict) and flip.get("output") == name else None))
    return results


def tolerance_only(differences: list[str]) -> bool:
    """Whether the declaration differs from the reference's record only in tolerance numbers or justifications
    (``outputs.NAME.KEY: ...`` lines, KEY one of a kind's keys in kinds.py): what calibrate judges may be edited
    without a new reference."""
    editable = {"justification", *(key for kind in kinds.KINDS.values() for key in kind.KEYS)}
    for line in differences:
        parts = line.split(":", 1)[0].split(".")
        if len(parts) != 3 or parts[0] != "outputs" or parts[2].replace("_", "-") not in editable:
            return False
    return True

