"""Typed records for steps and the run report (``report.json`` for machines, ``report.md`` for people)."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, assert_never

from kernodeck._fs import write_atomic, write_json

# one definition for both sides of the wall (re-exported: the orchestrator's modules import them from here)
from kernodeck.inenv.protocol import Layer as Layer
from kernodeck.inenv.protocol import Status as Status

REPORT_VERSION = 2  # 2: the claims a pass stands on (``claims``), the verdict derived from them


class Verdict(enum.StrEnum):
    """The run's top-level status (``report.json`` "status"): what a pass established, never more."""

    PASSED = "passed"  # every step passed AND every claim a pass stands on was established (CLAIMS)
    PASSED_UNLOCKED = "passed-unlocked"  # every check passed, but the env is NOT shown to be the lock's (--python)
    # every check passed on code that differs from the reference's (--allow-code-change): not a pass, exit 1
    PASSED_WITH_CHANGED_CODE = "passed-with-changed-code"
    FAILED = "failed"


@dataclass
class Step:
    name: str
    status: Status
    title: str = ""
    duration_s: float = 0.0
    reason: str = ""
    error: str = ""
    layer: str = ""
    command: str = ""
    interpreter: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = str(self.status)
        return {k: v for k, v in data.items() if v not in ("", {}, None) or k in ("name", "status")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Step:
        known = {f for f in cls.__dataclass_fields__}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values["status"])
        return cls(**values)


def overall(steps: list[Step]) -> Status:
    """The steps alone: passed when no step failed or was left unrun (a skipped step carries its reason).

    Not the verdict: a run passes only when every claim it stands on is established (:meth:`Report.verdict`); this
    is what the benchmark's partial runs ask, and the first half of the verdict.
    """
    for step in steps:
        match step.status:
            case Status.FAILED | Status.NOT_RUN:
                return Status.FAILED
            case Status.PASSED | Status.SKIPPED:
                continue
            case _ as unreachable:
                assert_never(unreachable)
    return Status.PASSED if steps else Status.FAILED


class ClaimState(enum.StrEnum):
    """Whether a claim was established, and if not, why not."""

    ESTABLISHED = "established"
    CONTRADICTED = "contradicted"  # the step ran, and its own record says the claim does not hold
    NOT_RECORDED = "not-recorded"  # the step ran but recorded no such evidence (its details lack the key)
    STEP_FAILED = "step-failed"
    STEP_NOT_RUN = "step-not-run"
    STEP_SKIPPED = "step-skipped"
    STEP_ABSENT = "step-absent"  # no such step in the run at all


def _empty_delta(v: Any) -> bool:
    return isinstance(v, dict) and all(k in v and not v[k] for k in ("added", "removed", "changed"))


def _finite_at_most(v: Any, limit: float) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v <= limit


def _all_outputs_passed(d: dict[str, Any]) -> bool:
    """Every declared output within its tolerance (one output's verdict is repeated at the top level: it must agree)."""
    outputs = d.get("outputs")
    return (
        d.get("passed", True) is True
        and isinstance(outputs, dict)
        and bool(outputs)
        and all(isinstance(o, dict) and o.get("passed") is True for o in outputs.values())
    )


def _files_unchanged(files: Any) -> bool:
    """The inventory step's every-file record (kernodeck/env/envfiles.py): compared with the build's snapshot, nothing
    foreign, shared, added, removed or changed, no distribution without its RECORD, nothing damaged, no bytecode
    that is not its source's."""
    if not isinstance(files, dict) or files.get("snapshot") != "compared":
        return False
    counts = files.get("counts")
    bytecode = files.get("bytecode_since_build")
    return (
        isinstance(counts, dict)
        and {"foreign", "shared", "added", "removed", "changed"} <= set(counts)
        and all(v == 0 for v in counts.values())
        and files.get("without_record") == []
        and files.get("damaged") == {}
        and isinstance(bytecode, dict)
        and bytecode.get("not_its_source") == []
    )


def _code_unchanged(code: Any) -> bool:
    """The in-env reference step's record of the declared code files against the reference's fingerprints."""
    return isinstance(code, dict) and bool(code.get("files")) and code.get("changed") == []


def _deterministic(d: dict[str, Any]) -> bool:
    repeats, outputs = d.get("repeats"), d.get("outputs")
    if not isinstance(repeats, int) or repeats < 2 or not isinstance(outputs, dict) or not outputs:
        return False
    # On CPU a pass means bitwise identical runs; elsewhere the step held each output to its declared tolerance.
    return d.get("device") != "cpu" or d.get("bitwise_identical") is True


def _backend_works(d: dict[str, Any]) -> bool:
    return (
        isinstance(d.get("device"), str)
        and bool(d["device"])
        and bool(d.get("expected_backend"))
        and d.get("matmul_max_abs_error") == 0.0
        and _finite_at_most(d.get("softmax_max_abs_error"), 1e-6)
    )


@dataclass(frozen=True)
class ClaimSpec:
    """One claim a pass stands on: the step that establishes it, the key of its details that records the evidence,
    and the test of that evidence (given the step's whole details; the key is known to be present)."""

    id: str
    text: str
    step: str
    key: str
    holds: Callable[[dict[str, Any]], bool]
    modes: frozenset[str] = frozenset({"verify", "reference"})
    # The step does not record ``key`` yet (another change adds it): until then a run without the key shows the
    # claim "not-recorded" but is not failed for it. Set False once the step writes the key (the strict verdict).
    pending: bool = False
    # A declared variant (verify --python: an existing interpreter, not a rebuild) may leave this claim
    # unestablished; the verdict is then passed-unlocked, naming what was not established.
    variant: bool = False


VERIFY = frozenset({"verify"})

# THE table: every claim, in the order the report shows them. Adjust a step or key here, nowhere else.
CLAIMS: tuple[ClaimSpec, ...] = (
    ClaimSpec("lock-current", "the lock is current against its inputs, its pins and its PEP 751 twin",
              "lock-check", "lock", lambda d: isinstance(d["lock"], str) and bool(d["lock"]), variant=True),
    ClaimSpec("env-packages", "the environment's packages are exactly the lock's",
              "inventory", "vs_lock", lambda d: _empty_delta(d["vs_lock"]), variant=True),
    ClaimSpec("env-files-unchanged", "no file of the environment added, removed or changed since it was built",
              "inventory", "files", lambda d: _files_unchanged(d["files"]), variant=True),
    ClaimSpec("reference-current", "the reference describes this code, data and weights",
              "reference", "code", lambda d: _code_unchanged(d["code"]), modes=VERIFY),
    ClaimSpec("outputs-within-tolerance", "each output is within its declared tolerance of the reference",
              "compare", "outputs", _all_outputs_passed, modes=VERIFY),
    ClaimSpec("criterion-met", "the application's criterion is met",
              "criterion", "passed", lambda d: d["passed"] is True),
    ClaimSpec("criterion-able-to-fail", "the criterion fails on corrupted outputs (it is able to fail)",
              "criterion", "controls", lambda d: isinstance(d["controls"], dict)
              and d["controls"].get("able_to_fail") is True),
    ClaimSpec("deterministic", "repeated runs give the same outputs (bitwise on CPU)",
              "determinism", "repeats", _deterministic),
    ClaimSpec("resume", "training resumed from a checkpoint in a new process matches an uninterrupted run",
              "resume", "passed", lambda d: d["passed"] is True, modes=VERIFY),
    ClaimSpec("backend", "the expected backend computes correctly (matmul exact, softmax within 1e-6)",
              "backend", "device", _backend_works),
)


@dataclass(frozen=True)
class Claim:
    """A claim as this run left it: established by ``step`` (its details' ``key``), or why not."""

    id: str
    text: str
    step: str
    key: str
    state: ClaimState
    why: str = ""
    binding: bool = True  # False: a pending key not recorded yet, shown but not yet required by the verdict
    variant: bool = False

    @property
    def established(self) -> bool:
        return self.state is ClaimState.ESTABLISHED

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "claim": self.text,
            "step": self.step,
            "key": self.key,
            "state": str(self.state),
            "established": self.established,
            "why": self.why,
            "binding": self.binding,
        }


def _claim_state(spec: ClaimSpec, step: Step | None) -> tuple[ClaimState, str]:
    if step is None:
        return ClaimState.STEP_ABSENT, f"no {spec.step} step in this run"
    match step.status:
        case Status.FAILED:
            return ClaimState.STEP_FAILED, f"{spec.step} failed"
        case Status.NOT_RUN:
            return ClaimState.STEP_NOT_RUN, f"{spec.step} was not run ({step.reason or 'an earlier step failed'})"
        case Status.SKIPPED:
            return ClaimState.STEP_SKIPPED, f"{spec.step} was skipped ({step.reason or 'no reason given'})"
        case Status.PASSED:
            pass
        case _ as unreachable:
            assert_never(unreachable)
    if spec.key not in step.details:
        return ClaimState.NOT_RECORDED, f"{spec.step} recorded no {spec.key}"
    try:
        holds = spec.holds(step.details)
    except (KeyError, TypeError, ValueError, AttributeError):
        holds = False
    if not holds:
        return ClaimState.CONTRADICTED, f"{spec.step} records {spec.key} = {_claim_value(step.details[spec.key])}"
    return ClaimState.ESTABLISHED, ""


def _claim_value(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 80 else text[:79] + "…"


def evaluate_claims(steps: list[Step], mode: str = "verify") -> list[Claim]:
    """Every claim of ``mode``, each established or not by the LAST step of its name (a step repeated counts once)."""
    by_name = {s.name: s for s in steps}
    out: list[Claim] = []
    for spec in CLAIMS:
        if mode not in spec.modes:
            continue
        state, why = _claim_state(spec, by_name.get(spec.step))
        binding = not (spec.pending and state is ClaimState.NOT_RECORDED)
        out.append(Claim(spec.id, spec.text, spec.step, spec.key, state, why, binding, spec.variant))
    return out


@dataclass
class Report:
    platform: str
    steps: list[Step]
    meta: dict[str, Any] = field(default_factory=dict)
    # What a passing run did NOT establish (e.g. --python: the env differs from the lock); empty for a rebuild.
    not_established: list[str] = field(default_factory=list)
    # Code files that differ from the reference's fingerprint (verify --allow-code-change): never a pass.
    changed_code: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        """Which claims the run stands on: ``verify`` (every claim) or ``reference`` (no reference to compare with)."""
        mode = self.meta.get("mode")
        return mode if mode in ("verify", "reference") else "verify"

    @property
    def claims(self) -> list[Claim]:
        return evaluate_claims(self.steps, self.mode)

    def unestablished(self) -> list[Claim]:
        """The binding claims this run did not establish: any one of them, and the run has not passed."""
        return [c for c in self.claims if c.binding and not c.established]

    @property
    def status(self) -> Status:
        """Passed exactly when the verdict is a pass (of either kind): from the claims, never from the steps alone."""
        return Status.PASSED if self.verdict in (Verdict.PASSED, Verdict.PASSED_UNLOCKED) else Status.FAILED

    @property
    def verdict(self) -> Verdict:
        match overall(self.steps):
            case Status.FAILED | Status.NOT_RUN:
                return Verdict.FAILED
            case Status.PASSED | Status.SKIPPED:
                missing = self.unestablished()
                if self.changed_code:  # --allow-code-change: the code claim alone is excused, and named instead
                    missing = [c for c in missing if c.id != "reference-current"]
                if missing and not (self.not_established and all(c.variant for c in missing)):
                    return Verdict.FAILED
                if self.changed_code:
                    return Verdict.PASSED_WITH_CHANGED_CODE
                return Verdict.PASSED_UNLOCKED if self.not_established else Verdict.PASSED
            case _ as unreachable:
                assert_never(unreachable)

    def verdict_line(self) -> str:
        match self.verdict:
            case Verdict.PASSED:
                held = [c for c in self.claims if c.established]
                return (
                    "passed: the environment is the lock's (observed inventory equals it) and every check passed; "
                    f"{len(held)} claims established"
                    + (f" ({len(self.claims) - len(held)} not yet required)" if len(held) < len(self.claims) else "")
                )
            case Verdict.PASSED_UNLOCKED:
                return "every check passed, but NOT established: " + "; ".join(self.not_established)
            case Verdict.PASSED_WITH_CHANGED_CODE:
                return (
                    "NOT a pass: the checks ran on code that differs from the reference's (--allow-code-change): "
                    + ", ".join(self.changed_code)
                    + "; if the change is intended: nox -s reference -- --new"
                )
            case Verdict.FAILED:
                failure = self.first_failure()
                if failure is not None or overall(self.steps) is not Status.PASSED:
                    return f"failed at {failure.name if failure else 'an unrun step'}"
                missing = self.unestablished()
                return "every step passed, but NOT established: " + "; ".join(
                    f"{c.text} ({c.why})" for c in missing
                )
            case _ as unreachable:
                assert_never(unreachable)

    def first_failure(self) -> Step | None:
        return next((s for s in self.steps if s.status is Status.FAILED), None)

    def as_dict(self) -> dict[str, Any]:
        failure = self.first_failure()
        return {
            "version": REPORT_VERSION,
            "status": str(self.verdict),
            "verdict": {
                "line": self.verdict_line(),
                "not_established": self.not_established,
                "changed_code": self.changed_code,
            },
            "platform": self.platform,
            "first_failure": failure.name if failure else None,
            "steps": [s.as_dict() for s in self.steps],
            **self.meta,
            "claims": [c.as_dict() for c in self.claims],
        }

    def write(self, out: Path) -> None:
        write_json(out / "report.json", self.as_dict())
        write_atomic(out / "report.md", render_markdown(self))


_MARK = {Status.PASSED: "✅", Status.FAILED: "❌", Status.SKIPPED: "⏭", Status.NOT_RUN: "·"}

# What the report names about the run, in this order (the rest of ``meta`` stays in report.json).
_META_KEYS = (
    "reference_id",
    "reference_code",
    "lock",
    "lock_inputs_digest",
    "interpreter",
    "expect_backend",
    "started",
    "finished",
)


def _num(value: Any) -> str:
    """A number as people read it: short, but 0.999999 never rounded to 1."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or value == 0:
        return str(value)
    if 0.99 < abs(value) < 1:
        return f"{value:.9f}"
    return f"{value:.3g}"


def _scalar(value: Any) -> str | None:
    if isinstance(value, bool | int | float):
        return _num(value)
    if isinstance(value, str) and len(value) <= 60:
        return value
    return None


def _generic(details: dict[str, Any], limit: int = 5) -> str:
    """Fallback for a step without a summariser: its first few scalar details, ``key value``."""
    parts = [f"{k} {v}" for k, raw in details.items() if (v := _scalar(raw)) is not None and k != "summary"]
    return ", ".join(parts[:limit])


def _compare_one(d: dict[str, Any]) -> str:
    """One compared output: what was found against what is allowed, whichever measures the step recorded."""
    parts = []
    for found, allowed, word, op in (
        ("max_abs", "max_abs_allowed", "max abs", "≤"),
        ("min_cosine", "cosine_min_allowed", "min cosine", "≥"),
        ("values_over", None, "values over atol + rtol*|ref|", "="),
        ("equal_share", "min_share_allowed", "share of equal rows", "≥"),
        ("unequal_rows", None, "unequal rows", "="),
        ("mismatches", None, "mismatches", "="),
    ):
        if found in d and d[found] is not None:
            limit = f" ({op} {_num(d[allowed])})" if allowed and d.get(allowed) is not None else ""
            parts.append(f"{word} {_num(d[found])}{limit}")
    if d.get("non_finite_rows"):
        parts.append(f"non-finite rows {d['non_finite_rows']}")
    if d.get("worst_id") is not None:
        parts.append(f"worst `{d['worst_id']}`")
    if d.get("bitwise_equal") is True:
        parts.append("bitwise equal")
    return ", ".join(parts)


def _compare(d: dict[str, Any]) -> str:
    outputs = d.get("outputs")
    if isinstance(outputs, dict) and outputs and all(isinstance(v, dict) for v in outputs.values()):
        return "; ".join(
            f"{name} ({o.get('kind', '?')}): {o.get('summary') or _compare_one(o) or _generic(o)}"
            for name, o in outputs.items()
        )
    return _compare_one(d)


def _criterion(d: dict[str, Any]) -> str:
    parts = []
    if "min_margin" in d or "margin" in d:
        parts.append(f"smallest margin {_num(d.get('min_margin', d.get('margin')))}")
    if "pairs_checked" in d:
        parts.append(f"{d['pairs_checked']} pairs checked, {len(d.get('misses') or {})} missed")
    return ", ".join(parts)


def _determinism(d: dict[str, Any]) -> str:
    if "bitwise_identical" not in d:
        return ""
    between = d.get("max_abs_between_runs")
    outputs = d.get("outputs")
    if between is None and isinstance(outputs, dict):  # one record per declared output
        each = [o.get("max_abs_between_runs", 0.0) for o in outputs.values() if isinstance(o, dict)]
        between = max(each) if each else None
    head = (
        f"bitwise identical over {d.get('repeats', '?')} runs"
        if d["bitwise_identical"]
        else f"max abs between runs {_num(between)}"
    )
    if isinstance(d.get("records"), int) and isinstance(d.get("of"), int) and d["records"] < d["of"]:
        head += f" of {d.get('subset', 'a subset')} ({d['records']} of {d['of']} records)"
    if d.get("cost_ratio") is not None:
        head += f"; settings cost x{_num(d['cost_ratio'])}"
    return head


def _resume(d: dict[str, Any]) -> str:
    if "final_weights_max_abs" not in d:
        return ""
    last = ""
    a, b = d.get("losses_uninterrupted") or [], d.get("losses_resumed") or []
    if a and b:
        last = f", loss at step {len(a)}: diff {_num(abs(float(a[-1]) - float(b[-1])))}"
    diverged = d.get("first_diverging_step")
    return (
        f"{d.get('steps', '?')} steps, checkpoint at {d.get('checkpoint_at', '?')}, new process: "
        f"max weight diff at the last step {_num(d['final_weights_max_abs'])} ({d.get('comparison', '?')})"
        + last
        + (f"; first diverging step {diverged}" if diverged else "")
    )


def _settings(d: dict[str, Any]) -> str:
    keys = (
        ("deterministic_algorithms", "deterministic"),
        ("cudnn.deterministic", "cudnn.deterministic"),
        ("cudnn.benchmark", "cudnn.benchmark"),
        ("cuda.matmul.allow_tf32 (legacy flag)", "tf32 matmul"),
        ("float32_matmul_precision", "matmul precision"),
        ("fill_uninitialized_memory", "fill memory"),
        ("torch.num_threads", "threads"),
        ("seed", "seed"),
    )
    return ", ".join(f"{label} {d[k]}" for k, label in keys if k in d)


def _unavail(value: Any) -> str:
    if isinstance(value, dict) and "unavailable" in value:
        return "unavailable"
    if isinstance(value, dict) and "version" in value:
        return str(value["version"])
    return "none" if value is None else str(value)


def _system(d: dict[str, Any]) -> str:
    if "torch_version" not in d:
        return ""
    devices = d.get("devices") or []
    names = ", ".join(
        f"{x.get('name')}"
        + (f" sm{x['capability']}" if x.get("capability") else "")
        + (f" {x['gcnArchName']}" if x.get("gcnArchName") else "")
        for x in devices
        if isinstance(x, dict)
    )
    cpu = d.get("cpu_model", "?")
    if d.get("torch_cpu_capability") and not isinstance(d["torch_cpu_capability"], dict):
        cpu = f"{cpu}, {d['torch_cpu_capability']}"
    return (
        f"torch {d['torch_version']}, CUDA {_unavail(d.get('torch_version_cuda'))}, "
        f"HIP {_unavail(d.get('torch_version_hip'))}, device {names or 'cpu'} ({_unavail(cpu)}), "
        f"driver {_unavail(d.get('driver'))}"
    )


def _rebuild(d: dict[str, Any]) -> str:
    if "installer" not in d:
        return ""
    what = "reused" if d.get("reused") else f"built with {d['installer']}"
    durations = d.get("durations") or {}
    timing = ", ".join(f"{k} {_num(v)}s" for k, v in durations.items() if isinstance(v, int | float))
    return what + (f" ({timing})" if timing else "")


def _inventory(d: dict[str, Any]) -> str:
    return f"{d['packages']} packages" if "packages" in d else ""


def _embed(d: dict[str, Any]) -> str:
    if "items" not in d:
        return ""
    where = f" on {d['device']}" if d.get("device") else ""
    return f"{d['items']} items{where}, {_num(d.get('items_per_s'))} items/s"


def _reread(d: dict[str, Any]) -> str:
    outputs = d.get("outputs")
    if isinstance(outputs, dict) and outputs:
        shapes = "; ".join(
            f"{name} {'x'.join(str(n) for n in o.get('shape', []))} {o.get('dtype', '')}" for name, o in outputs.items()
        )
        return f"{shapes}, finite, ids in order"
    if "rows" not in d:
        return ""
    return f"{d['rows']} rows x {d.get('dim', '?')} {d.get('dtype', '')}, finite, ids in order"


def _backend(d: dict[str, Any]) -> str:
    names = {"device": "on", "matmul_max_abs_error": "matmul error", "softmax_max_abs_error": "softmax error"}
    return ", ".join(f"{names[k]} {_num(v)}" for k, v in d.items() if k in names)


def _lock_check(d: dict[str, Any]) -> str:
    return f"{d['lock']} current against its inputs" if "lock" in d else ""


# step name -> summariser of its details; a step may instead give ``details["summary"]`` (one line) itself.
SUMMARISERS: dict[str, Any] = {
    "lock-check": _lock_check,
    "compare": _compare,
    "criterion": _criterion,
    "determinism": _determinism,
    "resume": _resume,
    "settings": _settings,
    "system": _system,
    "rebuild": _rebuild,
    "inventory": _inventory,
    "embed": _embed,
    "application": _embed,
    "reread": _reread,
    "backend": _backend,
}


def step_result(step: Step) -> str:
    """One line: what the step FOUND (an error or a reason when it did not pass), never only what it is for."""
    found = ""
    if step.status is not Status.FAILED:
        given = step.details.get("summary")
        found = given if isinstance(given, str) else ""
        if not found:
            summarise = SUMMARISERS.get(step.name)
            try:
                found = summarise(step.details) if summarise else ""
            except (KeyError, TypeError, ValueError, AttributeError):
                found = ""
            found = found or _generic(step.details)
    match step.status:
        case Status.PASSED:
            text = found or step.reason or step.title
        case Status.FAILED:
            text = step.error or "failed"
        case Status.SKIPPED | Status.NOT_RUN:
            text = step.reason
        case _ as unreachable:
            assert_never(unreachable)
    return " ".join(text.split())


def _cell(text: str, limit: int = 220) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _differences(report: Report) -> list[str]:
    """What differs from the reference's environment (recorded in meta by the run), as bullet lines."""
    vs = report.meta.get("vs_reference")
    if not isinstance(vs, dict):
        return ["- no reference environment recorded to compare with"]
    lines = []
    inv = vs.get("inventory")
    if isinstance(inv, dict):
        parts = [f"+{n}=={v}" for n, v in sorted(inv.get("added", {}).items())]
        parts += [f"-{n}=={v}" for n, v in sorted(inv.get("removed", {}).items())]
        parts += [f"{n} {p['expected']} → {p['observed']}" for n, p in sorted(inv.get("changed", {}).items())]
        counts = (
            f"{len(inv.get('added', {}))} added, {len(inv.get('removed', {}))} removed, "
            f"{len(inv.get('changed', {}))} changed"
        )
        lines.append(
            f"- inventory vs the reference's: {'identical' if not parts else counts + ': ' + ', '.join(parts[:12])}"
            + (" …" if len(parts) > 12 else "")
        )
    system = vs.get("system")
    if system is None:
        lines.append("- system chain: not compared (no system record in this run or the reference)")
    if isinstance(system, dict):
        if not system:
            lines.append("- system chain: the same as the reference's")
        for key, pair in list(system.items())[:15]:
            a, b = pair.get("reference"), pair.get("this run")
            if isinstance(a, list) and isinstance(b, list):
                shown = (
                    f"only in the reference: {', '.join(sorted(set(map(str, a)) - set(map(str, b)))) or '-'}; "
                    f"only here: {', '.join(sorted(set(map(str, b)) - set(map(str, a)))) or '-'}"
                )
            else:
                shown = f"{_unavail(a)} → {_unavail(b)}"
            lines.append(f"- system `{key}`: {_cell(shown, 200)}")
        unrecorded = vs.get("not_in_reference") or []
        if unrecorded:
            lines.append(f"- not recorded in the reference (cannot compare): {', '.join(unrecorded)}")
    return lines or ["- none recorded"]


def _inventory_vs_reference(report: Report) -> str:
    """The inventory row's second half: packages added / removed / changed against the reference's inventory."""
    vs = report.meta.get("vs_reference")
    inv = vs.get("inventory") if isinstance(vs, dict) else None
    if not isinstance(inv, dict):
        return ""
    counts = [len(inv.get(k) or {}) for k in ("added", "removed", "changed")]
    if not any(counts):
        return "; vs the reference's: identical"
    return "; vs the reference's: {} added, {} removed, {} changed".format(*counts)


def likely_cause(report: Report, failure: Step) -> str:
    """Where to look first for a failure: the layer, then what differs from the reference's environment."""
    recorded = report.meta.get("vs_reference")
    vs: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    inv = vs.get("inventory") or {}
    inv_keys = [*inv.get("changed", {}), *inv.get("added", {}), *inv.get("removed", {})]
    system = list((vs.get("system") or {}).keys())
    if failure.layer in ("lock", "install", "reference", "data-loading", "dossier", "environment"):
        return f"the {failure.layer} layer, before any numeric comparison: see the first failure below."
    if failure.layer in ("device", "transfer-to-device"):
        backend = report.meta.get("expect_backend", "the expected backend")
        return (
            f"the device layer: {backend} is not usable with this torch build, driver and devices (the system step "
            "records torch.version.cuda / hip, the driver and the devices); nothing was computed on another device."
        )
    found = []
    if inv_keys:
        found.append(f"packages differ from the reference's inventory ({', '.join(sorted(inv_keys)[:8])})")
    if system:
        found.append(f"the system chain differs from the reference's ({', '.join(system[:8])})")
    if not found:
        return (
            "the inventory and the system chain equal the reference's: look at the code, data or weights "
            f"(reference code: {report.meta.get('reference_code', 'not recorded')})."
        )
    return "; ".join(found) + "."


_CLAIM_MARK = {
    ClaimState.ESTABLISHED: "✅",
    ClaimState.CONTRADICTED: "❌",
    ClaimState.NOT_RECORDED: "·",
    ClaimState.STEP_FAILED: "❌",
    ClaimState.STEP_NOT_RUN: "·",
    ClaimState.STEP_SKIPPED: "⏭",
    ClaimState.STEP_ABSENT: "·",
}


def _claims_table(report: Report) -> list[str]:
    """What the verdict stands on: each claim, the step (and details key) that established it, or why not."""
    lines = ["", "## Claims", "", f"A {report.mode} passes only when every claim below is established.", "",
             "| claim | established by | state |", "|---|---|---|"]
    for claim in report.claims:
        state = f"{_CLAIM_MARK[claim.state]} {claim.state}"
        if claim.why:
            state += f": {claim.why}"
        if not claim.binding:
            state += " (not yet required: the step does not record it yet)"
        lines.append(f"| {_cell(claim.text, 120)} | `{claim.step}` ({claim.key}) | {_cell(state, 200)} |")
    return lines


def render_markdown(report: Report) -> str:
    failure = report.first_failure()
    counts = {st: sum(1 for s in report.steps if s.status is st) for st in Status}
    tally = ", ".join(f"{n} {st}" for st, n in counts.items() if n)
    lines = [f"# Kernodeck verify: {report.verdict.upper()}", ""]
    if failure:
        lines.append(
            f"**FAILED** at `{failure.name}` (layer: {failure.layer or 'unknown'}): "
            + _cell(" ".join(failure.error.split()), 300)
        )
    else:
        lines.append(f"**{report.verdict.upper()}**: {tally} on `{report.platform}`.")
    lines += ["", f"- verdict: {report.verdict_line()}"]
    lines += ["", f"- platform: `{report.platform}`", f"- steps: {tally}"]
    for key in _META_KEYS:
        if key in report.meta:
            lines.append(f"- {key.replace('_', ' ')}: `{report.meta[key]}`")
    lines += _claims_table(report)
    lines += ["", "## What differs from the reference", ""]
    lines += _differences(report)
    if failure:
        lines += ["", f"**Likely cause**: {likely_cause(report, failure)}"]
    lines += ["", "## Steps", "", "| step | status | time | result |", "|---|---|---|---|"]
    for step in report.steps:
        result = step_result(step)
        if step.name == "inventory" and step.status is Status.PASSED:
            result += _inventory_vs_reference(report)
        lines.append(f"| {step.name} | {_MARK[step.status]} {step.status} | {step.duration_s:.2f}s | {_cell(result)} |")
    if failure:
        lines += ["", "## First failure", "", f"- step: `{failure.name}` (layer: {failure.layer or 'unknown'})"]
        if failure.command:
            lines.append(f"- command: `{failure.command}`")
        if failure.interpreter:
            lines.append(f"- interpreter: `{failure.interpreter}`")
        lines += ["", "```", failure.error, "```"]
    lines += ["", "## Details", "", "Every step's recorded details, as in report.json.", ""]
    for step in report.steps:
        if step.details:
            lines += [
                "<details>",
                f"<summary>{step.name}</summary>",
                "",
                "```json",
                json.dumps(step.details, indent=2, default=str)[:6000],
                "```",
                "",
                "</details>",
                "",
            ]
    return "\n".join(lines) + "\n"


def summary_line(report: Report, path: Path) -> str:
    """The last line of a run: PASSED/FAILED, the first failure with its layer, the counts, the report's path."""
    counts = ", ".join(f"{n} {st}" for st in Status if (n := sum(1 for s in report.steps if s.status is st)))
    failure = report.first_failure()
    if failure is None:
        head = f"{report.verdict.upper()}: {counts}"
        if report.not_established or report.changed_code or report.verdict is Verdict.FAILED:
            head += f" ({report.verdict_line()})"
    else:
        error = " ".join(failure.error.split())
        error = error if len(error) <= 160 else error[:159] + "…"
        head = f"FAILED at {failure.name} (layer: {failure.layer or 'unknown'}): {error}; {counts}"
    return f"{head} — report: {path}"
