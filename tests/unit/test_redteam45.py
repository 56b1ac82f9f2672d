"""Red-team pass 45 (6d50303: pass 44's fixes attacked by class): each finding reproduced, marked
``xfail(strict=True)`` with its id while it stood, beside premises (the setup reaches the vulnerable path) and
controls (notes: /work/notes/redteam45.md). LOCK5, LOCK6 and LOCK7 are fixed (kernodeck/lock/resolver_env.py,
lock/inputs.METADATA_FILES): their tests now pass, and the premises run the tool itself (pip-compile without
``--no-config``, ``uv pip compile`` on a pyproject) to show the behaviour Kernodeck no longer lets reach a lock.
SET2, numerics state the settings step neither records nor reads back, needs the rebuilt env's torch:
tests/e2e/test_redteam45_sessions.py.

LOCK7 (pip-tools reads its own configuration from the project: ``[tool.pip-tools]`` in pyproject.toml or
``.pip-tools.toml``; no lock input; FALSE PASS of ``lock-current``; lock/inputs.compute_inputs, lock/compile): the
resolver runs in the project's folder, where pip-compile 7.x reads its config file (the project's pyproject.toml,
else ``.pip-tools.toml``) as defaults of its options. ``constraint = ["requirements/pins.txt"]`` there makes pip-compile
read a file no digest covers (LOCK4's fix follows only ``-r``/``-c`` lines of the inputs), and ``pre = true`` changes
the resolution while no recorded input moves: pyproject.toml is an input only by the variant's declaration and the
resolver's pin. Edit pins.txt (``kdtiny-beta==1.0`` -> ``==2.0``): ``check_lock`` says current, a relock pins 2.0.
A project that used pip-tools before Kernodeck keeps such a section. uv runs with ``UV_NO_CONFIG=1`` and reads no
``[tool.uv]`` (held). Fix idea: run pip-compile with ``--no-config``, or refuse a ``[tool.pip-tools]`` section or a
``.pip-tools.toml`` with one ERROR naming it. CONTROL1: the same constraint named by
``-c`` in base.in makes the edit stale.

LOCK5 (the caller's resolver variables reach the resolver, recorded nowhere; FALSE PASS of ``lock-current``;
lock/compile._resolve's ``clean_env``): the resolver gets the caller's whole environment. uv reads ``UV_OVERRIDE``,
``UV_CONSTRAINT``, ``UV_RESOLUTION``, ``UV_PRERELEASE`` (``UV_NO_CONFIG`` stops only its files); pip-compile reads
``PIP_PRE`` (and a pip.conf's ``pre``). With ``UV_OVERRIDE`` naming a file that pins ``kdtiny-beta==1.0`` in the
caller's shell, an input saying ``kdtiny-beta>=2`` locks 1.0: the lock breaks its own input and the check calls it
current; the same inputs locked elsewhere give 2.0 ("the same inputs locked on two machines ... give byte-identical
locks", locks.md). Fix idea: hand each resolver only the sources' variables (drop every other ``UV_*``, and pip's
resolution ones, or set them to their defaults), or refuse a set one with one ERROR naming it. CONTROL2: the same
inputs without the variable lock 2.0. Held: pip-compile ignores ``PIP_CONSTRAINT`` and a pip.conf ``constraint``.

LOCK6 (an input that is a pyproject.toml with dynamic dependencies read from a file; that file is no input; FALSE PASS
of ``lock-current``; lock/inputs.compute_inputs): ``requirements`` takes any file the resolver reads, and uv builds a
pyproject's metadata, reading ``[tool.setuptools.dynamic] dependencies = {file = [...]}``. Editing that file leaves
every recorded input as it was; a relock with an empty cache pins what it now says (uv's cache, keyed by the
pyproject, even hides it from a relock on the same machine). Fix idea: refuse an input that is not a requirements file
(a pyproject, a setup.py/.cfg), or take the project folder's files as inputs. CONTROL3: editing the pyproject itself
makes the lock stale.
"""

from __future__ import annotations

import ensurepip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from kernodeck.errors import ConfigError
from kernodeck.lock import inputs as lock_inputs
from kernodeck.lock import resolver_env as lock_resolver_env
from kernodeck.lock import resolvers as lock_resolvers
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.tinylock import (
    lock_current,
    lock_then_check,
    offline_tiny_wheels,
    pins,
    tiny_project,
    uv,
    write_wheel,
)

REQ = "requirements"


# --- LOCK7 -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return offline_tiny_wheels(tmp_path, monkeypatch)


def _pip_tools_config(tmp_path: Path, where: str) -> Path:
    """The tiny project with ``constraint = ["requirements/pins.txt"]`` in pip-tools' own config (``where``:
    the project's pyproject.toml or ``.pip-tools.toml``), pins.txt saying ``kdtiny-beta==1.0``."""
    root = tiny_project(tmp_path / "p")
    (root / REQ / "pins.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    section = '[tool.pip-tools]\nconstraint = ["requirements/pins.txt"]\n'
    if where == "pyproject":
        with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
            handle.write("\n" + section)
    else:
        (root / ".pip-tools.toml").write_text(section, encoding="utf-8")
    return root


def _pip_compile(root: Path, *extra: str) -> str:
    """pip-compile run by hand in the project's folder, as Kernodeck runs it but for ``extra``: beta's pin (a new
    output file each time: an existing one would seed its pins)."""
    out = root / f"out-{len(list(root.glob('out-*.txt')))}.txt"
    subprocess.run([sys.executable, "-m", "piptools", "compile", "--quiet", "--no-header", *extra, "--output-file",
                    str(out), f"{REQ}/base.in", f"{REQ}/torch-cpu.in"], cwd=root, check=True, capture_output=True,
                   timeout=300)
    found = re.search(r"^kdtiny-beta==(\S+)", out.read_text(encoding="utf-8"), re.MULTILINE)
    assert found
    return found.group(1)


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("where", ["pyproject", "dotfile"])
def test_lock7_premise_pip_compile_reads_the_constraint_its_project_config_names(tmp_path: Path, where: str) -> None:
    """The tool itself: run in the project's folder, pip-compile takes the config's constraint (1.0, and 2.0 after
    the edit); with --no-config, as Kernodeck now runs it, the inputs alone decide (2.0)."""
    root = _pip_tools_config(tmp_path, where)
    assert _pip_compile(root) == "1.0"
    assert _pip_compile(root, "--no-config") == "2.0"
    (root / REQ / "pins.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert _pip_compile(root) == "2.0"
    assert lock_resolvers.NO_CONFIG in lock_resolvers.command(
        "pip-tools", resolve_platform(load_project(root)), ["a.in"], "out.txt", None, False)


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("where", ["pyproject", "dotfile"])
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_lock7_a_project_with_a_pip_tools_config_is_refused(tmp_path: Path, where: str, resolver: str) -> None:
    """Fixed by refusal: one ERROR naming the config, a TIP to move its options into the .in files; no lock."""
    root = _pip_tools_config(tmp_path, where)
    with pytest.raises(ConfigError) as caught:
        lock_then_check(root, resolver)
    named = "pyproject.toml [tool.pip-tools]" if where == "pyproject" else ".pip-tools.toml"
    assert str(caught.value).startswith(f"{named} holds pip-compile options")
    assert caught.value.tip is not None and "into the .in files" in caught.value.tip
    assert not list((root / "lockfiles").glob("*.txt"))


@pytest.mark.usefixtures("offline")
def test_control1_the_same_constraint_named_by_c_in_an_input_makes_the_edit_stale(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base="-c pins.txt\nkdtiny-alpha\n")
    (root / REQ / "pins.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    target, changes = lock_then_check(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == "1.0" and changes == []
    (root / REQ / "pins.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert lock_current(root) == [f"{REQ}/pins.txt (named in {REQ}/base.in:1) changed"]


# --- LOCK5 -----------------------------------------------------------------------------------------------------------

CALLER = [  # (resolver, variable, value: "PINS" is a file pinning kdtiny-beta==1.0); each input set locks beta 2.0
    ("uv", "UV_OVERRIDE", "PINS"),  # the input says kdtiny-beta>=2: the lock broke it
    ("uv", "UV_CONSTRAINT", "PINS"),
    ("uv", "UV_RESOLUTION", "lowest"),
    ("uv", "UV_PRERELEASE", "allow"),  # beta 3.0rc1 beside 1.0 and 2.0
    ("pip-tools", "PIP_PRE", "1"),
    ("pip-tools", "PIP_CONSTRAINT", "PINS"),  # held before the fix too (test_held_...)
]
BASE = {"UV_OVERRIDE": "kdtiny-alpha\nkdtiny-beta>=2\n"}  # the others: kdtiny-alpha alone


def _caller_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path, variable: str,
                     value: str) -> Path:
    """The tiny project (a prerelease beta 3.0rc1 beside 1.0 and 2.0), locked by a caller whose shell sets
    ``variable``; base.in requires ``kdtiny-beta>=2`` for UV_OVERRIDE."""
    write_wheel(offline, "kdtiny-beta", "3.0rc1")
    pinned = tmp_path / "caller-pins.txt"
    pinned.write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    monkeypatch.setenv(variable, str(pinned) if value == "PINS" else value)
    return tiny_project(tmp_path / "p", base=BASE.get(variable, "kdtiny-alpha\n"))


@pytest.mark.parametrize(("resolver", "variable", "value"), CALLER)
def test_lock5_premise_the_callers_variable_reaches_the_resolver(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path, resolver: str, variable: str,
        value: str) -> None:
    """The variable is set where the lock runs; the inputs ask for no prerelease and no pin of beta."""
    root = _caller_variable(tmp_path, monkeypatch, offline, variable, value)
    assert (root / REQ / "base.in").read_text(encoding="utf-8") == BASE.get(variable, "kdtiny-alpha\n")
    assert os.environ[variable]


@pytest.mark.parametrize(("resolver", "variable", "value"), CALLER)
def test_lock5_the_callers_variable_does_not_change_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], offline: Path,
        resolver: str, variable: str, value: str) -> None:
    """Fixed by the allow-list (lock/resolver_env): the variable never reaches the resolver, one line names it."""
    root = _caller_variable(tmp_path, monkeypatch, offline, variable, value)
    target, changes = lock_then_check(root, resolver)
    assert changes == []  # the check calls it current ...
    assert pins(target)["kdtiny-beta"] == "2.0"  # ... and it is what the inputs give (before the fix: 1.0 or 3.0rc1)
    assert f"not handed to {resolver}" in capsys.readouterr().err
    assert variable not in lock_resolver_env.resolver_environment(resolver, {})


@pytest.mark.parametrize("pre", ["pre = true", "[install]\npre = true"])
def test_lock5_a_pip_configuration_pre_does_not_change_a_pip_tools_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path, pre: str) -> None:
    """The same class through pip's file: pip-compile gets its sources from it, never its `pre`."""
    write_wheel(offline, "kdtiny-beta", "3.0rc1")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nno-index = true\nfind-links = {offline}\n{pre}\n", encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.delenv("PIP_FIND_LINKS")  # the file's find-links alone: it must still reach pip-compile
    target, changes = lock_then_check(tiny_project(tmp_path / "p"), "pip-tools")
    assert pins(target)["kdtiny-beta"] == "2.0" and changes == []


@pytest.mark.parametrize("resolver", ["uv", "pip-tools"])
def test_control2_without_the_variable_the_same_inputs_lock_beta_2(
        tmp_path: Path, offline: Path, resolver: str) -> None:
    write_wheel(offline, "kdtiny-beta", "3.0rc1")
    for base in {"kdtiny-alpha\n", *BASE.values()}:
        target, changes = lock_then_check(tiny_project(tmp_path / str(len(base)), base=base), resolver)
        assert pins(target)["kdtiny-beta"] == "2.0" and changes == []


@pytest.mark.parametrize("how", ["PIP_CONSTRAINT", "pip.conf"])
def test_held_pip_compile_ignores_pips_own_constraint_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path, how: str) -> None:
    pinned = tmp_path / "caller-pins.txt"
    pinned.write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    if how == "PIP_CONSTRAINT":
        monkeypatch.setenv("PIP_CONSTRAINT", str(pinned))
    else:
        conf = tmp_path / "pip.conf"
        conf.write_text(f"[global]\nno-index = true\nfind-links = {offline}\nconstraint = {pinned}\n",
                        encoding="utf-8")
        monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    target, _ = lock_then_check(tiny_project(tmp_path / "p"), "pip-tools")
    assert pins(target)["kdtiny-beta"] == "2.0"


# --- LOCK6 -----------------------------------------------------------------------------------------------------------

APP_PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "kdtiny-app"
version = "1"
dynamic = ["dependencies"]

[tool.setuptools]
py-modules = []

[tool.setuptools.dynamic]
dependencies = {file = ["runtime.txt"]}
"""


def _dynamic(tmp_path: Path, wheels: Path) -> Path:
    """The tiny project whose input is requirements/app/pyproject.toml, its dependencies read from runtime.txt."""
    for wheel in (Path(ensurepip.__file__).parent / "_bundled").glob("setuptools-*.whl"):
        shutil.copy(wheel, wheels)  # the build backend, offline
    root = tiny_project(tmp_path / "p")
    app = root / REQ / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text(APP_PYPROJECT, encoding="utf-8")
    (app / "runtime.txt").write_text("kdtiny-alpha\nkdtiny-beta==1.0\n", encoding="utf-8")
    doc = tomlkit.parse((root / "pyproject.toml").read_text(encoding="utf-8"))
    doc["tool"]["kernodeck"]["requirements"] = [f"{REQ}/app/pyproject.toml"]  # type: ignore[index]
    (root / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    return root


def _uv_compile(root: Path, wheels: Path, cache: Path) -> str:
    """``uv pip compile`` run by hand on the pyproject input (offline, from ``wheels``): beta's pin."""
    out = root / f"out-{len(list(root.glob('out-*.txt')))}.txt"
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheels),
           "UV_CACHE_DIR": str(cache), "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv(), "pip", "compile", "--quiet", "--no-header", "--output-file", str(out),
                    f"{REQ}/app/pyproject.toml"], cwd=root, env=env, check=True, capture_output=True, timeout=300)
    found = re.search(r"^kdtiny-beta==(\S+)", out.read_text(encoding="utf-8"), re.MULTILINE)
    assert found
    return found.group(1)


def test_lock6_premise_uv_reads_the_dynamic_dependencies_file(tmp_path: Path, offline: Path) -> None:
    """The tool itself: uv builds the pyproject input and reads runtime.txt, a file no lock input covers."""
    assert _uv_compile(_dynamic(tmp_path, offline), offline, tmp_path / "uv-cache") == "1.0"


def test_lock6_premise_a_relock_with_an_empty_cache_pins_the_edited_file(tmp_path: Path, offline: Path) -> None:
    root = _dynamic(tmp_path, offline)
    assert _uv_compile(root, offline, tmp_path / "uv-cache") == "1.0"
    (root / REQ / "app" / "runtime.txt").write_text("kdtiny-alpha\nkdtiny-beta==2.0\n", encoding="utf-8")
    assert _uv_compile(root, offline, tmp_path / "another-machine-cache") == "2.0"


@pytest.mark.parametrize("resolver", ["uv", "pip-tools"])
@pytest.mark.parametrize("name", ["pyproject.toml", "setup.py", "setup.cfg", "SETUP.CFG"])
def test_lock6_a_metadata_input_is_refused(tmp_path: Path, offline: Path, resolver: str, name: str) -> None:
    """Fixed by refusal: one ERROR naming the input, a TIP to list the requirements in a .in file; no lock."""
    root = _dynamic(tmp_path, offline)
    if name != "pyproject.toml":
        (root / REQ / "app" / name).write_text("# metadata\n", encoding="utf-8")
        doc = tomlkit.parse((root / "pyproject.toml").read_text(encoding="utf-8"))
        doc["tool"]["kernodeck"]["requirements"] = [f"{REQ}/app/{name}"]  # type: ignore[index]
        (root / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        lock_then_check(root, resolver)
    assert str(caught.value).startswith(f"input {REQ}/app/{name} is a package's metadata file")
    assert caught.value.tip is not None and "in a .in file" in caught.value.tip
    assert not list((root / "lockfiles").glob("*.txt"))


def test_control3_the_check_of_a_lock_made_from_a_pyproject_input_refuses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path) -> None:
    """A lock made before the fix from such an input is not called current: the check refuses the input too."""
    root = _dynamic(tmp_path, offline)
    with monkeypatch.context() as before_the_fix:
        before_the_fix.setattr(lock_inputs, "METADATA_FILES", ())
        target, changes = lock_then_check(root, "uv")
    assert pins(target)["kdtiny-beta"] == "1.0" and changes == []
    with pytest.raises(ConfigError, match="is a package's metadata file"):
        lock_current(root)


def test_control3_a_requirements_file_of_another_name_is_an_input(tmp_path: Path, offline: Path) -> None:
    """The refusal is by the metadata files' names only: a .txt input beside the pyproject locks."""
    root = _dynamic(tmp_path, offline)
    doc = tomlkit.parse((root / "pyproject.toml").read_text(encoding="utf-8"))
    doc["tool"]["kernodeck"]["requirements"] = [f"{REQ}/app/runtime.txt"]  # type: ignore[index]
    (root / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    target, changes = lock_then_check(root, "uv")
    assert pins(target)["kdtiny-beta"] == "1.0" and changes == []
