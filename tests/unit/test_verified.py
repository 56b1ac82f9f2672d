"""Code runs only from verified bytes, in a closed world (kernodeck/inenv/_package.py, verified.py, world.py).

Each case runs the in-env side as the runner does (this folder loaded by path as ``kernodeck_inenv``), in a new
process of this interpreter (numpy is all it needs: the env's place is taken by this venv), on a tiny project in
tmp_path: a planted timestamp-valid ``.pyc`` never runs (with the control that the plain import path runs it), and
every file the application reads is the env's, the stdlib's or declared, or its step fails naming the file.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import py_compile
import shutil
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kernodeck._fs import inenv_fingerprints
from kernodeck.errors import ConfigError
from kernodeck.inenv.setters import OWN_CHOICE
from kernodeck.project import app_contract
from tests.helpers.closedworld import (
    APP,
    HARNESS,
    INENV,
    _closed_project,
    _python,
    _run,
    _script,
    _settings_project,
    _with_criterion,
)
from tests.helpers.planted import PLANT, plant_pyc


def test_a_planted_pyc_of_the_entry_never_runs_and_the_plain_import_path_would_run_it(tmp_path: Path) -> None:
    app = tmp_path / "checks" / "app.py"
    app.parent.mkdir()
    app.write_text("def run(app):\n    return 'source'\n")
    marker = tmp_path / "marker"
    plant_pyc(app, PLANT.format(marker=str(marker)))
    digest = hashlib.sha256(app.read_bytes()).hexdigest()

    control = ("import importlib.util, sys; s = importlib.util.spec_from_file_location('app', sys.argv[1]); "
               "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)")
    assert _python("-c", control, str(app), cwd=tmp_path).returncode == 0
    assert marker.is_file()  # the control: the old way (spec_from_file_location + exec_module) ran the .pyc
    marker.unlink()

    ours = ("import runpy, sys; from pathlib import Path; runpy.run_path(sys.argv[1]);"
            " from kernodeck_inenv._common import load_file;"
            " print(load_file(Path(sys.argv[2]), 'user_app', sys.argv[3]).run(None))")
    done = _python("-c", ours, str(INENV / "_package.py"), str(app), digest, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "source" and not marker.exists()

    # The bytes are checked against the fingerprint: another file's digest refuses it, nothing of it runs.
    app.write_text(PLANT.format(marker=str(marker)) + app.read_text())
    done = _python("-c", ours, str(INENV / "_package.py"), str(app), digest, cwd=tmp_path)
    assert done.returncode != 0 and "is not the file fingerprinted for this run" in done.stderr
    assert not marker.exists()


def _inenv_copy(tmp_path: Path) -> Path:
    """Kernodeck's in-env folder as it reaches an env (a checkout, or an installed distribution's site-packages)."""
    folder = tmp_path / "inenv"
    folder.mkdir()
    for path in INENV.glob("*.py"):
        shutil.copy2(path, folder / path.name)
    return folder


def test_a_planted_pyc_of_an_inenv_module_never_runs_and_the_plain_import_path_would_run_it(tmp_path: Path) -> None:
    folder = _inenv_copy(tmp_path)
    marker = tmp_path / "marker"
    plant_pyc(folder / "tolerance.py", PLANT.format(marker=str(marker)))

    control = "import sys; sys.path.insert(0, sys.argv[1]); import inenv.tolerance"
    assert _python("-c", control, str(tmp_path), cwd=tmp_path).returncode == 0
    assert marker.is_file()  # the control: a plain import of the package ran the planted bytecode
    marker.unlink()

    ours = ("import runpy, sys, json; runpy.run_path(sys.argv[1]); import kernodeck_inenv.tolerance as t;"
            " sources = sys.modules['kernodeck_inenv'].__loader__; sources.expect(json.loads(sys.argv[2]));"
            " print(t.__file__)")
    expected = json.dumps(inenv_fingerprints())
    done = _python("-c", ours, str(folder / "_package.py"), expected, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(folder / "tolerance.py") and not marker.exists()
    assert not list(folder.glob("__pycache__/_common*"))  # nothing written either

    # The orchestrator's fingerprints are checked: a sibling that is not those bytes is refused, by name.
    (folder / "tolerance.py").write_text((folder / "tolerance.py").read_text() + "\n# changed\n")
    done = _python("-c", ours, str(folder / "_package.py"), expected, cwd=tmp_path)
    assert done.returncode != 0 and "tolerance.py" in done.stderr and "not the bytes the orchestrator" in done.stderr


def test_the_envs_modules_keep_their_bytecode_cache_and_the_applications_files_leave_none(tmp_path: Path) -> None:
    # The runner's process leaves sys.dont_write_bytecode unset: a module imported the ordinary way, as torch is from
    # the env's site-packages, gets its __pycache__ (checked against its source by the next verify's inventory), so
    # the next run does not compile thousands of files again; the application's file, compiled from its verified
    # bytes, leaves none in the project.
    site, app = tmp_path / "site", tmp_path / "checks" / "app.py"
    site.mkdir()
    (site / "envmod.py").write_text("X = 1\n")
    app.parent.mkdir()
    app.write_text("def run(app):\n    return 1\n")
    code = ("import runpy, sys; from pathlib import Path; runpy.run_path(sys.argv[1]); sys.path.insert(0, sys.argv[2]);"
            " import envmod; from kernodeck_inenv._common import load_file; load_file(Path(sys.argv[3]), 'user_app')")
    done = _python("-c", code, str(INENV / "runner.py"), str(site), str(app), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (app.parent / "__pycache__").exists()
    # A project file the application loads the ordinary way (importlib's spec_from_file_location, as a train that
    # reuses another file does) leaves no bytecode in the project either: the next run's closed world would see it
    # read; the env's modules (under sys.prefix: the venv's site-packages here) keep theirs.
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env_site = next((venv / "lib").glob("python3*/site-packages"))
    (env_site / "envmod.py").write_text("X = 1\n")
    helper = app.with_name("helper.py")
    helper.write_text("Y = 2\n")
    load_plain = ("import importlib.util, runpy, sys; {prefix}import envmod;"
                  " s = importlib.util.spec_from_file_location('helper', sys.argv[2]);"
                  " m = importlib.util.module_from_spec(s); s.loader.exec_module(m); assert m.Y == 2")
    guarded = _python("-c", load_plain.format(prefix="runpy.run_path(sys.argv[1]); "), str(INENV / "runner.py"),
                      str(helper), cwd=tmp_path, python=venv / "bin" / "python")
    assert guarded.returncode == 0, guarded.stderr
    assert list((env_site / "__pycache__").glob("envmod.*.pyc"))
    assert not (app.parent / "__pycache__").exists()
    # the control: the same load without Kernodeck's loader writes the project's bytecode
    plain = _python("-c", load_plain.format(prefix=""), "-", str(helper), cwd=tmp_path, python=venv / "bin" / "python")
    assert plain.returncode == 0, plain.stderr
    assert list((app.parent / "__pycache__").glob("helper.*.pyc"))


def test_the_run_config_carries_every_inenv_file_fingerprint() -> None:
    found = inenv_fingerprints()
    assert {"runner.py", "_package.py", "verified.py", "world.py", "tolerance.py"} <= set(found)
    assert found["world.py"] == hashlib.sha256((INENV / "world.py").read_bytes()).hexdigest()


def test_the_runner_checks_the_inenv_files_against_the_run_configs_fingerprints(tmp_path: Path) -> None:
    config = {"steps": [], "project_root": str(tmp_path), "application": {"sample": "s.jsonl"}, "reference": None,
              "inenv_sha256": inenv_fingerprints()}
    (tmp_path / "run-config.json").write_text(json.dumps(config))
    argv = [str(INENV / "runner.py"), "--config", str(tmp_path / "run-config.json")]
    done = _python(*argv, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    # the negative: one fingerprint that is not the file's bytes stops the runner before any step, naming the file
    config["inenv_sha256"] = {**config["inenv_sha256"], "runner.py": "0" * 64}
    (tmp_path / "run-config.json").write_text(json.dumps(config))
    done = _python(*argv, cwd=tmp_path)
    assert done.returncode == 1 and "in-env file(s) runner.py" in done.stderr and "not the bytes" in done.stderr


@pytest.mark.parametrize("script", ["compare_outputs.py", "drift.py"])
def test_the_other_inenv_scripts_check_their_fingerprints_too(tmp_path: Path, script: str) -> None:
    """Every script run by path takes the orchestrator's fingerprints the same way (runner.py above; calibrate.py and
    resume.py's worker through the same call): the right ones run, one wrong one stops it before its work."""
    def run(fingerprints: dict[str, str]) -> subprocess.CompletedProcess[str]:
        config: dict[str, Any] = {"outputs": {}, "inenv_sha256": fingerprints}
        config.update({"a": str(tmp_path), "b": str(tmp_path)} if script == "compare_outputs.py"
                      else {"groups": [{"prefix": "", "dossiers": [], "outputs": {}}],
                            "result": str(tmp_path / "pairwise.json")})
        (tmp_path / "config.json").write_text(json.dumps(config))
        args = [str(tmp_path / "config.json")] if script == "compare_outputs.py" else ["--config",
                                                                                     str(tmp_path / "config.json")]
        return _python(str(INENV / script), *args, cwd=tmp_path)

    good = run(inenv_fingerprints())
    assert good.returncode == 0, good.stderr
    bad = run({**inenv_fingerprints(), "tolerance.py": "0" * 64})
    assert bad.returncode != 0 and "in-env file(s) tolerance.py" in bad.stderr


# --- 2. a closed world ----------------------------------------------------------------------------------------------

def test_declared_globs_are_accepted(tmp_path: Path) -> None:
    config = _closed_project(tmp_path, code=["src/mypkg/**/*.py"], files=["data/*.csv"])
    assert set(config["application"]["sources"]) == {"app.py", "src/mypkg/__init__.py", "src/mypkg/util.py",
                                                     "data/extra.csv"}
    assert _run(tmp_path, config) == {"status": "passed"}


def test_a_project_reached_through_a_link_is_judged_by_its_files(tmp_path: Path) -> None:
    """The application resolves its own paths (``Path(__file__).resolve()``) while the root is given through a link
    (macOS's /tmp, a mounted checkout): the same files, so the declared ones pass and are still checked."""
    config = _closed_project(tmp_path, code=["src/mypkg/**/*.py"], files=["data/*.csv"])
    link = tmp_path / "link"
    link.symlink_to(config["project_root"], target_is_directory=True)
    linked = _closed_project(tmp_path / "again", code=["src/mypkg/**/*.py"], files=["data/*.csv"])
    linked["project_root"] = str(link)
    linked["application"]["sample"] = str(link / "sample.jsonl")
    assert _run(tmp_path, linked) == {"status": "passed"}
    (Path(config["project_root"]) / "src/mypkg/util.py").write_text("VALUE = 2\n")  # not the fingerprinted bytes
    result = _run(tmp_path, linked)
    assert result["status"] == "failed" and result["error"].startswith("src/mypkg/util.py is not the file fingerp")


def test_an_undeclared_project_module_imported_through_sys_path_is_refused(tmp_path: Path) -> None:
    result = _run(tmp_path, _closed_project(tmp_path, files=["data/extra.csv"]))
    assert result["status"] == "failed"
    assert result["error"].startswith("the entry read files that are not declared sources:")
    assert "src/mypkg/util.py (imported)" in result["error"] and "src/mypkg/__init__.py (imported)" in result["error"]
    assert 'code = ["src/mypkg/__init__.py", "src/mypkg/util.py"]' in result["error"]
    assert "scratch.txt" not in result["error"]  # written by the application in this run: an output
    assert {f["declare"] for f in result["details"]["undeclared"]} == {"code"}


def test_an_undeclared_csv_opened_by_the_criterion_is_refused(tmp_path: Path) -> None:
    result = _run(tmp_path, _closed_project(tmp_path, code=["src/mypkg/*.py"]))
    assert result["status"] == "failed"
    assert result["error"].startswith("the criterion read files that are not declared sources: data/extra.csv (opened)")
    assert 'declare files = ["data/extra.csv"]' in result["error"]


def test_a_verdict_swallowed_by_the_controls_still_fails_the_step(tmp_path: Path) -> None:
    """The able-to-fail controls count any error of the criterion as a rejection: the closed world's verdict is one
    the step loop settles all the same (world.settle), so reading an undeclared file there is no way around it."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    result = _run(tmp_path, config, "--controls")
    assert result["status"] == "failed" and "the criterion read files" in result["error"]
    assert "data/extra.csv (opened)" in result["error"]
    config = _closed_project(tmp_path / "declared", code=["src/mypkg/*.py"], files=["data/extra.csv"])
    assert _run(tmp_path, config, "--controls") == {"status": "passed"}  # the control: declared, it passes


def test_a_planted_pyc_of_a_declared_project_module_never_runs(tmp_path: Path) -> None:
    config = _closed_project(tmp_path, code=["src/mypkg/**/*.py"], files=["data/*.csv"])
    marker = tmp_path / "marker"
    plant_pyc(Path(config["project_root"]) / "src/mypkg/util.py", PLANT.format(marker=str(marker)))
    assert _run(tmp_path, config) == {"status": "passed"}
    assert not marker.exists()
    # A declared module changed after it was fingerprinted is not run.
    util = Path(config["project_root"]) / "src/mypkg/util.py"
    util.write_text(PLANT.format(marker=str(marker)) + "VALUE = 2\n")
    result = _run(tmp_path, config)
    assert result["status"] == "failed" and "src/mypkg/util.py is not the file fingerprinted" in result["error"]
    assert not marker.exists()


def test_project_bytecode_without_source_is_never_imported(tmp_path: Path) -> None:
    """A sourceless ``mypkg/util.pyc`` (the import machinery runs such a file when no ``util.py`` is there): refused at
    the import, before it runs, naming the file."""
    config = _closed_project(tmp_path, code=["src/mypkg/**/*.py"], files=["data/*.csv"])
    util = Path(config["project_root"]) / "src/mypkg/util.py"
    marker = tmp_path / "marker"
    util.write_text(PLANT.format(marker=str(marker)) + "VALUE = 1\n")
    compiled = plant_pyc(util, "")
    compiled.rename(util.with_suffix(".pyc"))
    util.unlink()
    result = _run(tmp_path, config)
    assert result["status"] == "failed" and not marker.exists()
    assert "imports src/mypkg/util.pyc (bytecode without its source" in result["error"]


PACKAGE_DATA = {  # the standard ways a package reads its own data file, through its module's loader
    "importlib.resources": 'labels = importlib.resources.files("mypkg").joinpath("table.csv").read_text()',
    "pkgutil.get_data": 'labels = pkgutil.get_data("mypkg", "table.csv").decode()',
}


@pytest.mark.parametrize("how", sorted(PACKAGE_DATA))
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
def test_a_project_packages_data_is_read_through_its_loader_and_judged(tmp_path: Path, how: str,
                                                                         declared: bool) -> None:
    """A project module's loader keeps the standard source loader's API (red-team pass 10: the verified-bytes loader
    had none, so a declared package data file read the standard way failed the run); the read is judged as any."""
    sources = {"code": ["src/mypkg/*.py"], "files": ["src/mypkg/table.csv"] if declared else ["data/extra.csv"]}
    config = _closed_project(tmp_path, **sources)
    (Path(config["project_root"]) / "src" / "mypkg" / "table.csv").write_text("label\n1\n")
    doing = f'sys.path.insert(0, str(ROOT / "src")); import mypkg; {PACKAGE_DATA[how]}; assert labels[:5] == "label"'
    result = _run(tmp_path, _with_criterion(config, doing, imports="importlib.resources, pkgutil, sys", **sources))
    if declared:
        assert result == {"status": "passed"}, result
    else:
        assert result["status"] == "failed" and "src/mypkg/table.csv (opened)" in result["error"], result


def test_a_declared_compiled_extension_in_the_project_is_refused_as_such(tmp_path: Path) -> None:
    """An extension built in place in the project's folder, declared: not run, and the reason is not that nothing
    declares it (red-team pass 10: the message said so) but that native code runs from the env, where it is checked."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    built = importlib.util.find_spec("_json")
    assert built is not None and built.origin is not None and built.origin.endswith(".so")
    sources = {"code": ["src/mypkg/*.py", f"src/ext/_json{suffix}"]}
    config = _closed_project(tmp_path, **sources)
    (Path(config["project_root"]) / "src" / "ext").mkdir()
    shutil.copy(built.origin, Path(config["project_root"]) / "src" / "ext" / f"_json{suffix}")
    doing = 'sys.path.insert(0, str(ROOT / "src" / "ext")); sys.modules.pop("_json", None); import _json'
    result = _run(tmp_path, _with_criterion(config, doing, **sources))
    assert result["status"] == "failed", result
    assert f"imports src/ext/_json{suffix} (a compiled extension in the project's folder: declared" in result["error"]
    assert "build it into a wheel the lock pins" in result["error"]


def test_a_module_from_a_declared_zip_is_refused_as_an_archives_module(tmp_path: Path) -> None:
    """A zip of modules on sys.path (zipimport), the archive declared and fingerprinted: not run (its members are no
    declared file's own bytes), and the reason is the archive, not code "that neither the lock nor a declared source
    describes" (red-team pass 13: the message said so)."""
    marker = tmp_path / "marker"
    sources = {"code": ["src/mypkg/*.py"], "files": ["data/*"]}
    config = _closed_project(tmp_path, **sources)
    with zipfile.ZipFile(Path(config["project_root"]) / "data" / "mods.zip", "w") as archive:
        archive.writestr("zmod.py", PLANT.format(marker=str(marker)) + "VALUE = 2\n")
    doing = 'sys.path.insert(0, str(ROOT / "data" / "mods.zip")); import zmod'
    result = _run(tmp_path, _with_criterion(config, doing, **sources))
    assert result["status"] == "failed" and not marker.exists(), result
    assert result["error"].startswith("a module from an archive (zipimport: data/mods.zip/zmod.py) is not run from the "
                                      "project: declare its sources unpacked"), result["error"]
    assert "neither the lock nor a declared source" not in result["error"]


def test_a_glob_that_matches_nothing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="matches no file"):
        _closed_project(tmp_path, code=["src/other/**/*.py"])


# --- red team of issue 29: other ways to read an undeclared file ---------------------------------------------------

SNEAKY = {
    # a pseudo file system's link to an ordinary file of the project
    "proc_root": 'open("/proc/self/root" + str(ROOT / "data" / "extra.csv")).read()',
    "proc_cwd": 'open("/proc/self/cwd/" + os.path.relpath(ROOT / "data" / "extra.csv")).read()',
    # opened for update: "a+" reads the earlier bytes; appending first does not make them an output
    "append_plus": '(lambda f: (f.seek(0), f.read()))(open(ROOT / "data" / "extra.csv", "a+"))',
    "append_then_read": '(open(ROOT / "data" / "extra.csv", "ab").close(), (ROOT / "data" / "extra.csv").read_text())',
    "read_then_append": '((ROOT / "data" / "extra.csv").read_text(), open(ROOT / "data" / "extra.csv", "ab").close())',
    "rdonly_creat": 'os.read(os.open(str(ROOT / "data" / "extra.csv"), os.O_RDONLY | os.O_CREAT), 9)',
}


@pytest.mark.parametrize("how", sorted(SNEAKY))
def test_an_undeclared_file_read_another_way_is_refused(tmp_path: Path, how: str) -> None:
    """Each of these read data/extra.csv (undeclared) and passed the closed world: the file is named all the same."""
    config = _with_criterion(_closed_project(tmp_path, code=["src/mypkg/*.py"]), SNEAKY[how], code=["src/mypkg/*.py"])
    result = _run(tmp_path, config)
    assert result["status"] == "failed", (how, result)
    assert "data/extra.csv (opened)" in result["error"], result["error"]


def test_a_module_imported_through_proc_self_root_is_judged_and_its_planted_pyc_never_runs(tmp_path: Path) -> None:
    """sys.path through /proc/self/root reached the project as a trusted pseudo path: the standard loader then ran a
    planted timestamp-valid .pyc in place of the source. Now the module is the project's file: undeclared, refused."""
    config = _closed_project(tmp_path, files=["data/extra.csv"])
    root = Path(config["project_root"])
    app = root / "app.py"
    app.write_text(APP.replace('sys.path.insert(0, str(ROOT / "src"))',
                               'sys.path.insert(0, "/proc/self/root" + str(ROOT / "src"))'))
    util = root / "src" / "mypkg" / "util.py"
    util.write_text("VALUE = 9\n")
    py_compile.compile(str(util), doraise=True)  # a timestamp-valid pyc of other bytes of the same size
    stat = util.stat()
    util.write_text("VALUE = 1\n")
    os.utime(util, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl", "files": ["data/extra.csv"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    result = _run(tmp_path, config)
    assert result["status"] == "failed", result
    assert "src/mypkg/util.py (imported)" in result["error"], result["error"]


# --- red team of issue 29, third pass: the settings read back where they apply -------------------------------------


CHANGES = {  # each through its Python-level setter, and the torch._C binding that setter lands in
    "deterministic_algorithms": ("torch.use_deterministic_algorithms(False)", "_set_deterministic_algorithms"),
    "deterministic_warn_only":
        ("torch.use_deterministic_algorithms(True, warn_only=True)", "_set_deterministic_algorithms"),
    "torch.num_threads": ("torch.set_num_threads(1)", "set_num_threads"),
    "cudnn.deterministic": ("torch.backends.cudnn.deterministic = False", "_set_cudnn_deterministic"),
    "cudnn.benchmark": ("torch.backends.cudnn.benchmark = True", "_set_cudnn_benchmark"),
    "cudnn.allow_tf32 (legacy flag)": ("torch.backends.cudnn.allow_tf32 = True", "_set_cudnn_allow_tf32"),
    "cuda.matmul.allow_tf32 (legacy flag)":
        ("torch.backends.cuda.matmul.allow_tf32 = True", "_set_cublas_allow_tf32"),
    "float32_matmul_precision": ('torch.set_float32_matmul_precision("medium")', "_set_float32_matmul_precision"),
    "default_dtype": ("torch.set_default_dtype(torch.float64)", "_set_default_dtype"),
    "fill_uninitialized_memory": ("torch.utils.deterministic.fill_uninitialized_memory = False",
                                  "_set_deterministic_fill_uninitialized_memory"),
}


@pytest.mark.parametrize("setting", sorted(CHANGES))
def test_a_setting_the_entry_changes_fails_the_step_naming_it(tmp_path: Path, setting: str) -> None:
    """settings.json said "verified" for a setting the entry then changed (the read-back ran before the entry): the
    setter's call fails the step (setters.py), naming the setting, its recorded value, the value set and the binding."""
    code, binding = CHANGES[setting]
    config, fake = _settings_project(tmp_path, entry=code)
    result = _run(tmp_path, config, "--torch", str(fake))
    assert result["status"] == "failed", result
    assert result["error"].startswith("the entry changed determinism settings the run records as verified: ")
    if setting in OWN_CHOICE:  # a thread count the call may pin itself: the read-back after it, not the setter
        assert f"{setting}: recorded " in result["error"] and ", after the call " in result["error"], result["error"]
    else:
        assert f"{setting}: recorded " in result["error"] and ", set " in result["error"]
        assert f"(by torch._C.{binding}(" in result["error"], result["error"]
    assert list(result["details"]["changed_settings"]) == [setting]


# a change no watched setter makes (a binding held before Kernodeck wrapped it; the process's environment): the
# read-back after the call names it
AROUND = {"deterministic_algorithms": 'torch._s["det"] = False',
          "CUBLAS_WORKSPACE_CONFIG": 'os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":0:0"'}


@pytest.mark.parametrize("setting", sorted(AROUND))
def test_a_setting_changed_around_the_setters_is_caught_by_the_read_back(tmp_path: Path, setting: str) -> None:
    config, fake = _settings_project(tmp_path, entry=AROUND[setting], top="import os")
    result = _run(tmp_path, config, "--torch", str(fake))
    assert result["status"] == "failed", result
    assert f"{setting}: recorded " in result["error"] and ", after the call " in result["error"], result["error"]
    assert list(result["details"]["changed_settings"]) == [setting]


def test_the_settings_are_read_back_after_the_criterion_its_controls_and_the_files_load(tmp_path: Path) -> None:
    config, fake = _settings_project(tmp_path, criterion="torch.set_num_threads(1)")
    result = _run(tmp_path, config, "--torch", str(fake))
    assert result["status"] == "failed" and "the criterion changed determinism settings" in result["error"]
    assert "torch.num_threads: recorded 4, after the call 1" in result["error"], result["error"]
    # through the controls, which count any error of the criterion as a rejection: the step fails all the same
    result = _run(tmp_path, config, "--torch", str(fake), "--controls")
    assert result["status"] == "failed" and "the criterion changed determinism settings" in result["error"]
    # at the top of the entry's file, run when it loads
    config, fake = _settings_project(tmp_path / "top", top="torch.use_deterministic_algorithms(False)")
    result = _run(tmp_path, config, "--torch", str(fake))
    assert result["status"] == "failed" and "the entry's file changed determinism settings" in result["error"]
    assert "deterministic_algorithms: recorded True, set False" in result["error"]


def test_an_entry_that_seeds_its_own_generators_or_leaves_the_settings_passes(tmp_path: Path) -> None:
    """The control: the same harness passes when nothing is changed, and reseeding is no change of a setting."""
    config, fake = _settings_project(tmp_path, entry="torch.manual_seed(0)")
    assert _run(tmp_path, config, "--torch", str(fake)) == {"status": "passed"}


# --- red team of issue 29, third pass: reads the open hook did not see ------------------------------------------------

EXTRA = 'str(ROOT / "data" / "extra.csv")'
STARTS = {  # each started a program that read data/extra.csv, and verify passed
    "subprocess": (f'subprocess.run(["cat", {EXTRA}], capture_output=True)', "(cat, subprocess.Popen)"),
    "os.system": (f'os.system("cat " + {EXTRA})', "(cat "),
    "os.posix_spawn": (f'os.waitpid(os.posix_spawn("/bin/cat", ["cat", {EXTRA}], {{}}), 0)',
                       "(/bin/cat, os.posix_spawn)"),
    # POSIX os.spawnv forks, then execs in the child: refused there, and handed to the parent
    "os.spawnv": (f'os.spawnv(os.P_WAIT, "/bin/cat", ["cat", {EXTRA}])', "(/bin/cat, os.exec): "),
    "os.execv": (f'os.execv("/bin/cat", ["cat", {EXTRA}])', "(/bin/cat, os.exec)"),
    # a new interpreter: no hook, the project's files (and their bytecode) for its code, torch's default settings
    "multiprocessing spawn": ('multiprocessing.get_context("spawn").Pool(1).map(abs, [-1])',
                              "(a new Python interpreter, multiprocessing's spawn start method)"),
    "multiprocessing forkserver": ('multiprocessing.get_context("forkserver").Pool(1).map(abs, [-1])',
                                   "(a new Python interpreter, multiprocessing's forkserver start method)"),
}
READS = {  # (the code, what the error names)
    "sqlite3": ('sqlite3.connect(str(ROOT / "data" / "extra.db")).execute("select 1")', "data/extra.db (opened)"),
    "ctypes": ('ctypes.CDLL(str(ROOT / "data" / "libextra.so"))', "data/libextra.so (opened)"),
    "dir_fd": ('os.read(os.open("extra.csv", os.O_RDONLY, dir_fd=os.open(str(ROOT / "data"), os.O_RDONLY)), 9)',
               "data/extra.csv (opened)"),
    "listdir": ('os.listdir(ROOT / "data")', "data/ (listed: extra.csv, extra.db, libextra.so)"),
    "scandir": ('list(os.scandir(ROOT / "src"))', "src/ (listed: notes.txt)"),
    "glob": ('list((ROOT / "data").glob("*.csv"))', "data/ (listed: extra.csv"),
    # a forked child (a DataLoader worker) reads: its record reaches the parent's
    "forked child": (f'(lambda pid: os.waitpid(pid, 0) if pid else (open({EXTRA}).read(), os._exit(0)))(os.fork())',
                     "data/extra.csv (opened)"),
}
ALLOWED = {  # the controls: what ordinary code does passes
    "multiprocessing fork (DataLoader workers)": 'multiprocessing.get_context("fork").Pool(2).map(abs, [-1, -2])',
    "a shared memory block, whose resource tracker runs none of its code":
        '(lambda m: (m.close(), m.unlink()))(__import__("multiprocessing.shared_memory").shared_memory.SharedMemory('
        'create=True, size=16))',
    "sqlite in memory and a new database (an output)":
        '(sqlite3.connect(":memory:"), sqlite3.connect(str(ROOT / "new.db")).execute("create table t (x)"))',
    "a system library by name": 'ctypes.CDLL("libm.so.6")',
    "a system library by path": 'ctypes.CDLL(next(p for p in LIBM if os.path.exists(p)))',
    "a listing of a folder whose names are declared": 'os.listdir(ROOT / "src" / "mypkg")',
    "a listing of a folder the application made":
        '((ROOT / "made").mkdir(), (ROOT / "made" / "f").write_text("x"), os.listdir(ROOT / "made"))',
    "a listing of the env and the stdlib": 'os.listdir(os.path.dirname(os.__file__))',
}


def _sneaky_project(tmp_path: Path, code: str) -> dict[str, Any]:
    """The closed project, its criterion doing ``code`` (an undeclared src/notes.txt beside the imported package, an
    extra.db and a copy of a system library in data/)."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    root = Path(config["project_root"])
    (root / "src" / "notes.txt").write_text("not declared")
    sqlite3.connect(str(root / "data" / "extra.db")).close()
    shutil.copy2(_libm(), root / "data" / "libextra.so")
    return _with_criterion(config, code, imports="ctypes, multiprocessing, os, sqlite3, subprocess, sys",
                           head=f"LIBM = {LIBM!r}\n", code=["src/mypkg/*.py"])


LIBM = ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6", "/lib64/libm.so.6",
        "/usr/lib64/libm.so.6", "/lib/aarch64-linux-gnu/libm.so.6")


def _libm() -> str:
    for path in LIBM:
        if os.path.exists(path):
            return path
    pytest.skip("no libm.so.6 in the usual folders")


@pytest.mark.parametrize("how", sorted(STARTS))
def test_a_process_the_application_starts_is_refused_naming_the_program(tmp_path: Path, how: str) -> None:
    result = _run(tmp_path, _sneaky_project(tmp_path, STARTS[how][0]))
    assert result["status"] == "failed", (how, result)
    assert result["error"].startswith("the criterion started a process "), result["error"]
    assert STARTS[how][1] in result["error"] and "what it reads cannot be checked" in result["error"]


@pytest.mark.parametrize("how", sorted(READS))
def test_a_read_through_sqlite_ctypes_dir_fd_or_a_listing_is_judged(tmp_path: Path, how: str) -> None:
    result = _run(tmp_path, _sneaky_project(tmp_path, READS[how][0]))
    assert result["status"] == "failed", (how, result)
    assert result["error"].startswith("the criterion read files that are not declared sources"), result["error"]
    assert READS[how][1] in result["error"], result["error"]


@pytest.mark.parametrize("how", sorted(ALLOWED))
def test_ordinary_processes_libraries_and_listings_pass(tmp_path: Path, how: str) -> None:
    """The controls of the two tests above, in the same project: the import of mypkg lists src/ (notes.txt is not
    declared) through the import machinery, which is not refused."""
    result = _run(tmp_path, _sneaky_project(tmp_path, ALLOWED[how]))
    assert result == {"status": "passed"}, (how, result.get("error"))


def test_a_listing_of_declared_files_passes_and_an_undeclared_name_beside_them_fails(tmp_path: Path) -> None:
    config = _sneaky_project(tmp_path, 'os.listdir(ROOT / "data")')
    root = Path(config["project_root"])
    (root / "data" / "extra.db").unlink()
    (root / "data" / "libextra.so").unlink()
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl", "code": ["src/mypkg/*.py"],
         "files": ["data/*.csv"], "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}},
        root).fingerprints(root)
    assert _run(tmp_path, config) == {"status": "passed"}
    (root / "data" / "other.bin").write_bytes(b"x")
    result = _run(tmp_path, config)
    assert result["status"] == "failed" and "data/ (listed: other.bin)" in result["error"], result
    assert 'declare files = ["data/*"]' in result["error"]


# --- the red team's fourth pass (/work/notes, issue 29): reads the record missed, by class ---------------------------

def _outside(tmp_path: Path) -> Path:
    """An undeclared file outside the project, beside a folder a link in the project points into."""
    (tmp_path / "elsewhere" / "deep").mkdir(parents=True)
    (tmp_path / "elsewhere" / "secret.csv").write_text("label\n2\n")
    return tmp_path / "elsewhere"


def _shm(tmp_path: Path) -> Path:
    """An ordinary file in /dev/shm (a tmpfs anyone may write into), removed with the test."""
    if not os.path.isdir("/dev/shm") or not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm here")
    folder = Path("/dev/shm") / f"kd-{os.getpid()}-{tmp_path.name}"
    folder.mkdir()
    (folder / "data.csv").write_text("label\n3\n")
    (folder / "shmmod.py").write_text("VALUE = 3\n")
    return folder


EXTRA = '(ROOT / "data" / "extra.csv")'
HOLES = {
    # an ordinary file under /dev was trusted as the system's state
    "a file in /dev/shm": ('open(SHM / "data.csv").read()', "data.csv (opened)"),
    "a module imported from /dev/shm": ('(sys.path.insert(0, str(SHM)), __import__("shmmod"))', "shmmod.py (imported)"),
    # a write that fails was counted as one: its file's later reads were not recorded
    "an exclusive create of a file that is there, then a read":
        (f'(_try(lambda: open({EXTRA}, "x")), {EXTRA}.read_text())', "data/extra.csv (opened)"),
    "a folder made where one is, then listed": ('(_try(lambda: os.mkdir(ROOT / "data")), os.listdir(ROOT / "data"))',
                                              "data/ (listed: extra.csv)"),
    # the run's folder was exempt by path: a link there to an undeclared file, a file moved or linked into it
    "a symbolic link in the run's folder": (f'(os.symlink({EXTRA}, OUT / "l.csv"), (OUT / "l.csv").read_text())',
                                            "data/extra.csv (opened)"),
    "a hard link in the run's folder": (f'(os.link({EXTRA}, OUT / "h.csv"), (OUT / "h.csv").read_text())',
                                        "data/extra.csv (opened)"),
    "a file moved into the run's folder": (f'(os.rename({EXTRA}, OUT / "m.csv"), (OUT / "m.csv").read_text())',
                                           "data/extra.csv (opened)"),
    "a folder moved into the run's folder":
        ('(os.rename(ROOT / "data", OUT / "d"), (OUT / "d" / "extra.csv").read_text())', "data/extra.csv (opened)"),
    # '..' was folded as text before the link it follows: the file beside the link's target was judged as another
    "a '..' after a link": ('open(ROOT / "src" / "lnk" / ".." / "secret.csv").read()', "elsewhere/secret.csv (opened)"),
    # the fifth pass: a file (or folder) that was there counted as written once its state moved (a touch after a
    # failed create); a file deleted after a write-only open, reread through /proc; a listing through a descriptor
    "a touch after a failed create, then a read":
        (f'(_try(lambda: os.mkdir({EXTRA})), os.utime({EXTRA}), {EXTRA}.read_text())', "data/extra.csv (opened)"),
    "a folder that was there, given a file of its own, then moved into the run's folder":
        ('(_try(lambda: os.mkdir(ROOT / "data")), (ROOT / "data" / "own.txt").write_text("o"), '
         'os.rename(ROOT / "data", OUT / "d"), (OUT / "d" / "extra.csv").read_text())', "data/extra.csv (opened)"),
    "a deleted file reread through /proc/self/fd":
        (f'(lambda fd: (os.unlink({EXTRA}), open(f"/proc/self/fd/{{fd}}").read()))(os.open({EXTRA}, os.O_WRONLY))',
         "no longer there"),
    "a listing through a descriptor": ('os.listdir(os.open(ROOT / "data", os.O_RDONLY))', "data/ (listed: extra.csv"),
    # the sixth pass: a name relative to a folder descriptor was joined to the working folder; an O_PATH "truncate",
    # or an open whose opener opened another file, counted as bytes replaced once an xattr moved the ctime
    "a hard link made relative to a folder descriptor":
        ('(lambda d: (os.link("extra.csv", OUT / "h2.csv", src_dir_fd=d), (OUT / "h2.csv").read_text()))'
         '(os.open(ROOT / "data", os.O_RDONLY))', "data/extra.csv (opened)"),
    "a move relative to a folder descriptor":
        ('(lambda d: (os.rename("extra.csv", OUT / "m2.csv", src_dir_fd=d), (OUT / "m2.csv").read_text()))'
         '(os.open(ROOT / "data", os.O_RDONLY))', "data/extra.csv (opened)"),
    "an O_PATH open with O_TRUNC, an xattr, then a read":
        (f'(os.close(os.open({EXTRA}, os.O_PATH | os.O_TRUNC)), _try(lambda: os.setxattr({EXTRA}, "user.k", b"v")), '
         f'{EXTRA}.read_text())', "data/extra.csv (opened)"),
    "an open whose opener opened another file, an xattr, then a read":
        (f'(open({EXTRA}, "w", opener=lambda p, f: os.open("/dev/null", os.O_WRONLY)).close(), '
         f'_try(lambda: os.setxattr({EXTRA}, "user.k", b"v")), {EXTRA}.read_text())', "data/extra.csv (opened)"),
    # the seventh pass: a sqlite URI's name is percent-decoded by sqlite; a network socket's bytes come from outside
    "a sqlite URI with a percent-encoded name":
        ('sqlite3.connect("file:" + str(ROOT / "data" / "%65xtra.db") + "?mode=ro", uri=True).execute("select 1")',
         "data/extra.db (opened)"),
    "a network socket": ("socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()", "network socket"),
    "a step's result rewritten in the run's folder":
        ('(OUT / "steps").mkdir(exist_ok=True) or (OUT / "steps" / "03-application.json").write_text("{}")',
         "Kernodeck's record of this run"),
    # the ninth pass: a process's memory (the supervisor's mark, Kernodeck's record), a hard link to the env's
    # file written through, the run's folder moved away and back with a step's result rewritten
    "the process's memory written": ('open("/proc/self/mem", "wb").close()', "a process's memory"),
    "the process's memory read": ('open("/proc/self/mem", "rb").close()', "mem (opened)"),
    "a hard link to an env file": ('os.link(Path(os.__file__), OUT / "alias.py")', "given another name"),
    "the run's folder moved away": ('os.rename(OUT, OUT.parent / "elsewhere")', "which holds"),
    "a record written into Kernodeck's cache":
        ('(CACHE / "stat").mkdir(parents=True, exist_ok=True) or (CACHE / "stat" / "x.json").write_text("{}")',
         "Kernodeck's cache"),
    # the eighth pass: a socket whose family is not known yet (_socket picks AF_INET after the event); a name the
    # resolver answers; the working folder changed after a relative name was judged; another process's environment
    # (the orchestrator's: the allow-list's bypass); a listing from code compiled under the import machinery's name;
    # a touch through another name of the same file; a sqlite URI escape that is no UTF-8
    "a socket whose family is not known yet": ('__import__("_socket").socket().close()', "network socket"),
    "a name resolved by the system's resolver": ('socket.getaddrinfo("localhost", None)', "resolved a name"),
    "the working folder changed": ('os.chdir(ROOT / "data")', "changed the working folder"),
    "another process's environment": ('open(f"/proc/{os.getppid()}/environ", "rb").read()', "environ (opened)"),
    "a listing from code compiled under the import machinery's name":
        ('eval(compile("__import__(\'os\').listdir(D)", "<frozen importlib._bootstrap>", "eval"), '
         '{"D": str(ROOT / "data")})', "data/ (listed"),
    "a touch through another name of the same file":
        ('(_try(lambda: os.open(ROOT / "data" / "extra.csv", os.O_RDONLY | os.O_TRUNC | os.O_DIRECTORY)), '
         'os.utime(ROOT / "cache" / "0a1b2c", ns=(1, 1)), (ROOT / "data" / "extra.csv").read_text())',
         "data/extra.csv (opened)"),
    "a sqlite URI escape that is no UTF-8":
        ('sqlite3.connect("file:" + str(ROOT / "data") + "/%E9xtra.db?mode=ro", uri=True).execute("select 1")',
         "xtra.db (opened)"),
    # a forked child's record was a file in the run's folder the application could remove
    "a forked child's read, its notes removed":
        (f'((lambda pid: os.waitpid(pid, 0) if pid else (open({EXTRA}).read(), os._exit(0)))(os.fork()), '
         '[os.remove(p) for p in OUT.glob(".closed-world*")])', "data/extra.csv (opened)"),
}


@pytest.mark.parametrize("how", sorted(HOLES))
def test_a_read_the_record_used_to_miss_is_judged(tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of these read an undeclared file and passed (reference accepted, verify PASSED): it is named now."""
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "kdcache"))
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    root = Path(config["project_root"])
    outside = _outside(tmp_path)
    (root / "src" / "lnk").symlink_to(outside / "deep", target_is_directory=True)
    shm = _shm(tmp_path) if "shm" in how else None
    try:
        head = (f"SHM = Path({str(shm)!r})\nOUT = Path.cwd() / 'out'\nCACHE = Path({str(tmp_path / 'kdcache')!r})\n"
                "def _try(f):\n    try:\n        f()\n    except OSError:\n        pass\n")
        code, named = HOLES[how]
        if "sqlite" in how:
            sqlite3.connect(str(root / "data" / "extra.db")).close()
            sqlite3.connect(os.fsdecode(os.fsencode(str(root / "data")) + b"/\xe9xtra.db")).close()
        if "another name" in how:
            (root / "cache").mkdir()
            os.link(root / "data" / "extra.csv", root / "cache" / "0a1b2c")
        result = _run(tmp_path, _with_criterion(config, code, imports="os, socket, sqlite3, sys", head=head,
                                                code=["src/mypkg/*.py"]))
    finally:
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    assert result["status"] == "failed", (how, result)
    assert named in result["error"], result["error"]


CLEAN = {
    "a device under /dev": 'open("/dev/null").read()',
    "its own file made, moved and linked in the run's folder":
        '((OUT / "a.txt").write_text("x"), os.rename(OUT / "a.txt", OUT / "b.txt"), os.link(OUT / "b.txt", '
        'OUT / "c.txt"), (OUT / "c.txt").read_text())',
    "its own file in the project, written then read":
        '((ROOT / "own.txt").write_text("y"), (ROOT / "own.txt").read_text())',
    "a folder it made, listed":
        '(os.mkdir(ROOT / "made"), (ROOT / "made" / "f").write_text("z"), os.listdir(ROOT / "made"))',
    "a forked child reads a declared file and writes a file the parent then reads":
        '(lambda pid: (os.waitpid(pid, 0), (ROOT / "by-child.txt").read_text()) if pid else ((ROOT / "by-child.txt")'
        '.write_text((ROOT / "data" / "extra.csv").read_text()), os._exit(0)))(os.fork())',
    "a forked worker reads a file its parent rewrote, left in the project by an earlier run":
        '((ROOT / "features.txt").write_text("new"), (lambda pid: os.waitpid(pid, 0) if pid else '
        '((ROOT / "features.txt").read_text(), os._exit(0)))(os.fork()))',
    "a local socket pair, and a sqlite database in memory":
        '([s.close() for s in __import__("socket").socketpair()], __import__("sqlite3").connect(":memory:"))',
}


@pytest.mark.parametrize("how", sorted(CLEAN))
def test_the_controls_of_those_reads_pass(tmp_path: Path, how: str) -> None:
    """The controls of the test above, in the same project: the application's own files and a device pass."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/extra.csv"])
    (Path(config["project_root"]) / "features.txt").write_text("old")  # an earlier run's scratch file
    config = _with_criterion(config, CLEAN[how], head="OUT = Path.cwd() / 'out'\n", code=["src/mypkg/*.py"],
                             files=["data/extra.csv"])
    assert _run(tmp_path, config) == {"status": "passed"}, how


def test_a_link_made_in_the_env_is_judged_by_what_it_names(tmp_path: Path) -> None:
    """The env is trusted by its path (one prefix test for its thousands of files): a link the application makes in
    it to an undeclared file or module, read or imported there and removed, passed (fifth red-team pass). A throwaway
    venv stands for the env (numpy through a .pth), so no real env is touched."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "numpy-here.pth").write_text(os.path.dirname(os.path.dirname(__import__("numpy").__file__)) + "\n")
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    root = Path(config["project_root"])
    (root / "secretmod.py").write_text("VALUE = 7\n")
    code = ('(os.symlink(ROOT / "secretmod.py", SITE / "secretmod.py"), __import__("secretmod"), '
            'os.unlink(SITE / "secretmod.py"))')
    config = _with_criterion(config, code, head=f"SITE = Path({str(site)!r})\n", code=["src/mypkg/*.py"])
    result = _run(tmp_path, config, python=env / "bin" / "python")
    # refused as it is made (no change to the env in a window: the seventh pass), before anything reads through it
    assert result["status"] == "failed" and "changed the env" in result["error"], result
    assert "secretmod.py, linked onto" in result["error"] and not (site / "secretmod.py").exists(), result


GAP = """
import json, runpy, sys, threading
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
extra = Path(config["project_root"]) / "data" / "extra.csv"
go, box = threading.Event(), []
with world.window(ctx, "the entry"):  # the entry starts a thread and returns, leaving it running
    threading.Thread(target=lambda: (go.wait(), box.append(extra.read_text())), daemon=True).start()
go.set()  # between the windows (Kernodeck's own work, the hook off): the thread reads now
while not box:
    pass
try:
    with world.window(ctx, "the criterion"):  # which uses what the thread read
        assert box[0].startswith("label")
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc), "details": exc.details}))
"""


def test_a_thread_the_entry_leaves_running_is_judged_at_the_next_window(tmp_path: Path) -> None:
    """A thread the entry started and left running read an undeclared file between the entry's window and the
    criterion's (Kernodeck's own work then, the hook off) and handed the bytes on: it passed (fifth red-team pass).
    Its reads are recorded while the window is off and judged by the next window, named as that thread's."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    done = _script(tmp_path, config, GAP)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed" and "data/extra.csv (opened)" in result["error"], result
    assert result["details"]["undeclared"][0]["by"].startswith("a thread the application left running"), result


STARTERS = {  # the seventh pass: a thread no window saw start read between windows, and the criterion used the bytes
    "a raw _thread": "import _thread; _thread.start_new_thread(lambda: (go.wait(), box.append(extra.read_text())), ())",
    "a thread started after the window by one left running": (
        "threading.Thread(target=lambda: (go.wait(), threading.Thread(target=lambda: box.append(extra.read_text()))"
        ".start()), daemon=True).start()"),
    "a pool made in the window whose worker starts at a later submit": (
        "import concurrent.futures as cf; pool = cf.ThreadPoolExecutor(4); threading.Thread(target=lambda: "
        "(go.wait(), box.append(pool.submit(extra.read_text).result())), daemon=True).start()"),
    "a timer (a Thread subclass)": "threading.Timer(0, lambda: (go.wait(), box.append(extra.read_text()))).start()",
}


@pytest.mark.parametrize("how", sorted(STARTERS))
def test_every_thread_but_kernodecks_own_is_watched_between_windows(tmp_path: Path, how: str) -> None:
    """Only threads a window saw start were watched between windows (sixth red-team pass): one started with
    ``_thread``, by a thread left running, or by a pool at a later submit read unseen. Now every thread but
    Kernodeck's own (the one that runs the steps, its pools') is watched there."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    starter = "    threading.Thread(target=lambda: (go.wait(), box.append(extra.read_text())), daemon=True).start()\n"
    done = _script(tmp_path, config, GAP.replace(starter, f"    {STARTERS[how]}\n"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed" and "data/extra.csv (opened)" in result["error"], (how, result)


def test_kernodecks_own_threads_read_unwatched_between_windows(tmp_path: Path) -> None:
    """The control: the thread that runs the windows, and a pool of Kernodeck's (``seen.own_thread``), read the same
    undeclared file between windows, and the next window passes."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    own = ("    pass\nfrom kernodeck_inenv import seen\nimport concurrent.futures as cf\nextra.read_text()\n"
           "with cf.ThreadPoolExecutor(2, initializer=seen.own_thread) as pool:\n"
           "    box.append(pool.submit(extra.read_text).result())\n")
    script = GAP.replace(
        "    threading.Thread(target=lambda: (go.wait(), box.append(extra.read_text())), daemon=True).start()\n", own)
    done = _script(tmp_path, config, script)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "passed"}


FORK_HEAD = '''
def _link(n):
    try:
        return os.readlink("/proc/self/fd/" + n)
    except OSError:
        return ""
def _notes():
    return [int(n) for n in os.listdir("/proc/self/fd") if "(deleted)" in _link(n)]
def _forked(child_first, parent_after):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            child_first()
            os.write(w, (ROOT / "data" / "extra.csv").read_bytes())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    parent_after()
    return os.read(r, 1000)
'''
FORKED = {  # the sixth pass: the children's notes, an unnamed file, are reachable through /proc/self/fd
    "the parent truncates the notes after the child read": (
        "lambda: None", "lambda: [os.ftruncate(n, 0) for n in _notes()]"),
    "the child closes the notes' descriptor, then reads": ("lambda: [os.close(n) for n in _notes()]", "lambda: None"),
    "the child puts another file in the notes' place": (
        'lambda: [os.dup2(os.open("/dev/null", os.O_WRONLY), n) for n in _notes()]', "lambda: None"),
    "the child reads as it is": ("lambda: None", "lambda: None"),
}


@pytest.mark.parametrize("how", sorted(FORKED))
def test_a_forked_childs_read_is_judged_in_the_child(tmp_path: Path, how: str) -> None:
    """A forked child handed its reads to the parent through notes the application could truncate or close: the read
    passed. A child's read is judged at once in it now: the undeclared bytes never reach the parent's criterion
    (``b'label'`` is what the child would send), whatever became of the notes."""
    child, parent = FORKED[how]
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    result = _run(tmp_path, _with_criterion(config, f'assert b"label" in (got := _forked({child}, {parent})), got',
                                            head=FORK_HEAD, code=["src/mypkg/*.py"]))
    assert result["status"] == "failed", (how, result)
    assert "data/extra.csv (opened)" in result["error"] or "AssertionError: b''" in result["error"], result


FORGED = GAP.replace(
    "    threading.Thread(target=lambda: (go.wait(), box.append(extra.read_text())), daemon=True).start()\n",
    "    [os.write(int(n), (json.dumps({'kind': 'written', 'path': str(extra), 'before': None}) + '\\tbeef\\n')"
    ".encode())\n"
    "     for n in os.listdir('/proc/self/fd') if '(deleted)' in (lambda n: __import__('os').readlink("
    "'/proc/self/fd/' + n) if os.path.islink('/proc/self/fd/' + n) else '')(n)]\n"
    "    box.append('label')\n").replace("import json, runpy, sys, threading", "import json, os, runpy, sys, threading")
TOUCH_HEAD = FORK_HEAD + '''
def _fail(f):
    try:
        f()
    except OSError:
        pass
'''


def test_a_forged_or_lost_note_never_makes_an_input_the_applications_own(tmp_path: Path) -> None:
    """The parent wrote a line 'a child made data/extra.csv' into the notes; the next window then took the file for
    the application's output and did not record its read. A line not signed by Kernodeck is refused. And a child's
    change of an input's mtime (lost with its note, it looked like bytes replaced) is refused in the child."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    done = _script(tmp_path, config, FORGED)
    assert "not signed by Kernodeck" in done.stdout + done.stderr, (done.stdout, done.stderr)
    touch = ('(_fail(lambda: os.open(ROOT / "data" / "extra.csv", os.O_RDONLY | os.O_TRUNC | os.O_DIRECTORY)), '
             '_forked(lambda: os.utime(ROOT / "data" / "extra.csv", '
             'ns=(1, 1)), lambda: [os.ftruncate(n, 0) for n in _notes()]), (ROOT / "data" / "extra.csv").read_text())')
    result = _run(tmp_path, _with_criterion(config, touch, head=TOUCH_HEAD, code=["src/mypkg/*.py"]))
    assert result["status"] == "failed" and "data/extra.csv (opened)" in result["error"], result


DIVERGED = """
def _diverged():
    extra = ROOT / "data" / "extra.csv"
    try:
        os.open(extra, os.O_RDONLY | os.O_TRUNC | os.O_DIRECTORY)  # noted as a write, replaced nothing
    except OSError:
        pass
    go_r, go_w = os.pipe()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.read(go_r, 1)  # after the parent's touch
            os.write(w, extra.read_bytes())
        finally:
            os._exit(0)
    os.utime(extra, ns=(1, 1))  # an input still: touched, in the parent's record only
    os.write(go_w, b"g")
    os.waitpid(pid, 0)
    os.close(w)
    return os.read(r, 1000)
"""


def test_a_forked_childs_record_is_no_later_than_its_fork(tmp_path: Path) -> None:
    """Eighth red-team pass: the parent's failed truncating open notes data/extra.csv as written; after the fork the
    parent touches it. The child's copy of the record had the write and not the touch, so it took the file for its
    own and read it unjudged. In a forked child a file that was there is never the application's own."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    result = _run(tmp_path, _with_criterion(config, 'assert (got := _diverged()).startswith(b"label"), got',
                                            head=DIVERGED, code=["src/mypkg/*.py"]))
    assert result["status"] == "failed", result
    assert "data/extra.csv (opened)" in result["error"] or "AssertionError: b''" in result["error"], result


# --- the red team's seventh pass: guarded paths, Kernodeck's folder, declared files edited, code run between windows --


@pytest.fixture(scope="module")
def throwaway_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv standing for the env (numpy through a .pth): the cases write only files of their own into it."""
    env = tmp_path_factory.mktemp("guarded") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next((env / "lib").glob("python*/site-packages"))
    (site / "numpy-here.pth").write_text(os.path.dirname(os.path.dirname(__import__("numpy").__file__)) + "\n")
    return env


GUARDED = {  # each changed the env (or a declared file) inside a window, then used it: it passed
    "a module written into the env, then imported": (
        '((SITE / f"{NAME}.py").write_text("VALUE = 7\\n"), _check(__import__(NAME).VALUE == 7))', "the env"),
    "an env module appended to": ('open(SITE / f"{NAME}_v.py", "a").write("VALUE = 8\\n")', "the env"),
    "an env module opened for update": ('open(SITE / f"{NAME}_v.py", "r+").write("VALUE = 9")', "the env"),
    "an env module truncated": ('os.truncate(SITE / f"{NAME}_v.py", 0)', "the env"),
    "an env module's time changed": ('os.utime(SITE / f"{NAME}_v.py", ns=(1, 1))', "the env"),
    "an env module removed": ('os.remove(SITE / f"{NAME}_v.py")', "the env"),
    "a file moved onto an env module": (
        '((ROOT / "own.py").write_text("VALUE = 3\\n"), os.replace(ROOT / "own.py", SITE / f"{NAME}_v.py"))',
        "the env"),
    "a hard link made in the env": (
        '((ROOT / "own.py").write_text("VALUE = 4\\n"), os.link(ROOT / "own.py", SITE / f"{NAME}.py"))', "the env"),
    "a folder made in the env": ('os.mkdir(SITE / NAME)', "the env"),
    "bytecode written into the env by the application": (
        '(SITE / "__pycache__" / f"{NAME}_v.{sys.implementation.cache_tag}.pyc").write_bytes(b"planted")', "the env"),
    "a declared module rewritten": ('(ROOT / "src" / "mypkg" / "util.py").write_text("VALUE = 5\\n")',
                                    "src/mypkg/util.py"),
    "a declared data file appended to": ('open(ROOT / "data" / "extra.csv", "a").write("6\\n")', "data/extra.csv"),
}


@pytest.mark.parametrize("how", sorted(GUARDED))
def test_a_write_into_the_env_or_onto_a_declared_file_is_refused(tmp_path: Path, throwaway_env: Path,
                                                                 how: str) -> None:
    """The env is trusted because the inventory proved it before the runner started, and a declared file because the
    orchestrator fingerprinted it then: a window's write, truncate, append, touch, removal, move or link onto them,
    or a folder made in the env, changed what the run says it ran, unseen (seventh red-team pass). Refused at once."""
    site = next((throwaway_env / "lib").glob("python*/site-packages"))
    name = "kd_" + hashlib.sha256(how.encode()).hexdigest()[:8]
    (site / f"{name}_v.py").write_text("VALUE = 1\n")
    (site / "__pycache__").mkdir(exist_ok=True)
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/extra.csv"])
    code, named = GUARDED[how]
    head = f"SITE = Path({str(site)!r})\nNAME = {name!r}\ndef _check(ok):\n    assert ok\n"
    config = _with_criterion(config, code, head=head, code=["src/mypkg/*.py"], files=["data/extra.csv"])
    result = _run(tmp_path, config, python=throwaway_env / "bin" / "python")
    assert result["status"] == "failed" and "changed" in result["error"] and named in result["error"], (how, result)
    assert (site / f"{name}_v.py").read_text() == "VALUE = 1\n" and not (site / name).exists(), how


def test_the_interpreters_bytecode_for_an_env_module_is_written_in_a_window(tmp_path: Path,
                                                                            throwaway_env: Path) -> None:
    """The control: importing an env module in a window (torch inside the entry) writes its bytecode into the env's
    ``__pycache__`` (the import machinery's own write, which the env check accepts): that passes, and the cache is
    there."""
    site = next((throwaway_env / "lib").glob("python*/site-packages"))
    (site / "kd_fresh.py").write_text("VALUE = 2\n")
    shutil.rmtree(site / "__pycache__", ignore_errors=True)
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    config = _with_criterion(config, '__import__("kd_fresh")', code=["src/mypkg/*.py"])
    assert _run(tmp_path, config, python=throwaway_env / "bin" / "python") == {"status": "passed"}
    assert list((site / "__pycache__").glob("kd_fresh.*.pyc")), list(site.iterdir())


CHANGED = {  # a declared file edited after the run's fingerprints were taken, before the application reads it
    # loaded by path by the application: the bytecode rule compiles the file's current bytes
    "a declared module loaded by path": (
        '_check((lambda s: (s.loader.exec_module(m := importlib.util.module_from_spec(s)), m.VALUE)[1])('
        'importlib.util.spec_from_file_location("helper", ROOT / "helper.py")) == 2)', "helper.py"),
    "a declared data file": ('_check((ROOT / "data" / "extra.csv").read_text().startswith("changed"))',
                             "data/extra.csv"),
}


@pytest.mark.parametrize("how", [*sorted(CHANGED), "control: unchanged"])
def test_a_declared_file_changed_after_its_fingerprint_is_refused(tmp_path: Path, how: str) -> None:
    """A declared file opened or loaded by path was accepted by its path alone: edited after the run's fingerprints
    were taken (the user working on while a long verify runs), its new bytes ran or were read, and the dossier named
    the old ones (seventh red-team pass). A declared file read in a window is hashed again at its end."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/extra.csv"])
    root = Path(config["project_root"])
    (root / "helper.py").write_text("VALUE = 1\n")
    code, named = CHANGED.get(how, ('_check(importlib.util.find_spec("os") and (ROOT / "data" / "extra.csv")'
                                    '.read_text().startswith("label"))', ""))
    config = _with_criterion(config, code, imports="importlib.util, os, sys", head="def _check(ok):\n    assert ok\n",
                             code=["src/mypkg/*.py", "helper.py"], files=["data/extra.csv"])
    if named:
        (root / "helper.py").write_text("VALUE = 2\n")
        (root / "data" / "extra.csv").write_text("changed\n")
        result = _run(tmp_path, config)
        assert result["status"] == "failed" and named in result["error"], (how, result)
        assert "changed during the run" in result["error"], result
    else:
        assert _run(tmp_path, config) == {"status": "passed"}


HELD = """
import json, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import world
from kernodeck_inenv._common import CheckFailed, Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
extra = Path(config["project_root"]) / "data" / "extra.csv"
try:
    with world.window(ctx, "the criterion"):
        assert extra.read_text().startswith("label")
    if "--edit" in sys.argv:  # another process edits the declared file once it was read (its fingerprint taken)
        extra.write_text("edited\\n")
    world.sources_held(ctx)  # the runner's check after each step
    print(json.dumps({"status": "passed"}))
except CheckFailed as exc:
    print(json.dumps({"status": "failed", "error": str(exc)}))
"""


@pytest.mark.parametrize("edit", [True, False], ids=["edited after its read", "control: left as it is"])
def test_a_declared_file_edited_during_a_step_fails_it(tmp_path: Path, edit: bool) -> None:
    """The reference's run refuses sources that moved during it (new_reference.require_sources_as_run); verify
    checked nothing after the run, so a file edited after the application read it left a dossier whose fingerprints
    are not of the bytes the run used. The runner checks every declared file after each step now."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/extra.csv"])
    done = _script(tmp_path, config, HELD, flags=(["--edit"] if edit else []))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if edit:
        assert result["status"] == "failed" and "data/extra.csv" in result["error"], result
        assert "changed while this step ran" in result["error"], result
    else:
        assert result == {"status": "passed"}


@pytest.mark.parametrize("stash", ["stash.csv", "stash.py"])
def test_a_file_beside_kernodecks_inenv_modules_is_not_trusted(tmp_path: Path, stash: str) -> None:
    """Every file under Kernodeck's in-env folder was trusted, though only its modules are fingerprinted (the run
    config's ``inenv_sha256``): a file dropped there (an install the user writes) was read as Kernodeck's own (seventh
    red-team pass). Only the fingerprinted files are trusted there (the folder's ``*.py`` where none are given)."""
    folder = _inenv_copy(tmp_path)
    (folder / stash).write_text("label\n6\n")
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    if stash.endswith(".py"):  # given the fingerprints, as the runner is: a .py there that is not one is a stranger
        config["inenv_sha256"] = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in INENV.glob("*.py")}
    config = _with_criterion(config, f'assert open({str(folder / stash)!r}).read().startswith("label")',
                             code=["src/mypkg/*.py"])
    done = _script(tmp_path, config, HARNESS, inenv=folder)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed" and f"{stash} (opened)" in result["error"], result
    control = _with_criterion(config, f'assert open({str(folder / "seen.py")!r}).read()', code=["src/mypkg/*.py"])
    done = _script(tmp_path, control, HARNESS, inenv=folder)  # the control: Kernodeck's own module read passes
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"status": "passed"}, done.stderr


BETWEEN = {  # (lines after ROOT, the entry's return, the criterion's line): the application's code that Kernodeck's
    # own thread ran after a window closed (the hook off for it), reading data/extra.csv into BOX for the criterion
    "__del__ of the entry's return value": (
        "class _Late:\n    def __del__(self):\n        BOX.append(EXTRA.read_text())\n", "return _Late()",
        '_check(BOX and BOX[0].startswith("label"))',
        "the entry read files that are not declared sources: data/extra.csv"),
    "a profile function the entry leaves set": (
        "def _prof(frame, event, arg):\n"
        "    if not BOX and event == 'call' and frame.f_code.co_name == '_function':\n"
        "        BOX.append(EXTRA.read_text())\n", "sys.setprofile(_prof)\n    return 1",
        '_check(BOX and BOX[0].startswith("label"))', "AssertionError"),  # never called: no bytes
    "a trace function the entry leaves set": (
        "def _trace(frame, event, arg):\n"
        "    if not BOX and event == 'call' and frame.f_code.co_name == '_function':\n"
        "        BOX.append(EXTRA.read_text())\n", "sys.settrace(_trace)\n    return 1",
        '_check(BOX and BOX[0].startswith("label"))', "AssertionError"),
    "an audit hook the entry adds": (
        "def _hook(event, args):\n    if event == 'open' and not BOX:\n        BOX.append('')\n"
        "        BOX[0] = EXTRA.read_text()\n", "sys.addaudithook(_hook)\n    return 1",
        '_check(BOX and BOX[0].startswith("label"))', "the entry added an audit hook"),
    "a gc callback the entry adds": (  # called by the collection Kernodeck's own work runs between the windows
        "import gc\ndef _cb(phase, info):\n"
        "    if not BOX and sys._getframe(1).f_code.co_filename.endswith('harness.py'):\n"
        "        BOX.append(EXTRA.read_text())\n", "gc.callbacks.append(_cb)\n    return 1",
        '_check(BOX and BOX[0].startswith("label"))', "AssertionError"),
    "an unraisable hook the entry sets": (  # called for a finalizer's error in that collection
        "class _Boom:\n    def __del__(self):\n        raise ValueError('boom')\ndef _uh(args):\n"
        "    if not BOX and sys._getframe(1).f_code.co_filename.endswith('harness.py'):\n"
        "        BOX.append(EXTRA.read_text())\n",
        "sys.unraisablehook = _uh\n    b = _Boom()\n    b.me = b\n    del b\n    return 1",
        '_check(BOX and BOX[0].startswith("label"))', "AssertionError"),
    "a signal handler the entry sets": (  # called as the signal arrives, on Kernodeck's main thread
        "import signal\ndef _on(signum, frame):\n    if not BOX:\n        BOX.append(EXTRA.read_text())\n",
        "signal.signal(signal.SIGUSR2, _on)\n    return 1", '_check(BOX and BOX[0].startswith("label"))',
        "AssertionError"),
    "an exception whose message reads": (
        "class _Late(Exception):\n    def __str__(self):\n        return EXTRA.read_text()\n", "raise _Late()",
        "pass", "the entry read files that are not declared sources: data/extra.csv"),  # its message read inside
    "the criterion's answer, whose get reads": (
        "class _Answer(dict):\n    def get(self, key, default=None):\n"
        "        return EXTRA.read_text().startswith('label') if key == 'passed' else dict.get(self, key, default)\n",
        "return 1", 'return _Answer(summary="")', "a bool 'passed'"),  # its plain copy has none
}


@pytest.mark.parametrize("how", [*sorted(BETWEEN), "control: plain answers"])
def test_the_applications_code_never_runs_on_kernodecks_thread_between_windows(tmp_path: Path, how: str) -> None:
    """The entry left code that Kernodeck's own thread ran after the window closed, unwatched (seventh red-team
    pass): a finalizer of its return value, a profile or trace function, an audit hook of its own, the methods of
    the criterion's answer. The entry's return value is dropped and the criterion's answer copied as plain data
    inside the window, the trace and profile functions put back as they were at its end, an audit hook refused: the
    bytes never reach the criterion unjudged."""
    head, ret, doing, named = BETWEEN.get(how, ("", "return {'plain': [1, 2.5, None]}", "_check(not BOX)", ""))
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    config = _with_criterion(config, doing, head='EXTRA = ROOT / "data" / "extra.csv"\nBOX = []\n'
                             "def _check(ok):\n    assert ok\n" + head, code=["src/mypkg/*.py"])
    root = Path(config["project_root"])
    (root / "app.py").write_text((root / "app.py").read_text().replace("    return mypkg.util.VALUE\n",
                                                                       f"    {ret}\n", 1))
    config["application"]["sources"] = app_contract.from_table(
        {"entry": "app.py:run", "criterion": "app.py:criterion", "sample": "sample.jsonl", "code": ["src/mypkg/*.py"],
         "outputs": {"x": {"kind": "exact", "dtype": "int64", "justification": "labels"}}}, root).fingerprints(root)
    result = _run(tmp_path, config, "--collect")
    if how.startswith("control"):
        assert result == {"status": "passed"}, result
        return
    assert result["status"] == "failed" and named in result["error"], (how, result)


LATE_WRITE = GAP.replace(
    "    threading.Thread(target=lambda: (go.wait(), box.append(extra.read_text())), daemon=True).start()\n",
    "    def _write():\n        go.wait()\n        try:\n            extra.write_text('edited\\n')\n"
    "        except Exception:\n            pass  # the refusal swallowed (no traceback printed: its source read)\n"
    "        finally:\n            box.append('done')\n"
    "    threading.Thread(target=_write, daemon=True).start()\n").replace(
    "        assert box[0].startswith(\"label\")\n", "        pass\n    world.settle()\n")


def test_a_thread_left_running_may_not_change_a_declared_file_between_windows(tmp_path: Path) -> None:
    """The guard holds between windows too, for every thread but Kernodeck's own: a thread the entry left running
    that rewrites a declared file is refused there, and the step fails (settle) naming it as that thread's."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"], files=["data/extra.csv"])
    done = _script(tmp_path, config, LATE_WRITE)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["status"] == "failed", result
    assert result["error"].startswith("a thread the application left running"), result
    assert "changed a declared source, data/extra.csv" in result["error"], result
    assert (Path(config["project_root"]) / "data" / "extra.csv").read_text() == "label\n1\n"


def test_a_call_that_raises_is_judged_too(tmp_path: Path) -> None:
    """A call of the criterion that raised was not judged (the window judged only a call that returned), and the
    controls and the margin search count a raise as a rejection: a criterion could read an undeclared file on its
    first corrupted output, raise, and use the bytes in every later call. Its reads are judged now, and the step
    fails though the controls swallowed the error."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    config = _with_criterion(config, "(BOX.append(EXTRA.read_text()), _fail()) if not BOX else None",
                             head='EXTRA = ROOT / "data" / "extra.csv"\nBOX = []\ndef _fail():\n'
                                  '    raise ValueError("rejected")\n', code=["src/mypkg/*.py"])
    result = _run(tmp_path, config, "--controls")
    assert result["status"] == "failed" and "data/extra.csv (opened)" in result["error"], result


KEPT = """
import json, runpy, sys, threading
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import world
from kernodeck_inenv._common import Context
config = json.loads(Path(sys.argv[2]).read_text())
ctx = Context(config=config, out=Path(sys.argv[3]))
def tool(frame, event, arg):  # a debugger's or a coverage tool's, set before the run
    return None
sys.setprofile(tool)
threading.settrace(tool)
with world.window(ctx, "the entry"):
    sys.setprofile(None)  # the application's own change, put back at the window's end
    threading.settrace(None)
print(json.dumps({"kept": sys.getprofile() is tool and threading.gettrace() is tool}))
"""


def test_a_trace_or_profile_function_set_before_a_window_is_kept(tmp_path: Path) -> None:
    """The trace and profile functions are put back as they were when the window opened, not cleared: the
    application's change undone, a debugger's or a coverage tool's kept (on 976bd33 the change stayed)."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    done = _script(tmp_path, config, KEPT)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"kept": True}


ENVIRON = """
import json, os, runpy, sys
from pathlib import Path
runpy.run_path(sys.argv[1])
from kernodeck_inenv import leftover, world
from kernodeck_inenv._common import Context
from kernodeck_inenv.resume import Worker
ctx = Context(config=json.loads(Path(sys.argv[2]).read_text()), out=Path(sys.argv[3]))
out = Path(sys.argv[3])
os.environ["KD_KERNODECKS"] = "kept"  # Kernodeck's own, set before it starts any project code
leftover.at_start()  # as runner.py does at its start
os.environ["KD_SMOKE_SET"] = "/tmp/evil.so"  # project code outside the windows (an extension's smoke check)
(out / "wrapper.sh").write_text(f"#!/bin/sh\\necho ran > {out / 'wrapped'}\\nexec {sys.executable} \\"$@\\"\\n")
(out / "wrapper.sh").chmod(0o755)
with world.window(ctx, "the entry"):
    os.environ["KD_APP_SET"] = "/tmp/evil.so"  # the application's, as it would set LD_PRELOAD
    sys.executable = str(out / "wrapper.sh")  # and the interpreter a new process starts
(out / "probe.py").write_text("import json, os\\nprint(json.dumps([os.environ.get(k) for k in "
                              "('KD_APP_SET', 'KD_SMOKE_SET', 'KD_KERNODECKS')]))\\n")
said, _ = Worker(out / "probe.py").proc.communicate("")
print(json.dumps({"worker": json.loads(said), "wrapped": (out / "wrapped").exists(),
                  "here": os.environ.get("KD_APP_SET")}))
"""


def test_a_variable_the_application_sets_never_reaches_the_processes_kernodeck_starts(tmp_path: Path) -> None:
    """A resume check's new process is started with the environment and interpreter from before the project's code
    ran: a variable the entry set in its own process (LD_PRELOAD reached the application resume's workers: red-team
    pass 10), one a smoke check set outside the windows, and sys.executable pointed at a wrapper (pass 11) are not
    passed; Kernodeck's own, set before, is; the application keeps its own in its process."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    done = _script(tmp_path, config, ENVIRON)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "worker": [None, None, "kept"], "wrapped": False, "here": "/tmp/evil.so"}


LIBRARY = """
import json, socket, sys, threading
from pathlib import Path
from kernodeck.inenv import world
from kernodeck.inenv._common import Context
ctx = Context(config=json.loads(Path(sys.argv[1]).read_text()), out=Path(sys.argv[2]))
with world.window(ctx, "the criterion"):
    pass
box = []
thread = threading.Thread(target=lambda: box.append(socket.socket(socket.AF_INET).close() or "made"))
thread.start()
thread.join()
print(json.dumps(box))
"""


def test_a_process_that_imports_the_package_as_a_library_watches_only_the_windows(tmp_path: Path) -> None:
    """The full suite ran a unit test's window in the pytest worker itself (the hook stays installed there), and every
    later test's local server thread was then refused its socket as "a thread the application left running". Only an
    in-env process (the package loaded as kernodeck_inenv: the runner) watches the other threads between windows."""
    config = _closed_project(tmp_path, code=["src/mypkg/*.py"])
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "out").mkdir()
    (tmp_path / "library.py").write_text(LIBRARY)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, str(tmp_path / "library.py"), str(tmp_path / "config.json"),
                           str(tmp_path / "out")], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0 and json.loads(done.stdout.strip().splitlines()[-1]) == ["made"], done.stderr[-2000:]
