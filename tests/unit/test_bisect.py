"""The bisect's trials (kernodeck/upgrade/bisect.py) and their envs: a rebuilt trial's env is kept for a later trial of
the same lock, which runs in it only when rebuild's reuse check accepts it (``reused``); the last KEEP stay, the
others and, at the end, all are removed. The env build and the in-env steps are stood in for: what is under test is
which env each trial asks for and what its record says."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck.env import rebuild as rebuilding
from kernodeck.lock import lockdiff
from kernodeck.project.config import Project, load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade import bisect as bisecting
from kernodeck.upgrade.relock import Drift
from tests.helpers.standinbisect import PLATFORM, holding, tiny_lock

ROOT = Path(__file__).resolve().parents[2]


class _Envs:
    """rebuild stood in for: each call's venv root and flags; ``accept``: whether a kept env passes the reuse check."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, bool, bool]] = []
        self.accept = True

    def __call__(self, project: Project, plat: Any, lock_path: Path, **kw: Any) -> SimpleNamespace:
        env = project.venv_root / "env"
        reused = not kw["fresh"] and env.is_dir() and self.accept
        self.calls.append((project.venv_root, kw["fresh"], kw["observe_reused"]))
        env.mkdir(parents=True, exist_ok=True)
        return SimpleNamespace(python=env / "bin" / "python", reused=reused)


@pytest.fixture
def trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[bisecting._Trials, _Envs]:
    project = dataclasses.replace(load_project(ROOT), venv_root=tmp_path / "venvs", runs=tmp_path / "runs")
    plat = resolve_platform(project, PLATFORM)
    good = tiny_lock(tmp_path, "good.txt", {"a": "1.0", "b": "1.0", "c": "1.0"})
    bad = tiny_lock(tmp_path, "bad.txt", {"a": "2.0", "b": "2.0", "c": "2.0"})
    changes = lockdiff.diff(good, bad).changes
    envs = _Envs()
    monkeypatch.setattr(rebuilding, "rebuild", envs)
    monkeypatch.setattr(bisecting._Trials, "checks", lambda self, python, folder: [])
    monkeypatch.setattr(Drift, "from_steps", classmethod(lambda cls, steps: holding()))
    folder = tmp_path / "runs" / "bisect"
    folder.mkdir(parents=True)
    return bisecting._Trials(project, plat, good, bad, changes, "sha256:none", folder, {}, None), envs


def test_a_repeat_runs_in_its_trials_kept_env(trials: tuple[bisecting._Trials, _Envs]) -> None:
    t, envs = trials
    t.probe(frozenset({0}))
    t.probe(frozenset({0}))
    first, again = t.records
    assert envs.calls[0] == (t.folder / "try-01" / "venv", True, False)  # built fresh
    assert envs.calls[1] == (t.folder / "try-01" / "venv", False, True)  # try-01's env, observed against the lock
    assert first.rebuilt and first.env_of is None
    assert not again.rebuilt and again.env_of == 1 and again.repeat_of == 1
    assert not (t.folder / "try-02" / "venv").exists()
    t.close()
    assert not (t.folder / "try-01" / "venv").exists() and not t.kept


def test_a_kept_env_the_reuse_check_refuses_is_rebuilt(trials: tuple[bisecting._Trials, _Envs]) -> None:
    t, envs = trials
    t.probe(frozenset({0}))
    envs.accept = False  # e.g. a file of try-01's env changed since its build: rebuild builds it again
    t.probe(frozenset({0}))
    again = t.records[1]
    assert envs.calls[1] == (t.folder / "try-01" / "venv", False, True)
    assert again.rebuilt and again.env_of is None and again.repeat_of == 1
    envs.accept = True
    t.probe(frozenset({0}))  # the env try-02 built (in place of try-01's), kept as its own
    assert t.records[2].env_of == 2


def test_another_lock_never_runs_in_a_kept_env_and_only_the_last_two_stay(
        trials: tuple[bisecting._Trials, _Envs]) -> None:
    t, envs = trials
    for subset in ({0}, {1}, {0, 1}):
        t.probe(frozenset(subset))
    assert [fresh for _, fresh, _ in envs.calls] == [True, True, True]
    assert all(r.rebuilt and r.env_of is None for r in t.records)
    kept = sorted(p.parent.name for p in t.folder.glob("try-*/venv"))
    assert bisecting.KEEP == 2 and kept == ["try-02", "try-03"]  # try-01's env removed when try-03's was kept
    t.probe(frozenset({0}))  # try-01's lock again: its env is gone, so rebuilt
    assert envs.calls[-1] == (t.folder / "try-04" / "venv", True, False) and t.records[-1].env_of is None
