"""The system chain (kernodeck/inenv/system.py): the container image recorded only inside one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernodeck.dossier import baseimage
from kernodeck.inenv import system
from tests.helpers.containers import DIGEST


def test_system_chain_records_the_container_image_only_inside_one() -> None:
    assert system.CONTAINER_IMAGE_ENV == baseimage.ENV_VAR
    assert system.container({}) == {}
    assert system.container({"KERNODECK_BASE_IMAGE": f"python:3.11-slim@{DIGEST}"}) == {
        "container_image": {"reference": f"python:3.11-slim@{DIGEST}", "pinned_by_digest": True, "digest": DIGEST}}
    assert system.container({"KERNODECK_BASE_IMAGE": "python:3.11-slim"})["container_image"]["digest"] is None


def test_the_system_step_adds_the_container_image_to_its_chain(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    from kernodeck.inenv._common import Context

    monkeypatch.setattr(system, "collect", lambda: {"os": "Debian GNU/Linux 12"})
    monkeypatch.delenv(system.CONTAINER_IMAGE_ENV, raising=False)
    assert system.run(Context({}, tmp_path)) == {"os": "Debian GNU/Linux 12"}
    monkeypatch.setenv(system.CONTAINER_IMAGE_ENV, f"python:3.11-slim@{DIGEST}")
    ctx = Context({}, tmp_path)
    chain = system.run(ctx)
    assert chain["container_image"]["digest"] == DIGEST and ctx.state["system"] is chain


def test_a_tool_whose_version_is_not_text_is_recorded_not_raised(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # red-team pass 87, DECODE1: a gcc printing bytes the locale cannot decode raised UnicodeDecodeError out of the
    # system step (a traceback, no TIP); its version is now recorded with the bytes replaced
    tool = tmp_path / "gcc"
    tool.write_bytes(b"#!/bin/sh\nprintf '\\377\\376gcc (odd) 1.0\\n'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    found = system._cmd_version("gcc", ["--version"])
    assert found == {"path": str(tool), "version": "\ufffd\ufffdgcc (odd) 1.0"}
