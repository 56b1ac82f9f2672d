"""TIPs come from one place (kernodeck/tips.py) that knows the sessions a user can run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernodeck import noxsessions, tips
from tests.helpers.project import ROOT


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


# The orchestrator's modules that may spell a session by hand: the one place, and what runs or ships elsewhere.
# kernodeck/docpage.py writes the docs' session tables: it names sessions, it gives no TIP.
TIP_EXEMPT = ("kernodeck/tips.py", "kernodeck/inenv/", "kernodeck/project/templates/", "kernodeck/docpage.py")
# The modules issue 20 (the thin CLI) converted: they hold no literal command while the others are converted.
CONVERTED = ("kernodeck/__main__.py", "kernodeck/cli/", "kernodeck/noxsessions.py", "kernodeck/errors.py",
             "kernodeck/dossier/new_reference.py", "kernodeck/runformat/manifest.py",
             "kernodeck/runformat/recording.py", "kernodeck/dossier/replay.py", "kernodeck/dossier/compare.py",
             "kernodeck/dossier/export.py",
             "kernodeck/project/", "kernodeck/ci/")


def literal_commands(path: Path, root: Path = ROOT) -> list[str]:
    """``FILE:LINE`` of each string in ``path`` (docstrings aside: they describe, a TIP instructs) that spells a
    ``nox -s`` command by hand instead of asking :mod:`kernodeck.tips` for it."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [f"{path.relative_to(root).as_posix()}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "nox -s " in node.value
            and id(node) not in docstrings]


def _orchestrator(prefixes: tuple[str, ...] = ("kernodeck/",)) -> list[Path]:
    files = sorted((ROOT / "kernodeck").rglob("*.py"))
    rel = {f: f.relative_to(ROOT).as_posix() for f in files}
    return [f for f in files if rel[f].startswith(prefixes) and not rel[f].startswith(TIP_EXEMPT)]


def test_the_checker_finds_a_command_spelled_by_hand(tmp_path: Path) -> None:
    planted = tmp_path / "kernodeck" / "planted.py"
    planted.parent.mkdir()
    planted.write_text('"""Run `nox -s verify` (a docstring: allowed)."""\n\ndef f(x: str) -> str:\n'
                       '    """nox -s lock: allowed."""\n    return f"TIP: nox -s lock -- --platform {x}"\n',
                       encoding="utf-8")
    assert literal_commands(planted, tmp_path) == ["kernodeck/planted.py:5"]
    planted.write_text('from kernodeck import tips\nTIP = tips.nox("lock", "--check")\n', encoding="utf-8")
    assert literal_commands(planted, tmp_path) == []


def test_the_converted_modules_ask_tips_for_every_command() -> None:
    offenders = [hit for path in _orchestrator(CONVERTED) for hit in literal_commands(path)]
    assert offenders == [], offenders


def test_no_orchestrator_module_spells_a_command_by_hand() -> None:
    offenders = [hit for path in _orchestrator() for hit in literal_commands(path)]
    print("\n".join(offenders))
    assert offenders == [], f"{len(offenders)} literal `nox -s` command(s): use kernodeck.tips"
