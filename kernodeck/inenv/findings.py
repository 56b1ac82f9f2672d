"""What an in-env step FOUND, in one line: the summarisers its row names (kernodeck/inenv/steptable.py).

Pure functions of a step's ``details`` (the standard library only): the orchestrator calls them for report.md's step
table and its progress lines (kernodeck/verify/summaries.py), which falls back to :func:`generic` where a step has
none. They run in the orchestrator, never in the env; they live here so that a step's row names them.
"""

from __future__ import annotations

from typing import Any

from . import kinds


def _scalar(value: Any) -> str | None:
    if isinstance(value, (bool, int, float)):
        return fmt_number(value)
    if isinstance(value, str) and len(value) <= 60:
        return value
    return None


def generic(details: dict[str, Any], limit: int = 5) -> str:
    """Fallback for a step without a summariser: its first few scalar details, ``key value``."""
    parts = [f"{k} {v}" for k, raw in details.items() if (v := _scalar(raw)) is not None and k != "summary"]
    return ", ".join(parts[:limit])


def fmt_number(value: Any) -> str:
    """A number as people read it: short, but 0.999999 never rounded to 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or value == 0:
        return str(value)
    if 0.99 < abs(value) < 1:
        return f"{value:.9f}"
    return f"{value:.3g}"


def _compare_one(d: dict[str, Any]) -> str:
    """One compared output: what was found against what is allowed, whichever measures the step recorded."""
    parts = []
    # every kind's numbers (its SUMMARY in kinds.py, in table order), then mismatches (no kind's)
    for found, allowed, word, op in (*kinds.summary_rows(), ("mismatches", None, "mismatches", "=")):
        if found in d and d[found] is not None:
            limit = f" ({op} {fmt_number(d[allowed])})" if allowed and d.get(allowed) is not None else ""
            parts.append(f"{word} {fmt_number(d[found])}{limit}")
    if d.get("non_finite_rows"):
        parts.append(f"non-finite rows {d['non_finite_rows']}")
    if d.get("worst_id") is not None:
        parts.append(f"worst `{d['worst_id']}`")
    if d.get("bitwise_equal") is True:
        parts.append("bitwise equal")
    return ", ".join(parts)


def compare(d: dict[str, Any]) -> str:
    outputs = d.get("outputs")
    if isinstance(outputs, dict) and outputs and all(isinstance(v, dict) for v in outputs.values()):
        return "; ".join(
            f"{name} ({o.get('kind', '?')}): {o.get('summary') or _compare_one(o) or generic(o)}"
            for name, o in outputs.items()
        )
    return _compare_one(d)


def criterion(d: dict[str, Any]) -> str:
    parts = []
    if "min_margin" in d or "margin" in d:
        parts.append(f"smallest margin {fmt_number(d.get('min_margin', d.get('margin')))}")
    if "pairs_checked" in d:
        parts.append(f"{d['pairs_checked']} pairs checked, {len(d.get('misses') or {})} missed")
    return ", ".join(parts + _criterion_power(d.get("controls")))


def _noise_margin(name: str, m: dict[str, Any]) -> str:
    rows = "rows" in str(m.get("perturbation", ""))
    if not m.get("found"):
        return f"{name} none found"
    return f"{name} {m['breaks_at']} rows changed" if rows else f"{name} noise of {fmt_number(m['breaks_at'])}x its RMS"


def _draws(controls: dict[str, Any], how: Any) -> str:
    """The draws of ``how`` the criterion failed, of those drawn (``5/5``); "" where not recorded (an older report)."""
    records = controls.get("corruptions")
    record = records.get(how) if isinstance(records, dict) else None
    if not isinstance(record, dict) or not isinstance(record.get("draws"), int) or not record["draws"]:
        return ""
    return f"{record.get('failed_draws', '?')}/{record['draws']}"


def _criterion_power(controls: Any) -> list[str]:
    """Which corruptions the criterion failed (and in how many of their draws), the halves of its rows changed it
    failed, the required ones it passed in some draw, and the smallest perturbation of each output that breaks it."""
    if not isinstance(controls, dict) or not isinstance(controls.get("failed"), list):
        return []
    failed = controls["failed"]
    parts = [f"fails {', '.join(f'{how} {_draws(controls, how)}'.strip() for how in failed)}" if failed
             else "fails no corruption"]
    rows = controls.get("rows")
    if isinstance(rows, dict) and rows.get("halves") and not rows.get("passed"):
        parts[0] += f", half the rows {rows.get('failed_halves', '?')}/{rows['halves']}"
    blind = controls.get("cannot_see")
    for how in blind if isinstance(blind, list) else ():
        counts = _draws(controls, how)
        parts.append(f"{how} failed in only {counts} draws" if counts else f"{how} passed")
    if isinstance(rows, dict) and rows.get("halves") and rows.get("passed"):
        parts.append(f"half the rows failed in only {rows.get('failed_halves', '?')}/{rows['halves']} halves")
    loose = controls.get("search")
    if isinstance(loose, dict) and loose.get("passed"):
        parts.append(f"passed {loose.get('changed', '?')} of {loose.get('rows', '?')} rows wrong")
    margins = controls.get("noise_margin")
    if isinstance(margins, dict) and margins:
        parts.append("breaks at " + "; ".join(_noise_margin(n, m) for n, m in margins.items() if isinstance(m, dict)))
    return parts


def determinism(d: dict[str, Any]) -> str:
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
        else f"max abs between runs {fmt_number(between)}"
    )
    if isinstance(d.get("records"), int) and isinstance(d.get("of"), int) and d["records"] < d["of"]:
        head += f" of {d.get('subset', 'a subset')} ({d['records']} of {d['of']} records)"
    if d.get("cost_ratio") is not None:
        head += f"; settings cost x{fmt_number(d['cost_ratio'])}"
    return head


def resume(d: dict[str, Any]) -> str:
    if "final_weights_max_abs" not in d:
        return ""
    last = ""
    a, b = d.get("losses_uninterrupted") or [], d.get("losses_resumed") or []
    if a and b:
        last = f", loss at step {len(a)}: diff {fmt_number(abs(float(a[-1]) - float(b[-1])))}"
    diverged = d.get("first_diverging_step")
    return (
        f"{d.get('steps', '?')} steps, checkpoint at {d.get('checkpoint_at', '?')}, new process: "
        f"max weight diff at the last step {fmt_number(d['final_weights_max_abs'])} ({d.get('comparison', '?')})"
        + last
        + (f"; first diverging step {diverged}" if diverged else "")
    )


def resume_application(d: dict[str, Any]) -> str:
    """The application's own resume: its end state, where the loss curves part, the progress, the controls."""
    if "max_abs_at_end" not in d:
        return ""
    parting = d.get("first_parting_step")
    counters = d.get("counters_resumed") or {}
    controls = d.get("controls") or {}
    seen = [name for name, c in controls.items() if isinstance(c, dict) and c.get("seen")]
    return (
        f"train {d.get('steps', '?')} steps, checkpoint at {d.get('checkpoint_at', '?')}, resumed in a new process: "
        f"end state max diff {fmt_number(d['max_abs_at_end'])}{' (bitwise)' if d.get('bitwise') else ''}, "
        + (f"loss curves part at step {parting}" if parting else "loss curves the same")
        + (", progress " + " ".join(f"{k} {fmt_number(v)}" for k, v in counters.items()) if counters else "")
        + (f"; each dropped piece seen ({', '.join(seen)})" if seen else "")
    )


def settings(d: dict[str, Any]) -> str:
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


def fmt_value(value: Any) -> str:
    if isinstance(value, dict) and "unavailable" in value:
        return "unavailable"
    if isinstance(value, dict) and "version" in value:
        return str(value["version"])
    return "none" if value is None else str(value)


def system(d: dict[str, Any]) -> str:
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
        f"torch {d['torch_version']}, CUDA {fmt_value(d.get('torch_version_cuda'))}, "
        f"HIP {fmt_value(d.get('torch_version_hip'))}, device {names or 'cpu'} ({fmt_value(cpu)}), "
        f"driver {fmt_value(d.get('driver'))}"
    )


def application(d: dict[str, Any]) -> str:
    if "items" not in d:
        return ""
    where = f" on {d['device']}" if d.get("device") else ""
    return f"{d['items']} items{where}, {fmt_number(d.get('items_per_s'))} items/s"


def reread(d: dict[str, Any]) -> str:
    outputs = d.get("outputs")
    if isinstance(outputs, dict) and outputs:
        shapes = "; ".join(
            f"{name} {'x'.join(str(n) for n in o.get('shape', []))} {o.get('dtype', '')}" for name, o in outputs.items()
        )
        return f"{shapes}, finite, ids in order"
    if "rows" not in d:
        return ""
    return f"{d['rows']} rows x {d.get('dim', '?')} {d.get('dtype', '')}, finite, ids in order"


def backend(d: dict[str, Any]) -> str:
    names = {"device": "on", "matmul_max_abs_error": "matmul error", "softmax_max_abs_error": "softmax error"}
    return ", ".join(f"{names[k]} {fmt_number(v)}" for k, v in d.items() if k in names)
