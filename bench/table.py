"""The bench's record as people read it: each row's verdict against its target, bench/latest.md and docs/speed.md's
section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernodeck._fs import write_atomic, write_json

README_START, README_END = "<!-- bench:start -->", "<!-- bench:end -->"

# Ratios (Kernodeck over bare) except lock-check, which is seconds for the whole command.
TARGETS = {"verify": 1.15, "rebuild": 1.2, "job": 1.1, "lock-uv": 1.3, "lock-check": 1.0, "lock-check-init": 0.5,
           "application": 1.15, "hash-first": 1.3, "hash-unchanged": 0.2}
UNITS = {"verify": "x", "rebuild": "x", "job": "x", "lock-uv": "x", "lock-check": "s", "lock-check-init": "s",
         "application": "x", "hash-first": "x", "hash-unchanged": "s"}
LOCK_UV_PLATFORM = "cp311-linux_x86_64-cu130"


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
    bytecode = ", without this machine's `PYTHONDONTWRITEBYTECODE`" if data.get("machine", {}).get(
        "bytecode_variable_removed") else ""
    return f" (measured alone {str(data.get('measured', '?'))[:10]}, load average {load} before{bytecode})"


def render_markdown(record: dict[str, Any]) -> str:
    """bench/latest.md: the run's conditions, the table of rows against their targets, then what each row spent."""
    return "\n".join([*_table(record), *_notes(record["rows"], record["verdicts"])]) + "\n"


def _row(what: str, data: dict[str, Any], target: str) -> str:
    share = data.get("others_share")
    busy = f"{100 * share:.0f}%" if share is not None else "?"
    return (f"| {what} | {data['kernodeck']['median_s']:.2f}s | {data['bare']['median_s']:.2f}s | "
            f"{data['ratio']:.2f}x ({data['ratio_low']:.2f}..{data['ratio_high']:.2f}) | {busy} | {target} |")


def _table(record: dict[str, Any]) -> list[str]:
    """The run's conditions and one table row per comparison."""
    rows, host, v = record["rows"], record["machine"], record["verdicts"]
    lines = [
        f"Measured {record['finished'][:10]} on {host['cpu']}, {host['cores']} cores, {host['os']}, Python "
        f"{host['python']} (load average {host['load_average']} before, {host['load_average_after']} after; other "
        f"processes took {100 * (host.get('others_share') or 0):.0f}% of the machine meanwhile); nox sessions on the "
        f"{record.get('nox_backend', '?')} backend; platform `{record['platform']}`, lock `{record['lock']}`. "
        f"Whole commands as a user runs them, {record['repeat']} interleaved pairs after one warm-up of each; "
        + ("`PYTHONDONTWRITEBYTECODE`, set on this machine, removed for both sides (the bare side's `-I` ignores it; "
           "with it, each Kernodeck command compiles its own modules again from this checkout); "
           if record["machine"].get("bytecode_variable_removed") else "")
        + "ratio = median of the pairs' ratios (lowest..highest). `nox -s bench` regenerates this.",
        "",
        "| what | kernodeck | bare | ratio (spread) | others' CPU | target |",
        "|---|---|---|---|---|---|",
        _row("`nox -s verify` (env reused) vs one bare process: settings, import, load, embed, write, reread, compare"
            + _alone(rows["verify"]), rows["verify"], _mark(v["verify"])),
        _row("`nox -s rebuild -- --fresh` vs `rm -rf` + `uv venv` + `uv pip install --require-hashes --no-deps "
            "--no-cache --link-mode hardlink` + `pip check` + `pip freeze --all` (no bytecode compiled on either side)",
            rows["rebuild"], _mark(v["rebuild"])),
        _row("the CI job: `nox -s rebuild -- --fresh` then the first `nox -s verify` vs the bare install then the bare "
            "script", rows["job"], _mark(v["job"])),
        _row(f"`nox -s lock -- --platform {LOCK_UV_PLATFORM} --resolver uv` vs the `uv pip compile "
            "--generate-hashes --python-platform …` its header records", rows["lock_uv"], _mark(v["lock-uv"])),
        _row("`nox -s lock -- --check` (whole) vs `python -m kernodeck lock --check` (the check alone)",
            rows["lock_check"], _mark(v["lock-check"]) + " (whole command)"),
        _row("`nox -s lock -- --check` (whole) in a `kernodeck init`-made project "
             "(`pip install nox /path/to/kernodeck`) vs the same in this repository", rows["lock_check_init"],
            _mark(v["lock-check-init"]) + " (whole command)"),
    ]
    app, hashing = rows.get("application"), rows.get("hashing")
    if app:
        lines.append(_row("the `settings` and `application` steps (verified bytes, the closed world's audit hook, the "
                         "weights fingerprinted) vs the bare script's same work (imports, settings, load, embed, write)"
                         f"{_alone(app)}", app, _mark(v["application"])))
    if hashing:
        snap = hashing["snapshot"]
        lines.append(_row(f"the weights fingerprint of a {snap['mib']} MiB snapshot ({snap['files']} files, no stat "
                         f"record) vs `sha256sum` over the same files{_alone(hashing)}", hashing,
                         _mark(v["hash-first"])))
    lines.append("")
    return lines


def _notes(rows: dict[str, Any], v: dict[str, dict[str, Any]]) -> list[str]:
    """What each row spent, in prose after the table (the rows a run measured)."""
    lines: list[str] = []
    app, hashing = rows.get("application"), rows.get("hashing")
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
                  + (" (pip freeze and pip check in one pip process" if "pip-check-and-freeze" in rb
                     else " (pip check and freeze side by side")
                  + "; the bare side runs them one after the other; `files`: "
                  "every installed file hashed against its RECORD, in parallel threads, then the snapshot).", ""]
    cold = rows.get("cold")
    if cold:
        lines += [f"First `nox -s verify` on a fresh `git clone` (session venv made, env rebuilt from the warm cache, "
                  f"every check): {cold['cold']['median_s']:.2f}s; the next one there: {cold['warm']['median_s']:.2f}s "
                  f"({cold['ratio']:.2f}x; one run each).", ""]
    return lines + _scaling_notes(rows.get("scaling"))


def _scaling_notes(scaling: Any) -> list[str]:
    """Verify's cost against the sample size, and the line it grows along."""
    lines: list[str] = []
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
    return lines


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
