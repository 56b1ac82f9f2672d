"""The resolver's environment and pip-tools' configuration (kernodeck/lock/resolver_env.py): an allow-list by class
of the caller's UV_*/PIP_* variables and of pip's settings, each kept class shown reaching the resolver and each
dropped one shown not to; a pip-tools configuration refused where pip-compile would find it, and only there."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernodeck.errors import ConfigError
from kernodeck.lock import resolver_env, resolvers
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import copy_project


@pytest.fixture
def caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A caller with no UV_*/PIP_* variable and a pip configuration file of the test's own."""
    for name in list(os.environ):
        if name.startswith(("UV_", "PIP_")):
            monkeypatch.delenv(name)
    conf = tmp_path / "pip.conf"
    conf.write_text("", encoding="utf-8")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    return conf


KEPT = ["UV_CACHE_DIR", "UV_OFFLINE", "UV_NATIVE_TLS", "UV_HTTP_TIMEOUT", "UV_INDEX_MIRROR_PASSWORD",
        "UV_PYTHON_INSTALL_DIR", "PIP_TOOLS_CACHE_DIR", "HTTPS_PROXY", "SSL_CERT_FILE", "HOME"]
DROPPED = ["UV_OVERRIDE", "UV_CONSTRAINT", "UV_BUILD_CONSTRAINT", "UV_RESOLUTION", "UV_PRERELEASE",
           "UV_EXCLUDE_NEWER", "UV_TORCH_BACKEND", "UV_NO_BINARY", "UV_FORK_STRATEGY", "UV_PYTHON", "UV_SYSTEM_PYTHON",
           "UV_CONFIG_FILE", "PIP_PRE", "PIP_CONSTRAINT", "PIP_UPGRADE", "PIP_ONLY_BINARY", "PIP_NO_BINARY",
           "PIP_PREFER_BINARY", "PIP_USE_FEATURE", "PIP_TOOLS_RESOLVER"]


@pytest.mark.usefixtures("caller")
@pytest.mark.parametrize("resolver", ["uv", "pip-tools"])
def test_the_kept_classes_reach_the_resolver_and_the_others_do_not(
        monkeypatch: pytest.MonkeyPatch, resolver: str) -> None:
    for name in KEPT + DROPPED:
        monkeypatch.setenv(name, "1")
    env = resolver_env.resolver_environment(resolver, {"UV_NO_CONFIG": "1"})
    assert [name for name in KEPT if env.get(name) != "1"] == []
    assert [name for name in DROPPED if name in env] == []
    assert env["UV_NO_CONFIG"] == "1"  # what Kernodeck itself sets (uv's sources) comes last, over the caller's


@pytest.mark.usefixtures("caller")
def test_a_callers_variable_kernodeck_sets_itself_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UV_INDEX_STRATEGY", "first-index")
    monkeypatch.setenv("UV_INDEX", "https://caller.example/simple")
    env = resolver_env.resolver_environment("uv", {"UV_INDEX_STRATEGY": "unsafe-best-match"})
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"
    assert "UV_INDEX" not in env  # the caller's sources reach uv through uv_lock_environment's UV_INDEX only


def test_pip_tools_gets_pips_kept_settings_from_the_files_and_the_variables_and_no_file(
        caller: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caller.write_text("[global]\nfind-links = /wheels/a\n  /wheels/b\nno-index = true\npre = true\n"
                      "[install]\ntrusted-host = example.org\nonly-binary = :all:\n[download]\npre = false\n",
                      encoding="utf-8")
    monkeypatch.setenv("PIP_CERT", "/ca.pem")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "60")  # pip's other name of timeout
    env = resolver_env.resolver_environment("pip-tools", {})
    assert env["PIP_CONFIG_FILE"] == os.devnull
    assert env["PIP_DEFAULT_TIMEOUT"] == "60"
    assert env["PIP_FIND_LINKS"].split() == ["/wheels/a", "/wheels/b"]
    assert (env["PIP_NO_INDEX"], env["PIP_TRUSTED_HOST"], env["PIP_CERT"]) == ("true", "example.org", "/ca.pem")
    assert "PIP_PRE" not in env and "PIP_ONLY_BINARY" not in env


def test_uv_gets_no_pip_setting(caller: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    caller.write_text("[global]\nfind-links = /wheels\n", encoding="utf-8")
    monkeypatch.setenv("PIP_CERT", "/ca.pem")
    env = resolver_env.resolver_environment("uv", {})
    assert [name for name in env if name.startswith("PIP_")] == []


def test_one_line_names_what_is_left_out_and_no_value(
        caller: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    caller.write_text("[global]\npre = true\nfind-links = /wheels\n", encoding="utf-8")
    monkeypatch.setenv("PIP_ONLY_BINARY", "secret-looking-value")
    monkeypatch.setenv("PIP_FIND_LINKS", "/more-wheels")
    monkeypatch.setenv("UV_OVERRIDE", "/x")  # not pip's: pip-tools' line does not name it
    resolver_env.resolver_environment("pip-tools", {})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not handed to pip-tools" in err
    assert "PIP_ONLY_BINARY" in err and "pip's pre" in err
    assert "secret-looking-value" not in err and "FIND_LINKS" not in err and "UV_OVERRIDE" not in err


@pytest.mark.usefixtures("caller")
def test_nothing_left_out_says_nothing(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("UV_CACHE_DIR", "/cache")
    monkeypatch.setenv("UV_FIND_LINKS", "/wheels")  # a source: read by Kernodeck, handed on as uv's sources
    resolver_env.resolver_environment("uv", {})
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("name", ["UV_OVERRIDE", "PIP_PRE", "UV_INDEX_X_TOKEN", "UV_INDEX_PASSWORD", "PIP_TOOLS_X"])
def test_kept_is_an_allow_list(name: str) -> None:
    assert not resolver_env.kept(name)


def test_pip_compile_runs_with_no_config_and_the_recorded_command_omits_it(tmp_path: Path) -> None:
    plat = resolve_platform(load_project(copy_project(tmp_path / "p")))
    cmd = resolvers.command("pip-tools", plat, ["a.in"], "out.txt", None, False)
    assert resolvers.NO_CONFIG in cmd
    assert resolvers.NO_CONFIG not in resolvers.public_command(cmd, "out.txt", "lock.txt")


@pytest.mark.parametrize(("where", "text", "named"), [
    (".pip-tools.toml", "[tool.pip-tools]\npre = true\n", ".pip-tools.toml"),
    ("requirements/.pip-tools.toml", "", "requirements/.pip-tools.toml"),
    ("requirements/pyproject.toml", "[tool.pip-tools]\n", "requirements/pyproject.toml [tool.pip-tools]"),
])
def test_a_pip_tools_config_is_refused_naming_it(tmp_path: Path, where: str, text: str, named: str) -> None:
    root = copy_project(tmp_path / "p")
    (root / where).write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        resolver_env.refuse_pip_tools_config(load_project(root))
    assert str(caught.value).startswith(f"{named} holds pip-compile options")


def test_the_projects_pyproject_table_is_refused(tmp_path: Path) -> None:
    root = copy_project(tmp_path / "p")
    with (root / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write('\n[tool.pip-tools]\nconstraint = ["pins.txt"]\n')
    with pytest.raises(ConfigError, match=r"^pyproject.toml \[tool.pip-tools\] holds") as caught:
        resolver_env.refuse_pip_tools_config(load_project(root))
    assert caught.value.tip is not None and "remove the [tool.pip-tools] table from pyproject.toml" in caught.value.tip


def test_no_pip_tools_config_is_no_refusal(tmp_path: Path) -> None:
    root = copy_project(tmp_path / "p")
    (root / "sub").mkdir()
    (root / "sub" / ".pip-tools.toml").write_text("", encoding="utf-8")  # no input's folder: pip-compile never looks
    (root / "requirements" / "pyproject.toml").write_text("[tool.other]\n", encoding="utf-8")
    assert resolver_env.pip_tools_configs(load_project(root)) == []
