"""Compare two dossiers' outputs under their declared kinds, with the code verify uses (``tolerance.compare``).

    <venv>/bin/python -I <kernodeck>/inenv/compare_outputs.py REQUEST.json

REQUEST: ``{"a": DIR, "b": DIR, "outputs": {name: declared table}}`` (the folders hold ``NAME.npy`` and
``NAME.ids.json``). Prints ``{name: verdict}`` as JSON: B is compared with A as verify compares a run with its
reference. Runs in a rebuilt env (numpy is there; the orchestrator has none) and imports nothing of Kernodeck but
its sibling tolerance.py, from this folder loaded as the package ``kernodeck_inenv`` (_package.py).
"""

from __future__ import annotations

import importlib
import json
import runpy
import sys
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True


def _tolerance(expected: dict[str, str] | None = None) -> Any:
    runpy.run_path(str(Path(__file__).with_name("_package.py")))  # this folder as kernodeck_inenv (the one loader)
    # verified bytes only (_package.py): the orchestrator's fingerprints, checked before tolerance.py runs
    sys.modules["kernodeck_inenv"].__loader__.check(Path(__file__).resolve(), expected)
    return importlib.import_module("kernodeck_inenv.tolerance")


def _read(folder: Path, name: str) -> tuple[Any, list[str]] | str:
    from kernodeck_inenv.arrays import read_npy

    npy, ids = folder / f"{name}.npy", folder / f"{name}.ids.json"
    if not ids.is_file() and name == "embeddings":
        ids = folder / "ids.json"  # a dossier from before one ids file per output
    if not npy.is_file() or not ids.is_file():
        return f"{npy.name} or {ids.name} is missing"
    try:
        arr = read_npy(npy)
        names = [str(i) for i in json.loads(ids.read_text(encoding="utf-8"))]
    except (OSError, ValueError, EOFError) as exc:
        return f"{npy.name} is unreadable ({type(exc).__name__}: {exc})"
    if (arr.shape[0] if arr.ndim else 1) != len(names):  # a 0-d output (the application's resume) has one id
        return f"{ids.name} does not list one id per row of {npy.name}"
    return arr, names


def compare(request: dict[str, Any]) -> dict[str, Any]:
    tolerance = _tolerance(request.get("inenv_sha256"))
    out: dict[str, Any] = {}
    for name, declared in request["outputs"].items():
        a, b = _read(Path(request["a"]), name), _read(Path(request["b"]), name)
        problem = next((f"{side}: {got}" for side, got in (("A", a), ("B", b)) if isinstance(got, str)), None)
        if problem or isinstance(a, str) or isinstance(b, str):
            out[name] = {"kind": declared.get("kind"), "compared": False, "summary": f"not compared: {problem}"}
            continue
        if a[1] != b[1]:
            only = sorted(set(a[1]) ^ set(b[1]))
            why = f"ids differ ({len(only)} in one only, e.g. {only[:3]})" if only else "the same ids in another order"
            out[name] = {"kind": declared.get("kind"), "compared": False, "summary": f"not compared: {why}"}
            continue
        wrong = tolerance.dtypes_differ(declared, a[0], b[0]) or tolerance.shapes_differ(a[0], b[0])
        if wrong:  # another dtype or shape is another output, whatever its values (verify's structure check)
            out[name] = {"kind": declared.get("kind"), "compared": True, "passed": False, "summary": wrong}
            continue
        verdict = tolerance.compare(declared, b[0], a[0], a[1])
        verdict.pop("per_item_cosine", None)  # one number per row: the verdict names the worst
        out[name] = {"compared": True, **verdict}
    return out


if __name__ == "__main__":
    runpy.run_path(str(Path(__file__).with_name("_package.py")))  # first: the siblings, and its stacks hook
    print(json.dumps(compare(json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))), default=str))
