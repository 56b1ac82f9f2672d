"""The declared contract's code check (kernodeck/verify/steps/declared.py): the reference's code fingerprints are
what verify holds the project's files to, before anything is built."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernodeck.errors import CodeChanged
from kernodeck.project import app_contract
from kernodeck.project.config import load_project
from kernodeck.runformat import manifest, recording
from kernodeck.verify import context, runbuild
from kernodeck.verify.steps.declared import require_reference_code

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "def smoke(ext, device):\n    return {'output': [1.0], 'reference': [1.0]}\n"
DECLARED = ('\n[tool.kernodeck.extensions.kdext]\nmodule = "kdext._C"\nsmoke = "checks/ext.py:smoke"\n'
            "rtol = 0.0\natol = 0.0\n")


def _declaring_a_smoke_check(tmp_path: Path) -> Path:
    """This repository's declaration (pyproject.toml, checks/) with an extension's smoke check declared."""
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(ROOT / "checks", root / "checks", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "checks" / "ext.py").write_text(SMOKE, encoding="utf-8")
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write(DECLARED)
    return root


@pytest.mark.parametrize("edit", [True, False], ids=["the smoke file edited", "control: left as it is"])
def test_an_edit_of_a_smoke_checks_file_is_a_named_code_change(tmp_path: Path, edit: bool) -> None:
    """A declared smoke check runs in the runner's process before the application, and what it patches there (a
    library function, a module global) reaches the application's code; its file was outside the reference's identity,
    its sha256 recorded nowhere, so an edit of it changed the outputs' code with no code change named (red-team pass
    13). Its file is one of the declared sources now: a reference made with it fingerprints it, and verify names an
    edit of it before anything is built; the control leaves it as the reference saw it."""
    root = _declaring_a_smoke_check(tmp_path)
    project = load_project(root)
    app = context.declaration(project).application()  # as verify reads the declaration
    assert "checks/ext.py" in app.sources
    # the reference's code fingerprints, as reference --new writes them (recording.build_manifest)
    ref = manifest.Reference(root / "dossier" / "reference", {"application": {
        "code": recording.code_fingerprint(project, app_contract.load(root).sources)}})
    assert "checks/ext.py" in ref.manifest["application"]["code"]
    if edit:
        (root / "checks" / "ext.py").write_text(SMOKE.replace("1.0]}", "1.0], 'path': 'fast'}"), encoding="utf-8")
        with pytest.raises(CodeChanged) as caught:
            require_reference_code(project, ref, app, allow=False)
        assert caught.value.changed == ["checks/ext.py"]
    else:
        assert require_reference_code(project, ref, app, allow=False) == []
    # what the in-env side checks the code it runs against (and reference --new compares with after its run)
    assert "checks/ext.py" in runbuild.in_env_sources({}, root, app)



@pytest.mark.parametrize("how", ["missing", "changed"])
def test_a_missing_code_file_is_named_missing_and_its_tip_restores_it(tmp_path: Path, how: str) -> None:
    """A declared file the reference fingerprints that is not there (a checkout without it, a container's image that
    lacks it: red-team pass 55, EXPORT1) is said to be missing, its TIP to restore it (or to export the image again),
    never first to make a new reference, which would describe code that is not there; the control: a changed file
    is said to differ, its TIP a new reference."""
    root = _declaring_a_smoke_check(tmp_path)
    project = load_project(root)
    app = context.declaration(project).application()
    ref = manifest.Reference(root / "dossier" / "reference", {"application": {
        "code": recording.code_fingerprint(project, app.sources)}})
    if how == "missing":
        (root / "checks" / "ext.py").unlink()
    else:
        (root / "checks" / "ext.py").write_text(SMOKE + "# edited\n", encoding="utf-8")
    with pytest.raises(CodeChanged) as caught:
        require_reference_code(project, ref, app, allow=False)
    message, tip = str(caught.value), caught.value.tip
    assert caught.value.changed == ["checks/ext.py"]
    if how == "missing":
        assert "code the reference fingerprints is missing: checks/ext.py" in message and "differs" not in message
        assert "--allow-code-change" not in message  # the checks cannot run a file that is not there
        assert tip.startswith("git checkout -- checks/ext.py ") and "nox -s export -- --format dockerfile" in tip
        assert caught.value.missing == ["checks/ext.py"]
    else:
        assert "code differs from the reference's fingerprint: checks/ext.py" in message and "missing" not in message
        assert tip.startswith("nox -s reference -- --new") and caught.value.missing == []
