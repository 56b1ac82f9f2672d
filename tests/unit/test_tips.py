"""TIPs come from one place (kernodeck/tips.py) that knows the sessions a user can run."""

from __future__ import annotations

import ast

import pytest

from kernodeck import noxsessions, tips
from tests.conftest import ROOT


def test_the_session_lists_are_the_sessions_that_exist() -> None:
    assert {spec.name for spec in noxsessions.SESSIONS} == tips.SESSIONS
    tree = ast.parse((ROOT / "noxfile.py").read_text(encoding="utf-8"))
    own = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
           and any("session" in ast.unparse(d) for d in node.decorator_list)}
    assert own == tips.OWN_SESSIONS


def test_a_tip_names_the_session_and_its_arguments() -> None:
    assert tips.nox("rebuild", "--fresh") == tips.REBUILD_FRESH == "nox -s rebuild -- --fresh"
    assert tips.nox("verify") == "nox -s verify"


def test_a_session_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="no nox session 'rebuilt'"):
        tips.nox("rebuilt", "--fresh")
