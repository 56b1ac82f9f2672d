"""Red-team pass 47 (notes: /work/notes/redteam47.md): passes 44-46's fixes attacked by class (the lock's inputs and
the resolver's environment here; the settings read back in tests/e2e/test_redteam47_sessions.py).

LOCK9 (a requirement line whose text pip-compile takes from the caller's environment; FALSE PASS of
``lock-current``; lock/inputs.compute_inputs, lock/includes, lock/resolver_env): pip's requirements parser expands
``${NAME}`` in EVERY line, requirement lines included, and pip-compile (the default resolver) parses the inputs with
it. Pass 44's and 46's fixes refuse ``${NAME}`` only in the value of ``-r``/``-c``/``-f``/``-i``/``--extra-index-url``
(includes._ENV); a requirement line such as ``kdtiny-beta==${BETA}`` is neither refused (refuse_direct_references skips
an unparsable line that names no URL or path) nor fingerprinted by what it expands to, and ``BETA`` is no ``PIP_*``
variable, so resolver_env hands it on. Locked with ``BETA=1.0`` (pins 1.0), the caller's ``BETA=2.0`` leaves every
recorded input as it was: ``check_lock`` says current, while a relock of the same inputs pins 2.0. (uv does not
expand a variable in a version: it refuses the line; so this is pip-tools'.) Fix idea: refuse ``${NAME}`` in any
logical line of any input (includes._ENV on every line, not only option values), naming the file and line; or record
each expanded variable's value as an input. CONTROL: the same pin written literally and edited makes the lock stale;
an ``-r ${FILE}`` line is refused (pass 44's fix). FIXED: lock/includes.read_inputs reads each input once and refuses
a ``${NAME}`` in any of its logical lines (includes._expanded).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck.errors import ConfigError, LockFailed
from tests.helpers.tinylock import lock_current, lock_then_check, offline_tiny_wheels, pins, tiny_project, uv

REQ = "requirements"
FROM_ENV = "kdtiny-alpha\nkdtiny-beta==${BETA}\n"  # pip expands ${BETA} as it reads the line


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return offline_tiny_wheels(tmp_path, monkeypatch)


def _locked_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, beta: str) -> Path:
    """The tiny project whose base.in pins beta through ``${BETA}``, locked by pip-tools with ``BETA=beta``."""
    monkeypatch.setenv("BETA", beta)
    root = tiny_project(tmp_path / "p", base=FROM_ENV)
    target, changes = lock_then_check(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == beta and changes == []
    return root


@pytest.mark.usefixtures("offline")
def test_lock9_a_variable_in_a_requirement_line_is_refused_naming_its_file_and_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fixed: a ``${NAME}`` in any line of any input (the declared ones and the files they name) is refused before the
    resolver runs, naming the file, the line and the variable; the TIP says to write the value."""
    monkeypatch.setenv("BETA", "1.0")
    root = tiny_project(tmp_path / "p", base="-r more.in\nkdtiny-alpha\n")
    (root / REQ / "more.in").write_text("# the beta pin\nkdtiny-beta==${BETA}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"requirements/more\.in:2.*\$\{BETA\}") as info:
        lock_then_check(root, "pip-tools")
    assert "write the value itself in requirements/more.in" in info.value.tip


def test_lock9_premise_uv_refuses_the_line_pip_compile_expands(tmp_path: Path, offline: Path) -> None:
    (tmp_path / "req.in").write_text(FROM_ENV, encoding="utf-8")
    env = {**os.environ, "BETA": "1.0", "UV_NO_CONFIG": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(offline)}
    proc = subprocess.run([uv(), "pip", "compile", "--quiet", "--no-header", "req.in"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "${BETA}" in proc.stderr
    piptools = subprocess.run([sys.executable, "-m", "piptools", "compile", "--no-config", "--quiet", "--no-header",
                               "--output-file", "-", "req.in"], cwd=tmp_path, env={**os.environ, "BETA": "1.0"},
                              capture_output=True, text=True, timeout=300, check=False)
    assert piptools.returncode == 0 and "kdtiny-beta==1.0" in piptools.stdout, piptools.stderr


@pytest.mark.usefixtures("offline")
def test_lock9_a_changed_variable_an_input_line_expands_makes_the_lock_stale(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        root = _locked_with(tmp_path, monkeypatch, "1.0")
    except (ConfigError, LockFailed) as exc:  # the fix: the line is refused
        assert "base.in:2" in str(exc)
        return
    monkeypatch.setenv("BETA", "2.0")
    assert lock_current(root) != []


@pytest.mark.usefixtures("offline")
def test_control1_the_pin_written_literally_and_edited_makes_the_lock_stale(tmp_path: Path) -> None:
    root = tiny_project(tmp_path / "p", base="kdtiny-alpha\nkdtiny-beta==1.0\n")
    target, changes = lock_then_check(root, "pip-tools")
    assert pins(target)["kdtiny-beta"] == "1.0" and changes == []
    (root / REQ / "base.in").write_text("kdtiny-alpha\nkdtiny-beta==2.0\n", encoding="utf-8")
    assert any("base.in" in change for change in lock_current(root))


@pytest.mark.usefixtures("offline")
def test_control2_a_file_named_through_a_variable_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINS", "pins.txt")
    root = tiny_project(tmp_path / "p", base="-c ${PINS}\nkdtiny-alpha\n")
    (root / REQ / "pins.txt").write_text("kdtiny-beta==1.0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="environment variable"):
        lock_then_check(root, "pip-tools")
