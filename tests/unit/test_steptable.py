"""The step tables (kernodeck/inenv/steptable.py, kernodeck/verify/outside.py): every consumer reads its rows and
keeps no list of its own, and a new in-env step is its module plus its row (the row is its ``StepName`` member): a toy
step, added so to a copy of the package, is run by the runner, summarised, claimed, given a deadline, run by bisect's
trials and shown in docs/report.md's table of the steps. A step outside the env is its module plus its row too: the
pipeline's entry is made from the row."""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.inenv import steptable
from kernodeck.inenv.protocol import Layer, is_layer
from kernodeck.inenv.steptable import StepName
from kernodeck.project import deadlines
from kernodeck.upgrade import bisect
from kernodeck.verify import claims, summaries
from kernodeck.verify.outside import OUTSIDE_STEPS, OutsideRow
from kernodeck.verify.steps import STEPS as ENTRIES
from kernodeck.verify.steps import entry, in_env

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
    if [(r.name, r.layer, not r.quiet) for r in OUTSIDE_STEPS] != [(e.name, e.layer, e.announce) for e in ENTRIES
                                                                     if e.name != "checks"]:
        found.append("verify.steps.STEPS")
    if tuple(r.name for r in steptable.STEPS if r.bisect) != bisect.STEPS:
        found.append("bisect.STEPS")
    return found


def test_every_consumer_reads_the_tables() -> None:
    assert _consumers_agree() == []


def test_a_consumer_keeping_its_own_list_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(summaries.SUMMARISERS, "embed", lambda d: "")  # a summariser for a step that is gone
    monkeypatch.setattr(claims, "SKIPPABLE", {**claims.SKIPPABLE, "resume": "because"})
    monkeypatch.setattr(deadlines, "DEFAULTS", {**deadlines.DEFAULTS, "settings": 1.0})
    monkeypatch.setattr(bisect, "STEPS", ("settings", "backend", "application", "reread", "compare", "criterion"))
    assert _consumers_agree() == ["deadlines.DEFAULTS", "summaries.SUMMARISERS", "claims.SKIPPABLE", "bisect.STEPS"]


def _unsaid(rows: list[OutsideRow | steptable.StepRow]) -> list[str]:
    """A row that does not say what its step checks, or names a layer its failure cannot belong to."""
    found = [f"{r.name}: what it checks" for r in rows if not r.checks.strip()]
    layers = [(r.name, str(layer)) for r in rows
              for layer in (r.layers if isinstance(r, steptable.StepRow) else (r.layer,))]
    return found + [f"{name}: layer {layer!r}" for name, layer in layers if not is_layer(layer)]


def test_every_row_says_what_its_step_checks_and_where_its_failure_belongs() -> None:
    assert _unsaid([*OUTSIDE_STEPS, *steptable.STEPS]) == []
    assert bisect.STEPS == ("settings", "backend", "reference", "application", "reread", "compare", "criterion")


def test_a_row_without_its_words_or_with_a_stranger_layer_is_caught() -> None:
    row = steptable.StepName.BACKEND.row
    planted = [dataclasses.replace(row, checks=" "), dataclasses.replace(row, layers=(Layer.DEVICE, "gpu-melted")),
               dataclasses.replace(OUTSIDE_STEPS[0], layer="lock-ish")]
    assert _unsaid(planted) == ["backend: what it checks", "backend: layer 'gpu-melted'",
                                "lock-check: layer 'lock-ish'"]


def test_every_outside_row_names_a_step_function_of_its_module() -> None:
    """The pipeline's entries are the rows' (kernodeck/verify/steps/__init__.py): each runs a function of ``(ctx,
    run)`` of the module its row names; what it shows not-run and which errors end the run are the row's too."""
    assert [e.name for e in ENTRIES] == [r.name for r in OUTSIDE_STEPS] + ["checks"]
    for row, made in zip(OUTSIDE_STEPS, ENTRIES, strict=False):
        assert made.act.__module__ == f"kernodeck.verify.steps.{row.module}", row.name
        assert list(inspect.signature(made.act).parameters) == ["ctx", "run"], row.name
        shown = made.shows(None)  # type: ignore[arg-type]
        assert (shown, made.fails_on == ()) == (() if row.quiet else (row.name,), row.errors_end_run), row.name


def test_an_outside_row_naming_no_function_is_refused() -> None:
    row = OUTSIDE_STEPS[0]
    with pytest.raises(AttributeError, match="lock_chek"):
        entry(dataclasses.replace(row, function="lock_chek"))
    with pytest.raises(TypeError, match="is not a function"):
        entry(dataclasses.replace(row, function="annotations"))  # the module's ``from __future__`` feature
    with pytest.raises(ModuleNotFoundError):
        entry(dataclasses.replace(row, module="lock_chek"))


TOY_MODULE = '''"""A toy step: a function of the in-env context that returns its details."""


def run(ctx):
    return {"answer": 42, "items": 3}
'''
TOY_ROW = '''    TOY = StepRow(
        "toy", "toy", "run", "a toy step added by its module and its row", 5.0,
        summary=lambda d: f"the answer is {d['answer']}", claims=(
            ClaimRow("toy-answer", "the toy step found the answer", "answer", lambda d: d["answer"] == 42),),
        layers=(Layer.OPERATOR,), bisect=True, variation=True, checks="the answer is 42")
'''
TABLE_END = "\n\n\nSTEPS: tuple[StepRow, ...] = tuple(name.row for name in StepName)\n"
ORCHESTRATOR = '''
import json, sys
from pathlib import Path
from kernodeck import docpage
from kernodeck.inenv.steptable import VARIATION_STEPS
from kernodeck.project import deadlines
from kernodeck.upgrade import bisect
from kernodeck.verify.claims import evaluate_claims
from kernodeck.verify.record import Step
from kernodeck.verify.steps import in_env
from kernodeck.verify.summaries import step_result
step = Step.from_dict(json.loads(next(Path(sys.argv[1]).glob("*-toy.json")).read_text()))
toy = [c for c in evaluate_claims([step]) if c.step == "toy"]
print(json.dumps({"line": step_result(step), "claims": [(c.id, str(c.state)) for c in toy],
                  "deadline": deadlines.DEFAULTS.get("toy"), "runs": "toy" in in_env.IN_ENV_STEPS,
                  "reference": "toy" in in_env.REFERENCE_STEPS, "bisect": "toy" in bisect.STEPS,
                  "variation": "toy" in [row.name for row in VARIATION_STEPS],
                  "doc": [row for row in docpage.steps_block().splitlines() if "`toy`" in row]}))
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
                                       "deadline": 5.0, "runs": True, "reference": True, "bisect": True,
                                       "variation": True,
                                       "doc": ["| `toy` | operator | the answer is 42 |"]}


def test_a_step_module_without_its_row_is_not_run(tmp_path: Path) -> None:
    """The control: the module alone; the runner knows no such step (the row is what makes it one)."""
    _, run, ran = _run_toy(tmp_path, row=False)
    assert ran.returncode != 0 and "KeyError: 'toy'" in ran.stderr
    assert not list((run / "steps").glob("*-toy.json"))
