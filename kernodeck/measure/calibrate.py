"""calibrate: a tolerance from measurement, between the noise that must pass and the margin that must fail.

1. The noise: the declared application runs in the rebuilt env under each source of legitimate variation this
   machine offers (threads, the CPU kernel level ``ATEN_CPU_CAPABILITY``, deterministic algorithms, TF32 on a GPU),
   each its own in-env process (``inenv/calibrate.py``) against the reference outputs, each leaving a dossier folder
   that ``drift`` reads. What the machine lacks is listed as unavailable, never skipped silently.
2. The margin of use: the smallest perturbation of the reference outputs that makes the application's criterion fail
   (found in-env by bisection on a fixed seed), measured in the same numbers as the noise; for a nearest-neighbour
   criterion of a cosine output also the flip bound (``reference.flip_bound``'s rule), whichever is smaller.
3. A proposal between them (their geometric mean), and a verdict on the declared tolerance: ok, too tight (below the
   noise: it fails on another machine), too loose (at or above the margin: a wrong output passes), or no room (the
   noise already reaches the margin).

Everything here is the orchestrator's side: it reads the in-env results as JSON and never imports numpy or torch.
"""

from __future__ import annotations

import enum
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, assert_never

from kernodeck import lock as locking
from kernodeck import outdir
from kernodeck._fs import write_atomic, write_json
from kernodeck._proc import clean_env, log, show
from kernodeck.dossier import reference as refmod
from kernodeck.errors import KernodeckError
from kernodeck.measure import svg
from kernodeck.project import application
from kernodeck.project.application import Kind
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform

IN_ENV = Path(__file__).resolve().parents[1] / "inenv" / "calibrate.py"
VERSION = 1
# x86 kernel levels torch dispatches to, with the /proc/cpuinfo flags each needs (ATen's own cpu feature checks).
ISA_LEVELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("default", ()),
    ("avx2", ("avx2", "fma")),
    ("avx512", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
)


class Verdict(enum.StrEnum):
    OK = "ok"
    TOO_TIGHT = "too tight"  # below the observed noise: another machine fails it
    TOO_LOOSE = "too loose"  # at or above the margin of use: a wrong output passes it
    NO_ROOM = "no room"  # the noise itself reaches the margin: no tolerance separates them

    def says(self) -> str:
        if self is Verdict.OK:
            return "ok: between the noise and the margin"
        if self is Verdict.TOO_TIGHT:
            return "TOO TIGHT: below the observed noise, it will fail on another machine"
        if self is Verdict.TOO_LOOSE:
            return "TOO LOOSE: at or above the margin of use, a wrong output would pass"
        if self is Verdict.NO_ROOM:
            return "NO ROOM: the legitimate noise already reaches the margin of use"
        assert_never(self)


@dataclass(frozen=True)
class Variation:
    """One source of legitimate variation; ``available`` False with ``why`` when this machine cannot offer it."""

    name: str
    what: str
    threads: int | None = None
    isa: str | None = None  # ATEN_CPU_CAPABILITY; None: torch's own choice
    deterministic: bool = True
    tf32: bool = False
    available: bool = True
    why: str = ""

    def env(self) -> dict[str, str]:
        extra: dict[str, str] = {}
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
    for level, needs in ISA_LEVELS:
        name, what = f"isa-{level}", f"ATEN_CPU_CAPABILITY={level}"
        if not x86:
            if level == "default":
                plan_.append(Variation(name, what, isa=level))
            else:
                plan_.append(Variation(name, what, isa=level, available=False, why=f"an x86 level; this CPU is {arch}"))
            continue
        lacking = sorted(set(needs) - flags) if flags is not None else list(needs)
        if flags is None and needs:
            plan_.append(Variation(name, what, isa=level, available=False, why="no /proc/cpuinfo to read flags from"))
        elif lacking:
            plan_.append(Variation(name, what, isa=level, available=False,
                                   why=f"this CPU lacks {', '.join(lacking)}"))
        else:
            plan_.append(Variation(name, what, isa=level))
    plan_.append(Variation("nondeterministic", "deterministic algorithms off (cudnn.benchmark on)",
                           deterministic=False))
    gpu = backend in ("cuda", "rocm")
    plan_.append(Variation("tf32", "TF32 on (the declared settings have it off)", tf32=True, available=gpu,
                           why="" if gpu else f"TF32 is a GPU matmul mode; the backend here is {backend}"))
    return plan_


# --- the analysis: axes, verdicts, proposals (pure; tested on synthetic numbers) -----------------------------------


@dataclass(frozen=True)
class AxisSpec:
    key: str  # the number's name in the in-env records
    label: str
    declared: float | None  # the declared tolerance in these units (None: the kind has no such bound)


def axes(kind: Kind, tolerance: dict[str, float]) -> list[AxisSpec]:
    """The numbers a kind's tolerance bounds, each as a distance (0 = equal) with the declared bound in its units."""
    if kind is Kind.COSINE:
        return [AxisSpec("max_abs", "max abs", float(tolerance["max-abs"])),
                AxisSpec("one_minus_cos", "1 - min cosine", 1.0 - float(tolerance["cosine-min"]))]
    if kind is Kind.ALLCLOSE:
        # |a-b| / (atol + rtol*|ref|) at its largest: 1.0 is the declared bound; a proposal scales atol and rtol
        return [AxisSpec("allclose_ratio", "allclose ratio: max of abs(a-b) / (atol + rtol*abs(ref))", 1.0),
                AxisSpec("max_abs", "max abs (shown for reading; the ratio is judged)", None)]
    if kind is Kind.AGREEMENT:
        return [AxisSpec("disagreement", "share of rows that differ", 1.0 - float(tolerance["min-share"]))]
    if kind is Kind.EXACT:
        return [AxisSpec("disagreement", "share of rows that differ", 0.0)]
    assert_never(kind)


def verdict(declared: float, noise: float, margin: float | None) -> Verdict:
    """Where the declared bound sits: the noise must pass (``<=``), the margin must fail (``<``)."""
    if margin is not None and noise >= margin:
        return Verdict.NO_ROOM
    if declared < noise:
        return Verdict.TOO_TIGHT
    if margin is not None and declared >= margin:
        return Verdict.TOO_LOOSE
    return Verdict.OK


def propose(noise: float, floor: float, margin: float | None) -> float | None:
    """The geometric mean of the noise (at least the dtype's resolution) and the margin; None without room."""
    low = max(noise, floor)
    if margin is None or low <= 0 or margin <= low:
        return None
    return math.sqrt(low * margin)


@dataclass(frozen=True)
class Axis:
    key: str
    label: str
    declared: float | None
    noise: float
    noise_by_variation: dict[str, float]
    floor: float
    margin: float | None
    margin_source: str
    proposal: float | None
    verdict: Verdict | None

    def ratios(self) -> dict[str, float | None]:
        """How far the proposal sits from each side (both >= 1 when it lies between them)."""
        if self.proposal is None:
            return {"proposal_over_noise": None, "margin_over_proposal": None}
        low = max(self.noise, self.floor)
        return {"proposal_over_noise": self.proposal / low,
                "margin_over_proposal": (self.margin / self.proposal) if self.margin else None}


@dataclass(frozen=True)
class OutputCalibration:
    name: str
    kind: Kind
    tolerance: dict[str, float]
    axes: list[Axis]
    margin_test: str
    proposed_tolerance: dict[str, float] | None
    notes: list[str] = field(default_factory=list)

    @property
    def verdicts(self) -> list[Verdict]:
        return [a.verdict for a in self.axes if a.verdict is not None]

    def overall(self) -> str:
        bad = sorted({str(v) for v in self.verdicts if v is not Verdict.OK})
        return ", ".join(bad) if bad else str(Verdict.OK)


def _sig(value: float, digits: int = 2) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def proposed_tolerance(
    kind: Kind, tolerance: dict[str, float], by_axis: dict[str, float | None]
) -> dict[str, float] | None:
    """The declared table's keys at the proposal (two significant digits), or None where an axis has no proposal."""
    if any(v is None for v in by_axis.values()):
        return None
    got = {k: float(v) for k, v in by_axis.items() if v is not None}
    if kind is Kind.COSINE:
        # rounded towards the noise (a tighter cosine floor is 1 - a rounded-down distance)
        return {"max-abs": _sig(got["max_abs"]), "cosine-min": 1.0 - _sig(got["one_minus_cos"])}
    if kind is Kind.ALLCLOSE:
        k = got["allclose_ratio"]
        return {"rtol": _sig(tolerance["rtol"] * k), "atol": _sig(tolerance["atol"] * k)}
    if kind is Kind.AGREEMENT:
        return {"min-share": round(1.0 - got["disagreement"], 4)}
    if kind is Kind.EXACT:
        return None  # exact has no number to move; a noise above zero makes it too tight (use agreement)
    assert_never(kind)


def flip_limit(key: str, flip: dict[str, Any]) -> tuple[float, str] | None:
    """Below this distance no nearest neighbour can flip (``flip`` is the reference's flip-bound record: its smallest
    nearest-neighbour lead m and the output's dim).

    max abs d moves any cosine by at most 2*sqrt(dim)*d (``reference.tolerance_bound``), a lead by twice that: below
    m/(4*sqrt(dim)). A row within cosine c of its reference moved by at most sqrt(2(1-c)) as a unit vector, so any
    cosine between two rows by at most 2*sqrt(2(1-c)) and a lead by twice that: below 1-c = m**2/32.
    """
    lead, dim = float(flip["reference_min_margin"]), float(flip["dim"])
    if key == "max_abs":
        return lead / (4 * math.sqrt(dim)), f"flip bound: lead {lead:.3g} / (4*sqrt({dim:.0f}))"
    if key == "one_minus_cos":
        return lead**2 / 32, f"flip bound: lead {lead:.3g} squared / 32"
    return None


def analyse_output(
    name: str,
    kind: Kind,
    tolerance: dict[str, float],
    noise: dict[str, dict[str, float]],
    margin: dict[str, Any],
    flip: dict[str, Any] | None = None,
) -> OutputCalibration:
    """One output: ``noise`` maps each variation to its numbers; ``margin`` is the in-env margin record."""
    found = bool(margin.get("found"))
    fails = margin.get("fails", {}) if found else {}
    resolution = margin.get("resolution", {})
    notes: list[str] = []
    calibrated: list[Axis] = []
    by_axis: dict[str, float | None] = {}
    for spec in axes(kind, tolerance):
        per = {v: float(nums[spec.key]) for v, nums in noise.items() if spec.key in nums}
        worst = max(per.values(), default=0.0)
        edge: float | None = float(fails[spec.key]) if spec.key in fails else None
        source = margin.get("test", "") if edge is not None else ""
        bound = flip_limit(spec.key, flip) if flip is not None else None
        if bound is not None and (edge is None or bound[0] < edge):
            edge, source = bound
        floor = float(resolution.get(spec.key, 0.0))
        proposal = propose(worst, floor, edge) if kind is not Kind.EXACT else None  # exact has no number to move
        if spec.declared is not None:  # an axis shown for reading only proposes nothing
            by_axis[spec.key] = proposal
        judged = verdict(spec.declared, worst, edge) if spec.declared is not None else None
        calibrated.append(Axis(spec.key, spec.label, spec.declared, worst, per, floor, edge, source, proposal, judged))
    if not found:
        notes.append(f"no margin of use found: {margin.get('why', 'not searched')}")
    if kind is Kind.EXACT and calibrated:
        notes.append(exact_note(calibrated[0], margin))
    return OutputCalibration(name, kind, dict(tolerance), calibrated, str(margin.get("test", "")),
                             proposed_tolerance(kind, tolerance, by_axis), notes)


def _rows(share: float, rows: int | None) -> str:
    return f"{round(share * rows)} of {rows} rows" if rows else f"a share of {share:.3g} of the rows"


def exact_note(axis: Axis, margin: dict[str, Any]) -> str:
    """What calibrate can say of an ``exact`` output, in rows: the noise (rows that differed in the worst variation),
    the margin (rows changed until the criterion fails), and why there is no tolerance to propose."""
    rows = margin.get("rows")
    if not isinstance(rows, int) or rows <= 0:  # an older record: one row is the resolution
        rows = round(1 / axis.floor) if axis.floor > 0 else None
    if axis.noise > 0:
        worst = max(axis.noise_by_variation, key=lambda k: axis.noise_by_variation[k])
        said = (f"exact: no tolerance to propose. {_rows(axis.noise, rows)} differed ({worst}), so exact fails on "
                "another machine: declare kind = \"agreement\" with a min-share (calibrate then proposes one)")
    else:
        said = (f"exact: no tolerance to propose. No variation changed a row (0 of {rows or '?'} rows differed in "
                f"{len(axis.noise_by_variation)} variations), so exact holds on this machine")
    if axis.margin is not None:
        said += f"; the criterion fails once {_rows(axis.margin, rows)} change"
    elif "the application's criterion: still passes" in str(margin.get("why", "")):
        said += ("; the criterion does not react to this output (it still passes with every row changed): exact is "
                 "the only check that fails a changed row")
    return said + "."


# --- running it ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VariationRun:
    variation: Variation
    folder: str  # relative to the calibration folder
    status: str  # passed | failed | unavailable
    seconds: float = 0.0
    error: str = ""
    observed: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)


def _in_env(python: Path, folder: Path, config: dict[str, Any], variation: Variation) -> tuple[int, float, str]:
    """One variation's process; returns its exit code, seconds and the tail of its stderr."""
    import subprocess

    from kernodeck.verify import RUNNER_ENV

    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "run-config.json", config)
    argv = [str(python), "-I", str(IN_ENV), "--config", str(folder / "run-config.json")]
    env = clean_env(RUNNER_ENV)
    for var in ("ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(var, None)  # the declared run is torch's own choice, never the caller's leftovers
    env.update(variation.env())
    shown = " ".join(f"{k}={v}" for k, v in variation.env().items())
    log(f"$ {shown + ' ' if shown else ''}{show(argv)}")
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    return proc.returncode, time.perf_counter() - start, "\n".join(lines[-5:])


@dataclass(frozen=True)
class Calibration:
    platform: str
    reference_id: str
    variations: list[VariationRun]
    outputs: list[OutputCalibration]
    margins: dict[str, Any]
    started: str
    declared_differs: list[str] = field(default_factory=list)  # from the reference's record (tolerances only)

    def as_dict(self) -> dict[str, Any]:
        def axis(a: Axis) -> dict[str, Any]:
            return {**asdict(a), "verdict": str(a.verdict) if a.verdict else None, **a.ratios()}

        return {
            "version": VERSION,
            "platform": self.platform,
            "reference_id": self.reference_id,
            "started": self.started,
            "declared_differs_from_reference": self.declared_differs,
            "variations": [
                {**asdict(v.variation), "folder": v.folder, "status": v.status, "seconds": round(v.seconds, 2),
                 "error": v.error, "observed": v.observed, "outputs": v.outputs}
                for v in self.variations
            ],
            "outputs": {
                o.name: {"kind": str(o.kind), "declared": o.tolerance, "verdict": o.overall(),
                         "margin_test": o.margin_test, "proposed": o.proposed_tolerance, "notes": o.notes,
                         "axes": [axis(a) for a in o.axes]}
                for o in self.outputs
            },
            "margins": self.margins,
        }


def calibrate(project: Project, plat: Platform, out: Path | None, *, write: bool = False) -> tuple[Calibration, Path]:
    """Rebuild (or reuse) the env, run every available variation and the margin search, write the calibration."""
    from kernodeck.env.rebuild import acquire, platform_lock, rebuild
    from kernodeck.verify import require_declared_contract

    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    lock_path = locking.require_current(project, plat)
    app = application.load(project.root)
    ref = refmod.load(project)
    differ = refmod.declaration_differences(ref.manifest, app)
    if not tolerance_only(differ):
        require_declared_contract(project, ref, app)  # raises: another output, kind, dtype, entry or sample
    elif differ:
        log(f"kernodeck: calibrate: judging the tolerance pyproject declares now (the reference recorded another: "
            f"{'; '.join(differ)})")
    final = (out or project.runs / f"calibrate-{time.strftime('%Y%m%d-%H%M%S')}-{plat.id}").resolve()
    if out is not None:
        final = outdir.check(out, what="the calibration", tip="nox -s calibrate -- --out runs/NAME",
                             root=project.root, allowed=(project.runs,))
    stage = outdir.Staged.begin(final, "calibration")  # signed with the list of its files, swapped in whole
    staging = stage.path
    plock = platform_lock(project, plat)
    acquire(plock, plat)
    try:
        python = rebuild(project, plat, lock_path).python
        base = {**ref.run_config(project), "project_root": str(project.root), "mode": "verify",
                "expect_backend": str(plat.variant.backend)}
        # the numbers are measured under the DECLARED tolerance (the one judged), whatever the reference recorded
        base["application"]["outputs"] = {n: o.declared() for n, o in app.outputs.items()}
        variations = plan(cpu_flags(), os.cpu_count() or 1, str(plat.variant.backend), os.uname().machine)
        runs: list[VariationRun] = []
        margin_file = staging / "margins.json"
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
            code, seconds, tail = _in_env(python, staging / rel, config, variation)
            runs.append(_read_variation(variation, staging / rel, rel, code, seconds, tail))
        if not margin_file.exists():
            failed = next((r for r in runs if r.status == "failed"), None)
            raise KernodeckError(
                f"the declared run failed before the margin search: {failed.error if failed else 'no run'}",
                tip="nox -s verify  (its report names the failing step)")
        margins = json.loads(margin_file.read_text(encoding="utf-8"))
        flip = (ref.manifest.get("criterion") or {}).get("flip_bound")
        results = []
        for name, output in app.outputs.items():
            noise = {r.variation.name: r.outputs[name]["numbers"] for r in runs
                     if r.status == "passed" and name in r.outputs}
            results.append(analyse_output(name, output.kind, output.tolerance, noise, margins["outputs"][name],
                                          flip if isinstance(flip, dict) and flip.get("output") == name else None))
        result = Calibration(plat.id, ref.id, runs, results, margins, started, differ)
        write_json(staging / "calibration.json", result.as_dict())
        write_atomic(staging / "calibration.md", render(result))
        write_atomic(staging / "calibration.svg", svg.calibration_chart(chart_data(result)))
        stage.commit()
    except BaseException:
        stage.abandon()
        raise
    finally:
        plock.release()
    if write:
        write_proposal(project.root / "pyproject.toml", result)
    return result, final


TOLERANCE_KEYS = frozenset({"rtol", "atol", "max-abs", "cosine-min", "min-share", "justification"})


def tolerance_only(differences: list[str]) -> bool:
    """Whether the declaration differs from the reference's record only in tolerance numbers or justifications
    (``outputs.NAME.KEY: ...`` lines): what calibrate judges may be edited without a new reference."""
    for line in differences:
        parts = line.split(":", 1)[0].split(".")
        if len(parts) != 3 or parts[0] != "outputs" or parts[2].replace("_", "-") not in TOLERANCE_KEYS:
            return False
    return True


def _read_variation(variation: Variation, folder: Path, rel: str, code: int, seconds: float, tail: str) -> VariationRun:
    noise_file = folder / "noise.json"
    if not noise_file.exists():
        return VariationRun(variation, rel, "failed", seconds, f"the process ended (exit {code}): {tail[-400:]}")
    noise = json.loads(noise_file.read_text(encoding="utf-8"))
    if "failed" in noise:
        return VariationRun(variation, rel, "failed", seconds,
                            f"{noise['failed']['step']}: {noise['failed']['error'][:400]}")
    run = VariationRun(variation, rel, "passed", seconds, observed=noise.get("observed", {}),
                       outputs=noise["outputs"])
    log(f"kernodeck: calibrate: {variation.name}: done in {seconds:.1f}s ("
        + "; ".join(f"{n}: {_numbers_text(o['numbers'])}" for n, o in run.outputs.items()) + ")")
    return run


def _numbers_text(nums: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.3g}" for k, v in nums.items())


# --- what people read ------------------------------------------------------------------------------------------------


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render(cal: Calibration) -> str:
    """calibration.md: the variations tried, then per output the noise, margin, proposal and verdict."""
    lines = [f"# Calibration of the declared tolerances ({cal.platform})", "",
             f"Reference `{cal.reference_id}`; started {cal.started}. Each variation ran the application in its own "
             "process in the rebuilt env, against the reference outputs.", "",
             *([f"The declared tolerance differs from the reference's record: {'; '.join(cal.declared_differs)}. "
                "It is the declared one that is judged here.", ""] if cal.declared_differs else []),
             "## Variations", "", "| variation | what | status | threads after the entry | CPU level | seconds |",
             "|---|---|---|---|---|---|"]
    for r in cal.variations:
        status = r.status if r.status != "unavailable" else f"unavailable: {r.error}"
        if r.status == "failed":
            status = f"FAILED: {r.error[:160]}"
        lines.append(f"| {r.variation.name} | {r.variation.what} | {status} | "
                     f"{r.observed.get('torch.num_threads_after_entry', '-')} | "
                     f"{r.observed.get('torch_cpu_capability', '-')} | {r.seconds:.1f} |")
    lines += ["", "## Per output", ""]
    for out in cal.outputs:
        lines += [f"### `{out.name}` ({out.kind}): {out.overall()}", "",
                  f"Declared: {', '.join(f'{k} = {v}' for k, v in out.tolerance.items()) or 'every row equal'}. "
                  f"Margin of use searched with: {out.margin_test or 'nothing that applies'}.", "",
                  "| number | noise (must pass) | worst variation | margin (must fail) | proposal | "
                  "proposal / noise | margin / proposal | declared | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for a in out.axes:
            worst = max(a.noise_by_variation, key=lambda k: a.noise_by_variation[k], default="-")
            ratios = a.ratios()
            lines.append(
                f"| {a.label} | {_g(a.noise)} | {worst if a.noise > 0 else 'all equal'} | {_g(a.margin)} | "
                f"{_g(a.proposal)} | {_g(ratios['proposal_over_noise'])} | {_g(ratios['margin_over_proposal'])} | "
                f"{_g(a.declared)} | {_says(a)} |")
        if out.proposed_tolerance:
            lines += ["", "Proposed: " + ", ".join(f"`{k} = {v}`" for k, v in out.proposed_tolerance.items())]
        for note in out.notes:
            lines += ["", f"Note: {note}"]
        for a in out.axes:
            if a.margin_source.startswith("flip bound"):
                lines += ["", f"The {a.label} margin is the {a.margin_source}."]
        lines.append("")
    lines += ["Noise below the dtype's resolution counts as that resolution when the proposal is made "
              "(one unit in the last place; one row for labels).", ""]
    return "\n".join(lines)


def _says(axis: Axis) -> str:
    if axis.verdict is None:
        return "-"
    if axis.verdict is Verdict.OK and axis.margin is None:
        return "ok: at or above the noise (no margin of use to judge it against)"
    return axis.verdict.says()


def chart_data(cal: Calibration) -> list[svg.Panel]:
    panels = []
    for out in cal.outputs:
        for a in out.axes:
            panels.append(svg.Panel(
                title=f"{out.name}: {a.label} ({a.verdict or '-'})",
                points=list(a.noise_by_variation.items()),  # in run order
                margin=a.margin,
                declared=a.declared,
                proposal=a.proposal,
                floor=a.floor,
            ))
    return panels


def write_proposal(pyproject: Path, cal: Calibration) -> list[str]:
    """Write each output's proposal into pyproject (tomlkit: comments and layout kept), numbers in its justification."""
    import tomlkit

    doc = tomlkit.parse(pyproject.read_text(encoding="utf-8"))
    outputs = doc["tool"]["kernodeck"]["application"]["outputs"]
    changed = []
    for out in cal.outputs:
        if not out.proposed_tolerance:
            continue
        table = outputs[out.name]
        for key, value in out.proposed_tolerance.items():
            table[key] = value
        measured = "; ".join(
            f"{a.label}: noise {_g(a.noise)} over {len(a.noise_by_variation)} variations, margin {_g(a.margin)}"
            f" ({a.margin_source or 'not found'}), set to {_g(a.proposal)}"
            for a in out.axes)
        text = str(table.get("justification", "")).split("\n\nCalibrated", 1)[0]
        text += (f"\n\nCalibrated by `nox -s calibrate` on {cal.platform} ({cal.started}): {measured}.")
        table["justification"] = tomlkit.string(text, multiline=True)
        changed.append(out.name)
    write_atomic(pyproject, tomlkit.dumps(doc))
    if changed:
        log(f"kernodeck: calibrate: wrote the proposal of {', '.join(changed)} into {pyproject.name}; "
            "the reference records the declared contract: make it again with nox -s reference -- --new")
    return changed
