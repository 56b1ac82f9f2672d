"""The step tables (kernodeck/inenv/steptable.py, kernodeck/verify/outside.py): every consumer reads its rows and
keeps no list of its own, and a new in-env step is its module plus its row (the row is its ``StepName`` member): a toy
step, added so to a copy of the package, is run by the runner, summarised, claimed and given a deadline."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.inenv import steptable
from kernodeck.inenv.steptable import StepName
from kernodeck.project import deadlines
from kernodeck.verify import claims, summaries
from kernodeck.verify.outside import OUTSIDE_STEPS
from kernodeck.verify.steps import STEPS as ENTRIES
from kernodeck.verify.steps import in_env

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_is_the_protocols_steps_in_run_order() -> None:
    assert tuple(row.name for row in steptable.STEPS) == tuple(s.value for s in StepName) == in_env.IN_ENV_STEPS
    assert set(steptable.BY_NAME) == {s.value for s in StepName}
    for name in StepName:  # code names a step by its member: the member's name is the step's, in upper case
        assert (name.name, name.row) == (name.value.upper().replace("-", "_"), steptable.BY_NAME[name]), name


def test_every_row_names_a_function_of_its_module() -> None:
    """Read with ast, not imported: most step modules import torch or numpy, which the orchestrator never does."""
    for row in steptable.STEPS:
        tree = ast.parse((ROOT / "kernodeck" / "inenv" / f"{row.module}.py").read_text(encoding="utf-8"))
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert row.function in functions, f"{row.name}: {row.module}.{row.function}"


def _consumers_agree() -> list[str]:
    """What a consumer keeps that the rows do not say: each one reads the tables, none keeps a list of its own."""
    rows = [*OUTSIDE_STEPS, *steptable.STEPS]
    found = []
    if dict(deadlines.DEFAULTS) != {str(r.name): r.deadline_s for r in steptable.STEPS}:
        found.append("deadlines.DEFAULTS")
    if tuple(str(r.name) for r in steptable.STEPS if r.reference) != in_env.REFERENCE_STEPS:
        found.append("in_env.REFERENCE_STEPS")
    if {str(r.name): r.summary for r in rows if r.summary is not None} != summaries.SUMMARISERS:
        found.append("summaries.SUMMARISERS")
    if [(c.id, c.step, c.key, c.holds) for c in claims.CLAIMS] != [(c.id, str(r.name), c.key, c.holds)
                                                                   for r in rows for c in r.claims]:
        found.append("claims.CLAIMS")
    if {str(r.name): r.skippable for r in rows if r.skippable} != claims.SKIPPABLE:
        found.append("claims.SKIPPABLE")
    if [r.name for r in OUTSIDE_STEPS] != [e.name for e in ENTRIES if e.name != "checks"]:
        found.append("verify.steps.STEPS")
    return found


def test_every_consumer_reads_the_tables() -> None:
    assert _consumers_agree() == []


def test_a_consumer_keeping_its_own_list_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(summaries.SUMMARISERS, "embed", lambda d: "")  # a summariser for a step that is gone
    monkeypatch.setattr(claims, "SKIPPABLE", {**claims.SKIPPABLE, "resume": "because"})
    monkeypatch.setattr(deadlines, "DEFAULTS", {**deadlines.DEFAULTS, "settings": 1.0})
    assert _consumers_agree() == ["deadlines.DEFAULTS", "summaries.SUMMARISERS", "claims.SKIPPABLE"]


TOY_MODULE = '''"""A toy step: a function of the in-env context that returns its details."""


def run(ctx):
    return {"answer": 42, "items": 3}
'''
TOY_ROW = '''    TOY = StepRow(
        "toy", "toy", "run", "a toy step added by its module and its row", 5.0,
        summary=lambda d: f"the answer is {d['answer']}", claims=(
            ClaimRow("toy-answer", "the toy step found the answer", "answer", lambda d: d["answer"] == 42),))
'''
TABLE_END = "\n\n\nSTEPS: tuple[StepRow, ...] = tuple(name.row for name in StepName)\n"
ORCHESTRATOR = '''
import json, sys
from pathlib import Path
from kernodeck.project import deadlines
from kernodeck.verify.claims import evaluate_claims
from kernodeck.verify.record import Step
from kernodeck.verify.steps import in_env
from kernodeck.verify.summaries import step_result
step = Step.from_dict(json.loads(next(Path(sys.argv[1]).glob("*-toy.json")).read_text()))
toy = [c for c in evaluate_claims([step]) if c.step == "toy"]
print(json.dumps({"line": step_result(step), "claims": [(c.id, str(c.state)) for c in toy],
                  "deadline": deadlines.DEFAULTS.get("toy"), "runs": "toy" in in_env.IN_ENV_STEPS,
                  "reference": "toy" in in_env.REFERENCE_STEPS}))
'''


def _add_toy(package: Path, *, row: bool = True) -> None:
    """The newcomer's edits: the module and its row, the last of the table; nothing else."""
    inenv = package / "inenv"
    (inenv / "toy.py").write_text(TOY_MODULE, encoding="utf-8")
    table = inenv / "steptable.py"
    text = table.read_text(encoding="utf-8")
    assert text.count(TABLE_END) == 1
    if row:
        table.write_text(text.replace(TABLE_END, "\n" + TOY_ROW + TABLE_END), encoding="utf-8")


def _run_toy(tmp_path: Path, *, row: bool = True) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """A copy of the package with the toy step added, its runner run on a config asking for the toy step alone."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "kernodeck", copy / "kernodeck", ignore=shutil.ignore_patterns("__pycache__"))
    _add_toy(copy / "kernodeck", row=row)
    inenv = copy / "kernodeck" / "inenv"
    run = tmp_path / "run"
    run.mkdir()
    config = {"steps": ["toy"], "project_root": str(tmp_path), "application": {"sample": "s.jsonl"},
              "reference": None,
              "inenv_sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(inenv.glob("*.py"))}}
    (run / "run-config.json").write_text(json.dumps(config), encoding="utf-8")
    ran = subprocess.run([sys.executable, "-I", str(inenv / "runner.py"), "--config", str(run / "run-config.json")],
                         cwd=run, env=_env(), capture_output=True, text=True, check=False, timeout=120)
    return copy, run, ran


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON", "LD_"))}


def test_a_new_step_is_its_module_and_its_row(tmp_path: Path) -> None:
    copy, run, ran = _run_toy(tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    record = json.loads((run / "steps" / "01-toy.json").read_text(encoding="utf-8"))
    assert (record["status"], record["details"], record["title"]) == (
        "passed", {"answer": 42, "items": 3}, "a toy step added by its module and its row")
    seen = subprocess.run([sys.executable, "-c", ORCHESTRATOR, str(run / "steps")], cwd=copy, env=_env(),
                          capture_output=True, text=True, check=False, timeout=120)
    assert seen.returncode == 0, seen.stderr[-2000:]
    assert json.loads(seen.stdout) == {"line": "the answer is 42", "claims": [["toy-answer", "established"]],
                                       "deadline": 5.0, "runs": True, "reference": True}


def test_a_step_module_without_its_row_is_not_run(tmp_path: Path) -> None:
    """The control: the module alone; the runner knows no such step (the row is what makes it one)."""
    _, run, ran = _run_toy(tmp_path, row=False)
    assert ran.returncode != 0 and "KeyError: 'toy'" in ran.stderr
    assert not list((run / "steps").glob("*-toy.json"))
