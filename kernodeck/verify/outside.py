"""verify's own steps (outside the env), in the order they run: ONE row per step, as an in-env step's row
(kernodeck/inenv/steptable.py) says it for its step: what runs it, the layer its failure belongs to, its summariser,
the claims its record establishes, why a pass may skip it, what it checks (docs/report.md's table).

Below the report's modules (claims, summaries, markdown read it; it imports none of them) and so below the pipeline's
steps, which import the report's modules through the pipeline: a row names its step's function by module and name,
as an in-env row does, and the pipeline's entries are made from the rows (kernodeck/verify/steps/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernodeck.inenv.evidence import ClaimRow
from kernodeck.inenv.findings import fmt_number
from kernodeck.inenv.protocol import Layer


@dataclass(frozen=True)
class OutsideRow:
    """One step of verify's own: what runs it, and what its report line, its claims and the skipped-step rule make of
    its record."""

    name: str
    module: str  # kernodeck/verify/steps/MODULE.py
    function: str  # ``function(ctx, run)``: returns its Step (or None), raises StepFailed to fail (pipeline.Act)
    layer: Layer  # where a failure it raises belongs
    checks: str  # what it checks: it passes when ... (docs/report.md's table of the steps)
    summary: Callable[[dict[str, Any]], str] | None = None  # its report line; None: its first scalar details
    claims: tuple[ClaimRow, ...] = ()
    skippable: str = ""  # why a pass may skip it, when no claim rests on it
    quiet: bool = False  # shown only when it fails: not announced, not shown not-run after an earlier failure
    errors_end_run: bool = False  # an error it raises (not its StepFailed) ends the run before anything is written


def _lock_check(d: dict[str, Any]) -> str:
    return f"{d['lock']} current against its inputs" if "lock" in d else ""


def _rebuild(d: dict[str, Any]) -> str:
    if "installer" not in d:
        return ""
    what = "reused" if d.get("reused") else f"built with {d['installer']}"
    durations = d.get("durations") or {}
    timing = ", ".join(f"{k} {fmt_number(v)}s" for k, v in durations.items() if isinstance(v, int | float))
    return what + (f" ({timing})" if timing else "")


def _inventory(d: dict[str, Any]) -> str:
    return f"{d['packages']} packages" if "packages" in d else ""


def _empty_delta(v: Any) -> bool:
    return isinstance(v, dict) and all(k in v and not v[k] for k in ("added", "removed", "changed"))


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


OUTSIDE_STEPS: tuple[OutsideRow, ...] = (
    # an error other than the lock's own (a declared input missing) ends the run before anything is written
    OutsideRow(
        "lock-check", "lock_check", "lock_check", Layer.LOCK, "the lock is current against its inputs",
        _lock_check, errors_end_run=True, claims=(
            ClaimRow("lock-current", "the lock is current against its inputs, its pins and its PEP 751 twin", "lock",
                     lambda d: isinstance(d["lock"], str) and bool(d["lock"]), variant=True),)),
    OutsideRow(
        "reference-manifest", "declared", "declared_contract", Layer.REFERENCE,
        "the reference's copy of the contract is the one declared in pyproject.toml ([tool.kernodeck.application]) "
        "and its code fingerprints still describe the code (or `--allow-code-change`); judged before anything is "
        "built, shown only when it fails (its success is the reference id in the report)", quiet=True),
    OutsideRow(
        "rebuild", "build", "build", Layer.INSTALL,
        "fresh venv from the lock (or reused, or skipped for `--python`)", _rebuild,
        skippable="nothing is installed under --no-rebuild (the current env) or --python (an existing interpreter); "
                  "the env's proof still runs: the inventory step compares every package and file with the lock"),
    OutsideRow(
        "inventory", "inventory_check", "inventory_entry", Layer.INSTALL,
        "what the env holds NOW, observed by its own interpreter, equals the lock, and every file under it is a "
        "locked RECORD's and unchanged since the build ([env-integrity.md](env-integrity.md)) (with `--python`: a "
        "difference is recorded as a declared variant, `--strict` fails on it)", _inventory, claims=(
            ClaimRow("env-packages", "the environment's packages are exactly the lock's", "vs_lock",
                     lambda d: _empty_delta(d["vs_lock"]), variant=True),
            ClaimRow("env-files-unchanged", "no file of the environment added, removed or changed since it was "
                     "built", "files", lambda d: _files_unchanged(d["files"]), variant=True))),
)
