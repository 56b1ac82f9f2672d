"""Unit tests for the orchestrator's pieces (no subprocess, no index)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernodeck.env import inventory
from kernodeck.errors import ManifestError, UnknownVariant
from kernodeck.inenv.protocol import Status
from kernodeck.project.config import Backend, load_project
from kernodeck.project.platforms import os_arch_from_tag, parse_platform_id, resolve_platform
from kernodeck.runformat import manifest as dossier_manifest
from kernodeck.runformat import recording
from kernodeck.runformat import review as dossier_review
from kernodeck.sources import Source, redact_text, redact_url, strip_credentials, uv_environment
from kernodeck.verify.markdown import render_markdown
from kernodeck.verify.record import Step, overall
from kernodeck.verify.report import Report
from tests.conftest import ROOT, copy_project


@pytest.mark.parametrize("status", list(Status))
def test_overall_each_status(status: Status) -> None:
    steps = [Step("a", Status.PASSED), Step("b", status, reason="r")]
    expected = Status.FAILED if status in (Status.FAILED, Status.NOT_RUN) else Status.PASSED
    assert overall(steps) is expected


def test_overall_empty_is_failed() -> None:
    assert overall([]) is Status.FAILED


def test_report_roundtrip_and_first_failure(tmp_path: Path) -> None:
    steps = [
        Step("lock-check", Status.PASSED),
        Step(
            "compare", Status.FAILED, error="boom", layer="comparison", command="python x", interpreter="/e/bin/python"
        ),
        Step("criterion", Status.NOT_RUN, reason="earlier"),
    ]
    report = Report("cp311-linux_x86_64-cpu", steps, {"reference_id": "sha256:1"})
    report.write(tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["status"] == "failed" and data["first_failure"] == "compare"
    assert [Step.from_dict(s).status for s in data["steps"]] == [Status.PASSED, Status.FAILED, Status.NOT_RUN]
    md = render_markdown(report)
    assert "First failure" in md and "boom" in md and "comparison" in md


def test_inventory_diff_and_markers() -> None:
    observed = inventory.parse_freeze("numpy==2.0\ntorch==2.13.0+cpu\nextra==1\nlocal @ file:///x\n")
    delta = inventory.diff({"numpy": "2.0", "torch": "2.14.1", "gone": "1"}, observed)
    assert delta.changed == {"torch": ("2.14.1", "2.13.0+cpu")}
    assert set(delta.added) == {"extra", "local"} and delta.removed == {"gone": "1"}
    assert not delta.empty and "torch 2.14.1 -> 2.13.0+cpu" in delta.summary()
    assert inventory.diff({"a": "1"}, {"a": "1"}).empty


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("manylinux_2_36_x86_64", "linux_x86_64"),
        ("manylinux2014_aarch64", "linux_aarch64"),
        ("macosx_14_0_arm64", "macosx_arm64"),
        ("win_amd64", "win_amd64"),
        ("linux_x86_64", "linux_x86_64"),
    ],
)
def test_os_arch_from_tag(tag: str, expected: str) -> None:
    assert os_arch_from_tag(tag) == expected


def test_platform_ids_and_unknown_variant() -> None:
    project = load_project(ROOT)
    plat = parse_platform_id(project, "cp311-macosx_arm64-mps")
    assert (plat.python, plat.os_arch, plat.variant.backend) == ("3.11", "macosx_arm64", Backend.MPS)
    assert plat.lock_name == "cp311-macosx_arm64-mps.txt"
    with pytest.raises(UnknownVariant) as err:
        resolve_platform(project, variant="tpu")
    assert "cpu" in str(err.value) and "cu130" in str(err.value) and "rocm64" in str(err.value)


def test_every_backend_member_has_a_variant_or_is_declared() -> None:
    project = load_project(ROOT)
    assert {v.backend for v in project.variants.values()} == set(Backend)


def test_redaction() -> None:
    assert redact_url("https://user:s3cret@host/simple") == "https://***@host/simple"
    assert redact_url("file:///opt/pypi/simple") == "<local>"
    assert "s3cret" not in redact_text("ERROR: cannot reach https://u:s3cret@h/x and http://tok@h2/y")
    assert Source("find-links", "/opt/wheels").redacted() == "find-links <local path>"
    assert strip_credentials("https://u:s3cret@h/whl/cpu/t.whl") == "https://h/whl/cpu/t.whl"
    assert strip_credentials("https://h/x") == "https://h/x"


def test_uv_environment_maps_pip_sources() -> None:
    env = uv_environment(
        [Source("find-links", "/w"), Source("extra-index-url", "file:///a"), Source("index-url", "https://i/simple")]
    )
    assert (
        env["UV_FIND_LINKS"] == "/w"
        and env["UV_INDEX"] == "file:///a"
        and env["UV_DEFAULT_INDEX"] == "https://i/simple"
    )
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"
    assert uv_environment([]) == {}


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


def test_tolerance_bound_refuses_loose_tolerance() -> None:
    assert recording.tolerance_bound(1e-4, 384) == pytest.approx(2 * 384**0.5 * 1e-4)


def test_reviewer_strips_paths_and_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "https://bob:hunter2@private.example/simple")
    review = dossier_review.reviewer(tmp_path)
    text = review(f"ran in {tmp_path}/x with https://bob:hunter2@private.example/simple and token hunter2")
    assert "hunter2" not in text and str(tmp_path) not in text and "<project>/x" in text


def test_swap_into_place_keeps_old_on_failure(tmp_path: Path) -> None:
    from kernodeck import outdir

    out = tmp_path / "out"
    out.mkdir()
    (out / "report.json").write_text("old")
    outdir.mark(out, "dossier")  # Kernodeck's own folder: the only kind a swap replaces
    staging = tmp_path / ".out.staging"
    staging.mkdir()
    (staging / "report.json").write_text("new")
    outdir.mark(staging, "dossier")
    outdir.swap_into_place(staging, out)
    assert (out / "report.json").read_text() == "new" and not staging.exists()
    with pytest.raises(OSError):
        outdir.swap_into_place(tmp_path / "missing-staging", out)
    assert (out / "report.json").read_text() == "new"  # the earlier dossier is back in place
