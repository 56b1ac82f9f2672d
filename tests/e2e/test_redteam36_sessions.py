"""Red-team pass 36, the finding that needs whole sessions (notes: /work/notes/redteam36.md; the unit ones are in
tests/unit/test_redteam36.py).

BIND1 (``verify -- --python`` on the env Kernodeck built skips the binding; FALSE PASS): the env's record of the lock
it was built from (kernodeck-complete.json: the lock body's digest, each installed wheel's hash) is held to the lock
only by the rebuild step, which ``--python`` skips ("verifying an existing interpreter; nothing installed"). The
inventory step then finds the build's snapshot ("files unchanged since the build") and the names and versions equal,
and the verdict is ``passed: the environment is the lock's``, not ``passed-unlocked``. Issue 29's case 2 again: one
wheel hash removed from the lock (same version), resealed, the twin rewritten; ``verify -- --no-rebuild`` refuses the
env ("is not the lock's"), ``verify -- --python <that env>/bin/python`` passes it. Shown through real sessions on this
repository (numpy's first hash: rc 0, PASSED, "the environment's packages are exactly the lock's ✅ established") and
here on the tiny hermetic lock of tests/e2e/test_env_binding.py. CONTROL: ``--no-rebuild`` on the same env refuses it.

START1 (``compare`` and ``drift`` start the env's interpreter before its files are known clean; code no lock
describes runs): docs/env-integrity.md: "the refusal must come before anything starts that interpreter, or the
dropped code runs once (and can make the interpreter report anything)". ``nox -s compare`` and ``nox -s drift`` take
the current env's interpreter (``compare.env_python_for``, ``drift_map.interpreter``) and start it with ``site`` on
to compute their numbers, with no file check: a ``zz.pth`` dropped into the env's site-packages ran at ``nox -s
compare -- runs/base runs/base`` ("identical") and at ``nox -s drift -- runs/base runs/base`` (marker written by
both, real sessions on this repository). Shown here on the tiny env: the interpreter compare hands out is the one
with the foreign ``.pth``. CONTROL: ``verify -- --no-rebuild`` refuses that env, naming the file, before it starts.

LINEAGE1 (a reference made from an unproven run records nothing of it; WRONG CLAIM of its lineage):
``reference -- --python PATH`` with an interpreter Kernodeck does not know as a build (here a two-line wrapper that
execs the rebuilt env's python) runs as ``PASSED-UNLOCKED`` ("NOT established: that every file of the environment
is the lock's ...; nor, therefore, that the application read only declared inputs") and ``new_reference.create``
writes the reference anyway (it checks the run's status, not its verdict). The manifest records no trace of it; a
later ``verify -- --no-rebuild`` is PASSED with "reference lineage: ..., made ..., with lock sha256:08cb..." and "What
differs from the reference": nothing. Real sessions on this repository; here on a sibling sharing the rebuilt env
(the run itself is shown PASSED-UNLOCKED in the test, its premise).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from kernodeck._fs import sha256_file
from kernodeck.dossier import compare
from kernodeck.env.envdirs import marker
from kernodeck.errors import KernodeckError
from kernodeck.lock import lockfile
from kernodeck.measure import drift_map
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from kernodeck.upgrade import bisect as bisecting
from tests.helpers.builtenv import env_python, sibling
from tests.helpers.project import ROOT, kd
from tests.helpers.reports import read_report, statuses
from tests.helpers.tinylock import current_env, locked_tiny_project, offline_env, pip_wheel, write_wheel


def _edit_lock(project: Path, lock: str, env: dict[str, str], old: str, new: str) -> None:
    """Edit the lock's body, reseal it and rewrite its twin as a user would (``lock -- --pylock-only``)."""
    path = project / "lockfiles" / f"{lock}.txt"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1
    path.write_text(lockfile.seal(text.replace(old, new)), encoding="utf-8")
    assert kd(project, "lock", "--pylock-only", env=env).returncode == 0
    assert kd(project, "lock", "--check", env=env).returncode == 0  # the edited lock passes every check of its own


def _unbound(tmp_path: Path) -> tuple[Path, dict[str, str], Path]:
    """The tiny project rebuilt with uv, then the installed wheel's hash removed from its lock (resealed, twin
    rewritten): (project, env, the env's interpreter)."""
    links = tmp_path / "links"
    installed = write_wheel(links, "tinya", "1.0")
    other = write_wheel(tmp_path / "other", "tinya", "1.0", payload="OTHER = 1\n")
    other = other.rename(links / "tinya-1.0-py2-none-any.whl")
    project, plat = locked_tiny_project(tmp_path / "project", [pip_wheel(links), installed,
                                                               write_wheel(links, "tinyb", "2.0")])
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    good, alt = sha256_file(installed), sha256_file(other)
    both = f"--hash=sha256:{good} \\\n    --hash=sha256:{alt}"
    _edit_lock(project, plat.id, env, f"--hash=sha256:{good}", both)  # the pin accepts two builds of tinya 1.0
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    _edit_lock(project, plat.id, env, both, f"--hash=sha256:{alt}")  # the installed one's hash removed
    return project, env, current_env(project, plat) / "bin" / "python"


def current_env_of(project: Path, platform_id: str) -> Path:
    return current_env(project, resolve_platform(load_project(project), platform_id))


def _with_pth(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    """The tiny project rebuilt with uv, a foreign ``.pth`` dropped into its env: (project, env, platform id)."""
    links = tmp_path / "links"
    project, plat = locked_tiny_project(tmp_path / "project", [pip_wheel(links), write_wheel(links, "tinya", "1.0")])
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    assert kd(project, "rebuild", "--installer", "uv", env=env).returncode == 0
    (site,) = (current_env(project, plat) / "lib").glob("python3.*/site-packages")
    (site / "zz-rt36.pth").write_text(f"import os; open({str(tmp_path / 'ran')!r}, 'a').write('ran')\n")
    return project, env, plat.id


def test_control_verify_refuses_the_env_with_a_foreign_pth_before_starting_it(tmp_path: Path) -> None:
    """The runner is given its word only once the inventory has shown every file of the env the build's
    (kernodeck/early.py; it may start before, on the proof of the files its start reads, with ``-S --wait``: no
    ``site``): the inventory fails on the foreign ``.pth``, no runner but a waiting one is started, the ``.pth`` line
    never ran."""
    project, env, _ = _with_pth(tmp_path)
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env=env)
    assert proc.returncode != 0 and "zz-rt36.pth" in proc.stderr, proc.stderr[-2000:]
    started = [line for line in proc.stderr.splitlines() if line.startswith("$ ") and "runner.py" in line]
    assert all(" -S " in line and " --wait " in line for line in started), started
    assert not (tmp_path / "ran").exists()


def test_start1_compare_does_not_hand_out_an_env_with_a_foreign_pth(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: compare's and drift's interpreter is handed out only once the env's files are the build's
    (env/sealing.py checked_python), refused before it starts; the control: the clean env is handed out."""
    project, _, platform_id = _with_pth(tmp_path)
    monkeypatch.chdir(project)
    for borrow in (lambda: compare.env_python_for([platform_id]),
                   lambda: drift_map.interpreter(load_project(project), None)):
        with pytest.raises(KernodeckError, match=r"zz-rt36\.pth"):
            borrow()
    assert not (tmp_path / "ran").exists()
    (next((current_env_of(project, platform_id) / "lib").glob("python3.*/site-packages")) / "zz-rt36.pth").unlink()
    assert compare.env_python_for([platform_id]) == drift_map.interpreter(load_project(project), None)


def test_start1_bisect_uses_the_current_env_only_with_the_builds_files(tmp_path: Path) -> None:
    """bisect's first trial (the new lock's env as upgrade left it) borrows the current env the same way: with a
    foreign .pth it is not used (the trial rebuilds); the control: the clean env is used."""
    project, _, platform_id = _with_pth(tmp_path)
    env = current_env_of(project, platform_id)
    loaded = load_project(project)
    trials = SimpleNamespace(project=loaded, plat=resolve_platform(loaded, platform_id),
                             bad_digest=marker(env)["lock_digest"])
    assert bisecting._Trials.new_lock_env(trials) is None  # type: ignore[arg-type]
    assert not (tmp_path / "ran").exists()
    (next((env / "lib").glob("python3.*/site-packages")) / "zz-rt36.pth").unlink()
    assert bisecting._Trials.new_lock_env(trials) == env  # type: ignore[arg-type]


def test_control_no_rebuild_refuses_the_env_of_another_lock(tmp_path: Path) -> None:
    project, env, _ = _unbound(tmp_path)
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env=env)
    assert proc.returncode == 2 and "is not the lock's" in proc.stderr, proc.stderr[-2000:]


def test_bind1_python_on_the_env_of_another_lock_is_not_the_locks(tmp_path: Path) -> None:
    """Fixed: --python on a built env holds its build to the lock as the rebuild step does; unbound, the env is not
    shown to be the lock's (passed-unlocked, naming why), and --strict fails it."""
    project, env, python = _unbound(tmp_path)
    proc = kd(project, "verify", "--python", str(python), "--out", str(tmp_path / "run"), env=env)
    report = read_report(tmp_path / "run")  # (the tiny env has no torch: the in-env steps fail after it)
    (inventory,) = [s for s in report["steps"] if s["name"] == "inventory"]  # type: ignore[union-attr]
    assert inventory["status"] == "passed" and inventory["details"]["bound_to_lock"] is False, proc.stderr[-2000:]
    assert any("a Kernodeck build, but" in n and "tinya" in n for n in report["verdict"]["not_established"]), report  # type: ignore[index]
    strict = kd(project, "verify", "--python", str(python), "--strict", "--out", str(tmp_path / "strict"), env=env)
    assert strict.returncode != 0 and "is not the lock's" in strict.stderr, strict.stderr[-2000:]
    assert statuses(read_report(tmp_path / "strict"))["inventory"] == "failed"


# --- LINEAGE1 --------------------------------------------------------------------------------------------------------

REAL = env_python(ROOT)


@pytest.mark.skipif(not REAL.exists(), reason="needs this checkout's rebuilt env (nox -s rebuild)")
def test_lineage1_no_reference_from_an_unproven_run(tmp_path: Path) -> None:
    """Fixed: a reference is made only from a run that proves the env and the closed world (ERROR + TIP)."""
    project = sibling(ROOT, tmp_path)
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec {REAL.absolute()} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    before = (project / "dossier" / "reference" / "manifest.toml").read_text(encoding="utf-8")
    proc = kd(project, "reference", "--python", str(wrapper), "--new")
    assert "PASSED-UNLOCKED" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-2000:]
    after = (project / "dossier" / "reference" / "manifest.toml").read_text(encoding="utf-8")
    assert proc.returncode == 2 and after == before, (proc.stdout + proc.stderr)[-2000:]
    assert "ERROR: the reference run passed without establishing" in proc.stderr and "TIP:" in proc.stderr
