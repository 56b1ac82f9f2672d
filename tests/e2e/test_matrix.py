"""The CI matrix: every declared platform, as valid JSON GitHub Actions can expand."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from kernodeck.ci import matrix
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from tests.helpers.project import ROOT, copy_project, kd


def _declared(root: Path) -> list[dict[str, str]]:
    """The declared platforms read straight from pyproject.toml (not through kernodeck)."""
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return list(data["tool"]["kernodeck"]["platforms"])


def test_cli_lists_every_declared_platform_as_json(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    proc = kd(project, "matrix", "--out", str(tmp_path / "matrix.json"))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1, "one line, for $GITHUB_OUTPUT"
    printed = json.loads(proc.stdout)
    assert json.loads((tmp_path / "matrix.json").read_text(encoding="utf-8")) == printed
    declared = _declared(project)
    ids = [f"cp{p['python'].replace('.', '')}-{p['os-arch']}-{p['variant']}" for p in declared]
    assert [e["platform"] for e in printed["include"]] == ids
    data = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    variants = data["tool"]["kernodeck"]["variants"]
    for entry, plat in zip(printed["include"], declared, strict=True):
        assert entry["python"] == plat["python"] and entry["variant"] == plat["variant"]
        assert entry["runner"] == plat["runner"] and entry["backend"] == variants[plat["variant"]]["backend"]
        assert entry["runs_on"][-1] == plat["runner"]


def test_matrix_out_over_a_user_file_is_refused_and_its_tip_is_accepted(tmp_path: Path) -> None:
    """Red team (h11): --out over a user's notes.txt is refused, the file kept; the TIP's own --out then works (it
    named --out matrix.json, inside the project, which the same check refuses: a TIP that loops)."""
    project = copy_project(tmp_path / "project")
    notes = project / "notes.txt"
    notes.write_text("my notes\n", encoding="utf-8")
    proc = kd(project, "matrix", "--out", "notes.txt")
    assert proc.returncode == 2 and notes.read_text(encoding="utf-8") == "my notes\n", proc.stderr
    tip = next(line for line in proc.stderr.splitlines() if line.startswith("TIP: "))
    assert tip == "TIP: nox -s matrix -- --out runs/matrix.json", tip
    again = kd(project, "matrix", "--out", "runs/matrix.json")
    assert again.returncode == 0 and (project / "runs" / "matrix.json").is_file(), again.stderr
    assert kd(project, "matrix", "--out", "runs/matrix.json").returncode == 0  # its own file: replaced


def test_self_hosted_runners_carry_the_self_hosted_label_and_can_be_left_out() -> None:
    project = load_project(ROOT)
    full = matrix.build(project)
    hosted = [e for e in full["include"] if not e["self_hosted"]]
    for entry in full["include"]:
        if entry["runner"].startswith("self-hosted"):
            assert entry["self_hosted"] and entry["runs_on"] == ["self-hosted", entry["runner"]]
        else:
            assert not entry["self_hosted"] and entry["runs_on"] == [entry["runner"]]
    assert any(e["self_hosted"] for e in full["include"]), "the declared platforms include GPU runners"
    assert matrix.build(project, hosted_only=True)["include"] == hosted


def _with_platforms(tmp_path: Path, platforms: str) -> Path:
    project = copy_project(tmp_path / "project")
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8")
    head, sep, rest = text.partition("[[tool.kernodeck.platforms]]")
    assert sep, "pyproject.toml declares platforms"
    tail = rest[rest.index("\n[tool.", 0) :] if "\n[tool." in rest else ""
    pyproject.write_text(head + platforms + tail, encoding="utf-8")
    return project


def test_platform_without_runner_is_refused(tmp_path: Path) -> None:
    project = _with_platforms(
        tmp_path, '[[tool.kernodeck.platforms]]\npython = "3.11"\nos-arch = "linux_x86_64"\nvariant = "cpu"\n'
    )
    proc = kd(project, "matrix")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "ERROR: platform cp311-linux_x86_64-cpu has no runner label" in proc.stderr and "TIP:" in proc.stderr


def test_platform_declared_twice_is_refused(tmp_path: Path) -> None:
    entry = (
        '[[tool.kernodeck.platforms]]\npython = "3.11"\nos-arch = "linux_x86_64"\nvariant = "cpu"\n'
        'runner = "ubuntu-24.04"\n'
    )
    project = _with_platforms(tmp_path, entry + "\n" + entry)
    with pytest.raises(ConfigError, match="declared twice"):
        matrix.build(load_project(project))


def test_no_platforms_and_hosted_only_without_hosted_rows_are_refused(tmp_path: Path) -> None:
    project = _with_platforms(tmp_path / "none", "")
    with pytest.raises(ConfigError, match="declares no"):
        matrix.build(load_project(project))
    gpu_only = _with_platforms(
        tmp_path / "gpu",
        '[[tool.kernodeck.platforms]]\npython = "3.11"\n'
        'os-arch = "linux_x86_64"\nvariant = "cu130"\nrunner = "self-hosted-cuda"\n',
    )
    assert matrix.build(load_project(gpu_only))["include"][0]["runs_on"] == ["self-hosted", "self-hosted-cuda"]
    with pytest.raises(ConfigError, match=r"matrix would be empty: .*hosted runners only"):
        matrix.build(load_project(gpu_only), hosted_only=True)


def test_platforms_without_a_committed_lock_are_left_out_of_verify(capsys: pytest.CaptureFixture[str]) -> None:
    project = load_project(ROOT)
    every = [e["platform"] for e in matrix.build(project)["include"]]
    locked = [e["platform"] for e in matrix.build(project, locked_only=True)["include"]]
    unlocked = [p for p in every if not (project.lockfiles / f"{p}.txt").exists()]
    assert unlocked, "a declared platform without a committed lock (rocm64, locked on its runner)"
    assert locked == [p for p in every if p not in unlocked]
    assert f"left out {unlocked[0]}: no committed lock" in capsys.readouterr().err


def test_self_hosted_rows_only_for_the_runners_the_repository_declares() -> None:
    project = load_project(ROOT)
    every = matrix.build(project)["include"]
    gpu = [e for e in every if e["self_hosted"]]
    assert len(gpu) >= 2
    none_declared = matrix.build(project, runners=matrix.parse_runners(""))["include"]
    assert none_declared == [e for e in every if not e["self_hosted"]]
    one = matrix.build(project, runners=matrix.parse_runners(f" {gpu[0]['runner']}, other-label "))["include"]
    # every platform on that runner (one label can serve several Pythons), and none on another
    assert [e for e in one if e["self_hosted"]] == [e for e in gpu if e["runner"] == gpu[0]["runner"]]
    assert len({e["runner"] for e in gpu}) > 1
    assert matrix.build(project, runners=None)["include"] == every  # not given: every row, as before
    assert matrix.parse_runners(None) is None


def test_matrix_cli_takes_the_filters(tmp_path: Path) -> None:
    project = copy_project(tmp_path / "project")
    proc = kd(project, "matrix", "--locked-only", "--self-hosted-runners", "")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["include"]
    assert rows and not any(e["self_hosted"] for e in rows)
    assert "left out" in proc.stderr
