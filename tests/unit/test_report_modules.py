"""The report (kernodeck/verify) and the dossier (kernodeck/runformat, kernodeck/dossier) told in one-concept
modules: their import layers hold (no cycle, checked on the import graph), every name code outside imports stays where
it was, and the dossier's review passes a precomputed ``secrets`` through (read once by the caller), and only when
given."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from kernodeck.inenv.evidence import ClaimRow
from kernodeck.runformat import refdelta as dossier_delta
from kernodeck.runformat import review as dossier_review
from kernodeck.runformat import review as review_mod
from kernodeck.verify import claims

ROOT = Path(__file__).resolve().parents[2]

# module -> the sibling modules it may import at run time (an import under TYPE_CHECKING is a type, not an edge)
LAYERS = {
    "kernodeck.verify.record": set(),
    "kernodeck.verify.outside": set(),  # verify's own steps' rows (the in-env ones': kernodeck/inenv/steptable.py)
    "kernodeck.verify.claims": {"kernodeck.verify.record", "kernodeck.verify.outside"},
    "kernodeck.verify.summaries": {"kernodeck.verify.record", "kernodeck.verify.outside"},
    "kernodeck.verify.markdown": {"kernodeck.verify.record", "kernodeck.verify.claims", "kernodeck.verify.summaries"},
    "kernodeck.verify.report": {"kernodeck.verify.record", "kernodeck.verify.claims", "kernodeck.verify.summaries",
                                "kernodeck.verify.markdown"},
    "kernodeck.dossier.compare": set(),
    "kernodeck.dossier.read": {"kernodeck.dossier.compare"},
    "kernodeck.dossier.resume_outputs": {"kernodeck.dossier.compare"},
    "kernodeck.dossier.delta": {"kernodeck.dossier.read", "kernodeck.dossier.compare",
                                "kernodeck.dossier.resume_outputs"},
    "kernodeck.runformat.refdelta": {"kernodeck.runformat.manifest"},  # which records its manifest fingerprints
    "kernodeck.runformat.review": set(),
}


def runtime_imports(source: str, package: str) -> set[str]:
    """The modules of ``package`` (and the package itself) a module's source imports at its top level, outside an
    ``if TYPE_CHECKING:`` block; an import inside a function counts too (it runs when the function does)."""
    found: set[str] = set()
    tree = ast.parse(source)
    skipped = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
               and isinstance(block.test, ast.Name) and block.test.id == "TYPE_CHECKING"
               for node in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n for n in names if n == package or n.startswith(package + ".")}
    return found


def edges(module: str) -> set[str]:
    package = module.rsplit(".", 1)[0]
    source = (ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8")
    return {n for n in runtime_imports(source, package) if n in LAYERS or n == package or n.count(".") == 2}


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_each_module_imports_only_the_layers_below_it(module: str) -> None:
    assert edges(module) <= LAYERS[module], edges(module) - LAYERS[module]


def test_the_layer_check_catches_a_planted_cycle() -> None:
    """Negative control: markdown importing the report at run time (the cycle the TYPE_CHECKING import avoids)."""
    source = (ROOT / "kernodeck/verify/markdown.py").read_text(encoding="utf-8")
    assert "kernodeck.verify.report" not in runtime_imports(source, "kernodeck.verify")
    planted = source + "\nfrom kernodeck.verify.report import Report as _R\n"
    assert "kernodeck.verify.report" in runtime_imports(planted, "kernodeck.verify")
    inside = source + "\ndef _f() -> None:\n    from kernodeck.verify import report\n"
    assert "kernodeck.verify.report" in runtime_imports(inside, "kernodeck.verify")


def test_no_claim_carries_the_removed_pending_or_binding_fields() -> None:
    from dataclasses import fields

    assert {f.name for f in fields(ClaimRow)} == {"id", "text", "step", "key", "holds", "modes", "variant"}
    assert "binding" not in {f.name for f in fields(claims.Claim)}


def test_the_reviewer_replaces_project_and_home_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    project = home / "work" / "proj"
    review = dossier_review.reviewer(project)
    assert review(f"{project}/checks/app.py and {home}/.cache") == "<project>/checks/app.py and ~/.cache"
    assert review("nothing of this machine") == "nothing of this machine"


class Recorder:
    """Stands for kernodeck.sources' redaction functions: records the keyword arguments each call was given."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def scrub(self, text: str, public: Any = (), **kwargs: Any) -> str:
        self.calls.append({"fn": "scrub_text", **kwargs})
        return text

    def check(self, text: str, name: str, public: Any = (), declared: Any = (), **kwargs: Any) -> None:
        self.calls.append({"fn": "check_written", **kwargs})


@pytest.mark.parametrize("given", [None, object()])
def test_review_passes_secrets_through_only_when_given(
    given: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    monkeypatch.setattr(review_mod, "scrub_text", rec.scrub)
    monkeypatch.setattr(review_mod, "check_written", rec.check)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "report.md").write_text("x\n", encoding="utf-8")
    (folder / "embeddings.npy").write_bytes(b"\x93NUMPY")  # binary outputs are not reviewed
    dossier_review.review_folder(folder, tmp_path, secrets=given)
    assert [c["fn"] for c in rec.calls] == ["scrub_text", "check_written"]
    # None: each call reads this machine's sources itself; else read once by the caller: the same object reaches both
    assert all(c["secrets"] is given for c in rec.calls)


def test_the_reviewer_takes_the_declared_indexes_already_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_pyproject(root: Path) -> list[str]:
        raise AssertionError("pyproject.toml read again")

    monkeypatch.setattr(review_mod, "_public", no_pyproject)
    given = dossier_review.reviewer(tmp_path, public=["https://download.pytorch.org/whl/cpu"])
    assert given.public == ("https://download.pytorch.org/whl/cpu",)
    with pytest.raises(AssertionError, match="read again"):  # nothing given: it reads the project's declaration
        dossier_review.reviewer(tmp_path)


def test_vs_reference_takes_the_delta_and_system_already_had(tmp_path: Path) -> None:
    from kernodeck.env.inventory import diff

    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir()
    run.mkdir()
    (ref / "inventory.txt").write_text("numpy==2.0\ntorch==2.13.0\n", encoding="utf-8")
    (ref / "system.json").write_text('{"driver": "550", "cpu": {"model": "a"}}', encoding="utf-8")
    (run / "inventory.txt").write_text("numpy==2.1\ntorch==2.13.0\n", encoding="utf-8")
    (run / "system.json").write_text('{"driver": "560", "cpu": {"model": "a"}}', encoding="utf-8")
    read = dossier_delta.vs_reference(ref, run)
    assert read["inventory"]["changed"] == {"numpy": {"expected": "2.0", "observed": "2.1"}}
    assert read["system"] == {"driver": {"reference": "550", "this run": "560"}}
    delta = diff({"numpy": "2.0", "torch": "2.13.0"}, {"numpy": "2.1", "torch": "2.13.0"})
    system = {"driver": "560", "cpu": {"model": "a"}}
    for name in ("inventory.txt", "system.json"):
        (run / name).unlink()  # given what it needs, vs_reference reads nothing of the run
    assert dossier_delta.vs_reference(ref, run, inventory_delta=delta, system=system) == read
    # negative control: what is given is what is used (another system record, another difference)
    other = dossier_delta.vs_reference(ref, run, inventory_delta=delta, system={**system, "driver": "570"})
    assert other["system"] == {"driver": {"reference": "550", "this run": "570"}}
    assert "inventory" not in dossier_delta.vs_reference(ref, run)  # nor guessed when neither is given nor on disk
