"""Red-team pass 49 (notes: /work/notes/redteam49.md): the lock's inputs beyond ``${NAME}`` and compare's inputs.

LOCK10 (an environment marker in an input that reads the resolving machine, not the platform; FALSE ``lock-current``;
lock/inputs.compute_inputs, lock/includes, lock/compile): pip-compile (and uv without ``--python-platform``) evaluate
an input's markers against the interpreter that resolves. The lock's inputs record only what the platform id fixes
(``python 3.11``, ``os-arch linux_x86_64``), so a marker on ``python_full_version`` (or ``platform_release``,
``platform_version``, ``implementation_version``) makes the pins depend on the machine: this machine has CPython
3.11.7 (pyenv) and 3.11.2 (/usr/bin), the same inputs lock ``kdtiny-beta==2.0`` under one and ``==1.0`` under the
other, and ``lock -- --check`` says current on both. Fix idea (by class): refuse, naming the file and line, a marker
whose variable the platform id does not fix (allow python_version, sys_platform, platform_system, platform_machine,
os_name, implementation_name, platform_python_implementation, extra), or record each such variable's value as an
input. CONTROL: a ``python_version`` marker (fixed by the platform) locks and is current.

CMP1 (a file compare reads that no record covers; FALSE "within its declared tolerance"; dossier/compare
declared_outputs, dossier/delta changed_since_written): ``declared_outputs`` reads ``run-config.json`` FIRST, also in
a reference folder, whose record is its manifest (id over the declaration, sha256 of each output). A
``run-config.json`` planted in a reference folder replaces the manifest's declared kind and tolerance for
``nox -s compare``, and ``changed_since_written`` (manifest.inconsistency) does not name it: it checks the manifest's
id and outputs only. Two references (e.g. history entries) each given the same loose ``run-config.json`` compare
"within" with no word. Fix idea: a reference folder's declaration is its manifest's only (read run-config.json only
where a run's marker lists it), and any file compare reads that the folder's record does not cover is named.
CONTROL: without the planted file the declaration is the manifest's, and a planted file in a run's signed folder is
named (pass 46, COMP1).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker, default_environment

from kernodeck.dossier.compare import declared_outputs
from kernodeck.dossier.read import changed_since_written
from kernodeck.errors import ConfigError, LockFailed
from tests.helpers.tinylock import lock_then_check, offline_tiny_wheels, pins, tiny_project

REPO = Path(__file__).resolve().parents[2]
HERE = default_environment()["python_full_version"]
OTHER = f"{sys.version_info[0]}.{sys.version_info[1]}.0"  # another micro version of the same platform's Python


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return offline_tiny_wheels(tmp_path, monkeypatch)


def _machine_marked(variable: str, value: str) -> str:
    """beta 2.0 where the resolving machine's ``variable`` is at least ``value``, else beta 1.0."""
    return (f'kdtiny-alpha\nkdtiny-beta==2.0 ; {variable} >= "{value}"\n'
            f'kdtiny-beta==1.0 ; {variable} < "{value}"\n')


def test_lock10_premise_the_marker_decides_by_the_machine_not_the_platform() -> None:
    if HERE == OTHER:
        pytest.skip("this interpreter is micro version 0: no older micro version to stand for another machine")
    marker = Marker(f'python_full_version >= "{HERE}"')
    assert marker.evaluate() is True
    assert marker.evaluate({"python_full_version": OTHER}) is False  # a 3.11.2 machine (this one's /usr/bin) differs
    assert Marker('python_version >= "3.11"').evaluate({"python_full_version": OTHER}) is True


@pytest.mark.usefixtures("offline")
def test_lock10_premise_the_lock_pins_what_this_machine_selected_and_says_current(tmp_path: Path) -> None:
    if HERE == OTHER:
        pytest.skip("this interpreter is micro version 0")
    root = tiny_project(tmp_path / "p", base=_machine_marked("python_full_version", HERE))
    try:
        target, changes = lock_then_check(root, "pip-tools")
    except (ConfigError, LockFailed):  # the fix refuses the line: nothing left to show
        return
    assert pins(target)["kdtiny-beta"] == "2.0" and changes == []
    header = target.read_text(encoding="utf-8")
    assert f"# input: python {sys.version_info[0]}.{sys.version_info[1]}\n" in header
    inputs = [line for line in header.splitlines() if line.startswith(("# input:", "# inputs-digest:"))]
    assert inputs and not any(HERE in line for line in inputs)  # the full version decided the pin and is no input


@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("variable", ["python_full_version", "platform_release", "platform_version",
                                      "implementation_version"])
def test_lock10_a_marker_the_platform_does_not_fix_is_refused_naming_its_line(tmp_path: Path, variable: str) -> None:
    value = default_environment()[variable]  # type: ignore[literal-required]
    root = tiny_project(tmp_path / "p", base=_machine_marked(variable, value))
    with pytest.raises((ConfigError, LockFailed), match=r"base\.in:2"):
        lock_then_check(root, "pip-tools")


@pytest.mark.usefixtures("offline")
def test_lock10_control_a_marker_the_platform_fixes_locks_and_is_current(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base=_machine_marked("python_version", "3.11"))
    target, changes = lock_then_check(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == ("2.0" if sys.version_info >= (3, 11) else "1.0") and changes == []


LOOSE = {"kind": "cosine", "dtype": "float32", "max-abs": 1e9, "cosine-min": -1.0, "justification": "planted"}


def _reference_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "reference"
    shutil.copytree(REPO / "dossier" / "reference", folder, ignore=shutil.ignore_patterns("history"))
    return folder


def test_cmp1_premise_the_copied_reference_is_consistent_and_declares_its_own_tolerance(tmp_path: Path) -> None:
    folder = _reference_copy(tmp_path)
    assert changed_since_written(folder) == []
    declared = declared_outputs(folder)
    assert declared is not None and declared["embeddings"]["cosine-min"] == 0.9999


def test_cmp1_premise_a_planted_run_config_replaces_the_manifests_tolerance(tmp_path: Path) -> None:
    folder = _reference_copy(tmp_path)
    (folder / "run-config.json").write_text(json.dumps({"application": {"outputs": {"embeddings": LOOSE}}}),
                                            encoding="utf-8")
    declared = declared_outputs(folder)
    assert declared is not None
    if declared["embeddings"] == LOOSE:  # the finding: the planted tolerance is the one compare judges under
        assert changed_since_written(folder) == []


def test_cmp1_a_planted_declaration_in_a_reference_is_ignored_or_named(tmp_path: Path) -> None:
    folder = _reference_copy(tmp_path)
    (folder / "run-config.json").write_text(json.dumps({"application": {"outputs": {"embeddings": LOOSE}}}),
                                            encoding="utf-8")
    declared = declared_outputs(folder)
    assert declared is not None
    assert declared["embeddings"] != LOOSE or any("run-config.json" in e for e in changed_since_written(folder))
