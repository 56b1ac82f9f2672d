"""The verify runner started on the proof of the files its start reads (kernodeck/env/startfiles.py), before every file
of the env is proven, through real ``verify`` runs on the tiny project rebuilt with uv.

A ``.pth`` dropped into site-packages is not read by the waiting runner (``-S``): the runner starts while the rest is
checked, every file's proof names the ``.pth``, the runner is never given its word, and the ``.pth`` never runs. With a
loader variable set (``LD_LIBRARY_PATH`` may name a folder of the env: red-team pass 82, EARLY2) the runner waits for
every file's proof, and so never starts here. tests/e2e/test_redteam82_e2e.py holds the start files' own classes (a
``pyvenv.cfg`` naming a planted home; a planted library where ``LD_LIBRARY_PATH`` looks).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, write_wheel


def _dropped_pth(tmp_path: Path, **variables: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The tiny project rebuilt, then a ``.pth`` writing a marker dropped into the env's site-packages, then
    ``verify --no-rebuild`` with ``variables`` added to its environment: the run, the marker's path."""
    links = tmp_path / "links"
    project, plat = locked_tiny_project(tmp_path / "project", [pip_wheel(links), write_wheel(links, "tinya", "1.0")])
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    built = kd(project, "rebuild", "--installer", "uv", env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    marker = tmp_path / "ran"
    site = next((current_env(project, plat) / "lib").glob("python3.*/site-packages"))
    (site / "zz-dropped.pth").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).write_text('site ran')\n")
    return kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env={**env, **variables}), marker


def _runner_started(proc: subprocess.CompletedProcess[str]) -> bool:
    return any(line.startswith("$ ") and "runner.py" in line and "--wait" in line for line in proc.stderr.splitlines())


def test_a_dropped_pth_never_runs_though_the_runner_started_before_every_file_was_proven(tmp_path: Path) -> None:
    proc, marker = _dropped_pth(tmp_path)
    assert proc.returncode != 0 and "zz-dropped.pth" in proc.stderr, proc.stderr[-2000:]  # every file's proof
    assert _runner_started(proc), proc.stderr[-2000:]  # started on the start files' proof
    assert not marker.exists(), marker.read_text()  # never given its word: site never ran


def test_with_a_loader_variable_the_runner_waits_for_every_files_proof(tmp_path: Path) -> None:
    proc, marker = _dropped_pth(tmp_path, LD_LIBRARY_PATH=str(tmp_path / "no-such-folder"))
    assert proc.returncode != 0 and "zz-dropped.pth" in proc.stderr, proc.stderr[-2000:]
    assert not _runner_started(proc), proc.stderr[-2000:]  # every file's proof failed: never started
    assert not marker.exists(), marker.read_text()
