"""The base image export builds from (kernodeck/dossier/baseimage.py): pinned by digest, or a floating tag said to be
one; a malformed one refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernodeck.dossier import export
from kernodeck.errors import ConfigError
from kernodeck.project.config import load_project
from kernodeck.project.platforms import resolve_platform
from tests.helpers.containers import DIGEST, export_project
from tests.helpers.project import kd

PLATFORM = "cp311-linux_x86_64-cpu"


def test_a_declared_digest_is_written_pinned_and_carried_into_the_container(tmp_path: Path) -> None:
    root = export_project(tmp_path, f"python:3.11-slim@{DIGEST}")
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
    root = export_project(tmp_path, f"python:3.11-slim@{DIGEST}")
    proc = kd(root, "export", "--out", "runs/e", "--base-image", f"registry.example:5000/py:3.11@{DIGEST}")
    assert proc.returncode == 0, proc.stderr
    text = (root / "runs" / "e" / "Dockerfile").read_text(encoding="utf-8")
    assert f"FROM registry.example:5000/py:3.11@{DIGEST}\n" in text and "(--base-image)" in text
    proc = kd(root, "export", "--out", "runs/f", "--base-image", "python:3.11-slim")
    assert proc.returncode == 0, proc.stderr
    assert "# base image: python:3.11-slim is a floating tag (--base-image)" in (root / "runs/f/Dockerfile").read_text(
        encoding="utf-8")


def test_a_malformed_image_is_refused(tmp_path: Path) -> None:
    root = export_project(tmp_path)
    proc = kd(root, "export", "--out", "runs/e", "--base-image", "python:3.11-slim@sha256:abc")
    assert proc.returncode == 2 and "ERROR: --base-image 'python:3.11-slim@sha256:abc' is not an image" in proc.stderr
    assert "TIP:" in proc.stderr and not (root / "runs" / "e" / "Dockerfile").exists()
    with pytest.raises(ConfigError, match=r"platforms\[0\]\.image = \"python 3\.11\": expected a container image"):
        load_project(export_project(tmp_path / "declared", "python 3.11"))
