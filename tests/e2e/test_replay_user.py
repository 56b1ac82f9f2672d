"""`nox -s replay` in a user's project (one `kernodeck init` made): the clean clone's tools venv gets the project's
own pinned run group (``kernodeck-run``) and Kernodeck from ``$KERNODECK_SOURCE`` (or the installed version), since a
user's clone holds no ``kernodeck/`` and no ``run`` group. The replay keeps its machine with no package configuration:
the locked torch file comes only from the ``KERNODECK_INDEX_CPU`` mirror (tests/helpers/fresh.py).
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from kernodeck import noxsessions
from kernodeck.dossier.replay import kernodeck_install
from kernodeck.errors import KernodeckError
from tests.helpers.fresh import LocalIndex, fresh_env, run_nox, torch_file
from tests.helpers.project import ROOT

# A user's project: examples/regression (scaffolded by `kernodeck init`, then edited). The replay's subject is the clean
# clone's tools venv and its package sources, the same for every application: the regression's verify costs a third
# of the digits one (no resume-application step, whose training runs twice plus one run per dropped state).
EXAMPLE = ROOT / "examples" / "regression"
LEFT_BEHIND = shutil.ignore_patterns(".nox", ".venv-rebuild", "runs", "__pycache__", ".wheelhouse")


def test_tool_groups_are_the_projects_own() -> None:
    user = {"dependency-groups": {"kernodeck-run": ["uv==0.13.9"], "run": ["something-else==1"]}}
    assert noxsessions.tool_groups(user)["run"] == "kernodeck-run"  # a user's own `run` group is not Kernodeck's
    own = {"dependency-groups": {"run": ["uv==0.13.9"], "lock": []}}
    assert noxsessions.tool_groups(own) == noxsessions.OWN_GROUPS
    assert noxsessions.tool_groups({}) == noxsessions.GROUPS  # nothing pinned: the names init writes (then an error)


def test_replay_installs_the_kernodeck_the_session_names(tmp_path: Path) -> None:
    assert kernodeck_install({"KERNODECK_SOURCE": str(tmp_path)}) == ["--no-deps", "--force-reinstall", str(tmp_path)]
    assert kernodeck_install({"KERNODECK_SOURCE": "kernodeck==9.9"}) == ["kernodeck==9.9"]
    try:
        installed = importlib.metadata.version("kernodeck")
    except importlib.metadata.PackageNotFoundError:
        with pytest.raises(KernodeckError, match="not installed as a package") as info:
            kernodeck_install({})
        assert "KERNODECK_SOURCE" in info.value.tip
    else:
        assert kernodeck_install({}) == [f"kernodeck=={installed}"]


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args], cwd=project,
                   check=True, capture_output=True)


@pytest.mark.slow
@pytest.mark.network
def test_replay_of_a_user_project_passes(tmp_path: Path) -> None:
    """examples/regression committed into a fresh repository: `nox -s replay` passes from its clean clone; without the
    pinned run group the replay stops with one ERROR naming it."""
    project = tmp_path / "regression"
    shutil.copytree(EXAMPLE, project, ignore=LEFT_BEHIND)
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "regression")
    source = tmp_path / "kernodeck-source"  # this checkout's distribution files, so nothing is built inside it
    source.mkdir()
    shutil.copytree(ROOT / "kernodeck", source / "kernodeck", ignore=LEFT_BEHIND)
    for item in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / item, source / item)

    mirror = LocalIndex([torch_file(tmp_path, EXAMPLE / "lockfiles")])
    with mirror.serving():
        env = fresh_env(tmp_path / "home", KERNODECK_INDEX_CPU=mirror.url, KERNODECK_SOURCE=str(source))
        proc = run_nox(project, env, "-s", "replay", "--", "--out", str(tmp_path / "replayed"), timeout=1500)
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
        replayed = json.loads((tmp_path / "replayed" / "replay.json").read_text(encoding="utf-8"))
        assert replayed["status"] == "passed" and replayed["mirrors"] == ["KERNODECK_INDEX_CPU"], replayed
        assert any(r.startswith("/files/torch-") for r in mirror.requests)  # the clean clone's torch: the mirror's

        # Negative control: the same project without its pinned run group (run by the session venv's Kernodeck, as
        # the nox session itself refuses such a project before the replay starts).
        pyproject = project / "pyproject.toml"
        text = pyproject.read_text(encoding="utf-8")
        pyproject.write_text(text.replace("kernodeck-run", "kernodeck-tools"), encoding="utf-8")
        _git(project, "commit", "-q", "-am", "no run group")
        python = project / ".nox" / "replay" / "bin" / "python"
        failed = subprocess.run([str(python), "-m", "kernodeck", "replay", "--out", str(tmp_path / "neg")],
                                cwd=project, env=env, text=True, capture_output=True, timeout=600, check=False)
    out = failed.stdout + failed.stderr
    assert failed.returncode != 0, out[-3000:]
    error = next(line for line in out.splitlines() if line.startswith("ERROR:"))
    assert "[dependency-groups] kernodeck-run" in error, error
