"""verify's own steps (outside the env), what the report makes of each: ONE row per step, as an in-env step's row
(kernodeck/inenv/steptable.py) says it for its step: its summariser, the claims its record establishes, why a pass
may skip it.

Below the report's modules (claims, summaries, markdown read it; it imports none of them): the step itself, its
function and layer, is the pipeline's entry of the same name (kernodeck/verify/steps/__init__.py; tested equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernodeck.inenv.evidence import ClaimRow
from kernodeck.inenv.findings import fmt_number


@dataclass(frozen=True)
class OutsideRow:
    """One step of verify's own: what its report line, its claims and the skipped-step rule make of its record."""

    name: str
    summary: Callable[[dict[str, Any]], str] | None = None  # its report line; None: its first scalar details
    claims: tuple[ClaimRow, ...] = ()
    skippable: str = ""  # why a pass may skip it, when no claim rests on it


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
    OutsideRow("lock-check", _lock_check, claims=(
        ClaimRow("lock-current", "the lock is current against its inputs, its pins and its PEP 751 twin", "lock",
                 lambda d: isinstance(d["lock"], str) and bool(d["lock"]), variant=True),)),
    OutsideRow("reference-manifest"),  # shown only when it fails: its success is the reference id in the report
    OutsideRow("rebuild", _rebuild, skippable="nothing is installed under --no-rebuild (the current env) or --python "
               "(an existing interpreter); the env's proof still runs: the inventory step compares every package and "
               "file with the lock"),
    OutsideRow("inventory", _inventory, claims=(
        ClaimRow("env-packages", "the environment's packages are exactly the lock's", "vs_lock",
                 lambda d: _empty_delta(d["vs_lock"]), variant=True),
        ClaimRow("env-files-unchanged", "no file of the environment added, removed or changed since it was built",
                 "files", lambda d: _files_unchanged(d["files"]), variant=True))),
)
