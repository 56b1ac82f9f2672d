"""``nox -s bench``: Kernodeck against the bare tools, side by side, in ONE run, on the same lock and a warm cache.

    python -m kernodeck bench [--repeat 3] [--sizes 32,256,2048] [--pip-repeat 1]

Everything runs in a scratch copy of the project under ``runs/`` (the committed lock and environments are never
touched), each pair interleaved (Kernodeck, bare, Kernodeck, bare, ...) after one untimed warm-up of each, so that a
cache or a busy neighbour favours neither side. Measured:

- rebuild: ``rebuild --fresh --installer uv`` vs bare ``uv venv`` + ``uv pip install --require-hashes -r LOCK``, and
  vs bare ``python -m venv`` + ``pip install --require-hashes -r LOCK``;
- verify: ``verify --no-rebuild`` limited to the steps that do the bare script's work (settings, backend, reference,
  embed, reread, compare) vs one bare process doing that work (imports, load, encode, compare with the reference);
  the full verify (every check) is reported beside it, with what its extra checks cost;
- lock: ``lock`` with each resolver vs the bare ``pip-compile`` / ``uv pip compile`` command the lock header records
  (same flags, same inputs, the same seed lock, the machine's sources);
- verify's cost as the sample grows (``--sizes`` texts: the reference sample's texts cycled, fresh ids).

Writes ``bench/latest.json`` and ``bench/latest.md`` and the README section between the bench markers.
"""

from __future__ import annotations

import functools
import json
import os
import platform as _platform
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

from . import lock as locking
from . import lockfile
from ._fs import write_atomic, write_json
from ._proc import clean_env, log, show, uv_available
from .config import Project
from .errors import KernodeckError
from .platforms import Platform
from .rebuild import current_env, env_python
from .sources import machine_sources, uv_environment

BENCH_VERSION = 1
TARGETS = {"rebuild": 1.5, "verify": 1.25, "lock-uv": 1.3}
README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"
PROJECT_ITEMS = ("pyproject.toml", "kernodeck", "checks", "requirements", "lockfiles", "dossier")
SAME_WORK_STEPS = ("settings", "backend", "reference", "embed", "reread", "compare")
SCALING_STEPS = ("settings", "backend", "embed", "reread", "determinism")

# The bare script: one process doing the model work of verify's SAME_WORK_STEPS and nothing else.
BARE_SCRIPT = """
import importlib, json, random, sys
from pathlib import Path

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
lines = Path(cfg["sample"]).read_text(encoding="utf-8").splitlines()
texts = [json.loads(line)["text"] for line in lines if line.strip()]
ours = model.encode(texts, batch_size=cfg["batch_size"], convert_to_numpy=True, normalize_embeddings=cfg["normalize"],
                    show_progress_bar=False)
ref = np.load(Path(cfg["reference"]) / "embeddings.npy", allow_pickle=False)
ours64, ref64 = ours.astype(np.float64), ref.astype(np.float64)
cos = (ours64 * ref64).sum(axis=1) / (np.linalg.norm(ours64, axis=1) * np.linalg.norm(ref64, axis=1))
max_abs = float(np.abs(ours64 - ref64).max())
ok = cos.min() >= cfg["cosine_min"] and max_abs <= cfg["max_abs"]
print(json.dumps({"min_cosine": float(cos.min()), "max_abs": max_abs, "ok": bool(ok)}))
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
            "note": self.note,
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
    """One side of a comparison: the commands, how to reset between runs, its environment."""

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
        if arg == sys.executable or arg == getattr(sys, "_base_executable", ""):
            out.append("python")
        elif arg == uv_available():
            out.append("uv")
        elif os.path.isabs(arg) and Path(arg).is_relative_to(root):
            out.append(os.path.relpath(arg, root))
        else:
            out.append(arg)
    return show(out)


def pair(a: Side, b: Side, *, cwd: Path, repeat: int, warm: bool = True) -> tuple[Measure, Measure]:
    """Warm each side once (untimed), then alternate timed runs."""
    ma, mb = Measure(a.name, a.shown(cwd), note=a.note), Measure(b.name, b.shown(cwd), note=b.note)
    if warm:
        for side in (a, b):
            log(f"kernodeck bench: warm-up: {side.name}")
            _timed(side.commands, cwd=cwd, env=side.env, before=side.before)
    for number in range(1, repeat + 1):
        for side, measure in ((a, ma), (b, mb)):
            seconds = _timed(side.commands, cwd=cwd, env=side.env, before=side.before)
            measure.times.append(seconds)
            log(f"kernodeck bench: {side.name} run {number}/{repeat}: {seconds:.2f}s")
    return ma, mb


def single(side: Side, *, cwd: Path, repeat: int) -> Measure:
    measure = Measure(side.name, side.shown(cwd), note=side.note)
    for number in range(1, repeat + 1):
        seconds = _timed(side.commands, cwd=cwd, env=side.env, before=side.before)
        measure.times.append(seconds)
        log(f"kernodeck bench: {side.name} run {number}/{repeat}: {seconds:.2f}s")
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


def _scratch(project: Project) -> Path:
    work = project.runs / f"bench-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    work.mkdir(parents=True)
    for item in PROJECT_ITEMS:
        src = project.root / item
        if src.is_dir():
            shutil.copytree(src, work / item, ignore=shutil.ignore_patterns("__pycache__", "history"))
        elif src.exists():
            shutil.copy2(src, work / item)
    return work


def _header_command(lock_file: Path) -> list[str]:
    command = lockfile.read(lock_file).first("command")
    if not command:
        raise BenchError(f"{lock_file.name} records no command to compare with")
    return shlex.split(command)


def _bare_lock(recorded: list[str], lock_file: Path, seed: Path, root: Path) -> Command:
    """The lock header's public command, runnable: the resolver by path, the output into a seeded scratch file."""
    rel_final = str(lock_file.relative_to(root))
    argv = [str(seed) if a == rel_final else a for a in recorded]
    if argv[0] == "pip-compile":
        return [sys.executable, "-m", "piptools", "compile", *argv[1:]]
    if argv[0] == "uv":
        return [uv_available() or "uv", *argv[1:]]
    raise BenchError(f"unknown resolver command in {lock_file.name}: {argv[0]}")


def _sample(reference_sample: Path, size: int, out: Path) -> Path:
    texts = [
        json.loads(line)["text"] for line in reference_sample.read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    lines = [json.dumps({"id": f"bench-{i:05d}", "text": texts[i % len(texts)]}) for i in range(size)]
    write_atomic(out, "\n".join(lines) + "\n")
    return out


def _verify_argv(plat: Platform, out: Path, steps: Sequence[str], extra: dict[str, Any] | None = None) -> Command:
    spec = {"platform": plat.id, "out": str(out), "steps": list(steps), "extra": extra or {}}
    return [sys.executable, "-m", "kernodeck.bench", "--verify-steps", json.dumps(spec)]


def _verify_steps(spec_json: str) -> int:
    """``verify --no-rebuild`` limited to some in-env steps (the bench's same-work and scaling runs)."""
    from .config import load_project
    from .platforms import resolve_platform
    from .report import Status
    from .verify import Options, verify

    spec = json.loads(spec_json)
    project = load_project(Path.cwd())
    plat = resolve_platform(project, spec["platform"])
    opts = Options(out=Path(spec["out"]), rebuild=False, steps=tuple(spec["steps"]), extra_config=spec["extra"])
    report, _, _ = verify(project, plat, opts)
    return 0 if report.status is Status.PASSED else 1


def _ratio(a: Measure, b: Measure) -> float:
    return round(a.median / b.median, 2)


def run_bench(
    project: Project,
    plat: Platform,
    *,
    repeat: int = 5,
    pip_repeat: int = 1,
    sizes: Sequence[int] = (32, 256, 2048),
    keep: bool = False,
) -> dict[str, Any]:
    """Every measurement, in one run; returns the record written to bench/latest.json."""
    uv = uv_available()
    if uv is None:
        raise BenchError("uv is not installed here; the bench compares against it", tip="nox -s bench")
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    host = machine()
    wall0, busy0, own0 = time.monotonic(), _busy_cpu_seconds(), _own_cpu_seconds()
    work = _scratch(project)
    log(f"kernodeck bench: scratch project {work}")
    kd = [sys.executable, "-m", "kernodeck"]
    base = getattr(sys, "_base_executable", sys.executable)
    lock_file = locking.lock_path(project, plat)
    lock_rel = str(lock_file.relative_to(project.root))
    env = clean_env()
    sources = machine_sources()
    uv_env = clean_env(uv_environment(sources))
    rows: dict[str, Any] = {}
    try:
        # --- rebuild ---------------------------------------------------------------------------------------------
        bare_uv_dir, bare_pip_dir = work / "bare-uv", work / "bare-pip"
        kd_rebuild = Side(
            "kernodeck rebuild --fresh --installer uv",
            [[*kd, "rebuild", "--platform", plat.id, "--fresh", "--installer", "uv"]],
            env,
        )
        bare_uv = Side(
            "bare uv venv + uv pip install",
            [
                Remove(bare_uv_dir),
                [uv, "venv", "--quiet", "--python", base, bare_uv_dir],
                [uv, "pip", "install", "--python", env_python(bare_uv_dir), "--require-hashes", "--compile-bytecode",
                 "-r", lock_rel],
            ],
            uv_env,
            note="removes the previous env as --fresh does; the machine's pip sources handed to uv, as kernodeck does; "
            "bytecode compiled at install on every side (uv --compile-bytecode, pip by default)",
        )
        m_rebuild, m_bare_uv = pair(kd_rebuild, bare_uv, cwd=work, repeat=repeat)
        bare_pip = Side(
            "bare python -m venv + pip install",
            [
                Remove(bare_pip_dir),
                [base, "-m", "venv", bare_pip_dir],
                [
                    env_python(bare_pip_dir),
                    "-m",
                    "pip",
                    "install",
                    "--require-hashes",
                    "--no-input",
                    "--progress-bar",
                    "off",
                    "-r",
                    lock_rel,
                ],
            ],
            env,
            note=f"{pip_repeat} run(s): pip's own cache warm from earlier installs",
        )
        m_bare_pip = single(bare_pip, cwd=work, repeat=pip_repeat)
        shutil.rmtree(bare_uv_dir, ignore_errors=True)
        shutil.rmtree(bare_pip_dir, ignore_errors=True)
        built = current_env(_project_at(work), plat)
        marker = json.loads((built / "kernodeck-complete.json").read_text(encoding="utf-8")) if built else {}
        rows["rebuild"] = {
            "kernodeck": m_rebuild.as_dict(),
            "bare_uv": m_bare_uv.as_dict(),
            "bare_pip": m_bare_pip.as_dict(),
            "ratio_vs_bare_uv": _ratio(m_rebuild, m_bare_uv),
            "ratio_vs_bare_pip": _ratio(m_rebuild, m_bare_pip),
            "target": TARGETS["rebuild"],
            "commands_recorded": marker.get("commands", []),
            "kernodeck_steps_s": marker.get("durations_s", {}),
        }
        if built is None:
            raise BenchError("the rebuild left no current environment to verify")
        python = env_python(built)

        # --- verify ----------------------------------------------------------------------------------------------
        cfg = _sample_config(work)
        bare_cfg = json.dumps(
            {
                "module": cfg["weights-module"],
                "subdir": cfg["weights-subdir"],
                "max_seq_length": cfg["max-seq-length"],
                "batch_size": cfg["batch-size"],
                "normalize": cfg["normalize"],
                "sample": "dossier/reference/sample.jsonl",  # relative to the scratch project, where it runs
                "reference": "dossier/reference",
                "cosine_min": cfg["tolerance"]["cosine-min"],
                "max_abs": cfg["tolerance"]["max-abs"],
            }
        )
        script = work / "bare_verify.py"
        write_atomic(script, BARE_SCRIPT.lstrip())
        runner_env = clean_env(_runner_env())
        kd_same = Side(
            "kernodeck verify --no-rebuild (same work)",
            [_verify_argv(plat, Path("runs/v-same"), SAME_WORK_STEPS)],
            env,
            before=lambda: shutil.rmtree(work / "runs" / "v-same", ignore_errors=True),
            note="steps: " + ", ".join(SAME_WORK_STEPS),
        )
        bare_script = Side(
            "bare one-process script",
            [[python, "-I", script, bare_cfg]],
            runner_env,
            note="imports, load, encode, compare with the reference",
        )
        m_same, m_bare_script = pair(kd_same, bare_script, cwd=work, repeat=repeat)
        kd_full = Side(
            "kernodeck verify --no-rebuild (every check)",
            [[*kd, "verify", "--platform", plat.id, "--no-rebuild", "--out", work / "runs" / "v-full"]],
            env,
            before=lambda: shutil.rmtree(work / "runs" / "v-full", ignore_errors=True),
        )
        m_full = single(kd_full, cwd=work, repeat=repeat)
        full_report = json.loads((work / "runs" / "v-full" / "report.json").read_text(encoding="utf-8"))
        step_cost = {s["name"]: round(float(s.get("duration_s", 0.0)), 3) for s in full_report["steps"]}
        extra_checks = {k: v for k, v in step_cost.items() if k in ("system", "criterion", "determinism", "resume")}
        rows["verify"] = {
            "kernodeck_same_work": m_same.as_dict(),
            "bare_script": m_bare_script.as_dict(),
            "kernodeck_full": m_full.as_dict(),
            "ratio_same_work": _ratio(m_same, m_bare_script),
            "ratio_full": _ratio(m_full, m_bare_script),
            "target": TARGETS["verify"],
            "full_step_seconds": step_cost,
            "extra_checks_seconds": extra_checks,
        }

        # --- lock ------------------------------------------------------------------------------------------------
        rows["lock"] = {}
        for resolver in ("uv", "pip-tools"):
            lock_work = work / f"lock-{resolver}"
            lock_work.mkdir()
            for item in PROJECT_ITEMS:
                src = work / item
                (shutil.copytree if src.is_dir() else shutil.copy2)(src, lock_work / item)
            target = lock_work / lock_rel
            log(f"kernodeck bench: lock with {resolver} (first run also writes the header command)")
            _run([*kd, "lock", "--platform", plat.id, "--resolver", resolver], cwd=lock_work, env=env)
            recorded = _header_command(target)
            seed = lock_work / "bare-lock.txt"
            kd_lock = Side(
                f"kernodeck lock --resolver {resolver}",
                [[*kd, "lock", "--platform", plat.id, "--resolver", resolver]],
                env,
            )
            bare_lock = Side(
                "bare " + ("uv pip compile" if resolver == "uv" else "pip-compile"),
                [_bare_lock(recorded, target, seed, lock_work)],
                clean_env({**uv_environment(sources), "UV_NO_CONFIG": "1"}) if resolver == "uv" else env,
                before=functools.partial(shutil.copyfile, target, seed),
                note="the lock header's command; seeded with the same lock",
            )
            m_kd, m_bare = pair(kd_lock, bare_lock, cwd=lock_work, repeat=repeat, warm=False)
            rows["lock"][resolver] = {
                "kernodeck": m_kd.as_dict(),
                "bare": m_bare.as_dict(),
                "ratio": _ratio(m_kd, m_bare),
                "target": TARGETS["lock-uv"] if resolver == "uv" else None,
            }

        # --- scaling ---------------------------------------------------------------------------------------------
        rows["scaling"] = []
        for size in sizes:
            sample = _sample(work / "dossier" / "reference" / "sample.jsonl", size, work / f"sample-{size}.jsonl")
            extra = {"sample": sample.name, "sample_sha256": None}  # relative to the scratch project; not the reference
            out = work / "runs" / f"v-scale-{size}"
            side = Side(
                f"verify {size} texts",
                [_verify_argv(plat, out.relative_to(work), SCALING_STEPS, extra)],
                env,
            )
            measure = single(side, cwd=work, repeat=1)
            report = json.loads((out / "report.json").read_text(encoding="utf-8"))
            steps = {s["name"]: s for s in report["steps"]}
            embed, det = steps["embed"].get("details", {}), steps["determinism"].get("details", {})
            steady = det.get("seconds_deterministic") or 0
            rows["scaling"].append(
                {
                    "texts": size,
                    "seconds": round(measure.median, 2),
                    "embed_step_s": round(float(steps["embed"]["duration_s"]), 2),
                    "embed_items_per_s": embed.get("items_per_s"),
                    "steady_items_per_s": round(size / steady, 1) if steady else None,
                    "determinism_step_s": round(float(steps["determinism"]["duration_s"]), 2),
                }
            )
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "version": BENCH_VERSION,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {**host, "load_average_after": machine()["load_average"], **_others(wall0, busy0, own0)},
        "platform": plat.id,
        "lock": lock_rel,
        "repeat": repeat,
        "rows": rows,
        "targets": TARGETS,
        "verdicts": verdicts(rows),
    }


def _others(wall0: float, busy0: float | None, own0: float) -> dict[str, Any]:
    """The CPU other processes took during the bench: a busy neighbour explains noisy rows."""
    busy1 = _busy_cpu_seconds()
    if busy0 is None or busy1 is None:
        return {}
    others = max(0.0, (busy1 - busy0) - (_own_cpu_seconds() - own0))
    capacity = (time.monotonic() - wall0) * (os.cpu_count() or 1)
    return {"others_cpu_s": round(others, 1), "others_share": round(others / capacity, 3) if capacity else None}


def _project_at(root: Path) -> Project:
    from .config import load_project

    return load_project(root)


def _sample_config(root: Path) -> dict[str, Any]:
    from .reference import sample_config

    return sample_config(_project_at(root))


def _runner_env() -> dict[str, str]:
    from .verify import RUNNER_ENV

    return dict(RUNNER_ENV)


def verdicts(rows: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target: the measured ratio, the target, met or missed."""
    measured = {
        "rebuild": rows["rebuild"]["ratio_vs_bare_uv"],
        "verify": rows["verify"]["ratio_same_work"],
        "lock-uv": rows["lock"]["uv"]["ratio"],
    }
    return {
        name: {"ratio": value, "target": TARGETS[name], "met": value <= TARGETS[name]}
        for name, value in measured.items()
    }


def render_markdown(record: dict[str, Any]) -> str:
    rows, host = record["rows"], record["machine"]
    v = record["verdicts"]

    def mark(name: str) -> str:
        return "met" if v[name]["met"] else f"MISSED by {v[name]['ratio'] / v[name]['target']:.2f}x"

    def row(what: str, ours: dict[str, Any], bare: dict[str, Any], ratio: float, target: str) -> str:
        # The fastest runs beside the medians: one slow outlier on either side shows up as a gap between the two.
        fastest = ours["min_s"] / bare["min_s"]
        return (
            f"| {what} | {ours['median_s']:.2f}s | {bare['median_s']:.2f}s | {ratio:.2f}x ({fastest:.2f}x) | {target} |"
        )

    rb, vf, lk = rows["rebuild"], rows["verify"], rows["lock"]
    lines = [
        f"Measured {record['finished'][:10]} on {host['cpu']}, {host['cores']} cores, {host['os']}, Python "
        f"{host['python']} (load average {host['load_average']} before, {host['load_average_after']} after; other "
        f"processes took {100 * (host.get('others_share') or 0):.0f}% of the machine meanwhile); "
        f"platform `{record['platform']}`, lock `{record['lock']}`; median of {record['repeat']} interleaved runs "
        "after one warm-up each. `nox -s bench` regenerates this.",
        "",
        "| what | kernodeck | bare | ratio of medians (of fastest runs) | target (on medians) |",
        "|---|---|---|---|---|",
        row(
            "rebuild `--fresh`, uv vs `rm -rf` + `uv venv` + `uv pip install --require-hashes`",
            rb["kernodeck"],
            rb["bare_uv"],
            rb["ratio_vs_bare_uv"],
            f"≤ {TARGETS['rebuild']}x: {mark('rebuild')}",
        ),
        row(
            "rebuild `--fresh`, uv vs `rm -rf` + `python -m venv` + `pip install --require-hashes`",
            rb["kernodeck"],
            rb["bare_pip"],
            rb["ratio_vs_bare_pip"],
            "—",
        ),
        row(
            "verify `--no-rebuild`, same work vs one bare process",
            vf["kernodeck_same_work"],
            vf["bare_script"],
            vf["ratio_same_work"],
            f"≤ {TARGETS['verify']}x: {mark('verify')}",
        ),
        row(
            "verify `--no-rebuild`, every check vs the same bare process",
            vf["kernodeck_full"],
            vf["bare_script"],
            vf["ratio_full"],
            "— (more checks)",
        ),
        row(
            "lock, uv vs `uv pip compile`",
            lk["uv"]["kernodeck"],
            lk["uv"]["bare"],
            lk["uv"]["ratio"],
            f"≤ {TARGETS['lock-uv']}x: {mark('lock-uv')}",
        ),
        row(
            "lock, pip-tools vs `pip-compile`",
            lk["pip-tools"]["kernodeck"],
            lk["pip-tools"]["bare"],
            lk["pip-tools"]["ratio"],
            "—",
        ),
        "",
        "Where a kernodeck rebuild's time goes (its last run): "
        + ", ".join(f"{k} {float(v):.2f}s" for k, v in rb.get("kernodeck_steps_s", {}).items())
        + " (pip-check and freeze side by side, in the env, as the procedure records them); the rest is the "
        "interpreter start, kernodeck's imports, the lock check and removing the previous env (the bare side removes "
        "its own too).",
        "",
        "A kernodeck lock does more than the resolver: it asks pip for this machine's sources, checks the declared "
        "index is reachable, refuses machine sources in the result and writes the PEP 751 twin (each file's URL "
        "looked up on the public index).",
        "",
        "Checks a full verify runs beyond the bare script's work: "
        + ", ".join(f"{k} {s:.2f}s" for k, s in vf["extra_checks_seconds"].items())
        + ".",
        "",
        "| texts | verify (" + ", ".join(SCALING_STEPS) + ") | embed step | embed items/s (load included) "
        "| steady items/s | determinism step |",
        "|---|---|---|---|---|---|",
    ]
    for size in rows["scaling"]:
        lines.append(
            f"| {size['texts']} | {size['seconds']:.2f}s | {size['embed_step_s']:.2f}s | {size['embed_items_per_s']} "
            f"| {size['steady_items_per_s']} | {size['determinism_step_s']:.2f}s |"
        )
    return "\n".join(lines) + "\n"


def write(project: Project, record: dict[str, Any], out: Path | None = None) -> Path:
    folder = out or project.root / "bench"
    write_json(folder / "latest.json", record)
    text = render_markdown(record)
    write_atomic(folder / "latest.md", "# Kernodeck bench: latest run\n\n" + text)
    readme = project.root / "README.md"
    block = f"{README_START}\n{text}{README_END}"
    current = readme.read_text(encoding="utf-8") if readme.exists() else ""
    if README_START in current and README_END in current:
        head, rest = current.split(README_START, 1)
        new = head + block + rest.split(README_END, 1)[1]
    else:
        new = (
            current.rstrip("\n")
            + ("\n\n" if current else "")
            + "## Speed: Kernodeck against the bare tools\n\n"
            + block
            + "\n"
        )
    write_atomic(readme, new)
    return folder


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--verify-steps":
        sys.exit(_verify_steps(sys.argv[2]))
    sys.exit("usage: python -m kernodeck bench  (this module's own entry is for the bench's subprocesses)")
