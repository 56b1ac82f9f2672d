"""Red-team pass 59 (notes: /work/notes/redteam59.md): this session's relock body (3a97322) and bundled pip (c060765)
attacked by class, and pass 57's HUB1, PROC4 and HANG1 fixes run end to end, in real sessions on a fresh clone
(``.nb/bin/nox``, nox 2026.10.20): DRIFT1, PR1, PIP1, PR2.

DRIFT1 (a verdict read from a step's record by a key the record may lack; kernodeck/upgrade/relock.py
``Drift.from_steps``/``Drift.holds``, which upgrade's exit code, ``upgrade.json``'s ``holds``, the relock pull
request's row and every bisect trial's outcome read): the criterion counts as "not run" unless its step record has
``details``, and a failed criterion is left out of ``failure``; ``holds`` is then every output within tolerance. A
criterion that fails with a verdict that carries no details (its margin not a number: ``judge._answered``; its answer
not a dict with a bool ``passed``: ``application._judge``) is read as a criterion that did not run, and the upgrade
says the criterion still holds. Measured (real session on a fresh clone): checks/app.py's criterion returning its
margin as a one-element numpy array (as a library that now returns an array where it returned a scalar),
``verify -- --no-rebuild --allow-code-change``: exit 1, ``FAILED at criterion (layer: application): the criterion's
margin must be a number or None, not '[0.3160415]'``; its report.json's steps through ``Drift.from_steps``:
``holds True``, criterion ``None``, failure ``''``, and ``render_drift``: "Verdict: the criterion still holds: every
output within tolerance". Then the relock's own commands on the bisect fixture (tests/e2e/test_bisect_e2e.py's
loopback index and project; its criterion returns ``margin = np.array([1.0])`` when kdfixture-gamma 2.0 is installed,
``1.0`` otherwise): ``upgrade --out runs/drift1/P/upgrade`` moving gamma alone: its verify ``criterion: FAILED - the
criterion's margin must be a number or None, not '[1.]'``, yet upgrade exit 0, "Verdict: the criterion still holds:
every output within tolerance", "upgrade P: criterion still holds", and ``--pr-body``: "| P | 1 upgraded | within
tolerance, criterion holds |" (the workflow bisects nothing and proposes the lock as good); with the other three
moved too, ``bisect`` counts its trials with gamma 2.0 and scale 1.0 (try-04, try-07: criterion FAILED, details {})
"within tolerance" and names ``kdfixture-scale`` alone, confirmed, where the other changes without it do not hold
(the search's own rule: "not confirmed", more than one change). Module:
upgrade/relock.py (``Drift.from_steps``). Fix idea by class: the criterion did not run only when its status says so
(skipped, not-run); a failed step of any name is a failure of the verdict; holds is the report's own verdict, not a
second reading of its steps. Controls: an undeclared read in the criterion (a refusal with its details) and a
criterion that answers ``passed: False`` both give holds False (the first measured in a real session too).

PR1 (a result shown as written, but not shown to be the result of its row; kernodeck/upgrade/relock.py
``_platform_row``/``pr_body``, kernodeck/dossier/read.py ``file_as_written``): the pull request's body proves each
file's bytes are the ones its folder's marker lists, never that the folder is this platform's upgrade, nor that the
bisect beside it bisected that upgrade's locks. ``upgrade.json`` names its platform and lock digests; the body reads
neither. Measured in process with folders signed as upgrade and bisect sign them (``outdir.mark``, as
tests/helpers/workflows.platform_result): platform Q's ``upgrade/`` and ``bisect/`` copied (``cp -a``) under platform
P's name, where P's job left nothing: P's row reads "1 removed, 1 upgraded | **OUT OF TOLERANCE**; bisect: numpy",
Q's verdict and culprit, though ``upgrade.json`` says ``"platform": Q``; the same in a real session (the bisect
fixture's ``upgrade``/``bisect`` folders for cp311-linux_x86_64-cpu copied under cp311-macosx_arm64-mps, ``upgrade --
--pr-body``: "| cp311-macosx_arm64-mps | 4 upgraded | **OUT OF TOLERANCE**; bisect: kdfixture-scale |"); ``P/upgrade``
a symlink to Q's folder: the
same; ``--all-platforms ../OTHER/Q`` reads a folder outside the artifacts folder and shows it as a row. bisect.json
records no lock it bisected, so a bisect left from an earlier upgrade is shown beside a new one. Module:
upgrade/relock.py (``_platform_row``), upgrade/bisect_report.py (``summary``: the good and bad locks' digests). Fix
idea by class: a result is shown under a row only when it names that row (upgrade.json's platform, bisect.json's
platform and its bad/good body digests equal to upgrade.json's ``body_digest`` new/old; a platform id that is not a
plain folder name refused), else NOT AS WRITTEN FOR THIS PLATFORM.

PIP1 (the caller's pip options reach the pip that checks and freezes the env; kernodeck/env/rebuild.py ``_Build.step``
runs check and freeze under ``clean_env()``, which keeps every ``PIP_*`` variable and pip's own config files, and
``_Build.run`` keeps the wheel records of the pins ``freeze`` lists only; kernodeck/env/binding.py ``problems`` checks
the recorded wheels only): the pip served from the base's wheel (c060765), like the one it replaces, takes its
options from the environment: ``PIP_PYTHON`` (pip's ``--python``) sends ``pip check`` and ``pip freeze`` to another
interpreter's environment, ``PIP_EXCLUDE`` drops a pin from ``freeze --all``. Measured (real ``python -m kernodeck
rebuild`` of tiny locks, the tests' offline sources, uv installer): a lock pinning tinyc 1.0, which requires
tinymissing (not in the lock): without the variable, ``ERROR: pip-check failed: tinyc 1.0 requires tinymissing``
(right); with ``PIP_PYTHON=<an empty venv>/bin/python``: exit 0, the build's record ``pip_check: "No broken
requirements found."``, ``inventory.txt`` empty, no wheel hash recorded, tinyc installed; then ``verify --
--no-rebuild``: ``inventory: ok - 1 packages, equal to the lock; 31 files, unchanged since the build`` (the binding
accepts an env whose record binds no wheel). A lock of tinya and tinyb rebuilt with ``PIP_EXCLUDE=tinya`` (uv and
pip installers alike): exit 0, ``inventory.txt`` ``tinyb==2.0`` only, wheels recorded ``tinyb`` only, tinya
installed; a second ``rebuild`` reuses it ("same lock digest and interpreter"). ``--installer pip`` with
``PIP_PYTHON=<an empty venv>/bin/python``: the lock is installed into that other interpreter's env (tinya there), the
build promotes an empty env, exit 0, its ``inventory.txt`` ``tinya==1.0``; the next rebuild and verify refuse it
("changed after it was built": it never held tinya) with TIP ``--fresh``, which does the same again. Module:
env/rebuild.py (install, check and freeze), env/binding.py (``problems``). Fix idea by class: the pip that checks
and freezes runs isolated from the caller's pip configuration (``--isolated``: no ``PIP_*``, no config file; it needs
no source), the pip that installs takes its sources from the caller, never where it installs (``PIP_PYTHON``,
``PIP_TARGET``, ``PIP_PREFIX``, ``PIP_USER``, ``PIP_ROOT`` refused or dropped), a build is promoted only once its env
is observed to be the lock's, and the binding covers every pin the env holds as observed, not the ones a record lists
(an installed pin with no wheel record is unbound).
PR2 (the verdict re-read with fewer states than its writer gave; kernodeck/upgrade/relock.py ``_platform_row``):
upgrade has three outcomes (``outcome``: 0 criterion still holds, 1 OUT OF TOLERANCE, 3 NOT VERIFIED: a check failed
before the outputs were compared, no bisect), but ``upgrade.json`` keeps ``holds`` and ``failure`` only and the pull
request's row prints "**OUT OF TOLERANCE**" for every ``holds: false``, the not-verified ones included, with the
failure in parentheses. Measured in a real session (the bisect fixture, its app.py changed so that the verify stops at
``reference-manifest``, as the inventory stop docs/upgrading.md shows for numpy 2.3.3): ``upgrade --out
runs/notver/P/upgrade``: exit 3, "upgrade P: NOT VERIFIED (reference-manifest failed)", upgrade.md "Verdict: **not
verified: reference-manifest failed before the outputs were compared**"; ``--pr-body``: "| P | 4 upgraded | **OUT OF
TOLERANCE** (reference-manifest: dossier/reference/manifest.toml: code differs ...) |": outputs never compared, named
out of tolerance, in the one place a reviewer reads. Module: upgrade/relock.py (``UpgradeResult.as_dict``,
``_platform_row``). Fix idea by class: upgrade.json records the outcome upgrade printed and exited with (one enum,
its words from one table), and the row shows that, never a second reading of ``holds``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import pytest

from kernodeck import outdir
from kernodeck.dossier.read import file_as_written
from kernodeck.env import binding, envdirs, pythons, rebuild
from kernodeck.inenv import judge, steprun
from kernodeck.inenv._common import CheckFailed
from kernodeck.upgrade.pullrequest import pr_body
from kernodeck.upgrade.relock import Drift, OutputDrift, render_drift
from tests.helpers.project import kd
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, write_wheel
from tests.helpers.workflows import platform_result

# DRIFT1 -----------------------------------------------------------------------------------------------------------

_OUTPUTS = {"embeddings": {"kind": "cosine", "passed": True, "max_abs": 0.0, "min_cosine": 1.0, "summary": "ok"}}


def _steps(criterion: dict[str, Any]) -> list[dict[str, Any]]:
    """A verify's steps as report.json holds them: the outputs within tolerance, then ``criterion``'s record."""
    return [{"name": "application", "status": "passed", "details": {}},
            {"name": "compare", "status": "passed", "details": {"outputs": _OUTPUTS}},
            {"name": "criterion", **criterion},
            {"name": "determinism", "status": "not-run", "reason": "an earlier step failed: criterion"}]


def _margin_not_a_number() -> dict[str, Any]:
    """The criterion step's record when its margin is not a number (the run measured: a one-element array)."""
    with pytest.raises(CheckFailed) as raised:
        judge._answered({"passed": True, "summary": "each finds its pair", "margin": "[0.3160415]"})
    record = steprun._failed(raised.value)
    return {"status": str(record["status"]), "error": record["error"], "layer": record["layer"],
            "details": record["details"] or None}  # report.json writes an empty details as null (the run measured)


def test_drift1_premise_a_failed_criterion_can_carry_no_details() -> None:
    record = _margin_not_a_number()
    assert record["status"] == "failed" and "margin must be a number" in record["error"]
    assert record["details"] is None


def test_drift1_a_failed_criterion_never_holds() -> None:
    """Fixed: a failed criterion is one that failed, details or not (relock.Drift.from_steps reads the status)."""
    drift = Drift.from_steps(_steps(_margin_not_a_number()))
    assert not drift.holds, (drift.criterion, drift.failure)


def test_drift1_control_a_criterion_failing_with_its_answer_does_not_hold_and_a_pass_holds() -> None:
    failed = {"status": "failed", "error": "criterion failed: 3 of 24 miss", "layer": "comparison",
              "details": {"passed": False, "summary": "3 of 24 miss"}}
    refused = {"status": "failed", "error": "the criterion read files that are not declared sources: x",
               "layer": "application", "details": {"undeclared": [{"file": "x"}], "tip": "t"}}
    assert not Drift.from_steps(_steps(failed)).holds
    assert not Drift.from_steps(_steps(refused)).holds  # measured in a real session too
    passed = {"status": "passed", "details": {"passed": True, "summary": "each finds its pair"}}
    assert Drift.from_steps(_steps(passed)).holds


# PR1 --------------------------------------------------------------------------------------------------------------

P, Q = "cp311-linux_x86_64-cpu", "cp311-macosx_arm64-mps"


def _row(body: str, plat: str) -> str:
    return next(line for line in body.splitlines() if line.startswith(f"| {plat} |"))


def _q_copied_as_p(tmp_path: Path) -> Path:
    """Q's job's folders (out of tolerance, bisect: numpy), as written, copied under P's name (P's job left none)."""
    platform_result(tmp_path, Q, holds=False, culprit=[["numpy"]])
    shutil.copytree(tmp_path / Q, tmp_path / P, symlinks=True)
    return tmp_path


def test_pr1_premise_the_copied_folders_are_as_written_and_name_the_other_platform(tmp_path: Path) -> None:
    folder = _q_copied_as_p(tmp_path)
    assert file_as_written(folder / P / "upgrade", "upgrade.json") == ""
    assert file_as_written(folder / P / "bisect", "bisect.json") == ""
    assert json.loads((folder / P / "upgrade" / "upgrade.json").read_text(encoding="utf-8"))["platform"] == Q


def test_pr1_a_platforms_row_never_shows_another_platforms_result(tmp_path: Path) -> None:
    """Fixed: a result is shown only under the platform its upgrade.json names (upgrade/pullrequest.py)."""
    row = _row(pr_body([P, Q], _q_copied_as_p(tmp_path)), P)
    assert "OUT OF TOLERANCE" not in row and "numpy" not in row, row


def test_pr1_control_each_platform_its_own_result_and_a_missing_one_no_result(tmp_path: Path) -> None:
    platform_result(tmp_path, Q, holds=False, culprit=[["numpy"]])
    body = pr_body([P, Q], tmp_path)
    assert "**OUT OF TOLERANCE**; bisect: numpy" in _row(body, Q)
    assert "**no result**" in _row(body, P)


# PIP1 -------------------------------------------------------------------------------------------------------------


def _broken_lock(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A project whose lock pins tinyc 1.0 alone (it requires tinymissing), its wheel's folder, and an empty venv."""
    links = tmp_path / "links"
    project, _ = locked_tiny_project(tmp_path / "project", [write_wheel(links, "tinyc", "1.0", ("tinymissing>=1",))])
    other = tmp_path / "other"
    venv.create(other, with_pip=False)
    return project, links, other / "bin" / "python"


def _rebuild(project: Path, links: Path, tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"), **extra)
    return kd(project, "rebuild", "--installer", "uv", "--fresh", env=env)


def test_pip1_premise_pip_variables_steer_the_bundled_pips_check_and_freeze(tmp_path: Path) -> None:
    """The variables alone, on the pip rebuild runs (the base's wheel, run by the env's interpreter): PIP_PYTHON makes
    its check read the other interpreter's env, where nothing is broken; PIP_EXCLUDE drops a pin from its freeze."""
    wheel = pythons.bundled_pip(str(Path(sys.executable).resolve()))
    assert wheel is not None
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=False)
    links = tmp_path / "links"
    subprocess.run([str(env_dir / "bin" / "python"), f"{wheel}/pip", "install", "--no-deps", "--no-index", "-q",
                    str(write_wheel(links, "tinyc", "1.0", ("tinymissing>=1",)))], check=True, env=offline_env())
    other = tmp_path / "other"
    venv.create(other, with_pip=False)
    check = [str(env_dir / "bin" / "python"), f"{wheel}/pip", "check"]
    plain = subprocess.run(check, capture_output=True, text=True, env=offline_env(), check=False)
    assert plain.returncode == 1 and "tinymissing" in plain.stdout
    sent = subprocess.run(check, capture_output=True, text=True, check=False,
                          env=offline_env(PIP_PYTHON=str(other / "bin" / "python")))
    assert sent.returncode == 0 and "No broken requirements" in sent.stdout
    freeze = [str(env_dir / "bin" / "python"), f"{wheel}/pip", "freeze", "--all"]
    assert "tinyc" in subprocess.run(freeze, capture_output=True, text=True, env=offline_env(), check=True).stdout
    assert "tinyc" not in subprocess.run(freeze, capture_output=True, text=True, check=True,
                                         env=offline_env(PIP_EXCLUDE="tinyc")).stdout


def test_pip1_the_callers_pip_options_never_pass_a_broken_env(tmp_path: Path) -> None:
    """Fixed: check and freeze run with no PIP_* variable and no pip config (env/installenv.reading_env)."""
    project, links, other = _broken_lock(tmp_path)
    proc = _rebuild(project, links, tmp_path, PIP_PYTHON=str(other))
    assert proc.returncode != 0 and "tinymissing" in proc.stdout + proc.stderr, proc.stderr[-600:]


def test_pip1_control_without_the_variable_the_broken_env_is_refused(tmp_path: Path) -> None:
    project, links, _ = _broken_lock(tmp_path)
    proc = _rebuild(project, links, tmp_path)
    assert proc.returncode != 0 and "tinymissing" in proc.stdout + proc.stderr, proc.stderr[-600:]


def test_pip1_every_installed_pin_is_in_the_builds_records(tmp_path: Path) -> None:
    """Fixed: the build's freeze reads the env with no PIP_EXCLUDE (env/installenv.reading_env)."""
    links = tmp_path / "links"
    wheels = [write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")]
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    proc = _rebuild(project, links, tmp_path, PIP_EXCLUDE="tinya")
    if proc.returncode != 0:  # refusing the caller's option is a fix too
        return
    built = current_env(project, plat)
    recorded = json.loads((built / envdirs.MARKER).read_text(encoding="utf-8"))[binding.WHEELS]
    assert "tinya" in (built / rebuild.INVENTORY).read_text(encoding="utf-8") and "tinya" in recorded, recorded


def test_pip1_rebuild_never_installs_into_another_interpreters_env(tmp_path: Path) -> None:
    """Fixed: pip's install runs without the variables that say where it installs (env/installenv.installing_env)."""
    links = tmp_path / "links"
    project, _ = locked_tiny_project(tmp_path / "project", [write_wheel(links, "tinya", "1.0")])
    other = tmp_path / "other"
    venv.create(other, with_pip=False)
    env = offline_env(PIP_FIND_LINKS=str(links), PIP_PYTHON=str(other / "bin" / "python"))
    kd(project, "rebuild", "--installer", "pip", env=env)
    assert not list(other.glob("lib/python*/site-packages/tinya*"))


# PR2 --------------------------------------------------------------------------------------------------------------

_NOT_COMPARED = "inventory: the environment's observed inventory differs from the lock: numpy (files changed)"


def _upgraded(folder: Path, failure: str) -> Path:
    """P's upgrade folder as upgrade writes it for a verify that did not hold: ``failure`` set when a check failed
    before the outputs were compared (upgrade.json's keys as UpgradeResult.as_dict writes them)."""
    signed = folder / P / "upgrade"
    signed.mkdir(parents=True)
    beyond = OutputDrift("embeddings", "cosine", False, 0.5, 0.9, None, ">= 0.9999", "moved")
    drift = Drift((), None, failure) if failure else Drift((beyond,), None, "")
    data = {"version": 1, "platform": P, "holds": False, "failure": failure, "outputs": [], "criterion": None,
            "verdict": str(drift.verdict),  # as UpgradeResult.as_dict writes it (pass 59's fix)
            "changes": [{"name": "numpy", "kind": "downgraded", "old": "2.4.6", "new": "2.3.3"}]}
    (signed / "upgrade.json").write_text(json.dumps(data), encoding="utf-8")
    (signed / "upgrade.md").write_text(render_drift(drift), encoding="utf-8")
    outdir.mark(signed, "upgrade")
    return folder


def test_pr2_premise_upgrade_itself_says_not_verified(tmp_path: Path) -> None:
    text = (_upgraded(tmp_path, _NOT_COMPARED) / P / "upgrade" / "upgrade.md").read_text(encoding="utf-8")
    assert "not verified: inventory failed before the outputs were compared" in text
    assert "out of tolerance" not in text.lower()


def test_pr2_a_not_verified_upgrade_is_never_called_out_of_tolerance(tmp_path: Path) -> None:
    """Fixed: the row shows the verdict upgrade printed and exited with (upgrade.json's verdict)."""
    row = _row(pr_body([P], _upgraded(tmp_path, _NOT_COMPARED)), P)
    assert "OUT OF TOLERANCE" not in row, row


def test_pr2_control_outputs_compared_and_beyond_it_are_out_of_tolerance(tmp_path: Path) -> None:
    assert "**OUT OF TOLERANCE**" in _row(pr_body([P], _upgraded(tmp_path, "")), P)


def test_drift1_a_step_failing_after_the_comparison_is_not_verified_and_said_to_fail_after_it() -> None:
    """The same class's minor form: determinism failing after the outputs were compared within tolerance is NOT
    VERIFIED, worded as failing after the comparison (it said "before"); with nothing compared, "before"."""
    steps = _steps({"status": "passed", "details": {"passed": True, "summary": "ok"}})
    steps[-1] = {"name": "determinism", "status": "failed", "error": "runs differ", "details": {}}
    drift = Drift.from_steps(steps)
    assert str(drift.verdict) == "NOT VERIFIED" and "determinism failed after the outputs were compared" in \
        render_drift(drift)
    early = Drift.from_steps([{"name": "inventory", "status": "failed", "error": "x"},
                              {"name": "compare", "status": "not-run"}])
    assert "inventory failed before the outputs were compared" in render_drift(early)


def test_pip1_an_install_a_config_file_sends_elsewhere_promotes_no_env(tmp_path: Path) -> None:
    """What a variable cannot carry any more a pip config file still can (``[install] target``): the install lands
    outside the env, which the build then observes not to be the lock's, and no env is promoted (rebuild.py,
    require_the_locks). Control: the same rebuild without that option passes."""
    links = tmp_path / "links"
    project, plat = locked_tiny_project(tmp_path / "project", [write_wheel(links, "tinya", "1.0")])
    config = tmp_path / "pip.conf"
    config.write_text(f"[install]\ntarget = {tmp_path / 'elsewhere'}\n", encoding="utf-8")
    env = offline_env(PIP_FIND_LINKS=str(links), PIP_CONFIG_FILE=str(config))
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert list((tmp_path / "elsewhere").glob("tinya*")), "premise: pip took the config file's target"
    assert proc.returncode != 0 and "the installed env is not the lock's (-tinya==1.0)" in proc.stderr, proc.stderr
    assert "pip config list" in proc.stderr and not (project / ".venv-rebuild" / plat.id / "CURRENT").exists()
    proc = kd(project, "rebuild", "--installer", "pip", env=offline_env(PIP_FIND_LINKS=str(links)))
    assert proc.returncode == 0, proc.stderr[-600:]
