"""Calibration inside the rebuilt env: one variation of the legitimate settings per process, and the margin of use.

    <venv>/bin/python -I <kernodeck>/inenv/calibrate.py --config VARIATION/run-config.json

Run by path like runner.py (its siblings are loaded as the package ``kernodeck_inenv`` by _package.py; nothing is
put on sys.path). One process runs only what a variation needs: the settings (with the variation's change applied
over the declared ones), the system chain, the backend, the reference, the application's entry, the reread, then
each output's numbers against the reference through ``tolerance.compare`` (the one comparison implementation). It
leaves a dossier-shaped folder (``steps/``, ``settings.json``, ``system.json``, ``outputs/``, ``noise.json``) that
``drift`` reads.

With ``margin_file`` in the config (the first variation's process, which has the reference and the application's
criterion loaded anyway), it also searches each output's margin of use (margin.py): the smallest perturbation of the
reference outputs that makes the criterion fail, with the numbers of that perturbation measured the way the noise is
measured.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import runpy
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _patch_settings(variation: dict[str, Any]) -> None:
    """Every call of settings.apply (the declared settings, before each entry call) applies the variation over it."""
    from kernodeck_inenv import settings

    original = settings.apply

    def apply(deterministic: bool = True) -> dict[str, Any]:
        import torch

        applied = original(deterministic=bool(variation.get("deterministic", True)) and deterministic)
        if variation.get("threads"):
            torch.set_num_threads(int(variation["threads"]))
        if variation.get("tf32"):
            # the knobs settings.apply set to "ieee", back to TF32 (the new API where this torch has it, as the
            # declared settings use it; the legacy flags otherwise: torch refuses a mix of the two)
            owners = [settings._knob_owner(torch, knob) for knob in settings.precision_knobs(torch)]
            if any(owner is not None for owner in owners):
                for owner in owners:
                    if owner is not None:
                        owner.fp32_precision = "tf32"
            else:
                torch.backends.cuda.matmul.allow_tf32 = True
                torch.backends.cudnn.allow_tf32 = True
                torch.set_float32_matmul_precision("high")
            applied = {**applied, "tf32": "on (the variation)"}
        return applied

    settings.apply = apply  # type: ignore[assignment]


def _step(ctx: Any, out: Path, number: int, name: str, func: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One step by the runner's rule (steprun.py: what must still hold after it, checked as verify checks it)."""
    from kernodeck_inenv import steprun
    from kernodeck_inenv._common import say, write_json_atomic

    say(f"[kernodeck] {name}: start ({time.strftime('%H:%M:%S')})")
    result: dict[str, Any] = {"name": name, "interpreter": sys.executable, **steprun.run(ctx, name, func)}
    write_json_atomic(out / "steps" / f"{number:02d}-{name}.json", result)
    say(f"[kernodeck] {name}: {result['status']} in {result['duration_s']:.2f}s")
    return result


def run_variation(config: dict[str, Any], out: Path) -> int:
    """The steps a variation needs, in this process; ``noise.json`` holds each output's numbers (or the failure)."""
    runpy.run_path(str(HERE / "_package.py"))  # HERE as the package kernodeck_inenv (the one loader)
    from kernodeck_inenv import application, settings, system, tolerance
    from kernodeck_inenv._common import Context, write_json_atomic
    from kernodeck_inenv.margin import margins, numbers
    from kernodeck_inenv.protocol import ConfigKey
    from kernodeck_inenv.steptable import VARIATION_STEPS, StepName, StepRow

    # verified bytes only (_package.py), as in runner.py
    sys.modules["kernodeck_inenv"].__loader__.check(Path(__file__).resolve(), config.get(ConfigKey.INENV_SHA256))
    variation = dict(config["variation"])
    if variation.get("threads"):
        # Before torch starts its pools; the patched settings.apply sets it again before each entry call.
        os.environ["OMP_NUM_THREADS"] = str(variation["threads"])
    _patch_settings(variation)
    ctx = Context(config=config, out=out)
    ctx.state["deterministic"] = bool(variation.get("deterministic", True))

    def settings_step() -> dict[str, Any]:
        import torch

        applied = settings.apply(deterministic=True)
        record = settings.read_back(torch)
        record["applied"] = applied
        record["variation"] = variation
        ctx.state["settings"] = record
        return record

    def step_of(row: StepRow) -> Callable[[], dict[str, Any]]:
        """The row's function, as the runner calls it; the settings step applies the variation's settings."""
        if row.name == StepName.SETTINGS:
            return settings_step
        function = getattr(importlib.import_module(f"kernodeck_inenv.{row.module}"), row.function)
        return lambda: function(ctx)  # type: ignore[no-any-return]

    steps = [(row.name, step_of(row)) for row in VARIATION_STEPS]  # the rows flagged ``variation``
    noise: dict[str, Any] = {"variation": variation, "outputs": {}}
    for number, (name, func) in enumerate(steps, start=1):
        result = _step(ctx, out, number, name, func)
        if result["status"] == "failed":
            noise["failed"] = {"step": name, "error": result.get("error", "")}
            break
    else:
        import torch

        ids = [str(i["id"]) for i in application.sample(ctx)]
        for name, decl in ctx.config["application"]["outputs"].items():
            verdict = tolerance.compare(decl, ctx.state["reread"][name], ctx.state["reference"][name], ids)
            noise["outputs"][name] = {
                "passed": bool(verdict["passed"]),
                "summary": verdict["summary"],
                "numbers": numbers(verdict),
                "bitwise_equal": bool(verdict.get("bitwise_equal", False)),
            }
        # What actually ran: the threads after the entry (an application may pin its own) and torch's ISA level.
        noise["observed"] = {
            "torch.num_threads_after_entry": torch.get_num_threads(),
            "torch_cpu_capability": system.torch_cpu_capability(torch),
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "device": str(ctx.state.get("device", "cpu")),
        }
    found = None
    if config.get("margin_file") and "reference" in ctx.state and "failed" not in noise:
        # the margin search calls the criterion hundreds of times: a step of its own, held after it as any step
        margin = _step(ctx, out, len(steps) + 1, "margin", lambda: margins(ctx))
        if margin["status"] == "failed":
            noise["failed"] = {"step": "margin", "error": margin.get("error", "")}
        else:
            found = margin["details"]
    for file, key in (("settings.json", "settings"), ("system.json", "system")):
        if key in ctx.state:
            write_json_atomic(out / file, ctx.state[key])
    write_json_atomic(out / "noise.json", noise)
    if found is not None:
        write_json_atomic(Path(config["margin_file"]), found)
    return 1 if "failed" in noise else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text(encoding="utf-8"))
    root = Path(config["project_root"])
    config["application"]["sample"] = str(root / config["application"]["sample"])
    config["reference"]["dir"] = str(root / config["reference"]["dir"])
    return run_variation(config, args.config.resolve().parent)


if __name__ == "__main__":
    runpy.run_path(str(HERE / "_package.py"))  # first: the siblings, and this process registered for its stacks
    status = main()
    from kernodeck_inenv._common import end  # loaded by main() before the application's code ran

    end(status)  # every file is written atomically; tearing down torch checks nothing
