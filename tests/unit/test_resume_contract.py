"""The application's own resume as declared (kernodeck/project/resume_contract.py, issue 36): the examples' tables,
the defaults, each bad declaration named, the schema."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from kernodeck.errors import ConfigError
from kernodeck.project import resume_contract
from kernodeck.project.config import load_project

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"


def _digits_table() -> dict[str, Any]:
    data = tomllib.loads((DIGITS / "pyproject.toml").read_text(encoding="utf-8"))
    return copy.deepcopy(data["tool"]["kernodeck"]["application"]["resume"])


def test_the_digits_example_declares_its_resume() -> None:
    contract = resume_contract.from_table(_digits_table())
    assert contract is not None
    assert str(contract.entry) == "checks/train.py:train" and (contract.steps, contract.checkpoint_at) == (50, 30)
    assert contract.controls == (resume_contract.Drop.OPTIMIZER, resume_contract.Drop.RNG, resume_contract.Drop.LOADER)
    assert contract.outputs["weights"].tolerance == {"rtol": 0.0, "atol": 1e-6}
    config = contract.run_config()
    assert config["entry"] == {"file": "checks/train.py", "function": "train"}
    assert config["outputs"]["weights"]["kind"] == "allclose" and config["controls"] == ["optimizer", "rng", "loader"]


def test_the_lightning_example_declares_its_resume_with_its_own_train() -> None:
    data = tomllib.loads((ROOT / "examples" / "lightning" / "pyproject.toml").read_text(encoding="utf-8"))
    contract = resume_contract.from_table(data["tool"]["kernodeck"]["application"]["resume"])
    assert contract is not None and str(contract.entry) == "checks/train.py:train"
    train = (ROOT / "examples" / "lightning" / "checks" / "train.py").read_text(encoding="utf-8")
    assert "ckpt_path=" in train and all(f'"{d}"' in train for d in resume_contract.Drop)  # each control honoured
    assert "lightning" in (ROOT / "examples" / "lightning" / "requirements" / "base.in").read_text(encoding="utf-8")


def test_no_resume_declared_is_none_and_controls_default_to_every_piece() -> None:
    assert resume_contract.from_table(None) is None
    table = _digits_table()
    del table["controls"]
    contract = resume_contract.from_table(table)
    assert contract is not None and contract.controls == tuple(resume_contract.Drop)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.update(entry="checks/train.py"), "path/to/file.py:function"),
        (lambda t: t.update({"checkpoint-at": 50}), "must be below steps"),
        (lambda t: t.update(steps=1), "at least 2"),
        (lambda t: t.update(steps=True), "whole number"),
        (lambda t: t.update(outputs={}), "declares no outputs"),
        (lambda t: t["outputs"]["weights"].update(kind="roughly"), "is not one of"),
        (lambda t: t["outputs"]["weights"].pop("atol"), r"resume\.outputs\.weights.*needs a number atol"),
        (lambda t: t.update(controls=["optimizer", "weights"]), "controls"),
        (lambda t: t.update(controls=[]), "at least one piece"),
        (lambda t: t.update(controls=["rng", "rng"]), "each once"),
        (lambda t: t.update({"gpu-tolerance": -1}), "gpu-tolerance"),
        (lambda t: t.update({"gpu-tolerance": float("nan")}), "gpu-tolerance: nan is not a finite number"),
    ],
)
def test_bad_resume_declarations_are_named(edit: Any, message: str) -> None:
    table = _digits_table()
    resume_contract.from_table(table)  # the control: the example's declaration is accepted
    edit(table)
    with pytest.raises(ConfigError, match=message):
        resume_contract.from_table(table)


def test_every_drop_is_described() -> None:
    described = {resume_contract.describe(d) for d in resume_contract.Drop}
    assert described and len(described) == 3


def test_the_schema_accepts_the_table_and_refuses_a_stray_key(tmp_path: Path) -> None:
    from kernodeck.errors import KernodeckError

    text = (DIGITS / "pyproject.toml").read_text(encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    assert load_project(tmp_path).tool["application"]["resume"]["steps"] == 50
    (tmp_path / "pyproject.toml").write_text(
        text.replace("checkpoint-at = 30", "checkpoint-at = 30\nsave-every = 3"), encoding="utf-8")
    with pytest.raises(KernodeckError, match="save-every"):
        load_project(tmp_path)


def test_a_resume_output_may_not_take_the_name_of_kernodecks_own_records() -> None:
    from kernodeck.inenv.protocol import RESUME_FILES

    for name in sorted(RESUME_FILES):
        table = _digits_table()
        table["outputs"][name] = table["outputs"]["weights"]
        with pytest.raises(ConfigError, match=f"{name} is the name of Kernodeck's own record"):
            resume_contract.from_table(table)
