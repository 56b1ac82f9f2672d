"""What differs between two dossiers (``nox -s compare``: :func:`compare`, :func:`render_compare`), read after the
fact; a run against its reference, written into every run's folder, is :mod:`kernodeck.runformat.refdelta`."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from kernodeck.dossier.compare import NO_STEPS, REFERENCE, compare_outputs
from kernodeck.dossier.compare import render as render_outputs
from kernodeck.dossier.read import changed_since_written, load, read_embeddings
from kernodeck.dossier.resume_outputs import compare as compare_resume
from kernodeck.dossier.resume_outputs import render as render_resume
from kernodeck.runformat.refdelta import flat


def _dict_delta(a: dict[str, Any], b: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    out = {}
    for key in sorted(set(a) | set(b)):
        if key in skip:
            continue
        if a.get(key) != b.get(key):
            out[key] = {"a": a.get(key), "b": b.get(key)}
    return out


def _show_pair(key: str, pair: dict[str, Any]) -> str:
    a, b = pair["a"], pair["b"]
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        return f"- `{key}`: only in A: {', '.join(only_a) or '-'}; only in B: {', '.join(only_b) or '-'}"
    return f"- `{key}`: {json.dumps(a, default=str)[:200]} → {json.dumps(b, default=str)[:200]}"


def compare(dir_a: Path, dir_b: Path, python: Path | None = None) -> dict[str, Any]:
    """What differs between two dossiers: platform, system chain, inventory, settings, steps, every declared output
    under its kind (:func:`.judge.compare_outputs`, in ``python``: an interpreter with numpy) and the application's
    resumed training (:func:`.resume_outputs.compare`; None when neither dossier declares one)."""
    from kernodeck.env.inventory import diff, parse_freeze

    a, b = load(dir_a), load(dir_b)
    ra, rb = a["report"], b["report"]
    steps_a = {s["name"]: s["status"] for s in ra.get("steps", [])}
    steps_b = {s["name"]: s["status"] for s in rb.get("steps", [])}
    result: dict[str, Any] = {
        "a": str(dir_a),
        "b": str(dir_b),
        "platform": {
            "a": ra.get("platform"),
            "b": rb.get("platform"),
            "same": ra.get("platform") == rb.get("platform"),
        },
        "status": {"a": ra.get("status"), "b": rb.get("status")},
        "reference_id": {"a": ra.get("reference_id"), "b": rb.get("reference_id")},
        # the lock each run checked (the sha256 of its bytes): two bodies with the same versions but other wheels
        # read "identical" in the inventory, never in these
        "lock_digest": {"a": ra.get("lock_digest"), "b": rb.get("lock_digest")},
        # what is compared below is the files as they are now: each side's changes since Kernodeck wrote them
        "changed_since_written": {"a": changed_since_written(dir_a), "b": changed_since_written(dir_b)},
        "system": _dict_delta(
            flat(a.get("system.json", {})),
            flat(b.get("system.json", {})),
            skip=("python_executable", "loaded_libraries"),
        ),
        "missing": {
            name: [side for side, data in (("a", a), ("b", b)) if name not in data]
            for name in ("system.json", "settings.json")
            if name not in a or name not in b
        },
        "inventory": diff(parse_freeze(a["inventory"]), parse_freeze(b["inventory"])).as_dict(),
        "settings": _dict_delta(a.get("settings.json", {}), b.get("settings.json", {})),
        "steps": {
            n: {"a": steps_a.get(n), "b": steps_b.get(n)}
            for n in sorted(set(steps_a) | set(steps_b))
            if steps_a.get(n) != steps_b.get(n) and REFERENCE not in (ra.get("status"), rb.get("status"))
        },
        "steps_unrecorded": [side for side, r in (("a", ra), ("b", rb)) if r.get("status") == REFERENCE],
        "outputs": compare_outputs(dir_a, dir_b, python),
        "resume_application": compare_resume(dir_a, dir_b, python),
    }
    if result["outputs"] is None:  # dossiers from before the application contract: no declaration, no kind
        result["outputs"] = _numeric(dir_a / "outputs", dir_b / "outputs")
    return result


def _numeric(out_a: Path, out_b: Path) -> dict[str, Any]:
    """Per-item cosine and max abs between two undeclared runs' embeddings (dossiers from before the application
    contract declared no kind: no verdict, only the numbers; .npy read without numpy: float32 little-endian)."""
    ea, eb = read_embeddings(out_a), read_embeddings(out_b)
    if ea is None or eb is None:
        return {"available": False, "reason": "one of the dossiers has no readable float32 embeddings"}
    if ea[0] != eb[0]:
        return {"available": False, "reason": "the two runs embedded different ids"}
    per_item: dict[str, float] = {}
    max_abs, non_finite = 0.0, {}
    for name, va, vb in zip(ea[0], ea[1], eb[1], strict=True):
        bad = {side: sum(1 for x in v if not math.isfinite(x)) for side, v in (("a", va), ("b", vb))}
        if bad["a"] or bad["b"]:
            # min/max skip NaN: a non-finite row is counted and named, never folded into the numbers
            non_finite[name] = {side: n for side, n in bad.items() if n}
            continue
        dot = sum(x * y for x, y in zip(va, vb, strict=True))
        na = sum(x * x for x in va) ** 0.5
        nb = sum(y * y for y in vb) ** 0.5
        per_item[name] = dot / (na * nb) if na and nb else 0.0
        max_abs = max(max_abs, max(abs(x - y) for x, y in zip(va, vb, strict=True)))
    return {
        "available": True,
        "items": len(ea[0]),
        "finite_items": len(per_item),
        "non_finite_items": non_finite,
        "max_abs": max_abs if per_item else None,
        "min_cosine": min(per_item.values()) if per_item else None,
        "per_item_cosine": per_item,
    }


def _locks(pair: dict[str, Any]) -> str:
    """Whether two dossiers checked the same lock: a side that records none is said so, never "other"."""
    unrecorded = [side.upper() for side in ("a", "b") if not pair.get(side)]
    if unrecorded:
        return f" (not recorded by {' and '.join(unrecorded)}: not compared)"
    return "" if pair["a"] == pair["b"] else " (other locks)"


def render_compare(result: dict[str, Any]) -> str:
    """compare.md: what :func:`compare` found, section by section."""
    lines = [
        "# Kernodeck compare",
        "",
        f"- A: `{result['a']}`",
        f"- B: `{result['b']}`",
        f"- platform: `{result['platform']['a']}` vs `{result['platform']['b']}`",
        f"- status: {result['status']['a']} vs {result['status']['b']}",
        f"- reference: `{result['reference_id']['a']}` vs `{result['reference_id']['b']}`",
        f"- lock: `{result['lock_digest']['a']}` vs `{result['lock_digest']['b']}`{_locks(result['lock_digest'])}",
        "",
    ]
    for side in ("a", "b"):
        changed = result["changed_since_written"][side]
        if changed:
            lines.append(f"NOT AS WRITTEN: {side.upper()} ({result[side]}): {'; '.join(changed[:10])}"
                         f"{' …' if len(changed) > 10 else ''}: what follows compares its files as they are now")
    if any(result["changed_since_written"].values()):
        lines.append("")
    out = result["outputs"]
    lines += ["## Outputs", ""]
    if "per_output" in out:  # declared outputs, each under its kind
        lines += render_outputs(out)
    elif out.get("available"):
        bad = out.get("non_finite_items") or {}
        if bad:
            first = ", ".join(f"`{name}`" for name in list(bad)[:5]) + (" …" if len(bad) > 5 else "")
            lines.append(
                f"NON-FINITE values (NaN/Inf) in {len(bad)} of {out['items']} items ({first}): "
                "those rows are not compared"
            )
        if out.get("min_cosine") is None:
            lines.append("no finite item to compare: max abs difference and min cosine undefined")
        else:
            lines.append(
                f"{out['finite_items']} {'finite ' if bad else ''}items; max abs difference "
                f"{out['max_abs']:.3g}; min per-item cosine {out['min_cosine']:.9f}"
            )
    else:
        lines.append(f"not compared: {out.get('reason')}")
    if result.get("resume_application") is not None:
        lines += ["", "## The application's resume", "", *render_resume(result["resume_application"])]
    missing = result.get("missing", {})
    for section in ("system", "settings", "steps"):
        lines += ["", f"## {section.capitalize()}", ""]
        absent = missing.get(f"{section}.json", [])
        if section == "steps" and result.get("steps_unrecorded"):
            lines.append(f"not compared: {NO_STEPS} ({' and '.join(s.upper() for s in result['steps_unrecorded'])})")
            continue
        if absent:
            # A run that stopped early has no record to compare: say so once instead of listing every field as null.
            sides = " and ".join(side.upper() for side in absent)
            lines.append(f"not compared: {section}.json is not in {sides} (that run stopped before its {section} step)")
            continue
        delta = result[section]
        if not delta:
            lines.append("no difference")
        for key, pair in delta.items():
            lines.append(_show_pair(key, pair))
    inv = result["inventory"]
    lines += ["", "## Inventory", ""]
    if not any(inv.values()):
        lines.append("identical")
    for name, version in inv["added"].items():
        lines.append(f"- only in B: {name}=={version}")
    for name, version in inv["removed"].items():
        lines.append(f"- only in A: {name}=={version}")
    for name, pair in inv["changed"].items():
        lines.append(f"- {name}: {pair['expected']} → {pair['observed']}")
    return "\n".join(lines) + "\n"

