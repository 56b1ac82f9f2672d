"""calibrate's variations: each source of legitimate variation this machine offers (or why it cannot), and one
variation's in-env process (``inenv/calibrate.py``), read back from the dossier-shaped folder it leaves."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck._fs import write_atomic, write_json
from kernodeck._proc import clean_env, first_error, log
from kernodeck.env import start as inenv_start
from kernodeck.inenv.protocol import ConfigKey
from kernodeck.project.deadlines import Deadlines
from kernodeck.supervise import Stop, Stopped, supervise

IN_ENV = Path(__file__).resolve().parents[1] / "inenv" / "calibrate.py"


@dataclass(frozen=True)
class IsaLevel:
    """One x86 CPU level as each library that picks its kernels from the CPU reads it: ATen's own vector kernels
    (``ATEN_CPU_CAPABILITY``), MKL's GEMMs (``MKL_ENABLE_INSTRUCTIONS``) and oneDNN's convolutions and matmuls
    (``ONEDNN_MAX_CPU_ISA``, and ``DNNL_MAX_CPU_ISA``, its older name). ATen's alone leaves the bulk of a model's
    compute on this CPU's own path (red-team pass 36, CAL1: a float32 linear moves by 7.6e-5 under MKL's AVX2 level and
    by 0 under ATen's)."""

    aten: str
    needs: tuple[str, ...]  # the /proc/cpuinfo flags it needs (ATen's own cpu feature checks)
    mkl: str
    onednn: str

    def env(self) -> dict[str, str]:
        """The variables that put torch, MKL and oneDNN at this level."""
        return {"ATEN_CPU_CAPABILITY": self.aten, "MKL_ENABLE_INSTRUCTIONS": self.mkl,
                "ONEDNN_MAX_CPU_ISA": self.onednn, "DNNL_MAX_CPU_ISA": self.onednn}


# x86 kernel levels torch dispatches to; MKL's lowest is SSE4_2, oneDNN's SSE41 (ATen's "default": no AVX).
ISA_LEVELS: tuple[IsaLevel, ...] = (
    IsaLevel("default", (), "SSE4_2", "SSE41"),
    IsaLevel("avx2", ("avx2", "fma"), "AVX2", "AVX2"),
    IsaLevel("avx512", ("avx512f", "avx512bw", "avx512vl", "avx512dq"), "AVX512", "AVX512_CORE"),
)


@dataclass(frozen=True)
class Variation:
    """One source of legitimate variation; ``available`` False with ``why`` when this machine cannot offer it."""

    name: str
    what: str
    threads: int | None = None
    isa: str | None = None  # ATen's level name; None: torch's own choice
    deterministic: bool = True
    tf32: bool = False
    available: bool = True
    why: str = ""
    levels: tuple[tuple[str, str], ...] = ()  # the CPU level's variables (x86: ATen's, MKL's and oneDNN's)

    def env(self) -> dict[str, str]:
        extra: dict[str, str] = dict(self.levels)
        if self.isa is not None:
            extra["ATEN_CPU_CAPABILITY"] = self.isa
        if self.threads is not None:
            extra["OMP_NUM_THREADS"] = str(self.threads)
        return extra

    def config(self) -> dict[str, Any]:
        return {"name": self.name, "threads": self.threads, "isa": self.isa, "deterministic": self.deterministic,
                "tf32": self.tf32}


def cpu_flags(text: str | None = None) -> set[str] | None:
    """The CPU's feature flags from /proc/cpuinfo (None where there is none to read: not Linux)."""
    if text is None:
        try:
            text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        except OSError:
            return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def plan(flags: set[str] | None, cpus: int, backend: str, arch: str) -> list[Variation]:
    """Every variation, in run order: the declared settings first (it also finds the margins)."""
    plan_: list[Variation] = [Variation("declared", "the declared settings (torch's own threads and CPU level)")]
    plan_.append(Variation("threads-1", "1 thread", threads=1))
    if cpus > 1:
        plan_.append(Variation(f"threads-{cpus}", f"{cpus} threads (this machine's count)", threads=cpus))
    else:
        plan_.append(Variation("threads-all", "this machine's thread count", available=False,
                               why="this machine has one CPU: the same as threads-1"))
    x86 = arch in ("x86_64", "amd64", "AMD64", "i686")
    for isa in ISA_LEVELS:
        level, needs = isa.aten, isa.needs
        if not x86:  # no MKL, and oneDNN's levels are ARM's: ATen's alone
            name, what = f"isa-{level}", f"ATEN_CPU_CAPABILITY={level}"
            if level == "default":
                plan_.append(Variation(name, what, isa=level))
            else:
                plan_.append(Variation(name, what, isa=level, available=False, why=f"an x86 level; this CPU is {arch}"))
            continue
        name, what = f"isa-{level}", " ".join(f"{k}={v}" for k, v in isa.env().items() if k != "DNNL_MAX_CPU_ISA")
        levels = tuple(isa.env().items())
        lacking = sorted(set(needs) - flags) if flags is not None else list(needs)
        if flags is None and needs:
            plan_.append(Variation(name, what, isa=level, available=False, why="no /proc/cpuinfo to read flags from",
                                   levels=levels))
        elif lacking:
            plan_.append(Variation(name, what, isa=level, available=False,
                                   why=f"this CPU lacks {', '.join(lacking)}", levels=levels))
        else:
            plan_.append(Variation(name, what, isa=level, levels=levels))
    plan_.append(Variation("nondeterministic", "deterministic algorithms off (cudnn.benchmark on)",
                           deterministic=False))
    gpu = backend in ("cuda", "rocm")
    plan_.append(Variation("tf32", "TF32 on (the declared settings have it off)", tf32=True, available=gpu,
                           why="" if gpu else f"TF32 is a GPU matmul mode; the backend here is {backend}"))
    return plan_


@dataclass(frozen=True)
class VariationRun:
    variation: Variation
    folder: str  # relative to the calibration folder
    status: str  # passed | failed | unavailable
    seconds: float = 0.0
    error: str = ""
    observed: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)


def run_in_env(python: Path, folder: Path, config: dict[str, Any], variation: Variation,
               limits: Deadlines) -> tuple[int, float, str, Stopped | None]:
    """One variation's process, supervised (deadlines, stall, signals); its exit code, seconds, the tail of its
    stderr, and why it was stopped (None: it ended by itself)."""
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "run-config.json", config)
    argv = inenv_start.argv(python, str(IN_ENV), "--config", str(folder / "run-config.json"))
    # every variation starts from torch's own choice, never the caller's leftovers (callers_numerics: shown)
    env = inenv_start.environ(RUNNER_ENV, kept(config), drop_numerics=True)
    env.update(variation.env())
    shown = " ".join(f"{k}={v}" for k, v in variation.env().items())
    if shown:
        log(f"kernodeck: calibrate: {variation.name}: with {shown}")
    start = time.perf_counter()
    ended = supervise(argv, env=env, cwd=folder, deadlines=limits, root=Path(config["project_root"]),
                      label=f"calibrate {variation.name}")
    lines = [ln for ln in ended.tail if ln.strip()]
    return ended.code, time.perf_counter() - start, "\n".join(lines[-5:]), ended.stopped


def kept(config: dict[str, Any]) -> list[str]:
    """The caller's variables every variation keeps as the project declares them: its ``variables``, and the loaders'
    variables that name only its declared libraries (``ld-preload``)."""
    declared = list(config.get(ConfigKey.VARIABLES) or [])
    return declared + inenv_start.declared_loaders(clean_env(), list(config.get(ConfigKey.LIBRARIES) or []))


def callers_numerics(config: dict[str, Any]) -> dict[str, str]:
    """The caller's recorded variables no run needs (:func:`kernodeck.env.start.numerics`; not the declared ones:
    :func:`kept`) that every variation runs without, each value redacted: calibration.md shows them."""
    from kernodeck.sources.redaction import redact_text, secrets

    env, found, declared = clean_env(), secrets(), kept(config)
    return {name: redact_text(env[name], secrets=found) for name in sorted(env)
            if inenv_start.numerics(name, declared)}


def stopped_variation(variation: Variation, folder: Path, rel: str, seconds: float, stopped: Stopped) -> VariationRun:
    """A variation a deadline, a stall or a signal stopped: named with its step, layer and the user's line; every
    stack in its folder's ``steps/<step>.stacks.txt``."""
    step = stopped.step or "checks"
    stacks = f"{rel}/steps/{step}.stacks.txt"
    write_atomic(folder / "steps" / f"{step}.stacks.txt", stopped.stacks)
    log(f"kernodeck: calibrate: {variation.name}: {stopped.kind} in {step}: {stopped.message(stacks)}")
    at = f" at {stopped.user_frame}" if stopped.user_frame else ""
    return VariationRun(variation, rel, "failed", seconds,
                        f"{step} {stopped.kind}: layer {stopped.layer}{at}; {stopped.message(stacks)}")


def read_variation(variation: Variation, folder: Path, rel: str, code: int, seconds: float, tail: str) -> VariationRun:
    noise_file = folder / "noise.json"
    if not noise_file.exists():
        return VariationRun(variation, rel, "failed", seconds, f"the process ended (exit {code}): {tail[-400:]}")
    noise = json.loads(noise_file.read_text(encoding="utf-8"))
    if "failed" in noise:
        return VariationRun(variation, rel, "failed", seconds,
                            f"{noise['failed']['step']}: {noise['failed']['error'][:400]}")
    if code != 0:  # its numbers written, then the process failed: no measured variation (red-team pass 66, CALEXIT1)
        return VariationRun(variation, rel, "failed", seconds,
                            f"the process failed after its last step (exit {code}): {first_error(tail)[:400]}")
    run = VariationRun(variation, rel, "passed", seconds, observed=noise.get("observed", {}),
                       outputs=noise["outputs"])
    log(f"kernodeck: calibrate: {variation.name}: done in {seconds:.1f}s ("
        + "; ".join(f"{n}: {_numbers_text(o['numbers'])}" for n, o in run.outputs.items()) + ")")
    return run


def _numbers_text(nums: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in nums.items())


def run_all(python: Path, staging: Path, base: dict[str, Any], variations: list[Variation],
            margin_file: Path, limits: Deadlines) -> list[VariationRun]:
    """Each variation in its own process, in plan order, under ``staging/variations/NN-name``; the first one that
    runs also searches the margins of use into ``margin_file``. An unavailable one is listed with its reason."""
    runs: list[VariationRun] = []
    interrupted = ""
    for number, variation in enumerate(variations):
        rel = f"variations/{number:02d}-{variation.name}"
        if not variation.available:
            log(f"kernodeck: calibrate: {variation.name}: unavailable ({variation.why})")
            runs.append(VariationRun(variation, rel, "unavailable", error=variation.why))
            continue
        log(f"kernodeck: calibrate: {variation.name}: {variation.what}")
        config = {**base, "variation": variation.config()}
        if not runs or all(r.status == "unavailable" for r in runs):
            config["margin_file"] = str(margin_file)
        if interrupted:
            runs.append(VariationRun(variation, rel, "failed", error=f"not run: {interrupted}"))
            continue
        code, seconds, tail, stopped = run_in_env(python, staging / rel, config, variation, limits)
        if stopped is None:
            runs.append(read_variation(variation, staging / rel, rel, code, seconds, tail))
            continue
        runs.append(stopped_variation(variation, staging / rel, rel, seconds, stopped))
        if stopped.kind is Stop.INTERRUPTED:
            interrupted = f"the calibration was interrupted ({stopped.signal}) during {variation.name}"
    return runs
