"""The one run builder (kernodeck/verify/runbuild.py): each caller's runner configuration is verify's except for the
changes it declares; a caller that drops a setting (resume, determinism, the in-env inputs) is caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernodeck.env import start
from kernodeck.measure import tolerance_search, variations
from kernodeck.project.config import Project, load_project
from kernodeck.project.deadlines import Deadlines
from kernodeck.project.platforms import resolve_platform
from kernodeck.runformat import manifest
from kernodeck.upgrade import bisect, relock
from kernodeck.verify import context, runbuild
from kernodeck.verify.context import Options
from kernodeck.verify.pipeline import Run
from kernodeck.verify.steps import declared

ROOT = Path(__file__).resolve().parents[2]
PLATFORM = "cp311-linux_x86_64-cpu"


@pytest.fixture(scope="module")
def project() -> Project:
    """This repository's project, declaring a resume and a determinism setting (so that dropping them shows)."""
    found = load_project(ROOT)
    tool = {**found.tool, "resume": {"steps": 9, "checkpoint-at": 4}, "determinism": {"max-records": 7}}
    return dataclasses.replace(found, tool=tool)


def _verify(project: Project, tmp: Path, opts: Options, mode: str = "verify") -> dict[str, Any]:
    """verify's own runner configuration (the reference-manifest step's), for these options and mode."""
    plat = resolve_platform(project, PLATFORM)
    ctx = context.load(project, plat, opts, mode=mode, staging=tmp, names=())
    return declared.runner_config(ctx, Run(project, plat, tmp))


def _calibrate(project: Project, tmp: Path) -> list[dict[str, Any]]:
    """What calibrate hands each variation's process: its base configuration, through ``run_all``."""
    seen: list[dict[str, Any]] = []

    def run_in_env(python: Path, folder: Path, config: dict[str, Any], variation: variations.Variation,
                   limits: Deadlines) -> tuple[int, float, str, None]:
        seen.append(config)
        return 1, 0.0, "not run (the test)", None

    base = tolerance_search.base_config(project, manifest.load(project), "cpu")
    plan = variations.plan({"avx2", "fma"}, 2, "cpu", "x86_64")
    mp = pytest.MonkeyPatch()
    mp.setattr(variations, "run_in_env", run_in_env)
    try:
        variations.run_all(tmp / "python", tmp, base, plan, tmp / "margins.json", Deadlines())
    finally:
        mp.undo()
    return seen


Config = Callable[[Project, Path], list[dict[str, Any]]]
CALLERS: list[tuple[str, Config, runbuild.Changes]] = [
    ("verify", lambda p, t: [_verify(p, t, Options())], runbuild.Changes()),
    ("verify --allow-code-change", lambda p, t: [_verify(p, t, Options(allow_code_change=True))],
     declared.changes(Options(allow_code_change=True), "verify")),
    ("bench (extra config)", lambda p, t: [_verify(p, t, Options(extra_config={"sample_repeat": 3}))],
     declared.changes(Options(extra_config={"sample_repeat": 3}), "verify")),
    ("reference", lambda p, t: [_verify(p, t, Options(), mode="reference")], declared.changes(Options(), "reference")),
    ("upgrade", lambda p, t: [_verify(p, t, relock.verify_options(t / "upgrade", None))],
     declared.changes(relock.verify_options(Path("upgrade"), None), "verify")),
    ("bisect", lambda p, t: [bisect.trial_config(p, manifest.load(p), "cpu")], bisect.CHANGES),
    ("calibrate", _calibrate, tolerance_search.CHANGES),
]


def undeclared(config: dict[str, Any], verify: dict[str, Any], changes: runbuild.Changes) -> set[str]:
    """The top-level keys where a caller's configuration differs from verify's (a key missing from one counts)
    without declaring it."""
    missing = object()
    differ = {k for k in config.keys() | verify.keys() if config.get(k, missing) != verify.get(k, missing)}
    return differ - changes.keys() - runbuild.WHO


SESSIONS = {"verify": "verify", "verify --allow-code-change": "verify", "bench (extra config)": "verify",
            "reference": "reference", "upgrade": "upgrade", "bisect": "bisect", "calibrate": "calibrate"}


@pytest.mark.parametrize(("caller", "made"), [c[:2] for c in CALLERS], ids=[c[0] for c in CALLERS])
def test_each_caller_names_its_own_session(project: Project, tmp_path: Path, caller: str, made: Config) -> None:
    """The session the in-env TIPs name to run it again (red-team pass 38, MSG3): the caller's own."""
    assert {config["session"] for config in made(project, tmp_path)} == {SESSIONS[caller]}


@pytest.mark.parametrize(("caller", "made", "changes"), CALLERS, ids=[c[0] for c in CALLERS])
def test_each_caller_runs_with_verifys_configuration_but_for_what_it_declares(
    project: Project, tmp_path: Path, caller: str, made: Config, changes: runbuild.Changes
) -> None:
    verify = _verify(project, tmp_path, Options())
    assert verify["resume"] == {"steps": 9, "checkpoint_at": 4, "gpu_tolerance": 1e-5}  # the settings compared
    assert verify["determinism_records"] == 7 and verify["mode"] == "verify" and verify["inenv_sha256"]
    configs = made(project, tmp_path)
    assert configs, caller
    for config in configs:
        assert undeclared(config, verify, changes) == set(), caller


def test_calibrate_reaches_every_available_variation(project: Project, tmp_path: Path) -> None:
    """The table's calibrate row sees each process calibrate starts, each with its variation."""
    configs = _calibrate(project, tmp_path)
    available = [v for v in variations.plan({"avx2", "fma"}, 2, "cpu", "x86_64") if v.available]
    assert [c["variation"]["name"] for c in configs] == [v.name for v in available]
    assert "margin_file" in configs[0] and all("margin_file" not in c for c in configs[1:])


def test_a_caller_that_drops_a_setting_is_caught(project: Project, tmp_path: Path) -> None:
    """The run builders this one replaced: calibrate's and bisect's configuration left out the resume and
    determinism settings, and a changed key nobody declared is caught as well."""
    verify = _verify(project, tmp_path, Options())
    ref = manifest.load(project)
    app = context.declaration(project).application()
    old = {**ref.run_config(project, app), "project_root": str(project.root), "mode": "verify",
           "expect_backend": "cpu", "libraries": start.declared_libraries(project.tool),
           "variables": start.declared_variables(project.tool)}
    runbuild.add_in_env_inputs(old, project.root, app)
    assert undeclared(old, verify, bisect.CHANGES) == {"resume", "determinism_records", "allow_code_change",
                                                       "settings_cost"}
    assert undeclared({**verify, "expect_backend": "cuda"}, verify, tolerance_search.CHANGES) == {"expect_backend"}
    # a declared change covers its own keys only
    assert undeclared({**verify, "variation": {}}, verify, tolerance_search.CHANGES) == set()
    assert undeclared({**verify, "variation": {}}, verify, bisect.CHANGES) == {"variation"}


@pytest.mark.parametrize("change", list(runbuild.Change))
def test_every_change_names_the_keys_it_touches(change: runbuild.Change) -> None:
    keys = change.keys({"sample_repeat": 3})
    assert keys and all(isinstance(k, str) for k in keys)


def test_a_run_against_the_reference_needs_one(project: Project) -> None:
    with pytest.raises(ValueError, match="needs the reference"):
        runbuild.runner_config(project, context.declaration(project), None, "cpu")
