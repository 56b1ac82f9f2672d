"""What export builds a container from: the base image (pinned by digest, or a floating tag said to be one) and the
hash-pinned tools file (refused when it does not pin the run group as pyproject.toml does)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernodeck.dossier import baseimage, export, toolpins
from kernodeck.errors import ConfigError
from kernodeck.inenv import system
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.project import ROOT, copy_project, kd

DIGEST = "sha256:" + "0123456789abcdef" * 4
PLATFORM = "cp311-linux_x86_64-cpu"


def _project(tmp_path: Path, image: str | None = None) -> Path:
    root = copy_project(tmp_path / "project")
    shutil.copytree(ROOT / ".github" / "requirements", root / ".github" / "requirements")
    if image is not None:
        pyproject = root / "pyproject.toml"
        text = pyproject.read_text(encoding="utf-8")
        entry = 'os-arch = "linux_x86_64"\nvariant = "cpu"\n'
        assert entry in text
        pyproject.write_text(text.replace(entry, entry + f'image = "{image}"\n', 1), encoding="utf-8")
    return root


def test_a_declared_digest_is_written_pinned_and_carried_into_the_container(tmp_path: Path) -> None:
    root = _project(tmp_path, f"python:3.11-slim@{DIGEST}")
    project = load_project(root)
    text = export.dockerfile(project, resolve_platform(project, PLATFORM), "runs/x/kernodeck-tools.txt")
    assert f"FROM python:3.11-slim@{DIGEST}\n" in text
    assert "# base image pinned by digest ([[tool.kernodeck.platforms]] image)" in text and "floating" not in text
    assert f'KERNODECK_BASE_IMAGE="python:3.11-slim@{DIGEST}"' in text
    assert not [line for line in text.splitlines() if line.startswith("FROM") and "--platform" in line], \
        "the target platform is chosen at build time"
    definition = export.apptainer(project, resolve_platform(project, PLATFORM), "/x/kernodeck-tools.txt")
    assert f"From: python:3.11-slim@{DIGEST}\n" in definition and f"KERNODECK_BASE_IMAGE=python:3.11-slim@{DIGEST}" \
        in definition


def test_base_image_option_beats_the_declaration_and_a_tag_is_said_to_float(tmp_path: Path) -> None:
    root = _project(tmp_path, f"python:3.11-slim@{DIGEST}")
    proc = kd(root, "export", "--out", "runs/e", "--base-image", f"registry.example:5000/py:3.11@{DIGEST}")
    assert proc.returncode == 0, proc.stderr
    text = (root / "runs" / "e" / "Dockerfile").read_text(encoding="utf-8")
    assert f"FROM registry.example:5000/py:3.11@{DIGEST}\n" in text and "(--base-image)" in text
    proc = kd(root, "export", "--out", "runs/f", "--base-image", "python:3.11-slim")
    assert proc.returncode == 0, proc.stderr
    assert "# base image: python:3.11-slim is a floating tag (--base-image)" in (root / "runs/f/Dockerfile").read_text(
        encoding="utf-8")


def test_a_malformed_image_is_refused(tmp_path: Path) -> None:
    root = _project(tmp_path)
    proc = kd(root, "export", "--out", "runs/e", "--base-image", "python:3.11-slim@sha256:abc")
    assert proc.returncode == 2 and "ERROR: --base-image 'python:3.11-slim@sha256:abc' is not an image" in proc.stderr
    assert "TIP:" in proc.stderr and not (root / "runs" / "e" / "Dockerfile").exists()
    with pytest.raises(ConfigError, match=r"platforms\[0\]\.image = \"python 3\.11\": expected a container image"):
        load_project(_project(tmp_path / "declared", "python 3.11"))


def test_tools_file_must_pin_the_run_group_with_hashes(tmp_path: Path) -> None:
    root = _project(tmp_path)
    project = load_project(root)
    assert toolpins.vendored(project) and toolpins.run_group(project)[0] == "run"
    good = toolpins.hashed_file(project)
    hashed = root / ".github" / "requirements" / "run.txt"
    for broken, reason in ((good.replace("uv==0.13.9", "uv==0.13.8"), "uv==0.13.9: the file pins 0.13.8"),
                           (good.replace("tomlkit==", "tomlkitx=="), "tomlkit==0.15.2: missing"),
                           (good + "extra==1.0\n", "extra has no hash"),
                           (good + "-e .\n", "not a NAME==VERSION pin")):
        hashed.write_text(broken, encoding="utf-8")
        with pytest.raises(ConfigError, match=reason) as caught:
            toolpins.hashed_file(project)
        assert caught.value.tip.startswith("python -m hashin -r .github/requirements/run.txt packaging==26.4")
    hashed.unlink()
    proc = kd(root, "export", "--out", "runs/e")
    assert proc.returncode == 2 and "ERROR: no .github/requirements/run.txt" in proc.stderr, proc.stderr
    assert ("TIP: mkdir -p .github/requirements && touch .github/requirements/run.txt && python -m hashin -r "
            ".github/requirements/run.txt packaging==26.4") in proc.stderr
    assert not (root / "runs" / "e" / "Dockerfile").exists()


def test_a_project_without_kernodeck_vendored_must_pin_kernodeck_too(tmp_path: Path) -> None:
    root = _project(tmp_path)
    shutil.rmtree(root / "kernodeck")
    with pytest.raises(ConfigError, match=r"kernodeck==[^:]+: missing"):
        toolpins.hashed_file(load_project(root))


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
