"""The dossier: compare of two runs, replay from a clean clone, dirty trees refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.project import ROOT, copy_project, kd
from tests.helpers.reports import read_report
from tests.helpers.sharedruns import SharedRun


def git_repo(tmp_path: Path, source: Path | None = None) -> Path:
    """A copy of the project (or of ``source``, without its envs) committed in a git repository of its own."""
    if source is None:
        project = copy_project(tmp_path / "repo")
    else:
        project = Path(shutil.copytree(source, tmp_path / "repo", symlinks=True,
                                       ignore=shutil.ignore_patterns(".venv-rebuild", "runs", "__pycache__")))
    (project / ".gitignore").write_text("/.venv-rebuild/\n/runs/\n/.nox/\n__pycache__/\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=project, check=True)
    return project


def test_replay_refuses_a_dirty_tree(tmp_path: Path) -> None:
    project = git_repo(tmp_path)
    with (project / "requirements/base.in").open("a") as handle:
        handle.write("# edited\n")
    proc = kd(project, "replay")
    assert proc.returncode == 2
    assert "ERROR: uncommitted changes in 1 tracked file(s): requirements/base.in" in proc.stderr
    assert "TIP: commit" in proc.stderr


def test_compare_names_differences(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder, platform, status, torch in (
        (a, "cp311-linux_x86_64-cpu", "passed", "2.13.0+cpu"),
        (b, "cp311-linux_x86_64-cu130", "failed", "2.14.1"),
    ):
        folder.mkdir()
        (folder / "report.json").write_text(
            json.dumps({"status": status, "platform": platform, "steps": [{"name": "backend", "status": status}]})
        )
        (folder / "inventory.txt").write_text(f"torch=={torch}\nnumpy==2.4.6\n")
        (folder / "system.json").write_text(json.dumps({"torch_version": torch}))
    proc = kd(ROOT, "compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["platform"]["same"] is False
    assert result["inventory"]["changed"] == {"torch": {"expected": "2.13.0+cpu", "observed": "2.14.1"}}
    assert result["steps"] == {"backend": {"a": "passed", "b": "failed"}}
    assert result["system"]["torch_version"] == {"a": "2.13.0+cpu", "b": "2.14.1"}
    assert result["outputs"]["available"] is False
    assert "torch: 2.13.0+cpu → 2.14.1" in (tmp_path / "cmp" / "compare.md").read_text()


@pytest.mark.slow
def test_compare_two_runs_same_platform_zero_delta(
    concurrent_runs: tuple[SharedRun, SharedRun], tmp_path: Path
) -> None:
    # two passing verifies of one project (the tiny application's) in the same env: the session's shared pair
    # (started at once, which tests/e2e/test_verify_e2e.py asserts both finish); compare only reads their dossiers
    first, second = concurrent_runs
    for run in concurrent_runs:
        assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    a, b = first.out, second.out
    proc = kd(first.project, "compare", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert proc.returncode == 0, proc.stderr
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    outputs = result["outputs"]["per_output"]  # each under its declared kind, in the rebuilt env
    assert result["outputs"]["available"] and set(outputs) == {"logits", "labels"}
    logits, labels = outputs["logits"], outputs["labels"]
    assert logits["kind"] == "allclose" and logits["max_abs"] == 0.0 and logits["values_over"] == 0
    assert logits["passed"] is True and logits["bitwise_equal"] is True
    assert labels["kind"] == "agreement" and labels["equal_share"] == 1.0 and labels["passed"] is True
    assert result["inventory"] == {"added": {}, "removed": {}, "changed": {}} and result["steps"] == {}


@pytest.mark.slow
def test_replay_passes_on_a_clean_commit(tiny_referenced: Path, tmp_path: Path) -> None:
    """The replay reads no package configuration of this machine: the locked torch file (which this machine's pip
    sources hold) comes only from the KERNODECK_INDEX_CPU mirror; without the mirror the same replay fails. The
    replay (a clean clone, its env rebuilt from the lock, verified there) is Kernodeck's, the same for every
    application: the committed project declares the tiny one (a copy of the session's referenced tiny project),
    where MiniLM's model would only add its load and its runs to the replayed verify."""
    from tests.helpers.fresh import LocalIndex, torch_file, uv_cache_dir

    project = git_repo(tmp_path, tiny_referenced)
    mirror = LocalIndex([torch_file(tmp_path)])
    with mirror.serving():  # the replay keeps the caller's uv cache: the suite's, where the mirror's torch is dropped
        proc = kd(project, "replay", "--out", str(tmp_path / "replayed"), timeout=1500,
                  env={**os.environ, "KERNODECK_INDEX_CPU": mirror.url, "UV_CACHE_DIR": str(uv_cache_dir())})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_report(tmp_path / "replayed")["status"] == "passed"
    assert any(r.startswith("/files/torch-") for r in mirror.requests)
    meta = json.loads((tmp_path / "replayed" / "replay.json").read_text())
    assert meta["uncommitted"] == [] and meta["clean_environment"] is True
    assert meta["mirrors"] == ["KERNODECK_INDEX_CPU"]
    assert not (project / ".venv-rebuild").exists()  # everything happened in the clone

    # Negative control: no mirror. This machine's pip configuration holds the file, but the replay does not read it.
    proc = kd(project, "replay", "--out", str(tmp_path / "no-mirror"), timeout=1500)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(tmp_path / "no-mirror")
    assert report["status"] == "failed" and report["first_failure"] == "rebuild"
    rebuild = next(s for s in report["steps"] if s["name"] == "rebuild")  # type: ignore[union-attr]
    assert "torch" in rebuild["error"] and "2.13.0+cpu" in rebuild["error"], rebuild["error"]


@pytest.mark.slow
def test_reference_new_identity_only_when_asked(tiny_referenced: Path, tmp_path: Path) -> None:
    # a reference's identity is Kernodeck's, the same for every application: the tiny one's (its reference made once
    # for the run, tests/helpers/tinyapp.py), where MiniLM's model would only add its load to each of the four runs
    from tests.helpers.tinyapp import copy_referenced

    project = copy_referenced(tiny_referenced, tmp_path)
    manifest = project / "dossier/reference/manifest.toml"
    before = manifest.read_text()
    refused = kd(project, "reference")
    assert refused.returncode == 2 and "a new identity is made only when asked" in refused.stderr
    assert "TIP: nox -s reference -- --new" in refused.stderr and manifest.read_text() == before
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count("min-accuracy = 0.75") == 1
    pyproject.write_text(text.replace("min-accuracy = 0.75", "min-accuracy = 0.7"))
    made = kd(project, "reference", "--new")
    assert made.returncode == 0, made.stderr[-3000:]
    old_id = before.split('id = "', 1)[1].split('"', 1)[0]
    new_text = manifest.read_text()
    new_id = new_text.split('id = "', 1)[1].split('"', 1)[0]
    assert new_id != old_id and f"reference: {old_id} -> {new_id}" in made.stdout
    assert "changed: application: params.min-accuracy" in made.stdout and f'previous_id = "{old_id}"' in new_text
    kept = project / "dossier/reference/history" / old_id.replace(":", "-") / "manifest.toml"
    assert kept.read_text() == before
    again = kd(project, "reference", "--new")
    assert again.returncode == 0 and f"reference unchanged: {new_id}" in again.stdout
    assert kd(project, "verify", "--out", str(tmp_path / "run")).returncode == 0  # the new reference verifies
    # its lineage: made now (UTC), with the lock verify checked, nothing newer in its history
    created = new_text.split('created = "', 1)[1].split('"', 1)[0]
    lineage = json.loads((tmp_path / "run" / "report.json").read_text())["reference_lineage"]
    assert lineage["id"] == new_id and lineage["created"] == created and created.endswith("+00:00")
    assert lineage["differences"] == [] and lineage["previous_id"] == old_id
