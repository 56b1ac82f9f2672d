"""The interpreter's homes (kernodeck/inenv/homes.py): the one list that the bytecode rule (_package.py) and the
closed world's trusted roots (paths.py) both read, computed once per process; and a project file that is a link into
the env, which the two lists computed apart judged differently (its bytecode cached beside the link, in the project)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from kernodeck.inenv import homes, paths

INENV = Path(__file__).resolve().parents[2] / "kernodeck" / "inenv"


def _python(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHON"))}
    return subprocess.run([str(python), "-I", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False,
                          timeout=120)


def test_the_trusted_roots_are_the_homes_plus_the_inenv_folder_and_the_pseudo_file_systems() -> None:
    extra = {str(INENV) + os.sep, "/proc/", "/sys/", "/dev/"}
    assert set(paths.TRUSTED) == set(homes.HOMES) | extra
    assert paths.UNTRUSTED == homes.NOT_HOMES
    base_site = sysconfig.get_path("purelib", vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    samples = [os.__file__, sysconfig.get_path("purelib") + "/mod.py", base_site + "/mod.py", "/tmp/project/app.py"]
    for path in samples:  # outside the in-env folder and the pseudo file systems, the two answers are one
        path = os.path.normpath(os.path.abspath(path))
        assert homes.home(path) == paths.trusted(path), path
    assert homes.home(os.path.normpath(os.__file__)) and not homes.home("/tmp/project/app.py")


def test_the_bytecode_rule_and_the_closed_world_read_the_list_computed_once(tmp_path: Path) -> None:
    code = ("import importlib.machinery as m, json, runpy, sys; runpy.run_path(sys.argv[1]);"
            " from kernodeck_inenv import homes, paths; rule = m.SourceFileLoader.get_code.kernodeck_homes;"
            " print(json.dumps([rule is homes, paths.UNTRUSTED is homes.NOT_HOMES,"
            " paths.TRUSTED[:len(homes.HOMES)] == homes.HOMES, list(homes.HOMES)]))")
    done = _python(Path(sys.executable), "-c", code, str(INENV / "_package.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    *same, found = json.loads(done.stdout)
    assert same == [True, True, True] and found == list(homes.HOMES)


def test_a_project_file_that_links_into_the_env_leaves_no_bytecode_in_the_project(tmp_path: Path) -> None:
    """The closed world judges a linked file by where its bytes are (the env: trusted); its bytecode cache would be
    written beside the link, in the project, and read there by the next run (an undeclared file: a false FAIL). Under
    the runner's rule it gets none; the control: the plain import path writes it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env_site = next((venv / "lib").glob("python3*/site-packages"))
    (env_site / "envhelper.py").write_text("Y = 2\n")
    checks = tmp_path / "checks"
    checks.mkdir()
    (checks / "helper.py").symlink_to(env_site / "envhelper.py")
    load = ("import importlib.util, runpy, sys; {prefix}"
            "s = importlib.util.spec_from_file_location('helper', sys.argv[2]);"
            " m = importlib.util.module_from_spec(s); s.loader.exec_module(m); assert m.Y == 2")
    guarded = _python(venv / "bin" / "python", "-c", load.format(prefix="runpy.run_path(sys.argv[1]); "),
                      str(INENV / "runner.py"), str(checks / "helper.py"), cwd=tmp_path)
    assert guarded.returncode == 0, guarded.stderr
    assert not (checks / "__pycache__").exists()
    plain = _python(venv / "bin" / "python", "-c", load.format(prefix=""), "-", str(checks / "helper.py"), cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert list((checks / "__pycache__").glob("helper.*.pyc"))  # the control


def _planted(folder: Path) -> None:
    """``folder/mod.py`` (``Y = 2``) with a timestamp-valid bytecode cache beside it of other source (``Y = 9``)."""
    import py_compile

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "mod.py"
    source.write_text("Y = 9\n")
    stamp = source.stat().st_mtime_ns
    py_compile.compile(str(source), doraise=True)
    source.write_text("Y = 2\n")  # same size; the same mtime: the cache still looks current
    os.utime(source, ns=(stamp, stamp))


def test_an_env_folder_or_file_that_links_out_of_the_env_never_reads_the_bytecode_beside_it(tmp_path: Path) -> None:
    """A path given inside a home runs cached bytecode only when it also resolves inside one (its folder resolved once
    per run, its own link each time): a folder of site-packages that links to the project, or a module file there that
    links to one, is compiled from its bytes; the control: the plain import path runs the planted bytecode."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env_site = next((venv / "lib").glob("python3*/site-packages"))
    _planted(tmp_path / "project" / "pkgdir")
    (env_site / "linkedpkg").symlink_to(tmp_path / "project" / "pkgdir", target_is_directory=True)
    _planted(tmp_path / "project" / "single")
    (env_site / "filepkg").mkdir()
    (env_site / "filepkg" / "mod.py").symlink_to(tmp_path / "project" / "single" / "mod.py")
    (env_site / "filepkg" / "__pycache__").symlink_to(tmp_path / "project" / "single" / "__pycache__",
                                                     target_is_directory=True)
    load = "import runpy, sys; {prefix}import linkedpkg.mod as a, filepkg.mod as b; print(a.Y, b.Y)"
    guarded = _python(venv / "bin" / "python", "-c", load.format(prefix="runpy.run_path(sys.argv[1]); "),
                      str(INENV / "runner.py"), cwd=tmp_path)
    assert guarded.returncode == 0, guarded.stderr
    assert guarded.stdout.split() == ["2", "2"]
    plain = _python(venv / "bin" / "python", "-c", load.format(prefix=""), cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.split() == ["9", "9"]  # the control: the planted bytecode ran
