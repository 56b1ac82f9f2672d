"""The application's own work under Kernodeck's in-env guards against the bare script doing the same work (issue 29).

Kernodeck's side: the in-env runner's ``settings`` and ``application`` steps (``verify`` limited to those two, env
reused), with everything a verify has on there: Kernodeck's in-env files and the entry loaded from their verified
bytes (``inenv/_package.py``, ``inenv/verified.py``), the closed world's audit hook recording what the application
reads and judging it (``inenv/seen.py``, ``inenv/world.py``), the settings read back around each call, the weights
fingerprinted, the shared libraries checked after each step. Measured: the two steps' own seconds, as the run's
report.json records them (torch imported, settings applied, the weights found and checked, the model loaded, the
texts embedded, the outputs written). The bare side: the same work in one plain process (``BARE_SCRIPT``), timed from
its first import to its outputs written. Whole-process seconds of both sides are kept beside (the Kernodeck side's
include the orchestrator's own steps: lock check, inventory, report, dossier).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from bench.timing import Load, Measure, _run, pair_stats
from kernodeck._proc import log

STEPS = ("settings", "application")


def _kernodeck_once(argv: list[str | Path], out: Path, work: Path, env: dict[str, str]) -> tuple[float, float]:
    """(the two steps' seconds from the run's report, the whole command's seconds)."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    _run(argv, cwd=work, env=env)
    whole = time.perf_counter() - start
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    steps = {s["name"]: float(s["duration_s"]) for s in report["steps"]}
    return sum(steps[name] for name in STEPS), whole


def _bare_once(argv: list[str | Path], work: Path, env: dict[str, str]) -> tuple[float, float]:
    """(the bare script's own seconds from its first import to its outputs written, the whole process's seconds)."""
    start = time.perf_counter()
    proc = _run(argv, cwd=work, env=env)
    whole = time.perf_counter() - start
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["work_s"]), whole


def application_row(
    kd_argv: list[str | Path], out: Path, bare_argv: list[str | Path], work: Path, kd_env: dict[str, str],
    bare_env: dict[str, str], *, repeat: int,
) -> dict[str, Any]:
    """One warm-up of each side (the first writes the env's bytecode cache), then ``repeat`` interleaved pairs."""
    log("bench: warm-up: application steps (Kernodeck) and the bare script")
    _kernodeck_once(kd_argv, out, work, kd_env)
    _bare_once(bare_argv, work, bare_env)
    steps = Measure("settings + application steps (closed world, verified bytes)", "verify -- settings,application")
    bare = Measure("bare script: imports, settings, load, embed, write", "python -I bare_verify.py")
    kd_whole, bare_whole = Measure("whole", "kd"), Measure("whole", "bare")
    load = Load()
    for number in range(1, repeat + 1):
        inside, whole = _kernodeck_once(kd_argv, out, work, kd_env)
        steps.times.append(inside)
        kd_whole.times.append(whole)
        inside_bare, whole_bare = _bare_once(bare_argv, work, bare_env)
        bare.times.append(inside_bare)
        bare_whole.times.append(whole_bare)
        log(f"bench: application pair {number}/{repeat}: steps {inside:.2f}s, bare {inside_bare:.2f}s")
    return {
        "kernodeck": steps.as_dict(),
        "bare": bare.as_dict(),
        **pair_stats(steps, bare),
        "whole": {"kernodeck": kd_whole.as_dict(), "bare": bare_whole.as_dict(),
                  **pair_stats(kd_whole, bare_whole)},
        **load.others(),
        "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
