"""Run the requested checks in order, in ONE process inside the rebuilt env, writing each result as it finishes.

    <venv>/bin/python -I checks/runner.py --config DOSSIER/run-config.json

Importing torch and sentence-transformers costs seconds, so every check shares this process. A result file is
written per step (``steps/NN-name.json``) the moment it ends: if the process dies, the earlier results stay and the
orchestrator marks the rest. After a failure, later steps are written as not-run and nothing more is computed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent)
)  # -I drops the script's folder: make `checks` importable

from checks._common import CheckFailed, Context, Skip, set_step, write_json_atomic

# step name -> (module, function, title)
STEPS = {
    "settings": ("checks.settings", "run", "determinism settings applied before any compute"),
    "system": ("checks.system", "run", "system chain (OS, driver, CUDA/ROCm, devices, loaded libraries)"),
    "backend": ("checks.backend", "run", "expected backend usable; small computation matches numpy"),
    "reference": ("checks.embeddings", "check_reference", "reference outputs sound (shape, dtype, finite, ids)"),
    "embed": ("checks.embeddings", "embed", "embed the identified sample; write outputs"),
    "reread": ("checks.embeddings", "reread", "reread outputs from disk: count, dims, dtype, finite, id order"),
    "compare": ("checks.embeddings", "compare", "compare with the reference under the declared tolerance"),
    "criterion": ("checks.embeddings", "criterion", "business criterion: paraphrases find their pair"),
    "determinism": ("checks.embeddings", "determinism", "repeat runs in one process; cost of the settings"),
    "resume": ("checks.resume", "run", "training resume in a new process matches the uninterrupted run"),
}


def _layer_of(exc: BaseException) -> str:
    if isinstance(exc, ImportError):
        return "environment"
    if isinstance(exc, (MemoryError,)):
        return "device"
    return "unknown"


def _progress(result: dict[str, object]) -> str:
    """When the step ended and, for work over items (the embedding), its throughput."""
    note = f" (ended {time.strftime('%H:%M:%S')}"
    details = result.get("details")
    if isinstance(details, dict) and "items_per_s" in details:
        note += f"; {details.get('items', '?')} items, {details['items_per_s']} items/s"
    return note + ")"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text(encoding="utf-8"))
    root = Path(__file__).resolve().parent.parent
    for key in ("reference_dir", "sample"):  # relative to the project root that holds this runner
        if key in config:
            config[key] = str(root / config[key])
    out = args.config.resolve().parent  # results go beside the config: the run's dossier folder
    steps_dir = out / "steps"
    steps_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(config=config, out=out)
    failed = None
    for number, name in enumerate(config["steps"], start=1):
        module_name, func_name, title = STEPS[name]
        result: dict[str, object] = {"name": name, "title": title, "interpreter": sys.executable}
        if failed:
            result.update(status="not-run", reason=f"an earlier step failed: {failed}")
            write_json_atomic(steps_dir / f"{number:02d}-{name}.json", result)
            continue
        print(f"[kernodeck] {name}: start ({time.strftime('%H:%M:%S')})", file=sys.stderr, flush=True)
        set_step(name)
        start = time.perf_counter()
        try:
            details = getattr(importlib.import_module(module_name), func_name)(ctx)
            result.update(status="passed", details=details)
        except Skip as exc:
            result.update(status="skipped", reason=str(exc))
        except CheckFailed as exc:
            result.update(status="failed", error=str(exc), layer=exc.layer, details=exc.details)
        except Exception as exc:
            tb = traceback.extract_tb(exc.__traceback__)
            where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
            result.update(
                status="failed",
                error=f"{type(exc).__name__}: {exc}",
                layer=_layer_of(exc),
                details={"raised_at": where, "traceback": traceback.format_exc(limit=8)},
            )
        result["duration_s"] = round(time.perf_counter() - start, 4)
        if result["status"] == "failed":
            failed = name
        write_json_atomic(steps_dir / f"{number:02d}-{name}.json", result)
        ended = f"[kernodeck] {name}: {result['status']} in {result['duration_s']:.2f}s{_progress(result)}"
        print(ended, file=sys.stderr, flush=True)
    # Libraries load lazily (cuDNN at the first convolution, cuBLAS at the first GPU matmul): record the final map.
    if "system" in ctx.state:
        from checks.system import loaded_libraries

        write_json_atomic(out / "loaded-libraries-after-run.json", loaded_libraries())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
