"""Pairwise numbers between the outputs of several dossiers, inside an env that has numpy (the rebuilt one).

    <venv>/bin/python -I <kernodeck>/inenv/drift.py --config drift-config.json

The config names groups of outputs, each with its folder in every dossier (the application's outputs, the resumed
run of the application's own training) and its declared outputs (kind and tolerance), and the result file; a
group's outputs are named with its prefix.
Every pair is compared by ``tolerance.compare`` (the one comparison implementation, the same as verify's), the
second dossier of a pair standing as the reference; its distances are read by ``margin.numbers``, as calibrate
reads its noise.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _read(folder: Path, name: str) -> tuple[Any, list[str]] | str:
    from kernodeck_inenv.arrays import read_npy

    try:
        arr = read_npy(folder / f"{name}.npy")
        ids = json.loads((folder / f"{name}.ids.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, EOFError) as exc:
        return f"cannot read {name}.npy: {type(exc).__name__}: {exc}"
    return arr, [str(i) for i in ids]


def pairwise(folders: list[Path], declared: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{output: {"i,j": {"passed", "summary", "numbers"} or {"error"}}}`` for every pair i < j."""
    runpy.run_path(str(HERE / "_package.py"))  # HERE as the package kernodeck_inenv (the one loader)
    from kernodeck_inenv import tolerance
    from kernodeck_inenv.margin import numbers

    result: dict[str, Any] = {}
    for name, decl in declared.items():
        loaded = [_read(folder, name) for folder in folders]
        cells: dict[str, Any] = {}
        for i in range(len(folders)):
            for j in range(i + 1, len(folders)):
                a, b = loaded[i], loaded[j]
                if isinstance(a, str) or isinstance(b, str):
                    cells[f"{i},{j}"] = {"error": a if isinstance(a, str) else b}
                    continue
                if a[1] != b[1]:
                    cells[f"{i},{j}"] = {"error": "the two dossiers hold other ids (or another order)"}
                    continue
                wrong = tolerance.dtypes_differ(decl, a[0], b[0]) or tolerance.shapes_differ(a[0], b[0])
                if wrong:  # another dtype or shape: another output (compare says the same)
                    cells[f"{i},{j}"] = {"error": wrong}
                    continue
                verdict = tolerance.compare(decl, a[0], b[0], a[1])
                cells[f"{i},{j}"] = {"passed": bool(verdict["passed"]), "summary": verdict["summary"],
                                     "numbers": numbers(verdict)}
        result[name] = cells
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = json.loads(args.config.read_text(encoding="utf-8"))
    runpy.run_path(str(HERE / "_package.py"))  # HERE as the package kernodeck_inenv (the one loader)
    # verified bytes only (_package.py): the orchestrator's fingerprints, checked before any sibling runs
    sys.modules["kernodeck_inenv"].__loader__.check(Path(__file__).resolve(), config.get("inenv_sha256"))
    from kernodeck_inenv._common import write_json_atomic

    found: dict[str, Any] = {}
    for group in config["groups"]:
        cells = pairwise([Path(f) for f in group["dossiers"]], group["outputs"])
        found.update({group["prefix"] + name: by_pair for name, by_pair in cells.items()})
    write_json_atomic(Path(config["result"]), found)
    return 0


if __name__ == "__main__":
    runpy.run_path(str(HERE / "_package.py"))  # first: the siblings, and this process registered for its stacks
    sys.exit(main())
