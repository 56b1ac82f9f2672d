"""uv's and pip-tools' commands and environments (kernodeck/lock/resolvers.py): uv's source order, no source in
the command, resolver output cleaned up, the resolution date handed to both."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernodeck.errors import CommandFailed
from kernodeck.lock import resolvers
from kernodeck.project.config import load_project
from kernodeck.project.platforms import parse_platform_id, resolve_platform
from kernodeck.sources import PYPI, Source
from tests.helpers.project import ROOT
from tests.helpers.tinylock import RESOLVERS, tiny_project

PROJECT = load_project(ROOT)
CPU = parse_platform_id(PROJECT, "cp311-linux_x86_64-cpu")
MPS = parse_platform_id(PROJECT, "cp311-macosx_arm64-mps")
MIRRORS = [Source("find-links", "/w"), Source("extra-index-url", "file:///m1"), Source("extra-index-url", "file:///m2")]


def test_uv_public_sources_go_before_the_machine_mirrors() -> None:
    env = resolvers.uv_lock_environment(CPU, "https://download.pytorch.org/whl/cpu", MIRRORS, no_index=False)
    assert env["UV_INDEX"].split() == [PYPI, "https://download.pytorch.org/whl/cpu", "file:///m1", "file:///m2"]
    assert env["UV_DEFAULT_INDEX"] == PYPI and env["UV_FIND_LINKS"] == "/w"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match" and env["UV_NO_CONFIG"] == "1"
    assert "MACOSX_DEPLOYMENT_TARGET" not in env


def test_uv_machine_index_url_replaces_pypi_as_pip_does() -> None:
    replaced = [Source("index-url", "https://u:p@proxy.example/simple"), *MIRRORS]
    env = resolvers.uv_lock_environment(CPU, None, replaced, no_index=False)
    assert env["UV_DEFAULT_INDEX"] == "https://u:p@proxy.example/simple"
    assert PYPI not in env["UV_INDEX"].split()
    assert env["UV_INDEX"].split()[0] == "https://u:p@proxy.example/simple"


def test_uv_no_index_and_macos_target() -> None:
    env = resolvers.uv_lock_environment(MPS, None, [Source("find-links", "/w")], no_index=True)
    assert env["UV_NO_INDEX"] == "1" and "UV_INDEX" not in env and env["UV_FIND_LINKS"] == "/w"
    assert env["MACOSX_DEPLOYMENT_TARGET"] == "14.0"


def test_uv_command_holds_no_source() -> None:
    cmd = resolvers.command("uv", MPS, ["requirements/base.in"], "out.txt", "https://x.example/simple", False)
    assert not [c for c in cmd if "index" in c or "find-links" in c or "x.example" in c]
    assert cmd[cmd.index("--python-platform") + 1] == "aarch64-apple-darwin"


def test_tracebacks_are_dropped_from_resolver_output() -> None:
    output = ("  ERROR: Could not find a version that satisfies the requirement torch==9\n"
              "Traceback (most recent call last):\n  File \"/x/pip.py\", line 3, in resolve\n    raise X\n"
              "pip._vendor.resolvelib.resolvers.ResolutionImpossible: [x]\n"
              "pip._internal.exceptions.DistributionNotFound: No matching distribution found for torch==9\n")
    kept = resolvers.without_tracebacks(output)
    assert kept == "  ERROR: Could not find a version that satisfies the requirement torch==9"


def test_uv_reason_carries_its_cause_line() -> None:
    output = ("error: No solution found when resolving dependencies\n"
              "  cause: Because only kdtiny-beta<=2.0 is available and you require kdtiny-beta>=3, ...\n")
    exc = CommandFailed(["uv"], 1, "error: No solution found when resolving dependencies", output)
    assert resolvers.reason(exc).endswith("cause: Because only kdtiny-beta<=2.0 is available and you require "
                                          "kdtiny-beta>=3, ...")


@pytest.mark.parametrize("resolver", RESOLVERS)
def test_both_resolvers_get_the_date(tmp_path: Path, resolver: str) -> None:
    project = load_project(tiny_project(tmp_path / "p"))
    plat = resolve_platform(project)
    flag = {"pip-tools": "--uploaded-prior-to", "uv": "--exclude-newer"}[resolver]
    with_date = resolvers.command(resolver, plat, ["a.in"], "out.txt", None, False, "2024-06-01T00:00:00Z",
                                  ("kdtiny-torch",))
    assert with_date[with_date.index(flag) + 1] == "2024-06-01T00:00:00Z"
    if resolver == "uv":
        assert with_date[with_date.index("--exclude-newer-package") + 1] == "kdtiny-torch=false"
    without = resolvers.command(resolver, plat, ["a.in"], "out.txt", None, False)
    assert flag not in without and "--exclude-newer-package" not in without


def test_uv_keeps_the_name_the_caller_gave_an_index_and_the_name_is_no_part_of_its_identity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Red-team pass 46, LOCKF2: uv applies UV_INDEX_CORP_USERNAME/_PASSWORD to the index named corp only."""
    import types

    from kernodeck.lock.resolvers import uv_lock_environment
    from kernodeck.sources.installer_config import Source, machine_sources

    for name in [n for n in os.environ if n.startswith(("PIP_", "UV_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "pub=https://pub.example/simple")
    monkeypatch.setenv("UV_INDEX", "corp=https://corp.example/simple https://other.example/simple")
    found = machine_sources()
    assert Source("extra-index-url", "https://corp.example/simple") in found  # the URL is what is compared
    env = uv_lock_environment(types.SimpleNamespace(os_arch="linux_x86_64"), None, found, False)  # type: ignore[arg-type]
    assert env["UV_DEFAULT_INDEX"] == "pub=https://pub.example/simple"
    assert env["UV_INDEX"] == ("pub=https://pub.example/simple corp=https://corp.example/simple "
                               "https://other.example/simple")
