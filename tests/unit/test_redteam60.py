"""Red-team pass 60 (notes: /work/notes/redteam60.md): pass 59's fixes (6ab8cb5 DRIFT1/PR1/PR2, c53ca40 PIP1) attacked
by class, in real commands on a fresh clone: DRIFT2, MARKER1, COMPILE1.

DRIFT2 (a criterion that gave no answer read as one that answered no; kernodeck/upgrade/relock.py
``Drift.from_steps``/``Drift.verdict``, which upgrade's exit code, ``upgrade.json``'s ``verdict``, the relock pull
request's row and every bisect trial's outcome read): the fix reads the criterion's status, and any failed criterion
is OUT OF TOLERANCE ("the outputs (or the criterion) moved beyond it"). A criterion step is also failed when its
process was stopped before it answered: interrupted (SIGTERM/SIGINT: the report's verdict is ``interrupted``), stalled,
past its deadline (``in_env.stopped_step``), or the check process ended (``in_env.run_checks``: "the check process
ended (exit N) before this step reported", no details). Measured in process with the real ``stopped_step``: each of
the three stops gives ``Drift.verdict`` OUT OF TOLERANCE, drift table "Criterion: **does not hold** (interrupted by
SIGTERM after 12 s; ...)", "Verdict: **out of tolerance**"; the report's own verdict is ``interrupted`` / ``failed``.
So an upgrade interrupted in its criterion writes ``upgrade.json`` ``"verdict": "OUT OF TOLERANCE"`` (then exits
130), which ``--pr-body`` shows as "**OUT OF TOLERANCE**"; a bisect trial whose criterion stalls or whose process is
killed is BAD (a culprit), never rerun (``settle`` reruns NOT VERIFIED only), where the same stop one step earlier is
FAILED and rerun. Module: upgrade/relock.py (``Drift.from_steps``: ``criterion`` from the status alone). Fix idea by
class: the criterion counts against the outputs only when it answered (its record has the answer's ``passed``, or its
failure is the comparison layer's); a criterion stopped or crashed is a failure of the run (NOT VERIFIED, rerun in a
bisect), like any other step; the report's own verdict (``interrupted``) never turns into a word about the numbers.

MARKER1 (the lock's markers evaluated with Kernodeck's interpreter, not the env's; kernodeck/env/rebuild.py
``require_the_locks``, and before it kernodeck/env/sealing.py ``require_intact`` and
kernodeck/verify/steps/inventory_check.py): ``inventory.expected_from_lock(lock)`` evaluates each pin's marker with the
running interpreter, which is nox's (Ubuntu 24.04's python3 is 3.12: docs/rebuild.md), while the env is the platform's
Python (3.11). Measured (real ``python -m kernodeck rebuild`` of a tiny lock pinning ``tinya`` and ``tinyold==1.0 ;
python_version < "3.12"``, as a backport's pin reads): Kernodeck on 3.11, uv and pip installers: exit 0; the same
rebuild with Kernodeck on 3.12 (a venv of pyenv's 3.12.1; the base found: 3.11.7 by ``uv python find``): exit 2,
``ERROR: the installed env is not the lock's (+tinyold==1.0): an installer option of this machine sent the install
elsewhere or left pins out``, TIP ``pip config list``: an honest env refused, the user sent to look for a config that
is not there. Module: env/rebuild.py (``require_the_locks``). Fix idea by class: every comparison of an env with its
lock evaluates markers with the env's own marker values (``wheelhouse.marker_environment(plat)``, or the env's
interpreter's ``default_environment()``), never the orchestrator's.

COMPILE1 (the caller's uv options reach what the install writes; kernodeck/env/rebuild.py ``_Build.install``: uv runs
under ``clean_env(uv_environment(...))``, every ``UV_*`` variable kept, and is given no ``--no-compile-bytecode``):
``UV_COMPILE_BYTECODE=1`` (the setting uv's own docs put in Dockerfiles) makes uv compile every module at install,
which docs/env-integrity.md says Kernodeck does not do, and rewrites a wheel's shipped ``.pyc``. Measured (real
``rebuild --installer uv --fresh`` of a tiny lock whose wheel ships ``tinyp/__pycache__/__init__.cpython-311.pyc``,
as numpy 2.3.3's does): plain: exit 0; with ``UV_COMPILE_BYTECODE=1``: exit 2, ``ERROR: installed files differ from
their RECORD digest: ...tinyp/__pycache__/__init__.cpython-311.pyc (content differs from RECORD); the installer's cache
may hold a damaged copy``, TIP ``uv cache clean ... then --fresh``, which fails the same way; the recorded install
command shows no compile. Without a shipped .pyc the build passes and its compiled files are sealed as the build's,
never through the bytecode check. Module: env/rebuild.py (``install``). Fix idea by class: the options Kernodeck
decides on (bytecode, link mode, binary or not) are said on the command line both ways (``--no-compile-bytecode``), and
the uv variables that change what is installed rather than where from are dropped, as installenv does for pip's.
"""

from __future__ import annotations

import importlib.util
import marshal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import packaging.markers
import pytest

from kernodeck.env import inventory, pythons, wheelhouse
from kernodeck.errors import RebuildFailed
from kernodeck.inenv.protocol import Status
from kernodeck.lock import lockfile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.supervise import Stop, Stopped
from kernodeck.upgrade.relock import Drift, DriftVerdict
from kernodeck.verify.pipeline import RunMeta
from kernodeck.verify.record import Step, Verdict
from kernodeck.verify.report import Report
from kernodeck.verify.steps.in_env import stopped_step
from tests.helpers.project import kd
from tests.helpers.tinylock import fresh_venv, locked_tiny_project, offline_env, uv, wheel_of

ROOT = Path(__file__).resolve().parents[2]

# DRIFT2 -----------------------------------------------------------------------------------------------------------

_OUTPUTS = {"embeddings": {"kind": "cosine", "passed": True, "max_abs": 0.0, "min_cosine": 1.0, "summary": "ok"}}


def _stopped_criterion(tmp_path: Path, kind: Stop) -> tuple[list[Step], dict[str, Any]]:
    """A verify's steps whose outputs are within tolerance and whose criterion ``kind`` stopped before it answered
    (the record ``in_env.stopped_step`` writes), and the run's meta (an interruption marks it)."""
    run = SimpleNamespace(staging=tmp_path, meta=RunMeta(session="upgrade"))
    stop = Stopped(kind, "criterion", 12.0, 12.0, 0.0 if kind is Stop.INTERRUPTED else 900.0, "",
                   "SIGTERM" if kind is Stop.INTERRUPTED else "", "application", "", (), "stacks", (1,))
    step = stopped_step(cast(Any, run), "criterion", stop, tmp_path / "python")
    steps = [Step("compare", Status.PASSED, details={"outputs": _OUTPUTS}), step,
             Step("determinism", Status.NOT_RUN, reason="an earlier step failed: criterion")]
    return steps, ({"interrupted": run.meta.interrupted} if run.meta.interrupted else {})


def test_drift2_premise_a_stopped_criterion_is_a_failed_step_that_never_answered(tmp_path: Path) -> None:
    steps, meta = _stopped_criterion(tmp_path, Stop.INTERRUPTED)
    assert steps[1].status is Status.FAILED and "interrupted by SIGTERM" in steps[1].error
    assert "passed" not in steps[1].details  # no answer of the criterion in its record
    assert Report("P", steps, meta=meta).verdict is Verdict.INTERRUPTED


@pytest.mark.parametrize("kind", list(Stop))
def test_drift2_a_criterion_that_never_answered_is_not_verified(tmp_path: Path, kind: Stop) -> None:
    """Fixed: a step record the orchestrator wrote for a step that never reported (Step.unreported: stopped, or its
    process ended) is no answer: the run is NOT VERIFIED (a bisect reruns it), whatever the step; a criterion's own
    answer cannot say so (its keys are details, never the record's fields)."""
    steps, _ = _stopped_criterion(tmp_path, kind)
    drift = Drift.from_steps([s.as_dict() for s in steps])
    assert drift.verdict is DriftVerdict.NOT_VERIFIED, (drift.verdict, drift.criterion)
    ended = Step("criterion", Status.FAILED, error="the check process ended (exit -9) before this step reported: x",
                 layer="environment", unreported="process ended")  # in_env's record of a process that died in it
    drift = Drift.from_steps([s.as_dict() for s in [steps[0], ended]])
    assert drift.verdict is DriftVerdict.NOT_VERIFIED and drift.criterion is None, (drift.verdict, drift.criterion)
    said = Step("criterion", Status.FAILED, error="criterion failed: 3 of 24 miss", layer="comparison",
                details={"passed": False, "summary": "3 of 24 miss", "stopped": "stalled", "unreported": "x"})
    assert Drift.from_steps([s.as_dict() for s in [steps[0], said]]).verdict is DriftVerdict.OUT  # its answer


def test_drift2_control_a_criterion_that_answered_and_a_stopped_compare(tmp_path: Path) -> None:
    answered = [Step("compare", Status.PASSED, details={"outputs": _OUTPUTS}),
                Step("criterion", Status.FAILED, error="criterion failed: 3 of 24 miss", layer="comparison",
                     details={"passed": False, "summary": "3 of 24 miss"})]
    assert Drift.from_steps([s.as_dict() for s in answered]).verdict is DriftVerdict.OUT
    answered[1] = Step("criterion", Status.PASSED, details={"passed": True, "summary": "each finds its pair"})
    assert Drift.from_steps([s.as_dict() for s in answered]).verdict is DriftVerdict.HOLDS
    run = SimpleNamespace(staging=tmp_path, meta=RunMeta(session="upgrade"))
    stop = Stopped(Stop.STALLED, "compare", 12.0, 12.0, 900.0, "", "", "comparison", "", (), "stacks", (1,))
    compare = stopped_step(cast(Any, run), "compare", stop, tmp_path / "python")
    assert Drift.from_steps([compare.as_dict()]).verdict is DriftVerdict.NOT_VERIFIED  # held


# MARKER1 ----------------------------------------------------------------------------------------------------------

_LOCK = ("tinya==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
         'tinyold==1.0 ; python_version < "3.12" \\\n    --hash=sha256:' + "b" * 64 + "\n")
_HONEST = {"tinya": "1.0", "tinyold": "1.0"}  # what the platform's (3.11) env holds: its installer applied the marker


def _kernodeck_on_312(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernodeck's own interpreter as nox's on Ubuntu 24.04 (3.12): the marker values it evaluates with."""
    here = packaging.markers.default_environment()
    on_312 = {**here, "python_version": "3.12", "python_full_version": "3.12.1"}
    monkeypatch.setattr(packaging.markers, "default_environment", lambda: on_312)
    monkeypatch.setattr(wheelhouse, "default_environment", lambda: on_312)  # what the env's values start from
    monkeypatch.setattr(wheelhouse, "current_python", lambda: "3.12")


def _require(installed: dict[str, str]) -> None:
    lock = lockfile.parse_text(_LOCK, Path("lock.txt"))
    # the build asks its base Python for the marker values (pass 60's fix)
    inventory.require_the_locks(lock, pythons.marker_values(getattr(sys, "_base_executable", sys.executable)),
                                installed)


def test_marker1_premise_the_env_and_kernodeck_read_the_marker_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    plat = resolve_platform(load_project(ROOT))
    marker = packaging.markers.Marker('python_version < "3.12"')
    assert plat.python == "3.11" and marker.evaluate(wheelhouse.marker_environment(plat))  # the env's: applies
    _kernodeck_on_312(monkeypatch)
    assert not marker.evaluate()  # Kernodeck's: does not


def test_marker1_an_honest_env_is_the_locks_whatever_python_runs_kernodeck(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: the lock's markers are evaluated with the env's own values (pythons.marker_values: pass 61's MARKER2)."""
    _kernodeck_on_312(monkeypatch)
    _require(_HONEST)


def test_marker1_control_same_interpreter_accepted_a_missing_pin_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _require(_HONEST)
    with pytest.raises(RebuildFailed, match="-tinyold"):
        _require({"tinya": "1.0"})


# COMPILE1 ---------------------------------------------------------------------------------------------------------


def _shipping_pyc(links: Path) -> tuple[Path, bytes]:
    """A wheel that ships its module's .pyc in its RECORD (as numpy 2.3.3's cp311 wheel does), and that .pyc."""
    source = b"VERSION = '1.0'\n"
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") * 2 + len(source).to_bytes(4, "little")
    pyc = header + marshal.dumps(compile(source, "tinyp/__init__.py", "exec"))  # source mtime 0: stale to a compiler
    wheel = wheel_of(links, "tinyp", "1.0", {"tinyp/__init__.py": source,
                                             "tinyp/__pycache__/__init__.cpython-311.pyc": pyc})
    return wheel, pyc


def test_compile1_premise_uv_takes_the_callers_bytecode_option(tmp_path: Path) -> None:
    wheel, pyc = _shipping_pyc(tmp_path / "links")
    for name, extra in (("plain", {}), ("compiled", {"UV_COMPILE_BYTECODE": "1"})):
        python = fresh_venv(tmp_path / name)
        subprocess.run([uv(), "pip", "install", "--python", str(python), "--no-deps", "--link-mode", "copy",
                        str(wheel)], check=True, capture_output=True,
                       env=offline_env(UV_CACHE_DIR=str(tmp_path / "uvc"), **extra))
        installed = next((tmp_path / name).glob("lib/python*/site-packages/tinyp/__pycache__/*.pyc")).read_bytes()
        assert (installed == pyc) is (name == "plain"), name


def _rebuild(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    links = tmp_path / "links"
    wheel, _ = _shipping_pyc(links)
    project, _ = locked_tiny_project(tmp_path / "project", [wheel])
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uvc"), **extra)
    return kd(project, "rebuild", "--installer", "uv", "--fresh", env=env)


def test_compile1_the_callers_uv_bytecode_option_never_changes_the_install(tmp_path: Path) -> None:
    """Fixed: the install runs without the uv variables that change what it writes (env/installenv.installing_env),
    and says --no-compile-bytecode itself: the shipped .pyc is installed as its RECORD lists it."""
    proc = _rebuild(tmp_path, UV_COMPILE_BYTECODE="1")
    assert proc.returncode == 0, [line for line in proc.stderr.splitlines() if line.startswith(("ERROR", "TIP"))]
    assert "--no-compile-bytecode" in proc.stderr  # the command as logged before it ran


def test_compile1_control_the_same_lock_builds_without_it(tmp_path: Path) -> None:
    proc = _rebuild(tmp_path)
    assert proc.returncode == 0, proc.stderr[-800:]
