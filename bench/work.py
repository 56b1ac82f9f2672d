"""The bench's scratch work: a copy of the project, the bare script and the bare lock command, verify's argv and
report."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.timing import BenchError, Command
from kernodeck._fs import write_atomic
from kernodeck._proc import uv_available
from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import Platform, resolve_platform

PROJECT_ITEMS = ("pyproject.toml", "noxfile.py", "kernodeck", "checks", "requirements", "lockfiles", "dossier", "bench")


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
    from kernodeck.project import app_contract
    from kernodeck.runformat import manifest

    app = app_contract.load(work)  # this repository's application: the MiniLM embedding
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
