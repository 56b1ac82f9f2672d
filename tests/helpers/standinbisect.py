"""A bisect with its env builds and in-env steps stood in for: the tiny locks it bisects between
(tests/unit/test_bisect.py's trials too), and a bisect run to its end in its --out folder (red-team passes 39-41's
findings on what the bisect signs as its own)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from tests.helpers.project import ROOT

PLATFORM = "cp311-linux_x86_64-cpu"


def holding() -> Any:
    """A trial's drift that holds: its one output within tolerance, no criterion, no failure (a real relock.Drift)."""
    from kernodeck.upgrade.relock import Drift, OutputDrift

    return Drift((OutputDrift("values", "allclose", True, 0.0, None, None, "<= 1e-06", "equal"),), None, "")


def tiny_lock(tmp: Path, name: str, versions: dict[str, str]) -> lockfile.Lockfile:
    """A lock of ``versions`` (name: version) for PLATFORM, written as ``tmp/name`` with made-up hashes (no wheel
    behind them: the env builds are stood in for), read back."""
    body = "".join(f"{n}=={v} \\\n    --hash=sha256:{v.replace('.', '') * 32}\n" for n, v in sorted(versions.items()))
    path = tmp / name
    path.write_text(lockfile.render([("platform", PLATFORM)], body), encoding="utf-8")
    return lockfile.read(path, require_header=False)


def finished_bisect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    during: Callable[[Path, Path], None] | None = None,
                    record_steps: bool = False) -> tuple[Any, Any, Path]:
    """A bisect of two packages run to its end in its --out folder (bisect._folder, _Trials, _bisect), the env builds
    and the in-env steps stood in for: its project, platform and folder. In each trial's checks, with
    ``record_steps``, the trial's step record is written (``steps/record.md``, as the runner's), then
    ``during(bisect_folder, trial_folder)`` is called (the user, while the bisect runs)."""
    from kernodeck.env import rebuild as rebuilding
    from kernodeck.lock import lockdiff
    from kernodeck.project.platforms import resolve_platform
    from kernodeck.upgrade import bisect as bisecting
    from kernodeck.upgrade.relock import Drift

    project = dataclasses.replace(load_project(ROOT), venv_root=tmp_path / "venvs", runs=tmp_path / "runs")
    plat = resolve_platform(project, PLATFORM)
    good = tiny_lock(tmp_path, "good.txt", {"a": "1.0", "b": "1.0"})
    bad = tiny_lock(tmp_path, "bad.txt", {"a": "2.0", "b": "2.0"})
    d = lockdiff.diff(good, bad)

    def envs(project: Any, plat: Any, lock_path: Path, **kw: Any) -> SimpleNamespace:
        env = project.venv_root / "env"
        env.mkdir(parents=True, exist_ok=True)
        return SimpleNamespace(python=env / "bin" / "python", reused=not kw["fresh"])

    def checks(self: Any, python: Path, folder: Path) -> list[Any]:
        if record_steps:
            (folder / "steps").mkdir(parents=True, exist_ok=True)
            (folder / "steps" / "record.md").write_text(f"the steps of {folder.name}\n", encoding="utf-8")
        if during is not None:
            during(self.folder, folder)
        return []

    monkeypatch.setattr(rebuilding, "rebuild", envs)
    monkeypatch.setattr(bisecting._Trials, "checks", checks)
    monkeypatch.setattr(bisecting._Trials, "regroup", lambda self, python: None)
    monkeypatch.setattr(Drift, "from_steps", classmethod(lambda cls, steps: holding()))
    folder = bisecting._folder(project, plat, tmp_path / "runs" / "bisect")
    trials = bisecting._Trials(project, plat, good, bad, d.changes, "sha256:none", folder, {}, None)
    try:
        bisecting._bisect(trials, d, plat, folder)
    finally:
        trials.close()
    return project, plat, folder
