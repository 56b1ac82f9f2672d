"""Red-team pass 61 (notes: /work/notes/redteam61.md): pass 60's fixes (e3a1117: DRIFT2 record.UNREPORTED, MARKER1
wheelhouse.marker_environment(plat, full_version), COMPILE1 installenv._WHERE + --no-compile-bytecode) attacked by
class, in real commands on a fresh clone: DRIFT3, STOP2, MARKER2, UVCONF1.

DRIFT3 (the orchestrator's mark "this step never reported" written in the application's namespace;
kernodeck/verify/record.py ``reported``, read by kernodeck/upgrade/relock.py ``Drift.from_steps``): a step's record is
the orchestrator's when its ``details`` hold a key ``stopped`` or ``ended``. The criterion step's details ARE the
criterion's answer, as the application returned it (inenv/judge.py ``_answered``: every key kept). Measured (real
``verify --no-rebuild --allow-code-change`` of the tiny application, its criterion returning ``{'passed': False,
'summary': 'accuracy 0.12', 'stopped': 'early stop at epoch 3'}``, or ``'ended': '2026-12-04T20:00:00Z'``):
report.json's criterion record ``layer comparison``, ``error "criterion failed: accuracy 0.12"``, details with the
key; ``Drift.from_steps``: NOT VERIFIED, criterion None, failure "criterion: criterion failed: accuracy 0.12"; the same
answer with the key named ``at``: OUT OF TOLERANCE. A criterion that answered no is read as one that never answered:
upgrade exits 3 (no bisect in the relock workflow, which bisects on 1), the pull request's row says NOT VERIFIED; in a
bisect such a trial is FAILED and rerun. Module: verify/record.py (``reported``). Fix idea by class: the mark of
provenance lives where only the orchestrator writes (a field of the step record, or a details key the in-env side
refuses or nests the answer away from), never in a dict the application fills.

STOP2 (a stopped step's record taken from whichever file exists; kernodeck/verify/steps/in_env.py ``run_checks``):
the supervisor stops the in-env group with SIGTERM (a stall, a deadline, the user's Ctrl-C). An application that
handles SIGTERM itself (``signal.signal(SIGTERM, lambda s, f: sys.exit(143))``, a graceful-exit idiom) turns the stop
into its step's own failure, written before the group is killed; ``run_checks`` takes that file, never
``stopped_step``: no ``stopped`` detail, no stacks named, and for an interruption no ``meta.interrupted``. Measured
(real verify of the tiny application, the criterion installing that handler then sleeping): stalled (stall 30 s):
``criterion: FAILED (30.46s) - the criterion ended: the application called sys.exit(143)``, report ``failed``,
Drift OUT OF TOLERANCE; SIGINT to Kernodeck 3 s into the criterion: "SIGINT received: taking the stacks and stopping
the run", then the same record, report ``failed`` (not ``interrupted``), exit 1 (not 130), Drift OUT OF TOLERANCE.
Control (the same criterion without the handler): report ``interrupted``, details ``stopped: interrupted``, Drift NOT
VERIFIED. So upgrade writes upgrade.json OUT OF TOLERANCE and returns 1 (never raises Interrupted: the user's cancel
is lost, the relock workflow bisects), a bisect trial is BAD, never rerun, and the bisect goes on to the next trial
after the user's Ctrl-C. Module: verify/steps/in_env.py (``run_checks``). Fix idea by class: when the supervisor
stopped the process, the step it stopped (``Stopped.step``) is recorded as stopped whatever it wrote after the stop
(its own record kept beside, as a note), and an interruption always marks the run.

MARKER2 (the env's marker values still partly Kernodeck's; MARKER1's fix by class): ``marker_environment(plat,
full_version)`` keeps Kernodeck's own ``implementation_version`` (and the other keys of the interpreter running it),
and verify's inventory step calls it without the env's version (``python_full_version`` then "3.11.0" when Kernodeck
runs on 3.12, Kernodeck's own 3.11.x when on 3.11). Measured (real ``rebuild --installer uv`` then ``verify
--no-rebuild`` of a tiny lock, Kernodeck on pyenv's 3.12.1, the base found 3.11.7): a pin ``tinyb==2.0 ;
python_full_version >= "3.11.1"``: rebuild exit 0 (promoted), verify ``inventory: FAILED - the environment's observed
inventory differs from the lock: +tinyb==2.0``, TIP ``nox -s rebuild -- --fresh`` (which rebuilds the same env); a pin
``; implementation_version < "3.12"``: rebuild exit 2 ``the installed env is not the lock's (+tinyb==2.0): an
installer option of this machine sent the install elsewhere``, TIP ``pip config list`` (MARKER1's symptom). Control:
Kernodeck on 3.11: both pass. Modules: verify/steps/inventory_check.py, env/wheelhouse.py (``marker_environment``).
Fix idea by class: the env's marker values taken once from the env's own interpreter (packaging's
``default_environment()`` run in it, recorded with the build) and used by rebuild, reuse and verify alike.

UVCONF1 (uv's configuration files reach what rebuild's install writes; kernodeck/env/rebuild.py ``_Build.install``):
COMPILE1's fix drops UV_* variables, but uv also reads ``$UV_CONFIG_FILE``, ``~/.config/uv/uv.toml``, ``/etc/uv``,
and the nearest ``uv.toml`` or ``pyproject.toml`` with ``[tool.uv]`` from the project root upwards (the lock runs with
UV_NO_CONFIG; the install does not). ``[pip] python-platform = "aarch64-apple-darwin"`` makes uv pick another
platform's wheel among the lock's hashes (a real lock lists every platform's: 72 for numpy). Measured (real ``rebuild
--installer uv`` of a tiny lock whose pin ``tinyc==1.0`` has a manylinux_2_17_x86_64 and a macosx_11_0_arm64 wheel):
plain: the manylinux wheel; with the setting in a uv.toml named by UV_CONFIG_FILE, in the project's ``[tool.uv.pip]``,
or in a uv.toml in a folder above the project: rebuild exit 0, the logged install command unchanged, the env holds the
macOS wheel (its WHEEL ``Tag: py3-none-macosx_11_0_arm64``), and ``verify``'s inventory says "4 packages, equal to the
lock; 621 files, unchanged since the build". ``compile-bytecode``/``link-mode`` in the same file are overridden by the
command line (held). Module: env/rebuild.py (``install``), env/binding.py (a hash of the lock, never asked whether its
file is for this platform). Fix idea by class: the install reads no uv configuration (UV_NO_CONFIG; the sources
Kernodeck takes from uv's files handed over as variables, as pip's are), and the binding holds each installed wheel's
tags to the env's platform.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import packaging.markers
import pytest

from kernodeck.env import inventory, pythons, wheelhouse
from kernodeck.errors import KernodeckError, RebuildFailed
from kernodeck.inenv import judge, steprun
from kernodeck.inenv._common import CheckFailed
from kernodeck.inenv.protocol import Status
from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.supervise import Stop, Supervised
from kernodeck.upgrade.relock import Drift, DriftVerdict
from kernodeck.verify.record import Step
from kernodeck.verify.steps import inventory_check
from tests.helpers.hangrunner import RUNNER_HEAD, checks_on_runner
from tests.helpers.project import kd
from tests.helpers.tinylock import env_wheels, fresh_venv, locked_tiny_project, offline_env, uv, wheel_of

ROOT = Path(__file__).resolve().parents[2]
_OUTPUTS = {"values": {"kind": "allclose", "passed": True, "max_abs": 0.0, "summary": "ok"}}

# DRIFT3 -----------------------------------------------------------------------------------------------------------


def _answered_no(key: str) -> dict[str, Any]:
    """The criterion step's record (report.json) when the criterion answers no with one more key of its own, as
    inenv/judge.criterion makes it: its answer kept as the details, a comparison-layer failure."""
    details = judge._answered({"passed": False, "summary": "accuracy 0.12", key: "early stop at epoch 3"})
    record = steprun._failed(CheckFailed("criterion failed: accuracy 0.12", "comparison", details))
    return {"name": "criterion", "status": str(record["status"]), "error": record["error"], "layer": record["layer"],
            "details": record["details"]}


def _steps(criterion: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "compare", "status": "passed", "details": {"outputs": _OUTPUTS}}, criterion,
            {"name": "determinism", "status": "not-run", "reason": "an earlier step failed: criterion"}]


def test_drift3_premise_the_criterions_answer_is_its_record_and_may_name_the_orchestrators_keys() -> None:
    for key in ("stopped", "ended"):
        record = _answered_no(key)
        assert record["layer"] == "comparison" and record["details"]["passed"] is False  # it answered
        assert record["details"][key]  # its own key, named as the orchestrator's note once was (pass 60's fix)


@pytest.mark.parametrize("key", ["stopped", "ended"])
def test_drift3_a_criterion_that_answered_no_is_out_of_tolerance_whatever_its_keys(key: str) -> None:
    """Fixed: the orchestrator's note is a field of the step's record (Step.unreported), never a key of its details."""
    drift = Drift.from_steps(_steps(_answered_no(key)))
    assert drift.verdict is DriftVerdict.OUT, (drift.verdict, drift.failure)


def test_drift3_control_the_same_answer_with_another_key_is_out_of_tolerance() -> None:
    drift = Drift.from_steps(_steps(_answered_no("at")))
    assert drift.verdict is DriftVerdict.OUT and drift.criterion == (False, "accuracy 0.12")


# STOP2 ------------------------------------------------------------------------------------------------------------

# A fake in-env runner (tests/helpers/hangrunner.py's pattern): compare passed, then the criterion blocks; with
# ``fake_mode = "handler"`` the application's own SIGTERM handler writes the step's failure (what the real runner
# records for its sys.exit, measured) before the process ends.
_RUNNER = RUNNER_HEAD + f'''\
(steps / "01-compare.json").write_text(json.dumps(
    {{"name": "compare", "status": "passed", "details": {{"outputs": {_OUTPUTS!r}}}}}))
print("[kernodeck] criterion: start (now)", file=sys.stderr, flush=True)
if json.loads(config.read_text()).get("fake_mode") == "handler":
    def handler(signum, frame):
        (steps / "02-criterion.json").write_text(json.dumps(
            {{"name": "criterion", "status": "failed", "layer": "application",
              "error": "the criterion ended: the application called sys.exit(143) at app.py:19 in <lambda>",
              "details": {{"raised_at": "app.py:19 in <lambda>", "traceback": "ApplicationExit"}}}}))
        sys.exit(143)
    signal.signal(signal.SIGTERM, handler)
while True:
    time.sleep(0.1)
'''


def _stalled_criterion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> tuple[list[Step], Supervised]:
    """run_checks on the fake runner (stall 2 s): the steps recorded and what the supervisor said of the process."""
    run_, seen = checks_on_runner(tmp_path, monkeypatch, _RUNNER, ("compare", "criterion", "determinism"), mode)
    return run_.steps, seen[0]


def test_stop2_premise_the_supervisor_stopped_the_criterion_whose_record_is_the_applications(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, ended = _stalled_criterion(tmp_path, monkeypatch, "handler")
    assert ended.stopped is not None and ended.stopped.kind is Stop.STALLED and ended.stopped.step == "criterion"
    written = json.loads((tmp_path / "staging" / "steps" / "02-criterion.json").read_text(encoding="utf-8"))
    assert written["status"] == "failed" and "sys.exit(143)" in written["error"]  # the handler's record, on disk


def test_stop2_a_stopped_criterion_is_recorded_stopped_whatever_it_wrote(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: the step the supervisor stopped is recorded stopped, whatever it wrote after the signal (in_env)."""
    steps, _ = _stalled_criterion(tmp_path, monkeypatch, "handler")
    drift = Drift.from_steps([s.as_dict() for s in steps])
    assert drift.verdict is DriftVerdict.NOT_VERIFIED and "stalled" in drift.failure, (drift.verdict, drift.failure)


def test_stop2_control_without_the_handler_the_stop_is_recorded(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    steps, _ = _stalled_criterion(tmp_path, monkeypatch, "plain")
    criterion = next(s for s in steps if s.name == "criterion")
    assert criterion.details["stopped"] == "stalled"
    assert Drift.from_steps([s.as_dict() for s in steps]).verdict is DriftVerdict.NOT_VERIFIED


# MARKER2 ----------------------------------------------------------------------------------------------------------

_FULL = 'python_full_version >= "3.11.1"'
_IMPL = 'implementation_version < "3.12"'
_HONEST = {"tinya": "1.0", "tinyb": "2.0"}  # what the platform's 3.11.7 env holds: its installer applied the marker


def _lock(marker: str) -> lockfile.Lockfile:
    text = (f"tinya==1.0 \\\n    --hash=sha256:{'a' * 64}\n"
            f"tinyb==2.0 ; {marker} \\\n    --hash=sha256:{'b' * 64}\n")
    return lockfile.parse_text(text, Path("lock.txt"))


def _kernodeck_on_312(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernodeck's own interpreter as nox's on Ubuntu 24.04 (3.12.1): every version value of it (pass 60's stand-in,
    with implementation_version, which a real 3.12 has too)."""
    here = packaging.markers.default_environment()
    on_312 = {**here, "python_version": "3.12", "python_full_version": "3.12.1", "implementation_version": "3.12.1"}
    monkeypatch.setattr(packaging.markers, "default_environment", lambda: on_312)
    monkeypatch.setattr(wheelhouse, "default_environment", lambda: on_312)
    monkeypatch.setattr(wheelhouse, "current_python", lambda: "3.12")


_BASE = str(getattr(sys, "_base_executable", sys.executable))  # the env's base Python: this 3.11.7


def _built(marker: str, installed: dict[str, str]) -> None:
    """rebuild's check of the installed env (base Python found: 3.11.7)."""
    inventory.require_the_locks(_lock(marker), pythons.marker_values(_BASE), installed)


def _verified(marker: str, installed: dict[str, str]) -> KernodeckError | None:
    """verify's inventory step on the same env: its failure (None: equal to the lock)."""
    plat = resolve_platform(load_project(ROOT))
    run_ = SimpleNamespace(plat=plat, not_established=[], meta=SimpleNamespace(lock=""), base_python=None)
    failure, _ = inventory_check._against_lock(
        cast(Any, run_), Step("inventory", Status.PASSED), _lock(marker),
        cast(Any, SimpleNamespace(packages=installed)), None, None, Path(_BASE), intentional=False, strict=False,
        files_note="")
    return failure


def test_marker2_premise_kernodecks_values_are_not_the_envs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither Kernodeck's own values (on 3.12) nor the platform's declared ones (3.11, python_full_version 3.11.0)
    evaluate the two markers as the env's interpreter does (setup rewritten by the fix: the env is asked)."""
    _kernodeck_on_312(monkeypatch)
    plat = resolve_platform(load_project(ROOT))
    assert plat.python == "3.11"
    env = pythons.marker_values(_BASE)
    assert packaging.markers.Marker(_FULL).evaluate(env) and packaging.markers.Marker(_IMPL).evaluate(env)
    assert not packaging.markers.Marker(_FULL).evaluate(wheelhouse.marker_environment(plat))  # 3.11.0
    assert not packaging.markers.Marker(_IMPL).evaluate({**env, "implementation_version": "3.12.1"})  # a 3.12's


def test_marker2_verify_takes_the_env_rebuild_took(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: rebuild, reuse and verify evaluate the lock's markers with the env's own values (marker_values)."""
    _kernodeck_on_312(monkeypatch)
    failure = _verified(_FULL, _HONEST)
    assert failure is None, str(failure)


def test_marker2_rebuild_takes_an_honest_env_whatever_its_markers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: implementation_version too is the env's."""
    _kernodeck_on_312(monkeypatch)
    _built(_IMPL, _HONEST)


def test_marker2_control_same_interpreter_accepted_a_missing_pin_refused() -> None:
    for marker in (_FULL, _IMPL):
        _built(marker, _HONEST)
        assert _verified(marker, _HONEST) is None
        with pytest.raises(RebuildFailed, match="-tinyb"):
            _built(marker, {"tinya": "1.0"})
        assert "-tinyb" in str(_verified(marker, {"tinya": "1.0"}))


# UVCONF1 ----------------------------------------------------------------------------------------------------------

_MAC = "aarch64-apple-darwin"


def _platform_wheel(links: Path, tag: str) -> Path:
    """tinyc 1.0 for one platform tag (its module says which), byte-reproducible."""
    return wheel_of(links, "tinyc", "1.0", {"tinyc/__init__.py": f"TAG = {tag!r}\n".encode()}, tag=tag)


def _two_platform_project(root: Path) -> tuple[Path, Path]:
    """A project whose lock pins pip, tinya, tinyb and tinyc 1.0 with the hashes of its two wheels (a linux and a
    macOS one, as a real lock lists every platform's); its find-links folder."""
    links = root / "links"
    tagged = [_platform_wheel(links, tag) for tag in ("py3-none-manylinux_2_17_x86_64", "py3-none-macosx_11_0_arm64")]
    project_root, _ = locked_tiny_project(root / "project", env_wheels(links), (("tinyc", "1.0", tagged),))
    return project_root, links


def _uv_config(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "uv.toml"
    path.write_text(f'[pip]\npython-platform = "{_MAC}"\n', encoding="utf-8")
    return path


def _installed_tag(env: Path) -> str:
    wheel = next(env.glob("lib/python*/site-packages/tinyc-1.0.dist-info/WHEEL")).read_text(encoding="utf-8")
    return next(line.split(": ", 1)[1] for line in wheel.splitlines() if line.startswith("Tag: "))


def test_uvconf1_premise_uv_takes_the_platform_of_its_config_file(tmp_path: Path) -> None:
    links = tmp_path / "links"
    for tag in ("py3-none-manylinux_2_17_x86_64", "py3-none-macosx_11_0_arm64"):
        _platform_wheel(links, tag)
    for name, extra in (("plain", {}), ("configured", {"UV_CONFIG_FILE": str(_uv_config(tmp_path / "cfg"))})):
        fresh_venv(tmp_path / name)
        env = offline_env(UV_CACHE_DIR=str(tmp_path / f"uvc-{name}"), **extra)
        if extra:
            env.pop("UV_NO_CONFIG")
        subprocess.run([uv(), "pip", "install", "--python", str(tmp_path / name / "bin" / "python"), "--no-deps",
                        "--find-links", str(links), "tinyc==1.0"], check=True, capture_output=True, env=env)
        assert ("macosx" in _installed_tag(tmp_path / name)) is bool(extra), name


def _rebuild(tmp_path: Path, config: bool) -> tuple[subprocess.CompletedProcess[str], Path]:
    project, links = _two_platform_project(tmp_path)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"))
    if config:  # the caller's own uv.toml, as uv's docs name it (a user's ~/.config/uv/uv.toml reads the same)
        env.pop("UV_NO_CONFIG")
        env["UV_CONFIG_FILE"] = str(_uv_config(tmp_path / "cfg"))
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    plat = resolve_platform(load_project(project))
    return proc, (project / ".venv-rebuild" / plat.id / "current").resolve()


def test_uvconf1_the_callers_uv_config_never_changes_the_wheels_installed(tmp_path: Path) -> None:
    """Fixed: the install reads no uv config file (env/installenv.installing_env: UV_NO_CONFIG, no UV_CONFIG_FILE)."""
    proc, env = _rebuild(tmp_path, config=True)
    assert proc.returncode != 0 or "manylinux" in _installed_tag(env), _installed_tag(env)


def test_uvconf1_control_the_same_lock_installs_this_platforms_wheel(tmp_path: Path) -> None:
    proc, env = _rebuild(tmp_path, config=False)
    assert proc.returncode == 0, proc.stderr[-800:]
    assert "manylinux" in _installed_tag(env)


def test_uvconf1_control_bytecode_and_link_mode_in_the_config_are_overridden(tmp_path: Path) -> None:
    """Held: the command line's --no-compile-bytecode, --no-cache and --link-mode win over the same config file."""
    project, links = _two_platform_project(tmp_path)
    config = tmp_path / "cfg" / "uv.toml"
    config.parent.mkdir()
    config.write_text('[pip]\ncompile-bytecode = true\nlink-mode = "symlink"\nno-cache = false\n', encoding="utf-8")
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"), UV_CONFIG_FILE=str(config))
    env.pop("UV_NO_CONFIG")
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-800:]
    current = (project / ".venv-rebuild" / resolve_platform(load_project(project)).id / "current").resolve()
    assert not list(current.glob("lib/python*/site-packages/tinyc/__pycache__/*.pyc"))
    module = next(current.glob("lib/python*/site-packages/tinyc/__init__.py"))
    assert not module.is_symlink() and os.stat(module).st_nlink == 1
    assert not list((tmp_path / "uvc").glob("archive-v*/*/tinyc"))  # the config's cache was not used
