"""The run dossier: a folder another run can use (procedure, inventory, system chain, settings, outputs, report).

Everything written is reviewed first: URL credentials stripped, this machine's package sources and home/project
paths replaced by placeholders. Credentials are never recorded; the dossier says only how to provide them.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

from kernodeck import outdir
from kernodeck.dossier.export import pip_steps
from kernodeck.errors import KernodeckError
from kernodeck.sources import SecretInText, check_written, scrub_text

CREDENTIALS_HELP = """## Credentials and package sources

Nothing here holds a credential or this machine's package sources. The variant's declared public index is named in
the commands above; a mirror of it (`KERNODECK_INDEX_<VARIANT>`, e.g. `KERNODECK_INDEX_CPU`) is named by its
variable only. To install from a private index or a mirror, provide it at install time only, through the installer's
own settings:

- pip: `PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, `PIP_FIND_LINKS`, or a pip.conf / keyring / `~/.netrc` entry;
- uv: `UV_DEFAULT_INDEX`, `UV_INDEX`, `UV_FIND_LINKS`, or `UV_INDEX_<NAME>_USERNAME` / `_PASSWORD`.

The lock's hashes still decide what is accepted, whatever the source.
"""

_BINARY = (".npy", ".pt", ".safetensors")


def _public(root: Path) -> list[str]:
    """The project's declared indexes: public, committed in pyproject.toml, so they may be named."""
    from kernodeck.project.config import load_project

    try:
        return [v.index for v in load_project(root).variants.values()]
    except KernodeckError:
        return []


def reviewer(root: Path) -> Any:
    """A function that makes text fit to share: no credential, no source of this machine (its values read from
    pip's files and the environment, no pip needed), no home or project path."""
    public = _public(root)
    replacements: list[tuple[str, str]] = [(str(root), "<project>")]
    home = os.path.expanduser("~")
    if home not in ("/", ""):
        replacements.append((home, "~"))
    replacements.sort(key=lambda pair: -len(pair[0]))

    def review(text: str) -> str:
        text = scrub_text(text, public)
        for old, new in replacements:
            text = text.replace(old, new)
        return text

    review.public = public  # type: ignore[attr-defined]
    return review


def review_folder(folder: Path, root: Path, review: Any = None) -> None:
    """Rewrite every text file under ``folder`` through the reviewer (binary outputs are left as they are), then
    scan each for the values of every source and credential variable: one left fails the write (and the file is
    removed: it is Kernodeck's own, in a folder not yet in place)."""
    review = review or reviewer(root)
    public = getattr(review, "public", None)
    public = _public(root) if public is None else public
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.suffix in _BINARY:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        reviewed = review(text)
        if reviewed != text:
            path.write_text(reviewed, encoding="utf-8")
        try:
            check_written(reviewed, str(path.relative_to(folder)), public)
        except SecretInText:
            path.unlink()
            raise


def procedure(
    commands: list[str],
    runner_cmd: str,
    env_vars: dict[str, str],
    installer: str,
    lock_rel: str,
    platform_id: str,
    reused: bool,
    *,
    index_args: str = "",
    index_note: str = "",
) -> str:
    lines = [
        "# Procedure",
        "",
        f"Platform `{platform_id}`. The exact commands this run executed, in order (paths relative to the project).",
        "Each one is replayable by hand with plain Python and pip; Kernodeck is not needed to replay.",
        "",
    ]
    if index_note:
        lines += ["Package sources: PyPI and the variant's index:", f"{index_note}.",
                  "The lock's hashes decide which file is accepted, whatever index serves it.", ""]
    if reused:
        lines += ["The environment was reused (same lock digest, same interpreter); it was built by:", ""]
    lines += ["```sh", *commands, "```", ""]
    if installer == "uv":
        lines += [
            "uv installed the packages. The same step with pip alone (what the seed procedure runs):",
            "",
            "```sh",
            *pip_steps(lock_rel, index_args),  # the same commands `nox -s export` puts in a container
            ".venv-rebuild/bin/python -m pip freeze --all > installed-after.txt",
            "```",
            "",
        ]
    shown_env = " ".join(f"{k}={v}" for k, v in sorted(env_vars.items()))
    lines += [
        "Then the checks, in one process, by the environment's explicit interpreter, from the project root",
        "(DOSSIER is this folder; run-config.json in it names the steps and the declared tolerance):",
        "",
        "```sh",
        f"{shown_env} {runner_cmd}",
        "```",
        "",
        CREDENTIALS_HELP,
    ]
    return "\n".join(lines)


class DamagedDossier(KernodeckError):
    """A dossier file compare cannot read: named, with what is wrong with it."""

    tip = "compare takes two dossier folders written by `nox -s verify`; rerun the verify that made the damaged one"


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedDossier(f"{path} is not UTF-8 text (byte {exc.start}): damaged or not Kernodeck's") from None
    except OSError as exc:
        raise DamagedDossier(f"{path} cannot be read: {exc.strerror or exc}") from None


def _json_object(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise DamagedDossier(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}): truncated?") from None
    if not isinstance(data, dict):
        raise DamagedDossier(f"{path} holds a JSON {type(data).__name__}, not the object Kernodeck writes") from None
    return data


def _load(folder: Path) -> dict[str, Any]:
    from kernodeck.dossier.judge import reference_report

    report = folder / "report.json"
    as_reference = None if report.exists() else reference_report(folder)  # dossier/reference: its manifest
    if not report.exists() and as_reference is None:
        raise KernodeckError(
            f"{folder} holds no report.json: not a Kernodeck dossier", tip="nox -s verify -- --out DIR"
        )
    data: dict[str, Any] = {"report": as_reference if as_reference is not None else _json_object(report)}
    steps = data["report"].get("steps", [])
    if not isinstance(steps, list) or not all(isinstance(s, dict) and "name" in s for s in steps):
        raise DamagedDossier(f"{report} has no list of steps with names: not a Kernodeck report")
    for name in ("system.json", "settings.json"):
        if (folder / name).exists():
            data[name] = _json_object(folder / name)
    inv = folder / "inventory.txt"
    data["inventory"] = _text(inv) if inv.exists() else ""
    return data


def read_embeddings(folder: Path) -> tuple[list[str], list[list[float]]] | None:
    """A run's float32 embeddings and ids, read without numpy; None when absent or not float32 C-order.

    A file that is there but empty, truncated or not a .npy is a :class:`DamagedDossier` (an error), never a number.
    """
    from array import array

    npy, ids = folder / "embeddings.npy", folder / "embeddings.ids.json"
    if not ids.exists():
        ids = folder / "ids.json"  # a dossier from before the application contract (one ids file)
    if not npy.exists() or not ids.exists():
        return None
    raw = npy.read_bytes()
    if len(raw) < 10 or not raw.startswith(b"\x93NUMPY") or raw[6] not in (1, 2, 3):
        raise DamagedDossier(f"{npy} is empty or not a .npy file ({len(raw)} bytes)")
    size = 2 if raw[6] == 1 else 4
    header_len = int.from_bytes(raw[8 : 8 + size], "little")
    start = 8 + size + header_len
    if len(raw) < start:
        raise DamagedDossier(f"{npy} is truncated inside its header ({len(raw)} of {start} header bytes)")
    header = raw[8 + size : start].decode("latin1")
    if "'<f4'" not in header or "'fortran_order': False" not in header:
        return None
    shape = re.search(r"'shape':\s*\(([0-9,\s]*)\)", header)
    dims = [int(d) for d in shape.group(1).replace(" ", "").split(",") if d] if shape else []
    expected = math.prod(dims) * 4 if dims else None
    if expected is None or len(raw) - start != expected:
        raise DamagedDossier(
            f"{npy} is truncated: {len(raw) - start} data bytes where its header's shape "
            f"{tuple(dims)} needs {expected}"
        )
    values = array("f")
    values.frombytes(raw[start:])
    names = json.loads(_text(ids))
    if not isinstance(names, list) or len(names) != (dims[0] if dims else 0):
        raise DamagedDossier(f"{ids} does not list one id per row of {npy.name} ({dims[0] if dims else 0} rows)")
    dim = len(values) // max(len(names), 1)
    return [str(n) for n in names], [list(values[i * dim : (i + 1) * dim]) for i in range(len(names))]


def _dict_delta(a: dict[str, Any], b: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    out = {}
    for key in sorted(set(a) | set(b)):
        if key in skip:
            continue
        if a.get(key) != b.get(key):
            out[key] = {"a": a.get(key), "b": b.get(key)}
    return out


def _flat(data: dict[str, Any]) -> dict[str, Any]:
    """One level of nesting flattened (``cpu.isa_flags``), so a delta names the field that differs, not the record."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value and "unavailable" not in value:
            out.update({f"{key}.{sub}": inner for sub, inner in value.items()})
        else:
            out[key] = value
    return out


def _show_pair(key: str, pair: dict[str, Any]) -> str:
    a, b = pair["a"], pair["b"]
    if isinstance(a, list) and isinstance(b, list) and all(isinstance(x, str) for x in a + b):
        only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
        return f"- `{key}`: only in A: {', '.join(only_a) or '-'}; only in B: {', '.join(only_b) or '-'}"
    return f"- `{key}`: {json.dumps(a, default=str)[:200]} → {json.dumps(b, default=str)[:200]}"


def compare(dir_a: Path, dir_b: Path, python: Path | None = None) -> dict[str, Any]:
    """What differs between two dossiers: platform, system chain, inventory, settings, steps, and every declared
    output under its kind (:func:`.judge.compare_outputs`, in ``python``: an interpreter with numpy)."""
    from kernodeck.dossier.judge import compare_outputs
    from kernodeck.env.inventory import diff, parse_freeze

    a, b = _load(dir_a), _load(dir_b)
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
        "system": _dict_delta(
            _flat(a.get("system.json", {})),
            _flat(b.get("system.json", {})),
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
            if steps_a.get(n) != steps_b.get(n)
        },
        "outputs": compare_outputs(dir_a, dir_b, python),
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


# System fields that name this run, not the chain it ran on.
_NOT_CHAIN = ("python_executable", "loaded_libraries", "python_build", "cpu_count")


def vs_reference(reference: Path, run: Path) -> dict[str, Any]:
    """This run's inventory and system chain against the reference's (as recorded beside the reference)."""
    from kernodeck.env.inventory import diff, parse_freeze

    out: dict[str, Any] = {}
    ref_inv, inv = reference / "inventory.txt", run / "inventory.txt"
    if ref_inv.exists() and inv.exists():
        out["inventory"] = diff(
            parse_freeze(ref_inv.read_text(encoding="utf-8")), parse_freeze(inv.read_text(encoding="utf-8"))
        ).as_dict()
    ref_sys, sys_ = reference / "system.json", run / "system.json"
    if ref_sys.exists() and sys_.exists():
        a = _flat(json.loads(ref_sys.read_text(encoding="utf-8")))
        b = _flat(json.loads(sys_.read_text(encoding="utf-8")))
        out["system"] = {
            k: {"reference": a[k], "this run": b.get(k)}
            for k in a
            if k not in _NOT_CHAIN and a[k] != b.get(k)
        }
        out["not_in_reference"] = sorted(k for k in b if k not in a and k not in _NOT_CHAIN)
    return out


def render_compare(result: dict[str, Any]) -> str:
    lines = [
        "# Kernodeck compare",
        "",
        f"- A: `{result['a']}`",
        f"- B: `{result['b']}`",
        f"- platform: `{result['platform']['a']}` vs `{result['platform']['b']}`",
        f"- status: {result['status']['a']} vs {result['status']['b']}",
        f"- reference: `{result['reference_id']['a']}` vs `{result['reference_id']['b']}`",
        "",
    ]
    out = result["outputs"]
    lines += ["## Outputs", ""]
    if "per_output" in out:  # declared outputs, each under its kind
        from kernodeck.dossier.judge import render

        lines += render(out)
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
    missing = result.get("missing", {})
    for section in ("system", "settings", "steps"):
        lines += ["", f"## {section.capitalize()}", ""]
        absent = missing.get(f"{section}.json", [])
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


def swap_into_place(staging: Path, out: Path) -> None:
    """Replace ``out`` with the completed ``staging`` folder (the one rule lives in :mod:`kernodeck.outdir`)."""
    outdir.swap_into_place(staging, out, guard=True)
