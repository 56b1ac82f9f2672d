"""The application's own resume as ``nox -s compare`` and the drift map read it from a dossier.

The resume-application step keeps each run of the application's ``train`` in ``resume-application/<run>/``
(kernodeck/inenv/protocol.py): the declared end-state outputs, the loss curve and the progress counters, each as
``NAME.npy`` with ``NAME.ids.json``. Compare and drift read the resumed run's (``resume-application/resumed/``, what a
restarted training ends with), named ``resume-application/NAME`` beside the application's outputs:

- each end-state output under its declared kind (``[tool.kernodeck.application.resume.outputs.NAME]``);
- the loss curve under the rule the step itself applies: allclose with rtol 0 and atol 0 (bitwise) when every dossier
  ran on a CPU, else atol = the declared ``gpu-tolerance``;
- the progress counters under ``exact``.

The declaration is each dossier's ``run-config.json`` (``resume_application``), as for the application's outputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernodeck import tips
from kernodeck._fs import json_object
from kernodeck.dossier.compare import compare_declared, rule
from kernodeck.dossier.compare import render as render_outputs
from kernodeck.errors import ConfigError, KernodeckError
from kernodeck.inenv.protocol import LOSS_CURVE, PROGRESS, RESUME_DIR, RESUMED_RUN, ConfigKey
from kernodeck.inenv.steptable import StepName
from kernodeck.project import resume_contract

PREFIX = f"{RESUME_DIR}/"  # how compare and the drift map name these outputs beside the application's
# What the two dossiers' contracts must share (besides the outputs), each with what a difference means: the first three
# make another training; the gpu tolerance is the bound the step read the loss curve under off a CPU, and the one
# compare reads it under (A's), a setting of the contract like the others, named when the two differ.
ANOTHER_TRAINING = "another training: its numbers are not comparable"
CONTRACT = {
    "entry": ANOTHER_TRAINING,
    "steps": ANOTHER_TRAINING,
    "checkpoint_at": ANOTHER_TRAINING,
    "gpu_tolerance": "another bound on the loss curve off a CPU: the curves are read under A's",
}
OUTPUTS = "outputs"  # the declared end state, compared by :func:`differences` beside the settings above
OUTPUTS_MEAN = "another end state: each output is read under one declaration"


def contract(folder: Path) -> dict[str, Any] | None:
    """The resume contract a dossier's run was given (its ``run-config.json``), or None when it declared none; its
    ``gpu_tolerance`` checked as the declaration's is (absent: the default the step applied)."""
    found = json_object(folder / "run-config.json").get(ConfigKey.RESUME_APPLICATION)
    if not isinstance(found, dict) or not isinstance(found.get("outputs"), dict):
        return None
    where = f"{folder / 'run-config.json'}: {ConfigKey.RESUME_APPLICATION}.gpu_tolerance"
    try:
        tolerance = resume_contract.gpu_tolerance(found.get("gpu_tolerance", resume_contract.GPU_TOLERANCE), where)
    except ConfigError as exc:
        raise KernodeckError(f"{exc} (not what a run of Kernodeck writes: the dossier was edited)",
                             tip=tips.nox("compare", "A", "B") + " (with dossiers as verify wrote them)") from None
    return {**found, "gpu_tolerance": tolerance}


def run_folder(folder: Path) -> Path:
    """Where a dossier keeps its resumed run's files."""
    return folder / RESUME_DIR / RESUMED_RUN


def device(folder: Path) -> str | None:
    """The device a dossier's run used (its backend step), None when it did not record one."""
    for path in sorted((folder / "steps").glob(f"*-{StepName.BACKEND}.json")):
        found = (json_object(path).get("details") or {}).get("device")
        return str(found) if found else None
    return None


def curve_atol(folders: list[Path], declared: dict[str, Any]) -> float:
    """The loss curve's bound: 0 (bitwise) when every dossier ran on a CPU, else the declared gpu-tolerance (a dossier
    that recorded no device counts as not a CPU: the looser bound, never a false BEYOND)."""
    if all(device(folder) == "cpu" for folder in folders):
        return 0.0
    return float(declared["gpu_tolerance"])


def declared(resume: dict[str, Any], atol: float) -> dict[str, dict[str, Any]]:
    """Every output compare and drift read of a resumed run: the declared end state, the loss curve, the counters."""
    rule = "bitwise: every dossier ran on a CPU" if atol == 0 else "the declared gpu-tolerance: a dossier ran elsewhere"
    return {
        **resume["outputs"],
        LOSS_CURVE: {"kind": "allclose", "dtype": "float64", "rtol": 0.0, "atol": atol,
                     "justification": f"the loss of each global step, under the resume step's own rule ({rule})"},
        PROGRESS: {"kind": "exact", "dtype": "int64",
                   "justification": "the progress counters train returned (step, epoch, loader, ...): whole numbers"},
    }


def compare(dir_a: Path, dir_b: Path, python: Path | None) -> dict[str, Any] | None:
    """B's resumed run against A's, output by output under A's declared kinds; None when neither declares a resume."""
    ca, cb = contract(dir_a), contract(dir_b)
    if ca is None and cb is None:
        return None
    atol = curve_atol([dir_a, dir_b], ca or cb or {})
    result = compare_declared(declared(ca, atol) if ca else None, declared(cb, atol) if cb else None,
                              run_folder(dir_a), run_folder(dir_b), python)
    result["not_declared"] = [side for side, found in (("a", ca), ("b", cb)) if found is None]
    # the outputs are named output by output above (declared differently, only in one): the settings here
    result["contract"] = {k: v for k, v in differences(ca, cb).items() if k in CONTRACT} if ca and cb else {}
    return result


def differences(ca: dict[str, Any], cb: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What two dossiers' resume contracts (:func:`contract`) differ in, each with both values: every setting of
    :data:`CONTRACT`, then ``outputs``, the names of the end-state outputs one declares only or the two declare
    otherwise (kind, dtype, tolerance; the justification may be reworded). Compare and the drift map name these."""
    found = {key: {"a": ca.get(key), "b": cb.get(key)} for key in CONTRACT if ca.get(key) != cb.get(key)}
    oa, ob = ({n: rule(t) for n, t in c["outputs"].items()} for c in (ca, cb))
    names = sorted(n for n in set(oa) | set(ob) if oa.get(n) != ob.get(n))
    if names:
        found[OUTPUTS] = {"a": sorted(oa), "b": sorted(ob), "names": names}
    return found


def describe(differ: dict[str, dict[str, Any]], a: str = "A", b: str = "B") -> list[str]:
    """One line per difference of :func:`differences`, the two dossiers called ``a`` and ``b``."""
    lines = []
    for key, pair in differ.items():
        if key == OUTPUTS:
            lines.append(f"DIFFERENT RESUME CONTRACT: `outputs` {', '.join(pair['names'])} declared otherwise or by "
                         f"one only ({pair['a']} in {a}, {pair['b']} in {b}; {OUTPUTS_MEAN})")
        else:
            lines.append(f"DIFFERENT RESUME CONTRACT: `{key}` {json.dumps(pair['a'])} in {a}, {json.dumps(pair['b'])} "
                         f"in {b} ({CONTRACT[key]})")
    return lines


def render(result: dict[str, Any]) -> list[str]:
    """The Markdown lines of compare's section on the application's resume."""
    lines = [f"The resumed run of each dossier (`{RESUME_DIR}/{RESUMED_RUN}/`): its end state under the declared "
             f"kinds, its loss curve (`{LOSS_CURVE}`) and its progress counters (`{PROGRESS}`).", ""]
    for side in result["not_declared"]:
        lines.append(f"{side.upper()} declares no resume of the application (its run-config.json has none; "
                     "a reference folder keeps no resumed run): nothing to compare it with")
    lines += describe(result["contract"])
    if result["not_declared"]:
        return lines
    return lines + render_outputs(result)
