"""The bench's instrument: whole processes timed in interleaved pairs, their ratios and spread, the machine's load
meanwhile."""

from __future__ import annotations

import os
import platform as _platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck._proc import clean_env, log, show, uv_available
from kernodeck.errors import KernodeckError


class BenchError(KernodeckError):
    tip = "read the command's output above; the bench runs in a scratch copy under runs/ (kept with --keep)"


@dataclass
class Measure:
    """One command's wall times (seconds), warm-up excluded."""

    name: str
    command: str
    times: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "command": self.command,
            "times_s": [round(t, 3) for t in self.times],
            "median_s": round(self.median, 3),
            "min_s": round(min(self.times), 3),
            "max_s": round(max(self.times), 3),
            "note": self.note,
        }


def pair_stats(a: Measure, b: Measure) -> dict[str, Any]:
    """The ratio of each interleaved pair (a over b): its median and spread, and the ratio of the medians."""
    ratios = [x / y for x, y in zip(a.times, b.times, strict=True)]
    return {
        "ratio": round(statistics.median(ratios), 3),
        "ratio_low": round(min(ratios), 3),
        "ratio_high": round(max(ratios), 3),
        "ratio_of_medians": round(a.median / b.median, 3),
        "pairs": len(ratios),
    }


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """Least squares ``y = fixed + per_item * x`` and how well it fits (r², 1 when every point is on the line)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        raise BenchError("a line needs at least two different sample sizes", tip="--sizes 32,128,512,2048")
    slope, intercept = statistics.linear_regression(xs, ys)
    mean = statistics.fmean(ys)
    total = sum((y - mean) ** 2 for y in ys)
    residual = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return {
        "fixed_s": round(intercept, 3),
        "per_item_ms": round(slope * 1000, 3),
        "r2": round(1 - residual / total, 4) if total else 1.0,
    }


def _run(argv: Sequence[str | Path], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    args = [str(a) for a in argv]
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-15:]
        raise BenchError(f"bench command failed (exit {proc.returncode}): {show(args)}\n" + "\n".join(tail))
    return proc


@dataclass(frozen=True)
class Remove:
    """``rm -rf PATH`` as part of a timed command: a fresh env replaces the previous one on both sides."""

    path: Path


Command = list[str | Path] | Remove


def _timed(
    commands: list[Command], *, cwd: Path, env: dict[str, str], before: Callable[[], object] | None = None
) -> float:
    if before:
        before()
    start = time.perf_counter()
    for command in commands:
        if isinstance(command, Remove):
            shutil.rmtree(command.path, ignore_errors=True)
        else:
            _run(command, cwd=cwd, env=env)
    return time.perf_counter() - start


@dataclass
class Side:
    """One side of a comparison: the commands, how to reset between runs (untimed), its environment."""

    name: str
    commands: list[Command]
    env: dict[str, str]
    before: Callable[[], object] | None = None
    note: str = ""

    def shown(self, root: Path) -> str:
        return " && ".join(_display(["rm", "-rf", c.path] if isinstance(c, Remove) else c, root) for c in self.commands)


def _display(argv: Sequence[str | Path], root: Path) -> str:
    """A command as the table shows it: tools by name, paths relative to the scratch project."""
    out = []
    for arg in map(str, argv):
        if arg in (sys.executable, getattr(sys, "_base_executable", "")):
            out.append("python")
        elif arg == uv_available():
            out.append("uv")
        elif os.path.isabs(arg) and Path(arg).is_relative_to(root):
            out.append(os.path.relpath(arg, root))
        else:
            out.append(arg)
    return show(out)


class Load:
    """The CPU other processes took while a row ran (Linux): a busy neighbour explains a noisy row."""

    def __init__(self) -> None:
        self.wall0, self.busy0, self.own0 = time.monotonic(), _busy_cpu_seconds(), _own_cpu_seconds()

    def others(self) -> dict[str, Any]:
        busy1 = _busy_cpu_seconds()
        if self.busy0 is None or busy1 is None:
            return {}
        others = max(0.0, (busy1 - self.busy0) - (_own_cpu_seconds() - self.own0))
        capacity = (time.monotonic() - self.wall0) * (os.cpu_count() or 1)
        return {"others_cpu_s": round(others, 1), "others_share": round(others / capacity, 3) if capacity else None}


def pair(a: Side, b: Side, *, cwd: Path, repeat: int, warm: bool = True) -> dict[str, Any]:
    """Warm each side once (untimed), then alternate timed runs; the row's record."""
    ma, mb = Measure(a.name, a.shown(cwd), note=a.note), Measure(b.name, b.shown(cwd), note=b.note)
    if warm:
        for side in (a, b):
            log(f"bench: warm-up: {side.name}")
            _timed(side.commands, cwd=cwd, env=side.env, before=side.before)
    load = Load()
    for number in range(1, repeat + 1):
        for side, measure in ((a, ma), (b, mb)):
            seconds = _timed(side.commands, cwd=cwd, env=side.env, before=side.before)
            measure.times.append(seconds)
            log(f"bench: {side.name} run {number}/{repeat}: {seconds:.2f}s")
    return {"kernodeck": ma.as_dict(), "bare": mb.as_dict(), **pair_stats(ma, mb), **load.others()}


def single(side: Side, *, cwd: Path, repeat: int) -> Measure:
    measure = Measure(side.name, side.shown(cwd), note=side.note)
    for number in range(1, repeat + 1):
        seconds = _timed(side.commands, cwd=cwd, env=side.env, before=side.before)
        measure.times.append(seconds)
        log(f"bench: {side.name} run {number}/{repeat}: {seconds:.2f}s")
    return measure


def bench_env() -> dict[str, str]:
    """The environment Kernodeck's side runs in: the caller's, cleaned, and free to cache bytecode.

    A machine that sets ``PYTHONDONTWRITEBYTECODE`` (this one does) would have every Kernodeck command compile its own
    modules again from this checkout (0.3 s a command), which a pip-installed Kernodeck, compiled at install, never
    does, while the bare side's ``-I`` ignores the variable: both sides run without it, and the record says so."""
    env = clean_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def machine() -> dict[str, Any]:
    model = _platform.processor() or _platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if sys.platform == "darwin":
        proc = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=False)
        model = proc.stdout.strip() or model
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "os": _platform.platform(),
        "python": _platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "bytecode_variable_removed": bool(os.environ.get("PYTHONDONTWRITEBYTECODE")),  # bench_env()
    }


def _busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (Linux), to tell how much others used meanwhile."""
    try:
        fields = Path("/proc/stat").read_text(encoding="utf-8").splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    try:
        import resource
    except ImportError:  # not POSIX: _busy_cpu_seconds() is None there too
        return 0.0
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
