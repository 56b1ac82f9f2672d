"""The wall, enforced on the import graph (tests/helpers/wall.py): each contract holds here, and fails on a planted
breach."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import wall

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_keeps_the_wall() -> None:
    assert wall.breaches(ROOT) == []


def test_the_graph_sees_every_module_and_its_relative_imports() -> None:
    graph = wall.Graph(ROOT)
    assert "kernodeck.verify" in graph.edges and "kernodeck.inenv.runner" in graph.edges
    assert len(graph.edges) >= 30
    # the orchestrator's own imports are followed: verify reaches its report module
    assert "kernodeck.verify.report" in graph.reach("kernodeck.verify")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package and the applications, to plant breaches in."""
    shutil.copytree(ROOT / "kernodeck", tmp_path / "kernodeck", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "checks", tmp_path / "checks")
    assert wall.breaches(tmp_path) == []
    return tmp_path


@pytest.mark.parametrize("line", ["import torch", "from numpy import linalg", "import torch.nn as nn",
                                  "def f():\n    import sentence_transformers\n",
                                  "import importlib\nimportlib.import_module('torch')"])
def test_an_orchestrator_module_importing_torch_is_a_breach(tree: Path, line: str) -> None:
    (tree / "kernodeck" / "planted.py").write_text(line + "\n", encoding="utf-8")
    found = wall.breaches(tree)
    assert [b.chain[0] for b in found] == ["kernodeck.planted"], found
    assert "the orchestrator imports an in-env package" in str(found[0])


def test_torch_reached_through_another_module_names_the_chain(tree: Path) -> None:
    (tree / "kernodeck" / "planted_b.py").write_text("import numpy\n", encoding="utf-8")
    (tree / "kernodeck" / "planted_a.py").write_text("from . import planted_b\n", encoding="utf-8")
    (tree / "kernodeck" / "project" / "config.py").write_text(
        (tree / "kernodeck" / "project" / "config.py").read_text(encoding="utf-8") + "\nfrom ..planted_a import x\n",
        encoding="utf-8")
    found = {str(b) for b in wall.breaches(tree)}
    assert "the orchestrator imports an in-env package: kernodeck.planted_b -> numpy" in found
    chains = [b.chain for b in wall.orchestrator_breaches(wall.Graph(tree))]
    assert ("kernodeck.planted_b", "numpy") in chains
    # the chain from config to numpy exists in the graph (the report names the module that imports it)
    assert wall.Graph(tree).reach("kernodeck.project.config")["numpy"] == (
        "kernodeck.project.config", "kernodeck.planted_a", "kernodeck.planted_b", "numpy")


def test_the_orchestrator_importing_an_inenv_module_that_needs_numpy_is_a_breach(tree: Path) -> None:
    (tree / "kernodeck" / "inenv" / "needs_np.py").write_text("import numpy as np\n", encoding="utf-8")
    (tree / "kernodeck" / "planted.py").write_text("from .inenv import needs_np\n", encoding="utf-8")
    found = wall.breaches(tree)
    assert [b.chain for b in found] == [("kernodeck.planted", "kernodeck.inenv.needs_np")], found
    assert "needs numpy" in str(found[0])


@pytest.mark.parametrize("line", ["from kernodeck import config", "import kernodeck.verify.report",
                                  "from .. import errors", "from ..verify import verify"])
def test_inenv_importing_the_orchestrator_is_a_breach(tree: Path, line: str) -> None:
    (tree / "kernodeck" / "inenv" / "planted.py").write_text(line + "\n", encoding="utf-8")
    found = wall.breaches(tree)
    assert found and {b.chain[0] for b in found} == {"kernodeck.inenv.planted"}, found
    assert all("kernodeck/inenv imports the orchestrator" in str(b) for b in found)


@pytest.mark.parametrize("line", ["import kernodeck", "from kernodeck.inenv import tolerance"])
def test_the_application_importing_kernodeck_is_a_breach(tree: Path, line: str) -> None:
    app = tree / "checks" / "app.py"
    app.write_text(app.read_text(encoding="utf-8") + f"\n{line}\n", encoding="utf-8")
    found = wall.breaches(tree)
    assert [b.chain[0] for b in found] == ["checks/app.py"], found
    assert "the application imports Kernodeck" in str(found[0])
