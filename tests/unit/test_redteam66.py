"""Red-team pass 66 (notes: /work/notes/redteam66.md): the fixes of ca468c6..d38630d attacked by class (a sibling
of each fixed case): the homes trusted as written (HOMELINK1's class), the env being the lock's, the run's end.

ENVLINK1 (kernodeck/inenv/paths.py ``opened``/``trusted``, homes.py ``READ_HOMES``): HOMELINK1's fix judges a read
under a home reached through a link by the file it opens, but a path under the env's own prefix (resolved, so a
READ_HOME) is still trusted as written, with no link on it resolved, and the env holds links that leave it: the
venv's ``bin/python`` (``bin/python3``, ``bin/python3.X``) names the base interpreter by the path its ``home`` has,
through the base's link when there is one (uv's minor-version link, Homebrew's ``opt/``, ``~/py311 -> ...``: the
setup HOMELINK1 measured). The application removes that link above the base and makes it again onto a folder of its
own (neither is refused: the guard knows the homes, not the links above them), reads ``<env>/bin/python``, which
opens the stash's ``bin/python3.X`` (an undeclared file from anywhere: recorded nowhere), and puts the link back.
Measured through the real hook (the closed project's criterion, run by a venv of a base reached through a link).
The same read with the base's binary itself renamed aside and a link left in its place works with no link above the
base at all wherever the base's ``bin`` is the user's (pyenv, uv, conda; root in a container): by reading.
Fix idea by class: trust a path as written only while no link on it leads out of the home (the env's own links are
few and known: ``bin/python*``, ``lib64``), i.e. judge a read through ``<env>/bin/python*`` by the file it opens; or
take the links the env's ``bin/python*`` go through (as links.take does for the declared names) and hold them.

CALEXIT1 (kernodeck/measure/variations.py ``read_variation``): EXIT1's class (092e49c: a check process that fails
after its last step is no pass) in calibrate: a variation whose ``noise.json`` exists without ``failed`` is read as
passed whatever the exit code ``run_in_env`` returned (the code is used only when noise.json is missing). Measured on a
fake variation process (noise.json written, then exit 1): status passed. A stop there is kept (stopped_variation);
drift's pairwise process checks its exit (drift_map). Fix idea: a code other than 0 with noise.json is a failed
variation naming the exit and the first error, as runner_end does for verify.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.closedworld import criterion_doing, linked_base_venv, swapped_read

SECRET = "threshold=0.7\n"
VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="links and the audit hook's paths as on Linux")


def _linked_base_venv(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(the venv, the link, a stash holding ``bin/python3.X``, a text file)."""
    return linked_base_venv(tmp_path, f"bin/python{VERSION}", SECRET)


def _criterion_doing(tmp_path: Path, doing: str, python: Path) -> dict[str, object]:
    return criterion_doing(tmp_path, doing, python)


def test_envlink1_premise_the_envs_python_goes_through_the_link(tmp_path: Path) -> None:
    venv, link, _ = _linked_base_venv(tmp_path)
    # bin/python names bin/python3.X (venv) or the base itself (uv venv); either way the chain goes through the link
    assert os.readlink(venv / "bin" / f"python{VERSION}") == str(link / "bin" / f"python{VERSION}")


def test_envlink1_control_the_stashed_file_by_its_own_path_is_refused(tmp_path: Path) -> None:
    venv, _, stash = _linked_base_venv(tmp_path)
    result = _criterion_doing(tmp_path, f"open({str(stash / 'bin' / f'python{VERSION}')!r}).read()",
                              venv / "bin" / "python")
    assert result["status"] == "failed", result
    assert f"python{VERSION}" in str(result["error"]), result


def test_envlink1_a_file_read_through_the_envs_python_link_is_judged(tmp_path: Path) -> None:
    venv, link, stash = _linked_base_venv(tmp_path)
    real = os.readlink(link)
    result = _criterion_doing(tmp_path, swapped_read(link, stash, venv / "bin" / "python", SECRET),
                              venv / "bin" / "python")
    assert os.readlink(link) == real  # the link is put back: nothing is left to see after the call
    assert result["status"] == "failed", result  # was: passed, the stash's file read and recorded nowhere
    assert f"python{VERSION}" in str(result["error"]), result


def test_envlink1_control_the_interpreter_read_through_the_envs_python_is_trusted(tmp_path: Path) -> None:
    """The honest read under the fix: ``platform.libc_ver()`` opens ``sys.executable`` (the env's bin/python, through
    the base's link): the running interpreter's own file, trusted by the path it runs from."""
    venv, _, _ = _linked_base_venv(tmp_path)
    result = _criterion_doing(tmp_path, "import platform; assert platform.libc_ver()[0] == 'glibc'",
                              venv / "bin" / "python")
    assert result["status"] == "passed", result


# CALEXIT1 -----------------------------------------------------------------------------------------------------------
# EXIT1's class in calibrate (kernodeck/measure/variations.py ``read_variation``): a variation's process whose
# noise.json says its steps passed is read as passed whatever its exit code; one that failed after its last step
# (exit 1: the margin file's write failing, an application's thread ending the process) is a measured variation.

CAL_RUNNER = '''\
import json, sys
from pathlib import Path

config = Path(sys.argv[sys.argv.index("--config") + 1])
mode = json.loads(config.read_text())["fake_mode"]
noise = {"variation": {}, "outputs": {"x": {"passed": True, "summary": "ok", "numbers": {}, "bitwise_equal": True}},
         "observed": {}}
(config.parent / "noise.json").write_text(json.dumps(noise))
sys.stderr.write("after the last step: failed\\n" if mode == "fails" else "")
sys.exit(1 if mode == "fails" else 0)
'''


def _variation_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str) -> list[object]:
    from kernodeck.measure import variations
    from kernodeck.project.deadlines import Deadlines

    project = tmp_path / "project"
    project.mkdir()
    runner = tmp_path / "fake_calibrate.py"
    runner.write_text(CAL_RUNNER, encoding="utf-8")
    monkeypatch.setattr(variations, "IN_ENV", runner)
    staging = tmp_path / "cal"
    plan = [variations.Variation("declared", "the declared settings")]
    return list(variations.run_all(Path(sys.executable), staging, {"project_root": str(project), "fake_mode": mode},
                                   plan, staging / "margins.json", Deadlines(stall=30.0)))


def test_calexit1_premise_the_variations_process_exits_1_after_noise_json(tmp_path: Path) -> None:
    runner = tmp_path / "fake_calibrate.py"
    runner.write_text(CAL_RUNNER, encoding="utf-8")
    config = tmp_path / "run-config.json"
    config.write_text('{"fake_mode": "fails"}', encoding="utf-8")
    done = subprocess.run([sys.executable, str(runner), "--config", str(config)], check=False, timeout=60)
    assert done.returncode == 1 and (tmp_path / "noise.json").is_file()


def test_calexit1_control_a_variation_that_ends_cleanly_passes(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _variation_runs(tmp_path, monkeypatch, "ends")
    assert [r.status for r in runs] == ["passed"]  # type: ignore[attr-defined]


def test_calexit1_a_variation_failing_after_its_last_step_is_no_pass(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """CALEXIT1 (fixed): a code other than 0 after noise.json is a failed variation, its exit and first error named."""
    runs = _variation_runs(tmp_path, monkeypatch, "fails")
    assert [r.status for r in runs] == ["failed"], runs  # type: ignore[attr-defined]  # was: passed
    assert "failed after its last step (exit 1)" in runs[0].error  # type: ignore[attr-defined]


def test_envlink1_control_an_env_reached_through_a_link_keeps_its_modules(tmp_path: Path) -> None:
    """The fixes' control (a full run caught it): an env whose path goes through a link (a shared env, a venv-root
    behind a link) is still a home: its modules imported before the window (numpy's extension) and in it are the
    env's, judged by the file the path opens, never taken for project code and loaded again."""
    venv, _, _ = _linked_base_venv(tmp_path)
    through = tmp_path / "through"
    through.symlink_to(venv)
    doing = "import numpy, json, decimal; assert numpy.zeros(2).sum() == 0 and json.dumps(1) and decimal.Decimal(1)"
    result = _criterion_doing(tmp_path, doing, through / "bin" / "python")
    assert result["status"] == "passed", result
