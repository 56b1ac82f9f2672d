"""drift: the pairwise map of several runs' outputs (CI's platforms, or calibrate's variations).

For each declared output, every pair of dossiers is compared under the declared tolerance by ``inenv/drift.py``
(``tolerance.compare``, run by an interpreter that has numpy: the rebuilt env), each cell marked within or beyond
the tolerance and explained by what differs in the two runs' system chain (CPU model and kernel level, torch build,
device, threads, determinism, TF32), read from each dossier's records. Outputs: drift.md, drift.json, drift.svg.
The application's own resume, when declared, is mapped beside: its resumed run's end state, loss curve and progress
counters (``resume-application/NAME``, read as kernodeck/dossier/resume_outputs.py says), and each pair whose
resume contracts differ named as compare names it (``resume_outputs.differences``). A dossier not as Kernodeck wrote
it is named as compare names it (``dossier.read.changed_since_written``: red-team pass 55, DRIFT1), at the page's
top and in each of its pairs' cells.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernodeck import outdir, tips
from kernodeck._fs import inenv_fingerprints, json_object, write_atomic, write_json
from kernodeck._proc import first_error, log, show
from kernodeck.dossier import resume_outputs
from kernodeck.dossier.read import UNRECORDED, changed_since_written
from kernodeck.env import start
from kernodeck.errors import KernodeckError
from kernodeck.inenv import kinds
from kernodeck.measure import svg
from kernodeck.project.config import Project

IN_ENV = Path(__file__).resolve().parents[1] / "inenv" / "drift.py"
VERSION = 1


@dataclass(frozen=True)
class Dossier:
    label: str
    folder: Path
    chain: dict[str, str]
    not_as_written: tuple[str, ...] = ()  # dossier.read.changed_since_written: what it reads as it is now

    @property
    def outputs(self) -> Path:
        """A run's outputs/ folder; the committed reference keeps its outputs beside its manifest."""
        return self.folder / "outputs" if (self.folder / "outputs").is_dir() else self.folder


def _step(folder: Path, name: str) -> dict[str, Any]:
    for path in sorted((folder / "steps").glob(f"*-{name}.json")):
        return json_object(path).get("details") or {}
    return {}


def chain(folder: Path) -> dict[str, str]:
    """What decides the numbers, as one line each: read from system.json, settings.json, the backend step and, for
    calibrate's variations, noise.json (what actually ran: an application may pin its own threads)."""
    system, settings = json_object(folder / "system.json"), json_object(folder / "settings.json")
    observed = json_object(folder / "noise.json").get("observed", {})
    variation = settings.get("variation") or {}
    cpu = system.get("cpu") if isinstance(system.get("cpu"), dict) else {}
    flags = [f for f in (cpu or {}).get("isa_flags", []) if str(f).startswith(("avx", "amx", "sve", "neon", "fma"))]
    torch = str(system.get("torch_version", "?"))
    if system.get("torch_version_cuda"):
        torch += f" (CUDA {system['torch_version_cuda']})"
    if system.get("torch_version_hip"):
        torch += f" (ROCm {system['torch_version_hip']})"
    level = observed.get("torch_cpu_capability", system.get("torch_cpu_capability", "?"))
    threads = observed.get("torch.num_threads_after_entry", settings.get("torch.num_threads", "?"))
    deterministic = observed.get("deterministic_algorithms", settings.get("deterministic_algorithms", "?"))
    return {
        "CPU": str(system.get("cpu_model", "?")),
        "ISA flags": " ".join(sorted(flags)) or "?",
        "CPU kernel level": str(level),
        "torch": torch,
        "device": str(observed.get("device") or _step(folder, "backend").get("device", "?")),
        "threads": str(threads),
        "deterministic algorithms": str(deterministic),
        "TF32": "on" if variation.get("tf32") else str(settings.get("float32_matmul_precision", "?")),
    }


def explain(a: dict[str, str], b: dict[str, str]) -> str:
    """The system-chain difference of two runs, ``key: a vs b`` for each that differs and both recorded; ISA flags
    as what only one side has."""
    differ, unrecorded = [], []
    for key in a:
        left, right = a.get(key, "?"), b.get(key, "?")
        if left == right:
            continue
        if "?" in (left, right):
            unrecorded.append(key)
        elif key == "ISA flags":
            only_a = sorted(set(left.split()) - set(right.split()))
            only_b = sorted(set(right.split()) - set(left.split()))
            differ.append(f"ISA flags: only the first has {' '.join(only_a) or 'none more'}, "
                          f"only the second {' '.join(only_b) or 'none more'}")
        else:
            differ.append(f"{key}: {left} vs {right}")
    if unrecorded:
        differ.append(f"(not recorded by both: {', '.join(unrecorded)})")
    return "; ".join(differ) if differ else "no difference in the recorded chain"


def load(folders: list[Path]) -> list[Dossier]:
    if len(folders) < 2:
        raise KernodeckError(
            "drift needs at least two dossiers to compare",
            tip=f"{tips.nox('drift', 'runs/A', 'runs/B', '[runs/C ...]')}  (or a calibration's variations/*)")
    found = []
    for folder in folders:
        if not (folder / "outputs").is_dir() and not (folder / "manifest.toml").is_file():
            raise KernodeckError(f"{folder} is not a dossier with outputs/ (a verify run or a calibrate variation) "
                                 "nor a reference", tip=tips.nox("drift", "runs/A", "runs/B"))
        found.append(Dossier(folder.name, folder.resolve(), chain(folder), tuple(changed_since_written(folder))))
    labels = [d.label for d in found]
    if len(set(labels)) != len(labels):  # same folder names from different parents: number them
        found = [Dossier(f"{n + 1}:{d.label}", d.folder, d.chain, d.not_as_written) for n, d in enumerate(found)]
    return found


def _changed(d: Dossier) -> bool:
    """Files of ``d`` that changed since Kernodeck wrote them (a folder with no record at all is said once above)."""
    return any(UNRECORDED not in entry for entry in d.not_as_written)


def _differs_in(a: Dossier, b: Dossier) -> str:
    edited = [d.label for d in (a, b) if _changed(d)]
    said = explain(a.chain, b.chain)
    return f"NOT AS WRITTEN ({', '.join(edited)}): {said}" if edited else said


def ratio(kind: str, tolerance: dict[str, float], nums: dict[str, float]) -> float | None:
    """The largest share of the declared tolerance a pair uses (1.0 = at the bound); None when unmeasurable: over the
    kind's bounded axes (calibrate's, kinds.py)."""
    if "unmeasurable" in nums:
        return None
    return max(_share(nums[key], bound) for key, _, bound in kinds.get(kind).axes(tolerance) if bound is not None)


def _share(value: float, bound: float) -> float:
    if bound <= 0:
        return 0.0 if value <= 0 else float("inf")
    return value / bound


def cell_text(kind: str, nums: dict[str, float]) -> str:
    return "unmeasurable" if "unmeasurable" in nums else kinds.get(kind).cell_text(nums)


def short_text(kind: str, nums: dict[str, float]) -> str:
    """For a heatmap cell: the one number that fits."""
    return "n/a" if "unmeasurable" in nums else kinds.get(kind).short_text(nums)


def table(dossiers: list[Dossier], declared: dict[str, dict[str, Any]], numbers: dict[str, Any]) -> dict[str, Any]:
    """drift.json's body: per output the pairs with their numbers, mark and explanation."""
    outputs: dict[str, Any] = {}
    for name, decl in declared.items():
        tol = {k: v for k, v in decl.items() if k not in ("kind", "dtype", "justification")}
        rows = []
        for key, cell in sorted(numbers.get(name, {}).items(), key=lambda kv: tuple(map(int, kv[0].split(",")))):
            i, j = map(int, key.split(","))
            row: dict[str, Any] = {"a": dossiers[i].label, "b": dossiers[j].label, "i": i, "j": j,
                                   "differs_in": _differs_in(dossiers[i], dossiers[j])}
            if "error" in cell:
                row.update(mark="not compared", error=cell["error"], share_of_tolerance=None)
            else:
                share = ratio(decl["kind"], tol, cell["numbers"])
                row.update(numbers=cell["numbers"], summary=cell["summary"], share_of_tolerance=share,
                           mark="within" if cell["passed"] else "BEYOND")
            rows.append(row)
        outputs[name] = {"kind": decl["kind"], "declared": tol, "pairs": rows}
    return {"version": VERSION, "dossiers": [{"label": d.label, "folder": str(d.folder), "chain": d.chain,
                                              "not_as_written": list(d.not_as_written)} for d in dossiers],
            "outputs": outputs}


def json_safe(value: Any) -> Any:
    """drift.json in standard JSON: a share of a zero tolerance (an exact output with a changed row) is infinite, and
    JSON has no Infinity; it is written as the string "inf" (the row's mark says BEYOND)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def render(data: dict[str, Any]) -> str:
    lines = ["# Drift map", "", "| # | dossier | CPU | CPU kernel level | torch | device | threads | deterministic |",
             "|---|---|---|---|---|---|---|---|"]
    for n, d in enumerate(data["dossiers"], start=1):
        c = d["chain"]
        lines.append(f"| {n} | {d['label']} | {c['CPU']} | {c['CPU kernel level']} | {c['torch']} | {c['device']} | "
                     f"{c['threads']} | {c['deterministic algorithms']} |")
    for n, d in enumerate(data["dossiers"], start=1):
        changed = d.get("not_as_written") or []
        if changed:  # as compare heads its page (dossier.read.changed_since_written)
            lines.append(f"\nNOT AS WRITTEN: {n} {d['label']} ({d['folder']}): {'; '.join(changed[:10])}"
                         f"{' …' if len(changed) > 10 else ''}: what follows maps its files as they are now")
    if data.get("resume_contracts"):
        lines += ["", "## The application's resume: contracts", ""]
        lines += [f"- {c['i'] + 1}-{c['j'] + 1}: {line}" for c in data["resume_contracts"] for line in c["lines"]]
    for name, out in data["outputs"].items():
        declared = ", ".join(f"{k} = {v}" for k, v in out["declared"].items()) or "every row equal"  # exact
        beyond = sum(1 for r in out["pairs"] if r["mark"] == "BEYOND")
        lines += ["", f"## `{name}` ({out['kind']}; declared {declared}): "
                  f"{beyond} of {len(out['pairs'])} pairs beyond the tolerance", "",
                  "| pair | numbers | share of tolerance | mark | what differs |", "|---|---|---|---|---|"]
        for r in out["pairs"]:
            nums = cell_text(out["kind"], r["numbers"]) if "numbers" in r else r.get("error", "")
            share = "-" if r["share_of_tolerance"] is None else f"{r['share_of_tolerance']:.2g}"
            lines.append(f"| {r['i'] + 1}-{r['j'] + 1} | {nums} | {share} | {r['mark']} | {r['differs_in']} |")
    return "\n".join(lines) + "\n"


def heatmaps(data: dict[str, Any]) -> list[svg.Heatmap]:
    labels = [d["label"] for d in data["dossiers"]]
    maps = []
    for name, out in data["outputs"].items():
        cells: dict[tuple[int, int], tuple[str, float | None]] = {}
        for i in range(len(labels)):
            cells[(i, i)] = ("-", 0.0)
        for r in out["pairs"]:
            text = short_text(out["kind"], r["numbers"]) if "numbers" in r else "n/a"
            cells[(r["i"], r["j"])] = cells[(r["j"], r["i"])] = (text, r["share_of_tolerance"])
        maps.append(svg.Heatmap(f"{name} ({out['kind']})", labels, cells))
    return maps


def resume_contracts(dossiers: list[Dossier]) -> list[dict[str, Any]]:
    """Each pair of dossiers whose resume contracts differ, with what differs (``resume_outputs.differences``, what
    compare names): another ``entry``, ``steps``, ``checkpoint_at``, ``gpu_tolerance`` or declared end state."""
    contracts = [resume_outputs.contract(d.folder) for d in dossiers]
    found = []
    for i, ci in enumerate(contracts):
        for j in range(i + 1, len(contracts)):
            cj = contracts[j]
            differ = resume_outputs.differences(ci, cj) if ci is not None and cj is not None else {}
            if differ:
                found.append({"i": i, "j": j, "a": dossiers[i].label, "b": dossiers[j].label, "differs": differ,
                              "lines": resume_outputs.describe(differ, dossiers[i].label, dossiers[j].label)})
    return found


def _mark_contracts(data: dict[str, Any]) -> None:
    """A resume output's pair whose contracts differ says so first in what differs (its numbers stay shown)."""
    differing = {(c["i"], c["j"]): c for c in data["resume_contracts"]}
    for name, out in data["outputs"].items():
        for row in out["pairs"] if name.startswith(resume_outputs.PREFIX) else ():
            if (row["i"], row["j"]) in differing:
                keys = ", ".join(f"`{k}`" for k in differing[(row["i"], row["j"])]["differs"])
                row["differs_in"] = f"DIFFERENT RESUME CONTRACT ({keys}); {row['differs_in']}"


def drift(folders: list[Path], out: Path, python: Path, declared: dict[str, dict[str, Any]],
          root: Path | None = None, allowed: tuple[Path, ...] = (),
          resume: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, Any], Path]:
    """Compare every pair of ``folders`` with ``python`` (an interpreter with numpy); write drift.md/json/svg.
    ``resume``: the application's resume outputs (:func:`resume_declared`), mapped beside its outputs."""
    dossiers = load(folders)
    final = outdir.check(out, what="the drift map", tip=tips.nox("drift", "A", "B", "C", "--out", "runs/NAME"),
                         root=root, allowed=allowed)
    groups = [{"prefix": "", "dossiers": [str(d.outputs) for d in dossiers], "outputs": declared}]
    if resume:
        groups.append({"prefix": resume_outputs.PREFIX, "outputs": resume,
                       "dossiers": [str(resume_outputs.run_folder(d.folder)) for d in dossiers]})
        declared = {**declared, **{resume_outputs.PREFIX + name: decl for name, decl in resume.items()}}
    with outdir.staged(final, "drift") as staging:  # signed with the list of its files, swapped in whole
        config = {"groups": groups, "result": str(staging / "pairwise.json"), "inenv_sha256": inenv_fingerprints()}
        write_json(staging / "drift-config.json", config)
        argv = start.argv(python, str(IN_ENV), "--config", str(staging / "drift-config.json"))
        log(f"$ {show(argv)}")
        env = start.judging_environ()  # no loader variable of the caller's (LDCMP1); the rest recorded
        proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not (staging / "pairwise.json").exists():
            raise KernodeckError(
                f"the pairwise comparison failed (exit {proc.returncode}): {first_error(proc.stderr or proc.stdout)}",
                tip=f"{tips.REBUILD}  (drift compares with the rebuilt env's numpy), or: --python PATH")
        numbers = json.loads((staging / "pairwise.json").read_text(encoding="utf-8"))
        data = table(dossiers, declared, numbers)
        if resume:
            data["resume_contracts"] = resume_contracts(dossiers)
            _mark_contracts(data)
        data["made"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        data["environment"] = start.recorded(env)  # what the judging process got of the recorded variables
        write_json(staging / "drift.json", json_safe(data))
        write_atomic(staging / "drift.md", render(data))
        write_atomic(staging / "drift.svg", svg.heatmap(heatmaps(data)))
    return data, final


def declared_from(folders: list[Path]) -> dict[str, dict[str, Any]] | None:
    """The declared outputs recorded in the first dossier that has them (its run-config.json), for use outside a
    project (a CI job that downloaded the dossiers)."""
    for folder in folders:
        config = json_object(folder / "run-config.json")
        outputs = (config.get("application") or {}).get("outputs")
        if isinstance(outputs, dict) and outputs:
            return outputs
    return None


def resume_declared(project: Project | None, folders: list[Path]) -> dict[str, dict[str, Any]] | None:
    """The application's resume outputs to map (the project's contract, else the first dossier's record of one), the
    loss curve's bound read from the dossiers' devices; None when no resume of the application is declared, or when
    fewer than two of the dossiers hold a resumed run (calibrate's variations run no training)."""
    if sum(resume_outputs.run_folder(folder).is_dir() for folder in folders) < 2:
        return None
    contract = None
    if project is not None:
        from kernodeck.project import resume_contract

        table = project.tool.get("application", {}).get("resume")
        found = resume_contract.from_table(table)
        contract = found.run_config() if found is not None else None
    else:
        contract = next((c for folder in folders if (c := resume_outputs.contract(folder)) is not None), None)
    if contract is None:
        return None
    return resume_outputs.declared(contract, resume_outputs.curve_atol(folders, contract))


def default_out(runs: Path | None) -> Path:
    base = runs if runs is not None else Path.cwd()
    return base / f"drift-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


def declared_outputs(project: Project | None, folders: list[Path]) -> dict[str, dict[str, Any]]:
    """The declared outputs to compare: the project's declaration, else the first dossier's record of it."""
    from kernodeck.project import app_contract

    declared = ({n: o.declared() for n, o in app_contract.load(project.root).outputs.items()} if project
                else declared_from(folders))
    if not declared:
        raise KernodeckError("no declared outputs: run drift in the project, or give dossiers with run-config.json",
                             tip=f"cd PROJECT && {tips.nox('drift', 'A', 'B', 'C')}")
    return declared


def interpreter(project: Project | None, python: Path | None) -> Path:
    """The interpreter that computes the numbers (it needs numpy): ``python``, else the project's rebuilt env's, once
    its files are the build's (env/sealing.py checked_python: refused otherwise, before it starts)."""
    if python is None and project is not None:
        from kernodeck.env.envdirs import current_env
        from kernodeck.env.sealing import checked_python
        from kernodeck.project.platforms import resolve_platform

        env = current_env(project, resolve_platform(project, None))
        python = checked_python(env) if env is not None else None
    if python is None:
        raise KernodeckError(
            "drift compares with an interpreter that has numpy: no rebuilt env here",
            tip=f"{tips.REBUILD}  (then {tips.nox('drift')} again), or: {tips.nox('drift', '...', '--python', 'PATH')}")
    return python
