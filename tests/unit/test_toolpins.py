"""The hash-pinned tools file export installs (kernodeck/dossier/toolpins.py): refused when it does not pin the run
group as pyproject.toml does."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernodeck.dossier import toolpins
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from tests.helpers.containers import export_project
from tests.helpers.project import kd


def test_tools_file_must_pin_the_run_group_with_hashes(tmp_path: Path) -> None:
    root = export_project(tmp_path)
    project = load_project(root)
    assert toolpins.vendored(project) and toolpins.run_group(project)[0] == "run"
    good = toolpins.hashed_file(project)
    hashed = root / ".github" / "requirements" / "run.txt"
    for broken, reason in ((good.replace("uv==0.13.9", "uv==0.13.8"), "uv==0.13.9: the file pins 0.13.8"),
                           (good.replace("tomlkit==", "tomlkitx=="), "tomlkit==0.15.2: missing"),
                           (good + "extra==1.0\n", "extra has no hash"),
                           (good + "-e .\n", "not a NAME==VERSION pin")):
        hashed.write_text(broken, encoding="utf-8")
        with pytest.raises(ConfigError, match=reason) as caught:
            toolpins.hashed_file(project)
        assert caught.value.tip.startswith("python -m hashin -r .github/requirements/run.txt packaging==26.4")
    hashed.unlink()
    proc = kd(root, "export", "--out", "runs/e")
    assert proc.returncode == 2 and "ERROR: no .github/requirements/run.txt" in proc.stderr, proc.stderr
    assert ("TIP: mkdir -p .github/requirements && touch .github/requirements/run.txt && python -m hashin -r "
            ".github/requirements/run.txt packaging==26.4") in proc.stderr
    assert not (root / "runs" / "e" / "Dockerfile").exists()


def test_a_project_without_kernodeck_vendored_must_pin_kernodeck_too(tmp_path: Path) -> None:
    root = export_project(tmp_path)
    shutil.rmtree(root / "kernodeck")
    with pytest.raises(ConfigError, match=r"kernodeck==[^:]+: missing"):
        toolpins.hashed_file(load_project(root))
