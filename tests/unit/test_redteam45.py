"""Red-team pass 45 (6d50303: pass 44's fixes attacked by class): each finding reproduced, marked
``xfail(strict=True)`` with its id while it stands, beside premises (passing today: the setup reaches the vulnerable
path) and controls (notes: /work/notes/redteam45.md). SET2, numerics state the settings step neither records nor reads
back, needs the rebuilt env's torch: tests/e2e/test_redteam45_sessions.py.

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
import shutil
from pathlib import Path

import pytest
import tomlkit

from kernodeck.errors import KernodeckError
from kernodeck.lock import check as lock_check
from kernodeck.lock import compile as lock_compile
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.tinylock import offline_sources, pins, tiny_project, tiny_wheels, write_wheel

REQ = "requirements"


def _lock(root: Path, resolver: str) -> tuple[Path, list[str]]:
    """A real lock of ``root`` with ``resolver``, and the lock check's answer right after it."""
    proj = load_project(root)
    plat = resolve_platform(proj)
    target = lock_compile.compile_lock(proj, plat, resolver=resolver)
    return target, lock_check.check_lock(proj, plat)


def _check(root: Path) -> list[str]:
    proj = load_project(root)
    return lock_check.check_lock(proj, resolve_platform(proj))


# --- LOCK7 -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This machine's sources for the test: the tiny wheels only (alpha 1.0 needs beta>=1; beta 1.0 and 2.0)."""
    wheels = tiny_wheels(tmp_path / "wheels")
    offline_sources(monkeypatch, wheels, tmp_path / "cache")
    return wheels


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


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("where", ["pyproject", "dotfile"])
def test_lock7_premise_pip_compile_reads_the_constraint_its_project_config_names(tmp_path: Path, where: str) -> None:
    root = _pip_tools_config(tmp_path, where)
    target, changes = _lock(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == "1.0"  # without the config: 2.0 (CONTROL2's lock)
    assert changes == []
    (root / REQ / "pins.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    target, _ = _lock(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == "2.0"  # what a relock reads now


@pytest.mark.xfail(strict=True, reason="LOCK7: a file pip-tools' project config names is no input of the lock")
@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("where", ["pyproject", "dotfile"])
def test_lock7_an_edit_of_the_file_pip_tools_config_names_makes_the_lock_stale(tmp_path: Path, where: str) -> None:
    root = _pip_tools_config(tmp_path, where)
    try:
        _lock(root, "pip-tools")
    except KernodeckError:
        return  # refused with an ERROR: fixed that way
    (root / REQ / "pins.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")  # a relock pins 2.0
    assert _check(root) != []


@pytest.mark.usefixtures("offline")
def test_control1_the_same_constraint_named_by_c_in_an_input_makes_the_edit_stale(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base="-c pins.txt\nkdtiny-alpha\n")
    (root / REQ / "pins.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    target, changes = _lock(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == "1.0" and changes == []
    (root / REQ / "pins.txt").write_text("kdtiny-beta==2.0\n", encoding="utf-8")
    assert _check(root) == [f"{REQ}/pins.txt (named in {REQ}/base.in:1) changed"]


# --- LOCK5 -----------------------------------------------------------------------------------------------------------

CALLER = [  # (resolver, variable, value: "PINS" is a file pinning kdtiny-beta==1.0); each input set locks beta 2.0
    ("uv", "UV_OVERRIDE", "PINS"),  # the input says kdtiny-beta>=2: the lock breaks it
    ("uv", "UV_CONSTRAINT", "PINS"),
    ("uv", "UV_RESOLUTION", "lowest"),
    ("pip-tools", "PIP_PRE", "1"),  # beta 3.0rc1 beside 1.0 and 2.0
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


@pytest.mark.xfail(strict=True, reason="LOCK5: the caller's resolver variables change the lock, recorded nowhere")
@pytest.mark.parametrize(("resolver", "variable", "value"), CALLER)
def test_lock5_the_callers_variable_does_not_change_the_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path, resolver: str, variable: str,
        value: str) -> None:
    root = _caller_variable(tmp_path, monkeypatch, offline, variable, value)
    try:
        target, changes = _lock(root, resolver)
    except KernodeckError:
        return  # refused with an ERROR naming the variable: fixed that way
    assert changes == []  # the check calls it current ...
    assert pins(target)["kdtiny-beta"] == "2.0"  # ... so it must be what the inputs give (today: 1.0 or 3.0rc1)


@pytest.mark.parametrize("resolver", ["uv", "pip-tools"])
def test_control2_without_the_variable_the_same_inputs_lock_beta_2(
        tmp_path: Path, offline: Path, resolver: str) -> None:
    write_wheel(offline, "kdtiny-beta", "3.0rc1")
    for base in {"kdtiny-alpha\n", *BASE.values()}:
        target, changes = _lock(tiny_project(tmp_path / str(len(base)), base=base), resolver)
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
    target, _ = _lock(tiny_project(tmp_path / "p"), "pip-tools")
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


def test_lock6_premise_uv_reads_the_dynamic_dependencies_file(tmp_path: Path, offline: Path) -> None:
    target, changes = _lock(_dynamic(tmp_path, offline), "uv")
    assert pins(target)["kdtiny-beta"] == "1.0" and changes == []


def test_lock6_premise_a_relock_with_an_empty_cache_pins_the_edited_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offline: Path) -> None:
    root = _dynamic(tmp_path, offline)
    _lock(root, "uv")
    (root / REQ / "app" / "runtime.txt").write_text("kdtiny-alpha\nkdtiny-beta==2.0\n", encoding="utf-8")
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "another-machine-cache"))
    target, _ = _lock(root, "uv")
    assert pins(target)["kdtiny-beta"] == "2.0"


@pytest.mark.xfail(strict=True, reason="LOCK6: a pyproject input's dynamic dependencies file is no input of the lock")
def test_lock6_an_edit_of_the_dynamic_dependencies_file_makes_the_lock_stale(tmp_path: Path, offline: Path) -> None:
    root = _dynamic(tmp_path, offline)
    try:
        _lock(root, "uv")
    except KernodeckError:
        return  # such an input refused with an ERROR: fixed that way
    (root / REQ / "app" / "runtime.txt").write_text("kdtiny-alpha\nkdtiny-beta==2.0\n", encoding="utf-8")
    assert _check(root) != []


def test_control3_an_edit_of_the_pyproject_input_itself_makes_the_lock_stale(tmp_path: Path, offline: Path) -> None:
    root = _dynamic(tmp_path, offline)
    _lock(root, "uv")
    app = root / REQ / "app" / "pyproject.toml"
    app.write_text(app.read_text(encoding="utf-8").replace('version = "1"', 'version = "2"'), encoding="utf-8")
    assert _check(root) == [f"{REQ}/app/pyproject.toml changed"]
