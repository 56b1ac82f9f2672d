"""`nox -s replay` runs with no machine package configuration: what the clean environment drops and keeps, and that
pip and uv, run in it, see no configuration at all (a configured caller shows they would otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernodeck._proc import uv_available
from kernodeck.dossier.replay import clean_environment


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A caller as configured as a developer's machine: a pip config file, source variables, an XDG config folder."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = https://caller.invalid/simple\n", encoding="utf-8")
    xdg = tmp_path / "xdg"
    (xdg / "uv").mkdir(parents=True)
    (xdg / "uv" / "uv.toml").write_text('index-url = "https://caller.invalid/uv"\n', encoding="utf-8")
    for var, value in {
        "PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "/caller/wheels", "UV_INDEX": "https://caller.invalid/uvx",
        "XDG_CONFIG_HOME": str(xdg), "PYTHONPATH": "/caller/src", "KERNODECK_FAULT": "operator",
        "KERNODECK_INDEX_CPU": "http://127.0.0.1:9/simple", "KERNODECK_PYTHON_DOWNLOADS": "1",
        "HTTPS_PROXY": "http://proxy.invalid:3128",
    }.items():
        monkeypatch.setenv(var, value)
    return conf


def test_clean_environment_drops_configuration_and_keeps_the_documented_variables(
    configured: Path, tmp_path: Path
) -> None:
    env = clean_environment(tmp_path / "home", "/opt/cpython3.11/bin/python3.11")
    for var in ("PIP_FIND_LINKS", "UV_INDEX", "PYTHONPATH", "KERNODECK_FAULT"):
        assert var not in env, var
    assert env["PIP_CONFIG_FILE"] == os.devnull and env["UV_NO_CONFIG"] == "1"
    assert env["HOME"] == str(tmp_path / "home") and env["XDG_CONFIG_HOME"] == str(tmp_path / "home/.config")
    assert not [p for p in (tmp_path / "home").rglob("*") if p.is_file()]  # config folders made, empty
    assert env["KERNODECK_INDEX_CPU"] == "http://127.0.0.1:9/simple"  # the documented mirror
    assert env["KERNODECK_PYTHON_DOWNLOADS"] == "1" and env["HTTPS_PROXY"] == "http://proxy.invalid:3128"
    assert env["KERNODECK_BASE_PYTHON"] == "/opt/cpython3.11/bin/python3.11"
    assert not any(k.startswith(("PIP_", "UV_")) for k in env if k not in ("PIP_CONFIG_FILE", "UV_NO_CONFIG",
                                                                           "UV_CACHE_DIR"))


def _pip_config(env: dict[str, str]) -> str:
    argv = [sys.executable, "-m", "pip", "config", "list"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


def test_pip_in_the_clean_environment_reads_no_configuration(configured: Path, tmp_path: Path) -> None:
    assert "caller.invalid" in _pip_config(dict(os.environ))  # the caller's pip sees its configuration ...
    env = clean_environment(tmp_path / "home")
    # ... the replay's sees none (no file, /etc/pip.conf included): only the variable that says so
    assert _pip_config(env).splitlines() == [":env:.config-file='/dev/null'"]


@pytest.mark.skipif(uv_available() is None, reason="uv is installed by the `run` group")
def test_uv_in_the_clean_environment_reads_no_configuration(configured: Path, tmp_path: Path) -> None:
    """uv names the index it would ask in its verbose log: the caller's uv.toml, never in the replay's env."""
    uv = str(uv_available())

    def asked(env: dict[str, str]) -> str:
        argv = [uv, "pip", "compile", "--no-cache", "--offline", "-v", "-"]
        return subprocess.run(argv, env=env, input="tiny-nothing\n", capture_output=True, text=True,
                              check=False).stderr

    caller = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    assert "caller.invalid/uv" in asked(caller)
    assert "caller.invalid" not in asked(clean_environment(tmp_path / "home"))
