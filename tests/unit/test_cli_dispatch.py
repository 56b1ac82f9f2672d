"""Relative paths given to any path option are the caller's: made absolute from the folder the command was run in
(nox's invocation folder through a session), before anything changes folder."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.cli.dispatch import CALLER_ENV, build_parser, caller_folder, from_caller
from kernodeck.errors import UsageError
from tests.helpers.project import copy_project, kd


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_path_option_of_every_command_is_taken_from_the_callers_folder(tmp_path: Path) -> None:
    seen = 0
    for name, sub in _subparsers(build_parser()).items():
        for action in sub._actions:
            if action.type is not Path and action.dest != "python":
                continue
            value: object = Path("rel/x") if action.type is Path else "rel/bin/python"
            if action.nargs in ("+", "*"):
                value = [Path("rel/a"), Path("rel/b")]
            args = from_caller(argparse.Namespace(command=name, **{action.dest: value}), tmp_path)
            got = getattr(args, action.dest)
            for item in got if isinstance(got, list) else [got]:
                assert Path(item).is_absolute() and str(item).startswith(str(tmp_path)), (name, action.dest, got)
            seen += 1
    assert seen >= 25, seen  # --out of most commands, --wheelhouse, --python, compare's A B, drift's dossiers, ...


def test_absolute_paths_and_a_bare_interpreter_name_are_left_as_given(tmp_path: Path) -> None:
    args = build_parser().parse_args(["verify", "--python", "python3", "--out", "/abs/run"])
    args = from_caller(args, tmp_path)
    assert args.python == "python3" and args.out == Path("/abs/run")
    args = from_caller(build_parser().parse_args(["verify", "--python", "env/bin/python"]), tmp_path)
    assert args.python == str(tmp_path / "env" / "bin" / "python")


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_python_is_refused_not_ignored(tmp_path: Path, value: str) -> None:
    """`verify --python ''` (an unset variable in a script) started a full verify of the env instead."""
    args = build_parser().parse_args(["verify", "--python", value])
    with pytest.raises(UsageError, match="--python needs an interpreter") as caught:
        from_caller(args, tmp_path)
    assert "kernodeck verify:" in str(caught.value) and caught.value.tip
    done = subprocess.run([sys.executable, "-m", "kernodeck", "verify", "--python", value], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode != 0 and "ERROR: kernodeck verify: --python needs" in done.stderr, done.stderr
    assert "TIP:" in done.stderr and "Traceback" not in done.stderr


def test_the_caller_is_the_sessions_invocation_folder_else_this_process(tmp_path: Path) -> None:
    assert caller_folder({CALLER_ENV: str(tmp_path)}) == tmp_path
    assert caller_folder({}) == Path.cwd()


def _venv(folder: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True, capture_output=True,
                   timeout=300)


def test_a_relative_python_is_the_callers_and_a_missing_one_is_named_in_the_tip(tmp_path: Path) -> None:
    """`verify --python REL` ran its in-env runner in the dossier's staging folder, where REL is not: the issue's
    `No such file or directory` with a rebuild TIP. A relative path is now the caller's, and a missing one is named."""
    project = copy_project(tmp_path / "project")
    for lock in (project / "lockfiles").iterdir():
        lock.unlink()
    subprocess.run(["git", "init", "--quiet", str(project)], check=True, capture_output=True)
    caller = tmp_path / "caller"
    _venv(caller / "env")  # no torch: the in-env checks fail, but they start
    env = {**os.environ, CALLER_ENV: str(caller)}
    proc = kd(project, "verify", "--python", "env/bin/python", "--out", str(tmp_path / "run"), env=env)
    assert "No such file or directory" not in proc.stderr, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    steps = {s["name"]: s["status"] for s in report["steps"]}
    assert steps["rebuild"] == "skipped" and steps["settings"] != "not-run", steps
    proc = kd(project, "verify", "--python", "missing/bin/python", "--out", str(tmp_path / "run2"), env=env)
    assert proc.returncode == 2, proc.stderr[-3000:]
    tip = next(line for line in proc.stderr.splitlines() if line.startswith("TIP:"))
    assert str(caller / "missing" / "bin" / "python") in tip and "rebuild" not in tip, tip
    # Negative control: the same relative path read from the project's folder (no caller folder given) is not there.
    plain = {k: v for k, v in env.items() if k != CALLER_ENV}
    proc = kd(project, "verify", "--python", "env/bin/python", "--out", str(tmp_path / "run3"), env=plain)
    assert proc.returncode == 2 and str(project / "env" / "bin" / "python") in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("session_file", ["kernodeck/noxsessions.py"])
def test_the_sessions_hand_the_invocation_folder_on(session_file: str) -> None:
    from kernodeck import noxsessions

    assert noxsessions.CALLER_ENV == CALLER_ENV
    text = (Path(__file__).parents[2] / session_file).read_text(encoding="utf-8")
    assert "env[CALLER_ENV] = str(session.invoked_from)" in text
