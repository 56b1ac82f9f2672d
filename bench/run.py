"""``nox -s bench``: Kernodeck against the bare tools doing the same work, in ONE run, on the same lock, warm caches.

    nox -s bench [-- --repeat 5 --sizes 32,128,512,2048 --keep]      (python -m bench.run ...)

This is Kernodeck's own instrument: it lives beside the package, not in it. Everything runs in a scratch copy of the
project under ``runs/`` (the committed lock and environments are never touched). Each comparison is whole processes,
as a user runs them, in interleaved pairs (Kernodeck, bare, Kernodeck, bare, ...) after one untimed warm-up of each,
so that a cache or a busy neighbour favours neither side; a pair's ratio cancels most of the load that moves both.
Reported per row: each side's median, the median of the pair ratios and their spread (lowest..highest), and the CPU
other processes took meanwhile. Rows:

- ``nox -s verify`` (env reused) vs one bare process of the rebuilt env doing the sample work (settings, import,
  load the weights, embed, write, reread, compare with the reference);
- ``nox -s rebuild -- --fresh`` vs ``rm -rf`` + ``uv venv`` + ``uv pip install --require-hashes --no-deps
  --link-mode copy`` + ``pip check`` + ``pip freeze --all`` (files copied, no bytecode compiled, on both sides;
  Kernodeck also hashes every installed file against its RECORD and writes the env's file snapshot);
- the CI job as a whole: ``nox -s rebuild -- --fresh`` then the first ``nox -s verify`` vs the bare install above
  then the bare script (below) in the env it made;
- ``nox -s lock -- --platform P --resolver uv`` vs the ``uv pip compile`` command its header records (same inputs,
  seeded with the same lock);
- ``nox -s lock -- --check`` whole, against its 1 s target (and the check alone, ``python -m kernodeck lock --check``);
- the same in a ``kernodeck init``-made project (``pip install nox /path/to/kernodeck``), against its 0.5 s target;
- the first ``nox -s verify`` on a fresh ``git clone`` (session venv, env rebuilt from the warm cache, every check)
  against the next one there;
- verify's cost as the sample grows (``--sizes`` texts: the reference sample cycled, fresh ids), with the line it
  grows along (least squares: fixed cost + cost per text);
- the ``settings`` and ``application`` steps' own seconds (verified bytes, the closed world's audit hook, the
  weights fingerprinted) vs the bare script's same work, timed inside each process (bench/application.py);
- the weights fingerprint of a synthetic ``--hash-mb`` snapshot vs ``sha256sum`` over the same files, and its
  unchanged check (bench/hashing.py).

``--only verify,application,hashing`` runs those rows alone and adds them to the last whole run's record, with their
date.

Writes ``bench/latest.json`` and ``bench/latest.md`` and docs/speed.md's section between the bench markers, from that
one run. No test asserts a time: speed is judged here only.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform as _platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernodeck._fs import write_atomic, write_json
from kernodeck._proc import clean_env, log, show, uv_available
from kernodeck.env.envdirs import current_env, env_python
from kernodeck.errors import KernodeckError
from kernodeck.lock import lockfile
from kernodeck.project.config import Project, load_project
from kernodeck.project.platforms import Platform, resolve_platform
from kernodeck.sources import PYPI, Source, index_args, index_of, machine_sources, reachable, uv_environment

BENCH_VERSION = 2
# Ratios (Kernodeck over bare) except lock-check, which is seconds for the whole command.
TARGETS = {"verify": 1.15, "rebuild": 1.2, "job": 1.1, "lock-uv": 1.3, "lock-check": 1.0, "lock-check-init": 0.5,
           "application": 1.15, "hash-first": 1.3, "hash-unchanged": 0.2}
UNITS = {"verify": "x", "rebuild": "x", "job": "x", "lock-uv": "x", "lock-check": "s", "lock-check-init": "s",
         "application": "x", "hash-first": "x", "hash-unchanged": "s"}
# The rows that run alone too (--only): the in-env guards' cost (bench/application.py), the weights fingerprint
# (bench/hashing.py); measured alone, they are merged into the last whole run's record, each with its own date.
PIECES = ("verify", "application", "hashing")
LOCK_UV_PLATFORM = "cp311-linux_x86_64-cu130"
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"
PROJECT_ITEMS = ("pyproject.toml", "noxfile.py", "kernodeck", "checks", "requirements", "lockfiles", "dossier", "bench")
SCALING_STEPS = ("settings", "backend", "application", "reread", "determinism")

# The bare script: one process doing the sample work of verify and nothing else (no report, no other checks).
BARE_SCRIPT = """
import importlib, json, random, sys, time
from pathlib import Path

started = time.perf_counter()

cfg = json.loads(sys.argv[1])
import numpy as np
import torch
from sentence_transformers import SentenceTransformer

random.seed(1234); np.random.seed(1234); torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False
torch.set_float32_matmul_precision("highest")
package = importlib.import_module(cfg["module"])
model = SentenceTransformer(str(Path(package.__file__).resolve().parent / cfg["subdir"]), device="cpu",
                            local_files_only=True)
model.max_seq_length = cfg["max_seq_length"]
items = [json.loads(line) for line in Path(cfg["sample"]).read_text(encoding="utf-8").splitlines() if line.strip()]
ours = model.encode([i["text"] for i in items], batch_size=cfg["batch_size"], convert_to_numpy=True,
                    normalize_embeddings=cfg["normalize"], show_progress_bar=False)
out = Path(cfg["out"]); out.mkdir(parents=True, exist_ok=True)
np.save(out / "embeddings.npy", ours)
(out / "ids.json").write_text(json.dumps([i["id"] for i in items]), encoding="utf-8")
work_s = time.perf_counter() - started  # imports, settings, load, embed, write: the application's own work
ours = np.load(out / "embeddings.npy", allow_pickle=False)
assert json.loads((out / "ids.json").read_text(encoding="utf-8")) == [i["id"] for i in items]
assert ours.shape == (len(items), cfg["dim"]) and np.isfinite(ours).all()
ref = np.load(Path(cfg["reference"]) / "embeddings.npy", allow_pickle=False)
ours64, ref64 = ours.astype(np.float64), ref.astype(np.float64)
cos = (ours64 * ref64).sum(axis=1) / (np.linalg.norm(ours64, axis=1) * np.linalg.norm(ref64, axis=1))
max_abs = float(np.abs(ours64 - ref64).max())
ok = cos.min() >= cfg["cosine_min"] and max_abs <= cfg["max_abs"]
print(json.dumps({"min_cosine": float(cos.min()), "max_abs": max_abs, "ok": bool(ok), "work_s": work_s}))
sys.exit(0 if ok else 1)
"""


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


def _copy_project(src_root: Path, dest: Path) -> None:
    dest.mkdir(parents=True)
    for item in PROJECT_ITEMS:
        src = src_root / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=shutil.ignore_patterns("__pycache__", "history", "latest.*"))
        elif src.exists():
            shutil.copy2(src, dest / item)


def _header_command(lock_file: Path) -> list[str]:
    command = lockfile.read(lock_file).first("command")
    if not command:
        raise BenchError(f"{lock_file.name} records no command to compare with")
    return shlex.split(command)


def _bare_lock(recorded: list[str], lock_file: Path, seed: Path, root: Path) -> Command:
    """The lock header's public command, runnable: the resolver by path, the output into a seeded scratch file."""
    rel_final = str(lock_file.relative_to(root))
    start = 0
    while start < len(recorded) and re.fullmatch(r"[A-Z_]+=\S*", recorded[start]):
        start += 1  # VAR=value before the command (MACOSX_DEPLOYMENT_TARGET): the bare side gets it as Kernodeck does
    argv = [str(seed) if a == rel_final else a for a in recorded[start:]]
    if argv[0] == "uv":
        return [uv_available() or "uv", *argv[1:]]
    raise BenchError(f"the bench compares uv locks only; {lock_file.name} was made with {argv[0]}")


def _sample(reference_sample: Path, size: int, out: Path) -> Path:
    texts = [
        json.loads(line)["text"] for line in reference_sample.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    lines = [json.dumps({"id": f"bench-{i:05d}", "text": texts[i % len(texts)]}) for i in range(size)]
    write_atomic(out, "\n".join(lines) + "\n")
    return out


def _verify_argv(plat: Platform, out: Path, steps: Sequence[str], extra: dict[str, Any] | None = None) -> Command:
    spec = {"platform": plat.id, "out": str(out), "steps": list(steps), "extra": extra or {}}
    return [sys.executable, "-m", "bench.run", "--verify-steps", json.dumps(spec)]


def _verify_steps(spec_json: str) -> int:
    """``verify --no-rebuild`` limited to some in-env steps, on another sample (the scaling rows)."""
    from kernodeck.inenv.protocol import Status
    from kernodeck.runformat import manifest
    from kernodeck.verify import verify
    from kernodeck.verify.context import Options
    from kernodeck.verify.record import overall

    spec = json.loads(spec_json)
    project = load_project(Path.cwd())
    plat = resolve_platform(project, spec["platform"])
    extra = dict(spec["extra"])
    if "sample" in extra:  # another sample than the reference's: the application's table with that sample, unhashed,
        # and no reference outputs to hold it to (these runs compare nothing; reread checks rows against the sample)
        declared = manifest.load(project).run_config(project)["application"]
        extra["application"] = {**declared, "sample": extra.pop("sample"), "sample_sha256": None}
        extra["reference"] = None
    opts = Options(out=Path(spec["out"]), rebuild=False, steps=tuple(spec["steps"]), extra_config=extra)
    report, _ = verify(project, plat, opts)
    # a timing run of some steps: they must pass, but it stands on no claim of a verify (no compare, no resume...)
    return 0 if overall(report.steps) is Status.PASSED else 1


def _nox() -> list[str]:
    if importlib.util.find_spec("nox") is None:
        raise BenchError("nox is not installed beside the bench", tip="nox -s bench  (installs it)")
    return [sys.executable, "-m", "nox"]


def _nox_backend() -> str:
    """Which venv backend ``uv|virtualenv`` picks for the sessions the bench runs (uv when nox can find it)."""
    return "uv" if uv_available() or importlib.util.find_spec("uv") is not None else "virtualenv"


def _latest_report(runs: Path) -> dict[str, Any]:
    reports = sorted(runs.glob("*/report.json"), key=lambda p: p.stat().st_mtime)
    if not reports:
        raise BenchError(f"no verify report under {runs}")
    data: dict[str, Any] = json.loads(reports[-1].read_text(encoding="utf-8"))
    return data


def _files_check(report: dict[str, Any]) -> dict[str, Any]:
    """The every-file check of a verify (its inventory step's ``files`` details): entries, seconds."""
    step: dict[str, Any] = next((s for s in report.get("steps", []) if s.get("name") == "inventory"), {})
    files = (step.get("details") or {}).get("files") or {}
    return {"entries": files.get("entries"), "seconds": files.get("seconds"),
            "bytecode_since_build": files.get("bytecode_since_build")}


def _step_seconds(report: dict[str, Any]) -> dict[str, float]:
    return {s["name"]: round(float(s.get("duration_s", 0.0)), 3) for s in report["steps"]}


def bare_script(work: Path) -> tuple[Path, str]:
    """The bare script written into the scratch project, and its argument: this repository's MiniLM application's
    parameters, sample, reference and tolerance, read from the project as verify reads them."""
    from kernodeck.project import application
    from kernodeck.runformat import manifest

    app = application.load(work)  # this repository's application: the MiniLM embedding
    if app.weights is None or "embeddings" not in app.outputs:
        raise BenchError("the bare script measures this repository's MiniLM embedding application")
    tol = app.outputs["embeddings"].tolerance
    dim = int(manifest.load(load_project(work)).manifest["outputs"]["embeddings"]["shape"][1])
    weights = app.weights.as_config()  # a package source: {package, module, subdir}
    bare_cfg = json.dumps({
        "module": weights["module"], "subdir": weights["subdir"], "max_seq_length": app.params["max-seq-length"],
        "batch_size": app.params["batch-size"], "normalize": app.params["normalize"], "dim": dim,
        "sample": app.sample, "reference": "dossier/reference", "out": "runs/bare-out",
        "cosine_min": tol["cosine-min"], "max_abs": tol["max-abs"],
    })
    script = work / "bare_verify.py"
    write_atomic(script, BARE_SCRIPT.lstrip())
    return script, bare_cfg


def run_bench(
    project: Project,
    plat: Platform,
    *,
    repeat: int = 5,
    sizes: Sequence[int] = (32, 128, 512, 2048),
    keep: bool = False,
    hash_mb: int = 2048,
) -> dict[str, Any]:
    """Every measurement, in one run; returns the record written to bench/latest.json."""
    uv = uv_available()
    if uv is None:
        raise BenchError("uv is not installed here; the bench compares against it", tip="nox -s bench")
    nox = _nox()
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    host = machine()
    whole = Load()
    work = project.runs / f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    _copy_project(project.root, work)
    log(f"bench: scratch project {work}")
    kd = [sys.executable, "-m", "kernodeck"]
    lock_rel = str((project.lockfiles / plat.lock_name).relative_to(project.root))
    env = clean_env()
    sources = machine_sources()
    vindex = index_of(plat.variant)
    # The bare install names the variant's index as Kernodeck does: only when it answers (Kernodeck leaves an
    # unreachable declared index out and installs from this machine's sources).
    online = index_args(vindex) if reachable(vindex.url)[0] else []
    uv_env = clean_env(uv_environment(sources, extra_index=bool(online)))
    rows: dict[str, Any] = {}
    try:
        # --- rebuild ---------------------------------------------------------------------------------------------
        bare_dir = work / "bare-uv"
        base = getattr(sys, "_base_executable", sys.executable)
        py = env_python(bare_dir)
        kd_rebuild = Side("nox -s rebuild -- --fresh", [[*nox, "-s", "rebuild", "--", "--fresh", "--installer", "uv"]],
                          env)
        bare_install: list[Command] = [
            Remove(bare_dir),
            [uv, "venv", "--quiet", "--python", base, bare_dir],
            [uv, "pip", "install", "--quiet", "--python", py, "--require-hashes", "--no-deps", "--link-mode", "copy",
             *online, "-r", lock_rel],
            [py, "-m", "pip", "check"],
            [py, "-m", "pip", "freeze", "--all"],
        ]
        bare_rebuild = Side(
            "bare uv venv + uv pip install (copy) + pip check + pip freeze",
            bare_install,
            uv_env,
            note="removes the previous env as --fresh does; the machine's pip sources handed to uv, as Kernodeck does; "
            "files copied from the cache and no bytecode compiled at install, on both sides",
        )
        rows["rebuild"] = pair(kd_rebuild, bare_rebuild, cwd=work, repeat=repeat)
        shutil.rmtree(bare_dir, ignore_errors=True)
        built = current_env(load_project(work), plat)
        if built is None:
            raise BenchError("the rebuild left no current environment to verify")
        marker = json.loads((built / "kernodeck-complete.json").read_text(encoding="utf-8"))
        rows["rebuild"]["kernodeck_steps_s"] = marker.get("durations_s", {})

        # --- verify ----------------------------------------------------------------------------------------------
        rows["verify"] = verify_piece(work, built, env, repeat=repeat)
        script, bare_cfg = bare_script(work)  # the same script again, for the CI job's bare side
        rows["application"] = application_piece(work, plat, built, env, repeat=repeat)

        # --- the CI job: a fresh rebuild, then the first verify ---------------------------------------------------
        from kernodeck.verify.steps.in_env import RUNNER_ENV as runner_env

        kd_job = Side("nox -s rebuild -- --fresh, then nox -s verify",
                      [[*nox, "-s", "rebuild", "--", "--fresh", "--installer", "uv"], [*nox, "-s", "verify"]], env)
        bare_job = Side("bare install (as the rebuild row), then the bare script",
                        [*bare_install, [py, "-I", script, bare_cfg]], clean_env({**uv_env, **runner_env}),
                        note="the first verify of a fresh env: bytecode of what it imports is compiled by that run "
                        "(on both sides, unless PYTHONDONTWRITEBYTECODE is set: "
                        f"{'set' if os.environ.get('PYTHONDONTWRITEBYTECODE') else 'not set'} here)")
        rows["job"] = pair(kd_job, bare_job, cwd=work, repeat=max(1, repeat // 2))
        shutil.rmtree(bare_dir, ignore_errors=True)

        # --- lock --check ----------------------------------------------------------------------------------------
        kd_check = Side("nox -s lock -- --check", [[*nox, "-s", "lock", "--", "--check"]], env)
        inner_check = Side("python -m kernodeck lock --check", [[*kd, "lock", "--check"]], env,
                           note="the check alone, without nox")
        rows["lock_check"] = pair(kd_check, inner_check, cwd=work, repeat=repeat)
        rows["lock_check_init"] = init_made_lock_check(project.root, work, env, repeat=repeat)

        # --- lock with uv ----------------------------------------------------------------------------------------
        lock_plat = resolve_platform(project, LOCK_UV_PLATFORM)
        target = work / "lockfiles" / lock_plat.lock_name
        recorded = _header_command(target)
        seed = work / "bare-lock.txt"
        kd_lock = Side(f"nox -s lock -- --platform {lock_plat.id} --resolver uv",
                       [[*nox, "-s", "lock", "--", "--platform", lock_plat.id, "--resolver", "uv"]], env)
        bare_lock = Side(
            "bare uv pip compile",
            [_bare_lock(recorded, target, seed, work)],
            clean_env({**_lock_env(lock_plat, sources), "UV_NO_CONFIG": "1"}),
            before=functools.partial(shutil.copyfile, target, seed),
            note="the lock header's command, the same sources, seeded with the same lock",
        )
        rows["lock_uv"] = pair(kd_lock, bare_lock, cwd=work, repeat=repeat)

        # --- cold first verify on a fresh clone, then warm -------------------------------------------------------
        rows["cold"] = _cold_and_warm(project.root, work / "clone", nox, env)

        # --- scaling ---------------------------------------------------------------------------------------------
        rows["scaling"] = _scaling(work, plat, sizes, env)
        rows["hashing"] = hashing_piece(hash_mb, repeat, env)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "version": BENCH_VERSION,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**host, "load_average_after": machine()["load_average"], **whole.others()},
        "nox_backend": _nox_backend(),
        "platform": plat.id,
        "lock": lock_rel,
        "repeat": repeat,
        "rows": rows,
        "targets": TARGETS,
        "verdicts": verdicts(rows),
    }


def verify_piece(work: Path, built: Path, env: dict[str, str], *, repeat: int) -> dict[str, Any]:
    """``nox -s verify`` (env reused) against the bare script, whole processes; where verify spent its time."""
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    script, bare_cfg = bare_script(work)
    kd_verify = Side("nox -s verify (env reused)", [[*_nox(), "-s", "verify"]], env,
                     note="every check: lock check, env reuse, inventory, settings ... resume, report, dossier")
    bare_verify = Side("bare one-process script", [[env_python(built), "-I", script, bare_cfg]],
                       clean_env(RUNNER_ENV), note="settings, imports, load, embed, write, reread, compare")
    # An untimed verify before pair()'s own warm-up: the first run in an env writes the env's bytecode cache and the
    # next one checks it against its source, once (docs/env-integrity.md); the timed runs are the ones after.
    log("bench: warm-up: nox -s verify (the env's bytecode written, then checked by the next)")
    _timed(kd_verify.commands, cwd=work, env=env)
    row = pair(kd_verify, bare_verify, cwd=work, repeat=repeat)
    last = _latest_report(work / "runs")
    return {**row, "kernodeck_steps_s": _step_seconds(last), "every_file_check": _files_check(last),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine()}


def application_piece(work: Path, plat: Platform, built: Path, env: dict[str, str], *, repeat: int) -> dict[str, Any]:
    """The settings and application steps (closed world, verified bytes) against the bare script's same work."""
    from bench.application import STEPS, application_row
    from kernodeck.verify.steps.in_env import RUNNER_ENV

    script, bare_cfg = bare_script(work)
    out = work / "runs" / "bench-application"
    kd = _verify_argv(plat, out.relative_to(work), STEPS)
    assert isinstance(kd, list)
    row = application_row(kd, out, [env_python(built), "-I", script, bare_cfg], work, env, clean_env(RUNNER_ENV),
                          repeat=repeat)
    return {**row, "machine": machine()}


def hashing_piece(total_mb: int, repeat: int, env: dict[str, str]) -> dict[str, Any]:
    """The first fingerprint of a synthetic snapshot against sha256sum, and its unchanged check."""
    from bench.hashing import hashing_row

    return {**hashing_row(total_mb, repeat, env), "machine": machine()}


def run_pieces(project: Project, plat: Platform, pieces: Sequence[str], *, repeat: int, hash_mb: int,
               keep: bool) -> dict[str, Any]:
    """Only the rows ``pieces`` names; the application row in a scratch copy with its env rebuilt (untimed)."""
    rows: dict[str, Any] = {}
    env = clean_env()
    if "hashing" in pieces:
        rows["hashing"] = hashing_piece(hash_mb, repeat, env)
    if "application" in pieces or "verify" in pieces:
        work = project.runs / f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        _copy_project(project.root, work)
        log(f"bench: scratch project {work}; rebuilding its env (untimed)")
        try:
            _run([*_nox(), "-s", "rebuild", "--", "--installer", "uv"], cwd=work, env=env)
            built = current_env(load_project(work), plat)
            if built is None:
                raise BenchError("the rebuild left no current environment to verify")
            if "verify" in pieces:
                rows["verify"] = verify_piece(work, built, env, repeat=repeat)
            if "application" in pieces:
                rows["application"] = application_piece(work, plat, built, env, repeat=repeat)
        finally:
            if not keep:
                shutil.rmtree(work, ignore_errors=True)
    return rows


def merged(previous: dict[str, Any] | None, rows: dict[str, Any]) -> dict[str, Any]:
    """The last whole run's record with ``rows`` measured alone put in (each row keeps its own date and machine)."""
    if previous is None:
        raise BenchError("no earlier bench record to add these rows to (bench/latest.json)", tip="nox -s bench")
    record = {**previous, "rows": {**previous["rows"], **{name: {**row, "alone": True} for name, row in rows.items()}}}
    record["verdicts"] = verdicts(record["rows"])
    return record


def init_made_lock_check(root: Path, work: Path, env: dict[str, str], *, repeat: int) -> dict[str, Any]:
    """``nox -s lock -- --check`` in a project made as README's quick start makes one, against this repository's.

    Untimed setup, under ``work``: a venv with ``pip install nox /path/to/kernodeck`` (a copy of this checkout's
    distribution files, this machine's pip configuration as it is), ``git init``, ``kernodeck init``, ``nox -s lock``.
    The user's shell has no ``KERNODECK_SOURCE``: the sessions find the Kernodeck installed beside nox.
    """
    made = work / "init-made"
    source, venv, project = made / "kernodeck", made / "venv", made / "project"
    source.mkdir(parents=True)
    for item in ("pyproject.toml", "README.md", "kernodeck"):
        if (root / item).is_dir():
            shutil.copytree(root / item, source / item, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(root / item, source / item)
    base = getattr(sys, "_base_executable", sys.executable)
    user = {k: v for k, v in env.items() if k not in ("KERNODECK_SOURCE", "PYTHONPATH", "VIRTUAL_ENV")}
    user["PATH"] = os.pathsep.join([str(venv / "bin"), user.get("PATH", "")])
    project.mkdir()
    log("bench: an init-made project: pip install nox kernodeck, kernodeck init, nox -s lock (untimed)")
    _run([base, "-m", "venv", venv], cwd=made, env=user)
    _run([venv / "bin" / "pip", "install", "--quiet", "nox", source], cwd=made, env=user)
    _run(["git", "init", "-q"], cwd=project, env=user)
    _run([venv / "bin" / "kernodeck", "init"], cwd=project, env=user)
    _run([venv / "bin" / "nox", "-s", "lock"], cwd=project, env=user)
    theirs = Side("init-made project: nox -s lock -- --check",
                  [[venv / "bin" / "nox", "-f", project / "noxfile.py", "-s", "lock", "--", "--check"]], user,
                  note="Kernodeck installed beside nox from a folder; session venv reused, Kernodeck not reinstalled")
    ours = Side("this repository: nox -s lock -- --check", [[*_nox(), "-s", "lock", "--", "--check"]], env)
    return pair(theirs, ours, cwd=work, repeat=repeat)


def _lock_env(plat: Platform, sources: list[Source]) -> dict[str, str]:
    from kernodeck.lock.resolvers import uv_lock_environment

    declared = plat.variant.index.rstrip("/")
    extra = None if declared == PYPI or not reachable(declared)[0] else declared
    return uv_lock_environment(plat, extra, sources, False)


def _cold_and_warm(root: Path, clone: Path, nox: list[str], env: dict[str, str]) -> dict[str, Any]:
    """``git clone`` of the committed project, ``nox -s verify`` there (its first run), then again (warm)."""
    load = Load()
    _run(["git", "clone", "--quiet", "--no-hardlinks", root, clone], cwd=root, env=env)
    cold = single(Side("first nox -s verify on a fresh clone", [[*nox, "-s", "verify"]], env,
                       note="session venv made, env rebuilt from the warm installer cache, every check"),
                  cwd=clone, repeat=1)
    cold_steps = _step_seconds(_latest_report(clone / "runs"))
    warm = single(Side("next nox -s verify there", [[*nox, "-s", "verify"]], env), cwd=clone, repeat=1)
    return {"cold": cold.as_dict(), "warm": warm.as_dict(), "cold_steps_s": cold_steps,
            "ratio": round(cold.median / warm.median, 3), **load.others()}


def _scaling(work: Path, plat: Platform, sizes: Sequence[int], env: dict[str, str]) -> dict[str, Any]:
    points = []
    for size in sizes:
        sample = _sample(work / "dossier" / "reference" / "sample.jsonl", size, work / f"sample-{size}.jsonl")
        extra = {"sample": sample.name}  # relative to the scratch project; not the reference
        out = work / "runs" / f"v-scale-{size}"
        measure = single(Side(f"verify {size} texts", [_verify_argv(plat, out.relative_to(work), SCALING_STEPS, extra)],
                              env), cwd=work, repeat=1)
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        steps = {s["name"]: s for s in report["steps"]}
        det = steps["determinism"].get("details", {})
        points.append({
            "texts": size,
            "seconds": round(measure.median, 2),
            "embed_step_s": round(float(steps["application"]["duration_s"]), 2),
            "embed_items_per_s": steps["application"].get("details", {}).get("items_per_s"),
            "determinism_step_s": round(float(steps["determinism"]["duration_s"]), 2),
            "determinism_texts": det.get("records", size),
        })
    xs = [float(p["texts"]) for p in points]
    return {
        "steps": list(SCALING_STEPS),
        "points": points,
        "line": fit_line(xs, [p["seconds"] for p in points]) if len(set(xs)) > 1 else None,
        "embed_line": fit_line(xs, [p["embed_step_s"] for p in points]) if len(set(xs)) > 1 else None,
    }


def verdicts(rows: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target: what was measured (a median pair ratio, or seconds for lock-check), the target, met or missed."""
    measured = {
        "verify": rows["verify"]["ratio"],
        "rebuild": rows["rebuild"]["ratio"],
        "job": rows["job"]["ratio"],
        "lock-uv": rows["lock_uv"]["ratio"],
        "lock-check": rows["lock_check"]["kernodeck"]["median_s"],
        "lock-check-init": rows["lock_check_init"]["kernodeck"]["median_s"],
    }
    if "application" in rows:  # a record made before these rows has none
        measured["application"] = rows["application"]["ratio"]
    if "hashing" in rows:
        measured["hash-first"] = rows["hashing"]["ratio"]
        measured["hash-unchanged"] = rows["hashing"]["unchanged_s"]["median_s"]
    return {
        name: {"measured": value, "unit": UNITS[name], "target": TARGETS[name], "met": value <= TARGETS[name]}
        for name, value in measured.items()
    }


def _mark(v: dict[str, Any]) -> str:
    target = f"≤ {v['target']}{'x' if v['unit'] == 'x' else ' s'}"
    return f"{target}: met" if v["met"] else f"{target}: MISSED ({v['measured'] / v['target']:.2f}x over)"


def _alone(data: dict[str, Any]) -> str:
    """A row measured alone (``--only``), not in the whole run the rest of the table comes from: its date and load."""
    if not data.get("alone"):
        return ""
    load = data.get("machine", {}).get("load_average")
    return f" (measured alone {str(data.get('measured', '?'))[:10]}, load average {load} before)"


def render_markdown(record: dict[str, Any]) -> str:
    rows, host, v = record["rows"], record["machine"], record["verdicts"]

    def row(what: str, data: dict[str, Any], target: str) -> str:
        share = data.get("others_share")
        busy = f"{100 * share:.0f}%" if share is not None else "?"
        return (f"| {what} | {data['kernodeck']['median_s']:.2f}s | {data['bare']['median_s']:.2f}s | "
                f"{data['ratio']:.2f}x ({data['ratio_low']:.2f}..{data['ratio_high']:.2f}) | {busy} | {target} |")

    lines = [
        f"Measured {record['finished'][:10]} on {host['cpu']}, {host['cores']} cores, {host['os']}, Python "
        f"{host['python']} (load average {host['load_average']} before, {host['load_average_after']} after; other "
        f"processes took {100 * (host.get('others_share') or 0):.0f}% of the machine meanwhile); nox sessions on the "
        f"{record.get('nox_backend', '?')} backend; platform `{record['platform']}`, lock `{record['lock']}`. "
        f"Whole commands as a user runs them, {record['repeat']} interleaved pairs after one warm-up of each; "
        "ratio = median of the pairs' ratios (lowest..highest). `nox -s bench` regenerates this.",
        "",
        "| what | kernodeck | bare | ratio (spread) | others' CPU | target |",
        "|---|---|---|---|---|---|",
        row("`nox -s verify` (env reused) vs one bare process: settings, import, load, embed, write, reread, compare"
            + _alone(rows["verify"]), rows["verify"], _mark(v["verify"])),
        row("`nox -s rebuild -- --fresh` vs `rm -rf` + `uv venv` + `uv pip install --require-hashes --no-deps "
            "--link-mode copy` + `pip check` + `pip freeze --all` (no bytecode compiled on either side)",
            rows["rebuild"], _mark(v["rebuild"])),
        row("the CI job: `nox -s rebuild -- --fresh` then the first `nox -s verify` vs the bare install then the bare "
            "script", rows["job"], _mark(v["job"])),
        row(f"`nox -s lock -- --platform {LOCK_UV_PLATFORM} --resolver uv` vs the `uv pip compile "
            "--generate-hashes --python-platform …` its header records", rows["lock_uv"], _mark(v["lock-uv"])),
        row("`nox -s lock -- --check` (whole) vs `python -m kernodeck lock --check` (the check alone)",
            rows["lock_check"], _mark(v["lock-check"]) + " (whole command)"),
        row("`nox -s lock -- --check` (whole) in a `kernodeck init`-made project (`pip install nox /path/to/kernodeck`)"
            " vs the same in this repository", rows["lock_check_init"],
            _mark(v["lock-check-init"]) + " (whole command)"),
    ]
    app, hashing = rows.get("application"), rows.get("hashing")
    if app:
        lines.append(row("the `settings` and `application` steps (verified bytes, the closed world's audit hook, the "
                         "weights fingerprinted) vs the bare script's same work (imports, settings, load, embed, write)"
                         f"{_alone(app)}", app, _mark(v["application"])))
    if hashing:
        snap = hashing["snapshot"]
        lines.append(row(f"the weights fingerprint of a {snap['mib']} MiB snapshot ({snap['files']} files, no stat "
                         f"record) vs `sha256sum` over the same files{_alone(hashing)}", hashing,
                         _mark(v["hash-first"])))
    lines.append("")
    if app:
        whole = app["whole"]
        lines += [f"Whole processes of that row: `verify` limited to those steps {whole['kernodeck']['median_s']:.2f}s "
                  f"(with the orchestrator's lock check, inventory, report and dossier) against the bare script's "
                  f"{whole['bare']['median_s']:.2f}s ({whole['ratio']:.2f}x).", ""]
    if hashing:
        mib = hashing["snapshot"]["bytes"] / (1 << 20)
        lines += [f"The fingerprint hashed {mib / hashing['kernodeck']['median_s']:.0f} MiB/s "
                  f"({hashing['snapshot']['threads']} threads), `sha256sum` {mib / hashing['bare']['median_s']:.0f} "
                  "MiB/s. The same snapshot checked again unchanged (the stat record reused, no file read): "
                  f"{hashing['unchanged_s']['median_s']:.3f}s ({_mark(v['hash-unchanged'])}).", ""]
    steps = rows["verify"].get("kernodeck_steps_s", {})
    if steps:
        lines += ["Where a reused-env `nox -s verify` spends its time (its last run's report): "
                  + ", ".join(f"{k} {s:.2f}s" for k, s in steps.items()) + "; the rest is nox, the orchestrator's "
                  "start and the dossier.", ""]
    every = rows["verify"].get("every_file_check") or {}
    if every.get("seconds") is not None:
        lines += [f"The every-file check inside that verify's inventory step (stat of {every['entries']} entries "
                  f"against the build's snapshot): {every['seconds']:.2f}s.", ""]
    rb = rows["rebuild"].get("kernodeck_steps_s", {})
    if rb:
        lines += ["Where a fresh rebuild spends its time (its last run): "
                  + ", ".join(f"{k} {float(s):.2f}s" for k, s in rb.items())
                  + " (pip check and freeze side by side; the bare side runs them one after the other; `files`: "
                  "every installed file hashed against its RECORD, in parallel threads, then the snapshot).", ""]
    cold = rows.get("cold")
    if cold:
        lines += [f"First `nox -s verify` on a fresh `git clone` (session venv made, env rebuilt from the warm cache, "
                  f"every check): {cold['cold']['median_s']:.2f}s; the next one there: {cold['warm']['median_s']:.2f}s "
                  f"({cold['ratio']:.2f}x; one run each).", ""]
    scaling = rows.get("scaling")
    if scaling and scaling["points"]:
        lines += ["Verify's cost against the sample size (steps " + ", ".join(scaling["steps"]) + "; one run each):",
                  "",
                  "| texts | verify | embed step | embed items/s (load included) | determinism step (texts repeated) |",
                  "|---|---|---|---|---|"]
        for p in scaling["points"]:
            lines.append(f"| {p['texts']} | {p['seconds']:.2f}s | {p['embed_step_s']:.2f}s | {p['embed_items_per_s']} "
                         f"| {p['determinism_step_s']:.2f}s ({p['determinism_texts']}) |")
        line, embed = scaling.get("line"), scaling.get("embed_line")
        if line:
            lines += ["", f"It grows along a line: {line['fixed_s']:.2f}s + {line['per_item_ms']:.2f} ms per text "
                      f"(r² {line['r2']}); the embed step alone {embed['fixed_s']:.2f}s + "
                      f"{embed['per_item_ms']:.2f} ms per text (r² {embed['r2']})."]
    return "\n".join(lines) + "\n"


def write(root: Path, record: dict[str, Any], out: Path | None = None) -> Path:
    """bench/latest.json, bench/latest.md and docs/speed.md's section between the bench markers, from one record."""
    folder = out or root / "bench"
    write_json(folder / "latest.json", record)
    text = render_markdown(record)
    write_atomic(folder / "latest.md", "# Kernodeck bench: latest run\n\n" + text)
    readme = root / "docs" / "speed.md"
    block = f"{README_START}\n{text}{README_END}"
    current = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if README_START in current and README_END in current:
        head, rest = current.split(README_START, 1)
        new = head + block + rest.split(README_END, 1)[1]
    else:
        new = (current.rstrip("\n") + ("\n\n" if current else "") + "## Speed: Kernodeck against the bare tools\n\n"
               + block + "\n")
    write_atomic(readme, new)
    return folder


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nox -s bench --", description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--platform", metavar="ID", help="the platform to rebuild and verify (default: this machine's)")
    parser.add_argument("--repeat", type=int, default=5, metavar="N", help="interleaved pairs per row (default: 5)")
    parser.add_argument("--sizes", default="32,128,512,2048", metavar="N,N,...",
                        help="sample sizes (texts) for verify's scaling (default: 32,128,512,2048)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch project under runs/")
    parser.add_argument("--only", metavar="ROW,ROW", help=f"only these rows ({', '.join(PIECES)}), added to the last "
                        "whole run's bench/latest.* with their own date")
    parser.add_argument("--hash-mb", type=int, default=2048, metavar="MIB",
                        help="the synthetic weights snapshot's size for the hashing row (default: 2048)")
    parser.add_argument("--verify-steps", metavar="SPEC", help=argparse.SUPPRESS)  # the scaling rows' subprocess
    args = parser.parse_args(argv)
    args.only = [p.strip() for p in args.only.split(",") if p.strip()] if args.only else []
    if unknown := [p for p in args.only if p not in PIECES]:
        parser.error(f"--only takes {', '.join(PIECES)}, not {', '.join(unknown)}")
    if args.hash_mb < 1:
        parser.error("--hash-mb takes a size in MiB, at least 1")
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes takes numbers separated by commas, not {args.sizes!r}")
    if args.repeat < 1:
        parser.error("--repeat takes a number of pairs, at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.verify_steps:
            return _verify_steps(args.verify_steps)
        project = load_project(Path.cwd())
        plat = resolve_platform(project, args.platform)
        if args.only:
            rows = run_pieces(project, plat, args.only, repeat=args.repeat, hash_mb=args.hash_mb, keep=args.keep)
            latest = project.root / "bench" / "latest.json"
            record = merged(json.loads(latest.read_text(encoding="utf-8")) if latest.exists() else None, rows)
        else:
            record = run_bench(project, plat, repeat=args.repeat, sizes=args.sizes, keep=args.keep,
                               hash_mb=args.hash_mb)
        folder = write(project.root, record)
    except KernodeckError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        if exc.tip:
            print(f"TIP: {exc.tip}", file=sys.stderr)
        return 2
    print(render_markdown(record))
    missed = [name for name, v in record["verdicts"].items() if not v["met"]]
    print(f"bench: {folder / 'latest.md'}; targets missed: {', '.join(missed) if missed else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
