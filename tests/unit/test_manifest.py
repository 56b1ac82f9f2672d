"""The reference manifest (kernodeck/runformat/manifest.py): its identity, its weights pinned, an edit named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck.errors import ManifestError
from kernodeck.project.config import load_project
from kernodeck.runformat import manifest as dossier_manifest
from tests.helpers.project import ROOT, copy_project


def _manifest() -> dict[str, object]:
    return dossier_manifest.load(load_project(ROOT)).manifest


def test_reference_identity_stable_and_sensitive() -> None:
    manifest = _manifest()
    assert dossier_manifest.identity(manifest) == manifest["id"]
    same = json.loads(json.dumps(manifest))
    same["provenance"] = {"commit": "other", "dirty": True}
    assert dossier_manifest.identity(same) == manifest["id"]  # provenance is not content
    for table, key, value in [
        ("outputs.embeddings", "max-abs", 0.5),
        ("outputs.embeddings", "kind", "allclose"),
        ("outputs.embeddings", "justification", "other"),
        ("outputs.embeddings", "ids_sha256", "x"),
        ("outputs.embeddings", "shape", [40, 383]),
        ("data", "sha256", "0" * 64),
        ("weights", "version", "0.1.1"),
        ("application", "params", {"batch-size": 8}),
        ("application", "entry", "checks/other.py:run"),
        ("application", "code", {}),
        ("criterion", "margin", 0.5),
    ]:
        changed = json.loads(json.dumps(manifest))
        target = changed
        for part in table.split("."):
            target = target[part]
        target[key] = value
        assert dossier_manifest.identity(changed) != manifest["id"], f"{table}.{key} must change the id"


@pytest.mark.parametrize("version", ["latest", "", "main", "1.*", "newest"])
def test_floating_weights_refused(version: str) -> None:
    weights = dict(_manifest()["weights"])  # type: ignore[arg-type]
    weights["version"] = version
    with pytest.raises(ManifestError, match=r"version|floating"):
        dossier_manifest.check_weights(weights, "manifest.toml")


def test_weights_without_digest_refused() -> None:
    weights = dict(_manifest()["weights"])  # type: ignore[arg-type]
    weights["files"] = {}
    with pytest.raises(ManifestError, match="no file digests"):
        dossier_manifest.check_weights(weights, "manifest.toml")
    weights["files"] = {"model.safetensors": "abc"}
    with pytest.raises(ManifestError, match="not a sha256"):
        dossier_manifest.check_weights(weights, "manifest.toml")


def test_manifest_edited_or_broken_is_named(tmp_path: Path) -> None:
    project_dir = copy_project(tmp_path / "p")
    path = project_dir / "dossier/reference/manifest.toml"
    text = path.read_text()
    path.write_text(text.replace("max-abs = 0.0001", "max-abs = 0.01"))
    with pytest.raises(ManifestError, match="does not match its content"):
        dossier_manifest.load(load_project(project_dir))
    path.write_text(text.replace("[data]", "[data\n"))
    with pytest.raises(ManifestError, match=r"manifest.toml:\d+: not valid TOML"):
        dossier_manifest.load(load_project(project_dir))
    path.write_text(text.split("[data]")[0])
    with pytest.raises(ManifestError, match="missing"):
        dossier_manifest.load(load_project(project_dir))
