"""The upgrade (kernodeck/upgrade/relock.py): its drift table, read from a report's steps (per output numbers
against the tolerance, the verdict); a declared resolution date moved, and put back when the relock fails."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernodeck.lock import compile as lock_compile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade.relock import Drift, render_drift
from tests.helpers.tinylock import declare_as_of, offline_sources, tiny_project, tiny_wheels


def _steps(outputs: dict[str, dict[str, Any]], *, criterion: bool | None = True,
           failed: str = "") -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [{"name": "lock-check", "status": "passed"}]
    if failed:
        return [*steps, {"name": failed, "status": "failed", "error": "install failed: no matching distribution"},
                {"name": "compare", "status": "not-run"}]
    passed = all(o["passed"] for o in outputs.values())
    steps.append({"name": "compare", "status": "passed" if passed else "failed", "details": {"outputs": outputs}})
    if criterion is not None:
        steps.append({"name": "criterion", "status": "passed" if criterion else "failed",
                      "details": {"passed": criterion, "summary": "accuracy 0.97 (needs >= 0.9)"}})
    return steps


COSINE_OK = {"kind": "cosine", "passed": True, "min_cosine": 0.99999999, "max_abs": 3.2e-7,
             "cosine_min_allowed": 0.9999, "max_abs_allowed": 1e-4, "summary": "min cosine 1.0"}
ALLCLOSE_BAD = {"kind": "allclose", "passed": False, "max_abs": 0.5, "rtol": 1e-3, "atol": 1e-3,
                "summary": "12 values in 3 rows exceed"}
AGREE_OK = {"kind": "agreement", "passed": True, "equal_share": 0.995, "min_share_allowed": 0.99, "summary": "ok"}


def test_every_output_within_and_the_criterion_holding_is_a_pass() -> None:
    drift = Drift.from_steps(_steps({"embeddings": COSINE_OK, "labels": AGREE_OK}))
    assert drift.holds
    text = render_drift(drift)
    assert "| embeddings | cosine | 3.2e-07 | 0.999999990 | — | cosine >= 0.9999, max abs <= 0.0001 | yes |" in text
    assert "| labels | agreement | — | — | 0.9950 | agreement >= 0.99 | yes |" in text
    assert "Criterion: holds (accuracy 0.97 (needs >= 0.9))" in text
    assert "Verdict: the criterion still holds" in text


def test_one_output_out_of_tolerance_fails_and_is_named() -> None:
    drift = Drift.from_steps(_steps({"embeddings": COSINE_OK, "logits": ALLCLOSE_BAD}))
    assert not drift.holds
    text = render_drift(drift)
    assert "| logits | allclose | 0.5 | — | — | abs(a-b) <= 0.001 + 0.001*abs(ref) | **NO** |" in text
    assert "**out of tolerance: the outputs (or the criterion) moved beyond it**" in text


def test_a_failing_criterion_fails_even_within_tolerance() -> None:
    drift = Drift.from_steps(_steps({"embeddings": COSINE_OK}, criterion=False))
    assert not drift.holds and "does not hold" in render_drift(drift)


def test_a_run_that_stopped_before_compare_is_not_a_pass() -> None:
    drift = Drift.from_steps(_steps({}, failed="rebuild"))
    assert not drift.holds
    assert drift.failure == "rebuild: install failed: no matching distribution"
    assert "Not compared: rebuild" in render_drift(drift)
    assert "**not verified: rebuild failed before the outputs were compared**" in render_drift(drift)
    assert not Drift.from_steps([{"name": "lock-check", "status": "passed"}]).holds  # nothing compared: no pass


def test_a_pipe_in_a_cell_is_escaped_so_the_table_keeps_its_columns() -> None:
    from kernodeck.upgrade.relock import cell

    assert cell("first 'r0'; |ref| * 1e-6\nmore") == "first 'r0'; \\|ref\\| * 1e-6 more"
    row = render_drift(Drift.from_steps(_steps({"logits": ALLCLOSE_BAD}))).splitlines()[4]
    assert row.replace("\\|", "").count("|") == 8  # 7 columns


@pytest.fixture
def wheels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, folder, tmp_path / "cache")
    return folder


def test_upgrade_moves_a_declared_date_and_puts_it_back_when_the_relock_fails(
        tmp_path: Path, wheels: Path) -> None:
    from kernodeck.errors import KernodeckError
    from kernodeck.upgrade import relock as upgrade

    root = tiny_project(tmp_path / "p")
    declare_as_of(root, "2021-03-04")
    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver="uv")
    lock_before, pyproject_before = target.read_bytes(), (root / "pyproject.toml").read_text(encoding="utf-8")
    # A relock to another date writes the new date where the project declares one, the old file kept.
    kept = tmp_path / "kept"
    kept.mkdir()
    upgrade._keep_declared_date(proj, "2022-01-01", kept)
    assert load_project(root).resolve_as_of == "2022-01-01"
    assert (kept / "pyproject.toml").read_text(encoding="utf-8") == pyproject_before
    (root / "pyproject.toml").write_text(pyproject_before, encoding="utf-8")
    # When the relock fails (its only source emptied), the declared date goes back and the lock is untouched.
    for wheel in wheels.glob("*.whl"):
        wheel.unlink()
    with pytest.raises(KernodeckError):
        upgrade.upgrade(load_project(root), plat, as_of="2022-01-01")
    assert (root / "pyproject.toml").read_text(encoding="utf-8") == pyproject_before
    assert target.read_bytes() == lock_before
    folder = next((root / "runs").glob("upgrade-*"))
    assert (folder / "old" / target.name).read_bytes() == lock_before
    with pytest.raises(KernodeckError, match="not empty"):  # an upgrade's folder is never reused: its old/ is kept
        upgrade.upgrade(load_project(root), plat, out=folder)
