"""Installer choice and reuse, on a tiny hermetic lock (tiny wheels built here, pip from ensurepip, no index)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kernodeck.env import envdirs, installenv, inventory, rebuild, seeds
from kernodeck.errors import ConfigError
from kernodeck.inenv.protocol import Status
from kernodeck.project.platforms import Platform
from kernodeck.verify.pipeline import Run
from kernodeck.verify.record import Step
from tests.helpers.project import kd
from tests.helpers.reports import read_report
from tests.helpers.tinylock import (
    current_env,
    locked_tiny_project,
    offline_env,
    pip_wheel,
    wheel_spec,
    write_lock,
    write_wheel,
)

Tiny = tuple[Path, Platform, dict[str, str], dict[str, str]]


@pytest.fixture
def tiny(tmp_path: Path) -> Tiny:
    """(project, its platform, an environment whose only source is a local find-links, the pins of the lock)."""
    links = tmp_path / "links"
    wheels = [pip_wheel(links), write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")]
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    return project, plat, env, dict(wheel_spec(w) for w in wheels)


def _marker(env_dir: Path) -> dict[str, object]:
    return json.loads((env_dir / envdirs.MARKER).read_text(encoding="utf-8"))


def test_uv_and_pip_give_identical_inventories(tiny: Tiny) -> None:
    project, plat, env, pins = tiny
    proc = kd(project, "rebuild", "--installer", "uv", env=env)
    assert proc.returncode == 0, proc.stderr
    by_uv = current_env(project, plat)
    uv_inventory = (by_uv / rebuild.INVENTORY).read_text(encoding="utf-8")
    uv_marker = _marker(by_uv)

    proc = kd(project, "rebuild", "--installer", "pip", "--fresh", env=env)
    assert proc.returncode == 0, proc.stderr
    by_pip = current_env(project, plat)
    assert by_pip != by_uv, "--fresh must build a new environment"
    pip_inventory = (by_pip / rebuild.INVENTORY).read_text(encoding="utf-8")
    pip_marker = _marker(by_pip)

    assert inventory.parse_freeze(uv_inventory) == pins, "uv's env must hold exactly the lock (pip included)"
    assert inventory.parse_freeze(pip_inventory) == inventory.parse_freeze(uv_inventory)
    assert uv_inventory == pip_inventory  # `pip freeze --all`, byte for byte
    # The procedure records the commands that really ran, without this machine's paths to the tools.
    assert uv_marker["installer"] == "uv" and pip_marker["installer"] == "pip"
    uv_cmds, pip_cmds = " | ".join(uv_marker["commands"]), " | ".join(pip_marker["commands"])  # type: ignore[arg-type]
    assert "uv venv" in uv_cmds and "uv pip install" in uv_cmds and "--require-hashes" in uv_cmds
    # pip: an empty env, the lock installed by Kernodeck's pip (never the env's); read by Kernodeck's pip run by the
    # base interpreter, never by the env's own (kernodeck/env/envpip.py), though the lock pins pip
    assert "-m venv --without-pip" in pip_cmds and "uv " not in pip_cmds
    assert re.search(r"kernodeck/pip-[^/ ]+/__pip-runner__\.py install", pip_cmds), pip_cmds  # Kernodeck's pip
    for cmds in (pip_cmds, uv_cmds):
        assert re.search(r"kernodeck/pip-[^/ ]+/pip check", cmds) and "/pip freeze --all" in cmds, cmds
        assert "-m pip" not in cmds, cmds
    assert str(Path.home()) not in uv_cmds + pip_cmds


def test_pip_installer_removes_venv_seeds_the_lock_does_not_pin(tiny: Tiny) -> None:
    project, plat, env, pins = tiny
    proc = kd(project, "rebuild", "--installer", "pip", env=env)
    assert proc.returncode == 0, proc.stderr
    env_dir = current_env(project, plat)
    observed = inventory.parse_freeze((env_dir / rebuild.INVENTORY).read_text(encoding="utf-8"))
    assert observed == pins and "setuptools" not in observed
    assert seeds.left(env_dir, set(pins)) == []



@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_lock_without_pip_is_served_by_a_pip_outside_the_env_never_installed(tmp_path: Path, installer: str) -> None:
    """A lock that does not pin pip: its env is made empty (uv venv, or venv --without-pip) and Kernodeck's own pip
    installs it (pip: run by the env's interpreter through pip's runner), checks and freezes it; nothing is seeded, so
    nothing is removed. pip check still fails the rebuild on a requirement the lock does not hold."""
    links = tmp_path / "links"
    wheels = [write_wheel(links, "tinya", "1.0"), write_wheel(links, "tinyb", "2.0")]
    project, plat = locked_tiny_project(tmp_path / "project", wheels)
    env = offline_env(PIP_FIND_LINKS=str(links), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    proc = kd(project, "rebuild", "--installer", installer, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    built = current_env(project, plat)
    commands = " | ".join(_marker(built)["commands"])  # type: ignore[arg-type]
    assert re.search(r"kernodeck/pip-[^/ ]+/pip check", commands) and "/pip freeze --all" in commands, commands
    assert str(Path.home()) not in commands  # the tool, not this machine's path to it
    assert "uninstall" not in commands and "-m pip" not in commands, commands
    assert ("uv venv" in commands) is (installer == "uv"), commands
    runner = re.search(r"kernodeck/pip-[^/ ]+/__pip-runner__\.py install", commands)
    assert (installer == "uv") or ("-m venv --without-pip" in commands and runner), commands
    assert inventory.parse_freeze((built / rebuild.INVENTORY).read_text(encoding="utf-8")) == dict(
        wheel_spec(w) for w in wheels)
    assert seeds.left(built, set(), ("pip", *seeds.VENV_SEEDS)) == []
    # negative: a pin requiring what the lock lacks; the check fails the rebuild, naming it
    broken = tmp_path / "broken"
    wheels = [write_wheel(broken / "links", "tinyc", "1.0", ("tinymissing>=1",))]
    project, plat = locked_tiny_project(broken / "project", wheels)
    proc = kd(project, "rebuild", "--installer", installer,
              env=offline_env(PIP_FIND_LINKS=str(broken / "links"), UV_CACHE_DIR=str(tmp_path / "uv-cache")))
    assert proc.returncode != 0 and "tinymissing" in proc.stdout + proc.stderr, proc.stdout + proc.stderr

def test_seeds_left_sees_a_seed_that_is_not_pinned(tmp_path: Path) -> None:
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "setuptools-65.5.0.dist-info").mkdir(parents=True)
    assert seeds.left(tmp_path, {"pip"}) == ["setuptools"]
    assert seeds.left(tmp_path, {"pip", "setuptools"}) == []


def test_second_rebuild_is_reused_and_fresh_rebuilds(tiny: Tiny) -> None:
    project, plat, env, _ = tiny
    first = kd(project, "rebuild", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("rebuilt") and "no complete env yet" in first.stdout
    built = current_env(project, plat)

    again = kd(project, "rebuild", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("reused") and "up to date: same lock digest, same base interpreter" in again.stdout
    assert current_env(project, plat) == built

    fresh = kd(project, "rebuild", "--fresh", env=env)
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.startswith("rebuilt") and "--fresh given" in fresh.stdout
    assert current_env(project, plat) != built and not built.exists()

    # A changed lock is never reused.
    links = Path(env["PIP_FIND_LINKS"])
    write_lock(project, [*links.glob("*.whl"), write_wheel(links, "tinyc", "3.0")])
    changed = kd(project, "rebuild", env=env)
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout.startswith("rebuilt") and "lock or interpreter changed" in changed.stdout


def test_verify_report_records_the_reuse_decision(tiny: Tiny, tmp_path: Path) -> None:
    project, _, env, _ = tiny
    assert kd(project, "rebuild", env=env).returncode == 0
    # The tiny env has no torch: the in-env checks fail, but the rebuild step and its reason are in the report.
    proc = kd(project, "verify", "--out", str(tmp_path / "reused"), env=env)
    assert proc.returncode == 1, proc.stderr
    steps = {s["name"]: s for s in read_report(tmp_path / "reused")["steps"]}  # type: ignore[index,union-attr]
    assert steps["rebuild"]["status"] == "passed" and steps["rebuild"]["title"] == "reused"
    assert steps["rebuild"]["reason"].startswith("up to date")
    assert steps["rebuild"]["details"]["reused"] is True
    assert steps["inventory"]["status"] == "passed"
    # Progress: each step says when it starts and ends, and how long it took (in-env steps from the runner).
    for name in ("lock-check", "rebuild", "inventory"):
        assert re.search(rf"kernodeck: {name}: start \(\d\d:\d\d:\d\d\)", proc.stderr), name
        assert re.search(rf"kernodeck: {name}: ok \(\d+\.\d\ds, ended \d\d:\d\d:\d\d", proc.stderr), name
    # the runner's lines forwarded in the orchestrator's words; its end line left out: each step reported once
    assert re.search(r"kernodeck: settings: start \(\d\d:\d\d:\d\d\)", proc.stderr)
    assert len(re.findall(r"kernodeck: settings: FAILED \(\d+\.\d\ds\) - ", proc.stderr)) == 1
    assert "[kernodeck]" not in proc.stderr

    proc = kd(project, "verify", "--fresh", "--out", str(tmp_path / "fresh"), env=env)
    steps = {s["name"]: s for s in read_report(tmp_path / "fresh")["steps"]}  # type: ignore[index,union-attr]
    assert steps["rebuild"]["title"] == "rebuilt" and steps["rebuild"]["reason"] == "--fresh given"
    assert steps["rebuild"]["details"]["reused"] is False
    assert "up to date" in (tmp_path / "reused" / "report.md").read_text(encoding="utf-8")


def test_uv_requested_but_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(installenv, "uv_available", lambda: None)
    with pytest.raises(ConfigError, match="uv is not installed") as info:
        installenv.choose_installer("uv")
    assert "--installer pip" in info.value.tip
    assert installenv.choose_installer(None) == "pip" and installenv.choose_installer("auto") == "pip"


def test_unknown_installer_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown installer"):
        installenv.choose_installer("conda")


def test_offline_env_drops_every_source(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "UV_INDEX_URL",
        "UV_DEFAULT_INDEX",
        "UV_EXTRA_INDEX_URL",
        "UV_INDEX",
        "UV_FIND_LINKS",
    ):
        monkeypatch.setenv(var, "https://user:secret@mirror.invalid/simple")
    env = installenv.offline_env()
    assert not any("mirror.invalid" in v for v in env.values())
    assert env["PIP_NO_INDEX"] == "1" and env["PIP_CONFIG_FILE"] == os.devnull
    assert env["UV_OFFLINE"] == "1" and env["UV_NO_CONFIG"] == "1" and env["UV_NO_INDEX"] == "1"


def test_item_work_prints_its_throughput(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernodeck.inenv.runner import _progress

    app = {"status": "passed", "details": {"items": 40, "seconds": 0.5, "items_per_s": 80.0}}
    assert re.fullmatch(r" \(ended \d\d:\d\d:\d\d; 40 items, 80\.0 items/s\)", _progress(app))
    assert re.fullmatch(r" \(ended \d\d:\d\d:\d\d\)", _progress({"status": "passed", "details": {"rows": 3}}))
    run_ = Run(None, None, tmp_path)  # type: ignore[arg-type]
    run_.add(Step("application", Status.PASSED, duration_s=0.5, details=app["details"]))  # type: ignore[arg-type]
    assert "kernodeck: application: ok (0.50s) - 40 items, 80 items/s" in capsys.readouterr().err
