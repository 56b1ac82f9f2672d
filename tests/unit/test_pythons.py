"""The platform's Python, found on the machine: shims that exit 127, pyenv's versions folder, uv, downloads only when
allowed, and one ERROR + TIP when nothing fits. Fake layouts only; the interpreters run are this machine's own."""

from __future__ import annotations

import os
import platform as _platform
import stat
import sys
from pathlib import Path

import pytest

from kernodeck.env import pythons
from kernodeck.env.pythons import FoundBy, PythonNotFound, Search
from kernodeck.errors import KernodeckError
from kernodeck.project import platforms
from kernodeck.project.config import load_project
from tests.helpers.project import ROOT, copy_project, kd

HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
OS_ARCH = platforms.current_os_arch()
REAL = str(getattr(sys, "_base_executable", sys.executable))  # this CPython, outside any venv


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def shim(folder: Path, name: str) -> Path:
    """What pyenv's shim does for a version that is installed but not enabled."""
    return script(folder / name, f"echo 'pyenv: {name}: command not found' >&2\necho >&2\nexit 127")


def link(path: Path, target: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


def fake_pyenv(root: Path, *versions: str) -> Path:
    for version in versions:
        link(root / "versions" / version / "bin" / f"python{HERE}", REAL)
    return root


def search(tmp_path: Path, **kwargs: object) -> Search:
    defaults: dict[str, object] = {"path": "", "pyenv_root": tmp_path / "no-pyenv", "system_dirs": (), "uv": None,
                                   "running": False}
    return Search(**{**defaults, **kwargs})  # type: ignore[arg-type]


pytestmark = pytest.mark.skipif(os.name == "nt", reason="fake shims are shell scripts")


def test_a_shim_exiting_127_is_skipped_and_pyenvs_newest_patch_is_found(tmp_path: Path) -> None:
    shims = tmp_path / "shims"
    shim(shims, f"python{HERE}")
    root = fake_pyenv(tmp_path / "pyenv", f"{HERE}.1", f"{HERE}.99", f"{HERE}.10")
    (root / "versions" / f"{HERE}-dev").mkdir()  # not an exact CPython version: ignored
    where = search(tmp_path, path=str(shims), pyenv_root=root)
    found = pythons.find(HERE, OS_ARCH, where)
    assert found.found_by is FoundBy.PYENV
    assert found.candidate == str(root / "versions" / f"{HERE}.99" / "bin" / f"python{HERE}")
    assert found.version.startswith(HERE + ".")  # what the interpreter said when run, not the folder's name
    assert where.skipped == [f"{shims / f'python{HERE}'} (exit 127: pyenv: python{HERE}: command not found)"]


def test_a_uv_that_gives_up_on_a_shim_does_not_stop_the_search(tmp_path: Path) -> None:
    calls = tmp_path / "uv-calls"
    uv = script(tmp_path / "uv", f"echo \"$@\" >> {calls}\n"
                "echo 'error: Failed to inspect Python interpreter from first executable in the search path' >&2\n"
                "exit 2")
    shims, real_bin = tmp_path / "shims", tmp_path / "bin"
    shim(shims, f"python{HERE}")
    link(real_bin / f"python{HERE}", REAL)
    where = search(tmp_path, path=os.pathsep.join([str(shims), str(real_bin)]), uv=str(uv))
    found = pythons.find(HERE, OS_ARCH, where)
    assert (found.found_by, found.candidate) == (FoundBy.PATH, str(real_bin / f"python{HERE}"))
    assert "python find --no-python-downloads --system" in calls.read_text()


def test_a_python_under_the_right_name_but_another_version_is_skipped(tmp_path: Path) -> None:
    other = "3.99"
    impostor = link(tmp_path / "bin" / f"python{other}", REAL)  # named 3.99, is this Python: running it tells
    where = search(tmp_path, path=str(tmp_path / "bin"))
    with pytest.raises(PythonNotFound) as err:
        pythons.find(other, OS_ARCH, where)
    assert f"{impostor} (Python {HERE}." in str(err.value)


def test_an_interpreter_for_another_architecture_is_skipped(tmp_path: Path) -> None:
    link(tmp_path / "bin" / f"python{HERE}", REAL)
    other = "linux_riscv64" if "riscv" not in _platform.machine() else "linux_x86_64"
    with pytest.raises(PythonNotFound) as err:
        pythons.find(HERE, other, search(tmp_path, path=str(tmp_path / "bin")))
    assert f"built for {_platform.machine()}, not {other.split('_', 1)[1]}" in str(err.value)
    # the running interpreter gets the same check, answered in-process
    with pytest.raises(PythonNotFound):
        pythons.find(HERE, other, search(tmp_path, running=True))
    assert pythons.find(HERE, OS_ARCH, search(tmp_path, running=True)).found_by is FoundBy.RUNNING


def test_no_matching_python_is_one_error_and_a_tip_saying_how_to_get_one(tmp_path: Path) -> None:
    shim(tmp_path / "shims", f"python{HERE}")
    root = fake_pyenv(tmp_path / "pyenv")  # a pyenv with nothing installed
    (root / "versions").mkdir(parents=True)
    with pytest.raises(PythonNotFound) as err:
        pythons.find(HERE, OS_ARCH, search(tmp_path, path=str(tmp_path / "shims"), pyenv_root=root))
    message, tip = str(err.value), err.value.tip
    assert message.startswith(f"no CPython {HERE} for {OS_ARCH} on this machine (looked in: PATH, pyenv's")
    assert "exit 127: pyenv:" in message
    assert f"uv python install {HERE}" in tip and f"pyenv install {HERE}" in tip
    assert "KERNODECK_PYTHON_DOWNLOADS=1 nox -s verify" in tip


def _fake_uv_with_installs(tmp_path: Path) -> tuple[Path, Path]:
    """A uv whose managed Pythons appear only after `uv python install`: it logs every call."""
    calls, installed = tmp_path / "uv-calls", tmp_path / "managed" / f"python{HERE}"
    uv = script(tmp_path / "uv", f"""echo "$@" >> {calls}
case "$*" in
  "python install {HERE}") mkdir -p {installed.parent} && ln -sf {REAL} {installed}; exit 0;;
  *--managed-python*) [ -e {installed} ] && echo {installed} && exit 0; exit 2;;
  *) exit 2;;
esac""")
    return uv, calls


def test_uv_installs_a_managed_python_only_when_the_user_allows_it(tmp_path: Path) -> None:
    uv, calls = _fake_uv_with_installs(tmp_path)
    with pytest.raises(PythonNotFound):
        pythons.find(HERE, OS_ARCH, search(tmp_path, uv=str(uv)))
    assert "install" not in calls.read_text()  # never a silent download
    found = pythons.find(HERE, OS_ARCH, search(tmp_path, uv=str(uv), downloads=True))
    assert found.found_by is FoundBy.UV_INSTALLED and found.candidate == str(tmp_path / "managed" / f"python{HERE}")
    assert f"python install {HERE}" in calls.read_text()


def test_an_explicit_base_python_is_checked_not_skipped(tmp_path: Path) -> None:
    found = pythons.find(HERE, OS_ARCH, search(tmp_path, explicit=REAL, running=True))
    assert found.found_by is FoundBy.EXPLICIT and found.path == REAL
    wrong = shim(tmp_path / "shims", f"python{HERE}")
    with pytest.raises(PythonNotFound) as err:
        pythons.find(HERE, OS_ARCH, search(tmp_path, explicit=str(wrong), running=True))
    assert str(err.value).startswith(f"KERNODECK_BASE_PYTHON={wrong} is not a CPython {HERE}")
    assert err.value.tip == f"point KERNODECK_BASE_PYTHON at a CPython {HERE}, or unset it to let kernodeck find one"


def test_the_declared_platform_is_chosen_whatever_python_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    project = load_project(ROOT)
    monkeypatch.setattr(platforms, "current_os_arch", lambda: "linux_x86_64")
    monkeypatch.setattr(platforms, "current_python", lambda: "3.12")
    # cp312-linux_x86_64-cpu is declared lock-on-runner (no committed lock): the locked cp311 is chosen
    assert not (project.lockfiles / "cp312-linux_x86_64-cpu.txt").exists()
    assert platforms.resolve_platform(project).id == "cp311-linux_x86_64-cpu"
    # cu130 is locked for 3.11, 3.12 and 3.13: the running Python's own lock
    assert platforms.resolve_platform(project, variant="cu130").id == "cp312-linux_x86_64-cu130"
    monkeypatch.setattr(platforms, "current_python", lambda: "3.10")  # not declared: the first locked one
    assert platforms.resolve_platform(project, variant="cu130").id == "cp311-linux_x86_64-cu130"
    monkeypatch.setattr(platforms, "current_python", lambda: "3.12")
    # nothing declared for this OS/arch: the running Python (an undeclared platform, locked from here)
    monkeypatch.setattr(platforms, "current_os_arch", lambda: "linux_aarch64")
    assert platforms.resolve_platform(project).id == "cp312-linux_aarch64-cpu"


def test_a_wrong_base_python_stops_rebuild_with_one_error_and_a_tip(tmp_path: Path) -> None:
    """The CLI boundary: nothing is built, one ERROR line naming the interpreter, one TIP."""
    project = copy_project(tmp_path / "project")
    wrong = shim(tmp_path / "shims", f"python{HERE}")
    proc = kd(project, "rebuild", env=dict(os.environ, KERNODECK_BASE_PYTHON=str(wrong)))
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith(("ERROR:", "TIP:"))]
    assert len(errors) == 2 and errors[0].startswith(f"ERROR: KERNODECK_BASE_PYTHON={wrong} is not a CPython 3.11")
    assert "exit 127" in errors[0] and errors[1].startswith("TIP: ")
    assert not list((project / ".venv-rebuild").glob("*/env-*"))


def test_the_bundled_pip_is_the_wheel_ensurepip_installs_or_none(tmp_path: Path) -> None:
    """bundled_pip: this CPython's ensurepip wheel; None for a base without ensurepip, one that fails, one that names
    no wheel, and a path that is not there (the rebuild then falls back to seeding pip with python -m venv)."""
    import ensurepip

    found = pythons.bundled_pip(REAL)
    assert found is not None and Path(found).parent == Path(ensurepip.__file__).parent / "_bundled"
    assert Path(found).name.startswith("pip-") and Path(found).is_file()
    # negative: a base python without ensurepip (Debian's without python3-venv), failing, or naming nothing there
    stripped = tmp_path / "stripped"
    (stripped / "ensurepip").mkdir(parents=True)
    (stripped / "ensurepip" / "__init__.py").write_text("raise ImportError('removed by the distribution')\n",
                                                        encoding="utf-8")
    no_ensurepip = script(tmp_path / "bin" / "python-a", f'PYTHONPATH={stripped} exec {REAL} -c "$3"')  # not -I
    for base in (no_ensurepip, script(tmp_path / "bin" / "python-b", "exit 1"),
                 script(tmp_path / "bin" / "python-c", f"echo {tmp_path}/pip-99.0-py3-none-any.whl"),
                 tmp_path / "absent"):
        assert pythons.bundled_pip(str(base)) is None, base
    # control: the same wrapper without the stripped ensurepip finds the wheel
    assert pythons.bundled_pip(str(script(tmp_path / "bin" / "python-d", f'exec {REAL} -c "$3"'))) == found


def test_marker_values_are_the_interpreters_own_as_packaging_computes_them(tmp_path: Path) -> None:
    """marker_values asks the interpreter (-I -S): this one's equal packaging's default_environment here; one that
    does not answer is one ERROR with the rebuild TIP, never Kernodeck's own values in its place."""
    from packaging.markers import default_environment

    assert pythons.marker_values(REAL) == {k: str(v) for k, v in default_environment().items()}
    with pytest.raises(KernodeckError, match="cannot report its marker values") as refused:
        pythons.marker_values(str(script(tmp_path / "bin" / "python-x", "echo not-json")))
    assert refused.value.tip == "nox -s rebuild -- --fresh"


def test_marker_values_asked_ahead_are_the_same_answer_read_once(tmp_path: Path) -> None:
    """ask_markers starts the probe (verify's rebuild step, for the base interpreter); marker_values reads its answer
    once, then asks afresh; one that does not answer is refused as before."""
    from packaging.markers import default_environment

    pythons.ask_markers(REAL)
    assert REAL in pythons._ASKED
    assert pythons.marker_values(REAL) == {k: str(v) for k, v in default_environment().items()}
    assert REAL not in pythons._ASKED and pythons.marker_values(REAL) == pythons.marker_values(REAL)
    bad = str(script(tmp_path / "bin" / "python-x", "echo not-json"))
    pythons.ask_markers(bad)
    with pytest.raises(KernodeckError, match="cannot report its marker values"):
        pythons.marker_values(bad)
