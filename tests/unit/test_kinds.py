"""The tolerance kinds' table (kernodeck/inenv/kinds.py): a new kind is one module plus one entry, and nothing else.

A toy kind, registered here and nowhere else, is validated by the application's declaration, compared and shown able
to fail inside the env, measured by margin, calibrate and drift, worded by upgrade and the report, and written into
the JSON schema; no consumer branches on a kind's name (each check shown failing on a planted breach).
"""

from __future__ import annotations

import ast
import types
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from kernodeck import docpage
from kernodeck.errors import ConfigError
from kernodeck.inenv import controls, findings, kinds, margin, tolerance
from kernodeck.measure import analysis, drift_map, tolerance_search
from kernodeck.project import app_contract
from kernodeck.upgrade import relock as upgrade
from tests.helpers.schema_code import SCHEMA, render_schema

ROOT = Path(__file__).resolve().parents[2]

# A kind the package does not have: the sum of the output against the reference's, within max-sum. The whole kind,
# as a newcomer writes kernodeck/inenv/kind_NAME.py (kinds.ToleranceKind's members).
TOY = '''
DOC = "|sum(a) − sum(b)| ≤ `max-sum`"
USE = "totals"
MOVED = {"max-sum": "the largest value moved by 1.5 × max-sum"}
MEASURED = ("abs sum difference", "`max-sum`")
KEYS = {"max-sum": (0.0, float("inf"))}
SUMMARY = (("sum_diff", "max_sum_allowed", "sum difference", "<="),)
PROPOSES = True
FLIP_BOUND = False

def compare(ops, declared, ours, ref, ids):
    diff = abs(float(ops.np.sum(ours, dtype=ops.np.float64)) - float(ops.np.sum(ref, dtype=ops.np.float64)))
    need = float(declared["max-sum"])
    return {"kind": "toy", "passed": not (diff > need) and diff == diff, "sum_diff": diff, "max_sum_allowed": need,
            "summary": f"sum differs by {diff:.3g} (allowed <= {need})"}

def moved_past(moves, declared, ref, where):
    return {"max-sum": moves.nudged(ref, where, 1.5 * float(declared["max-sum"]))}

def numbers(verdict):
    return {"sum_diff": float(verdict["sum_diff"])} if "sum_diff" in verdict else None

def axes(tolerance):
    return [("sum_diff", "abs sum difference", float(tolerance["max-sum"]))]

def proposal(tolerance, got, sig):
    return {"max-sum": sig(got["sum_diff"])}

def calibrate_note(axis, margin):
    return None

def cell_text(nums):
    return f"sum {nums['sum_diff']:.2g}"

def short_text(nums):
    return f"{nums['sum_diff']:.1e}"

def allowed(verdict):
    return f"sum within {verdict.get('max_sum_allowed')}"
'''


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The toy kind as one module and one entry in the table; its declaration."""
    module = types.ModuleType("kind_toy")
    exec(compile(TOY, "kind_toy.py", "exec"), module.__dict__)
    monkeypatch.setitem(kinds.KINDS, "toy", cast(kinds.ToleranceKind, module))
    return {"kind": "toy", "dtype": "float64", "max-sum": 2.0, "justification": "a toy"}


def test_a_new_kind_is_one_module_and_one_entry(toy: dict[str, Any]) -> None:
    out = app_contract.output_from_table("total", toy, "[outputs.total]")
    assert (out.kind, out.tolerance) == ("toy", {"max-sum": 2.0})
    with pytest.raises(ConfigError, match="rtol not used by kind toy"):
        app_contract.output_from_table("total", {**toy, "rtol": 1.0}, "[outputs.total]")
    with pytest.raises(ConfigError, match=r"max-sum = -1.0 is outside \[0.0, inf\]"):
        app_contract.output_from_table("total", {**toy, "max-sum": -1.0}, "[outputs.total]")

    ref = np.arange(12, dtype=np.float64).reshape(4, 3)
    ids = ["a", "b", "c", "d"]
    near, far = tolerance.compare(toy, ref + 0.1, ref, ids), tolerance.compare(toy, ref + 1.0, ref, ids)
    assert near["passed"] is True and far["passed"] is False and far["sum_diff"] == pytest.approx(12.0)
    assert tolerance.compare(toy, ref[:3], ref, ids)["passed"] is False  # the shared shape check holds for it
    shown = controls.tolerance_controls(tolerance.compare, toy, ref, ids)
    assert list(shown["moved_past"]) == ["max-sum"] and shown["moved_past"]["max-sum"]["failed_compare"] is True
    # a sum does not see rows permuted against their ids: the controls hold a new kind to them too
    assert "permuted" in shown["cannot_see"] and shown["able_to_fail"] is False
    assert margin.numbers(near) == {"sum_diff": pytest.approx(1.2)}
    assert margin.numbers(tolerance.compare(toy, ref[:3], ref, ids)) == {"unmeasurable": 1.0}

    calibrated = analysis.analyse_output("total", "toy", {"max-sum": 2.0}, {"declared": {"sum_diff": 0.01}},
                                         {"found": True, "fails": {"sum_diff": 4.0}, "test": "criterion"})
    assert [a.key for a in calibrated.axes] == ["sum_diff"] and calibrated.overall() == "ok"
    assert calibrated.proposed_tolerance == {"max-sum": 0.2}  # sqrt(0.01 * 4.0), two significant digits

    # calibrate may judge an edit
    assert tolerance_search.tolerance_only(["outputs.total.max_sum: 2.0 -> declared 1.0"])
    assert drift_map.ratio("toy", {"max-sum": 2.0}, {"sum_diff": 0.5}) == 0.25
    assert drift_map.cell_text("toy", {"sum_diff": 0.25}) == "sum 0.25"
    assert drift_map.short_text("toy", {"sum_diff": 0.25})
    assert upgrade.OutputDrift.from_compare("total", far).allowed == "sum within 2.0"
    assert "sum difference 12 (<= 2)" in findings._compare_one(far)
    schema = render_schema(SCHEMA.read_text(encoding="utf-8"))
    assert '"toy"' in schema and '"max-sum": {"type": "number", "minimum": 0' in schema
    assert "| `toy` | \\|sum(a) − sum(b)\\| ≤ `max-sum` | totals |" in docpage.kinds_block()
    assert "| `toy` | the largest value moved by 1.5 × max-sum |" in docpage.kinds_moved_block()
    assert "| `toy` | abs sum difference | `max-sum` |" in docpage.kinds_measured_block()


@pytest.mark.parametrize("name", list(kinds.KINDS))
def test_each_kinds_words_name_its_own_bounds_and_axes(name: str) -> None:
    """A kind's doc rows are its code's: one per key ``moved_past`` gives, its keys the ones compare reads."""
    kind = kinds.get(name)
    tol = {key: (0.5 if high >= 1 else high / 2) for key, (low, high) in kind.KEYS.items()}
    ref = np.linspace(1.0, 2.0, 12).reshape(4, 3)
    assert set(controls.moved_past({"kind": name, **tol}, ref)) == set(kind.MOVED)
    assert tolerance.compare({"kind": name, **tol}, ref, ref, ["a", "b", "c", "d"])["passed"] is True
    assert [key for key, _, bound in kind.axes(tol) if bound is not None]


def test_a_kind_outside_the_table_is_refused() -> None:
    with pytest.raises(ConfigError, match="kind 'toy' is not one of cosine, allclose, exact, agreement"):
        app_contract.output_from_table("total", {"kind": "toy", "dtype": "float64", "justification": "x"}, "[o]")
    with pytest.raises(ValueError, match="unknown tolerance kind 'toy'"):
        tolerance.compare({"kind": "toy"}, [1.0], [1.0], ["a"])


def test_the_shipped_schema_says_the_kinds_table(toy: dict[str, Any]) -> None:
    """The schema's kind enum and keys are written from the table (python -m tests.helpers.schema_code): the shipped
    file is what the table gives, and it is not once a kind is added (the toy is registered here)."""
    shipped = SCHEMA.read_text(encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        mp.delitem(kinds.KINDS, "toy")
        assert render_schema(shipped) == shipped, "out of date: run python -m tests.helpers.schema_code"
    assert render_schema(shipped) != shipped


def _kind_names() -> set[str]:
    return set(kinds.KINDS)


def branches_on_a_kind_name(source: str, names: set[str]) -> list[int]:
    """The lines that compare something with a kind's name (``==``, ``!=``, ``in (...)``, ``is``) or match on it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            consts = [c for s in sides for c in ([s] if not isinstance(s, ast.Tuple | ast.List | ast.Set) else s.elts)]
            if any(isinstance(c, ast.Constant) and c.value in names for c in consts):
                found.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and isinstance(node.value, ast.Constant) and node.value.value in names:
            found.append(node.lineno)
    return found


def test_no_consumer_branches_on_a_kind_name() -> None:
    """Outside the kind modules and the table, nothing in the package compares with a kind's name."""
    # the kinds' own modules, and the schema's compiled validator (generated from the schema, itself from the table)
    own = {"kinds.py", "_tool_schema.py", *(f"kind_{name}.py" for name in kinds.KINDS)}
    breaches = [f"{path.relative_to(ROOT)}:{line}" for path in sorted((ROOT / "kernodeck").rglob("*.py"))
                if path.name not in own
                for line in branches_on_a_kind_name(path.read_text(encoding="utf-8"), _kind_names())]
    assert breaches == []


def test_a_planted_branch_on_a_kind_name_is_caught() -> None:
    planted = ('if kind == "cosine":\n    pass\n'
               'ok = verdict["kind"] in ("exact", "agreement")\n'
               'match kind:\n    case "allclose":\n        pass\n'
               'declared = {"kind": "allclose"}  # a declaration, not a branch\n')
    assert branches_on_a_kind_name(planted, _kind_names()) == [1, 3, 5]
