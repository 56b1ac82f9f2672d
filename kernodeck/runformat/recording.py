"""A new reference's manifest, built from the declaration and a reference run's outputs: the code fingerprints, the
commit, the weights as the lock pins them, the output shapes (read from the .npy headers) and the flip bound that
refuses a tolerance loose enough to flip a nearest neighbour."""

from __future__ import annotations

import datetime as _dt
import json
import math
import subprocess
from pathlib import Path
from typing import Any

from kernodeck import tips
from kernodeck._fs import sha256_file
from kernodeck.errors import ManifestError
from kernodeck.inenv import kinds
from kernodeck.project import app_contract
from kernodeck.project.app_contract import Application
from kernodeck.project.assets import Source, SourceKind
from kernodeck.project.config import Project
from kernodeck.runformat.manifest import FORMAT, RECORD_FILES, check_weights, identity


def code_fingerprint(project: Project, files: list[str] | tuple[str, ...]) -> dict[str, str]:
    return {rel: sha256_file(project.root / rel) for rel in files}


def git_revision(root: Path) -> dict[str, Any]:
    """The commit the project is at and whether its tree differs from it, said plainly where there is none."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout

    try:
        git("rev-parse", "--git-dir")
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unavailable (not a git checkout)", "dirty": True}
    try:
        commit = git("rev-parse", "--verify", "--quiet", "HEAD").strip()
    except subprocess.CalledProcessError:
        commit = ""
    if not commit:  # `git init` done, nothing committed yet: the files are not at any commit
        return {"commit": "none (a git repository without commits: nothing is committed yet)", "dirty": True}
    return {"commit": commit, "dirty": bool(git("status", "--porcelain").strip())}


def tolerance_bound(max_abs: float, dim: int) -> float:
    """The largest change of a cosine similarity that a per-component deviation of ``max_abs`` can cause."""
    return 2 * math.sqrt(dim) * max_abs


def flip_bound(app: Application, criterion: dict[str, Any], shapes: dict[str, list[int]]) -> dict[str, Any] | None:
    """Where it applies (a criterion judging nearest neighbours of an output whose kind is held to it, ``FLIP_BOUND``:
    cosine, with its smallest margin), refuse a max-abs loose enough to flip a nearest neighbour: its bound on any
    cosine must stay below half that margin."""
    name, margin = criterion.get("neighbours_of"), criterion.get("margin")
    if not name or margin is None or name not in app.outputs or not kinds.flip_bound(app.outputs[name].kind):
        return None
    max_abs = app.outputs[name].tolerance["max-abs"]
    dim = int(math.prod(shapes[name][1:])) if len(shapes[name]) > 1 else 1
    bound = tolerance_bound(max_abs, dim)
    if not (bound < float(margin) / 2):  # a NaN margin (edited in) is refused, never a pass
        raise ManifestError(
            f"declared max-abs {max_abs} of {name} allows cosine changes up to {bound:.3g}, not below half the "
            f"reference's smallest nearest-neighbour margin ({float(margin):.3g}): such a tolerance could flip a "
            "nearest neighbour",
            tip=f"lower max-abs in [tool.kernodeck.application.outputs.{name}], then: {tips.NEW_REFERENCE}",
        )
    return {
        "output": name,
        "rule": "2*sqrt(dim)*max-abs < margin/2: no nearest neighbour can flip inside the tolerance",
        "dim": dim,
        "bound": bound,
        "reference_min_margin": float(margin),
    }


def build_manifest(
    project: Project,
    *,
    outputs: Path,
    criterion: dict[str, Any] | None,
    weights: dict[str, Any] | None,
    platform_id: str,
    lock_digest: str,
    device: str,
    previous: str | None,
    data: dict[str, dict[str, str]] | None = None,
    records: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The new reference's manifest, from the declaration and the reference run's outputs (in ``outputs``).

    ``weights``: {"version", "wheel_sha256", "files"} when the application declares weights in a package, {"files"}
    for the other sources; ``data``: each data source's per-file digests."""
    app = app_contract.load(project.root)
    sample = project.root / app.sample
    # JSON Lines: \n ends a line, never U+2028/U+2029/U+0085 as str.splitlines would (inenv/_common.load_sample)
    items = [json.loads(line) for line in sample.read_text(encoding="utf-8").split("\n") if line.strip()]
    out_records: dict[str, Any] = {}
    shapes: dict[str, list[int]] = {}
    for name, decl in app.outputs.items():
        shapes[name] = npy_shape(outputs / f"{name}.npy")
        out_records[name] = {
            **decl.declared(),
            "file": f"{name}.npy",
            "sha256": sha256_file(outputs / f"{name}.npy"),
            "ids": f"{name}.ids.json",
            "ids_sha256": sha256_file(outputs / f"{name}.ids.json"),
            "shape": shapes[name],
        }
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "application": {
            "entry": str(app.entry),
            "criterion": str(app.criterion) if app.criterion else "",
            "params": app.params,
            "code": code_fingerprint(project, app.sources),
        },
        "data": {"sample": app.sample, "sha256": sha256_file(sample), "items": len(items)},
    }
    if app.weights is not None:
        if weights is None:
            raise ManifestError(f"the reference run recorded no weights for {app.weights.role}")
        manifest["weights"] = {**app.weights.as_config(), **weights}
        if app.weights.kind is not SourceKind.PACKAGE:
            manifest["weights"].update(source_record(app.weights))
        check_weights(manifest["weights"], "the new reference")
    if app.data:
        prints = (data or {})
        manifest["data"]["sources"] = {
            name: {**src.as_config(), **source_record(src), "files": prints.get(name, {})}
            for name, src in sorted(app.data.items())
        }
        for name, rec in manifest["data"]["sources"].items():
            check_weights(rec, f"the new reference's data {name}")
    manifest["outputs"] = out_records
    if criterion is not None:
        record: dict[str, Any] = {
            "summary": str(criterion.get("summary", "")),
            "margin": criterion.get("margin") if criterion.get("margin") is not None else "none",
        }
        bound = flip_bound(app, criterion, shapes)
        if bound is not None:
            record["flip_bound"] = bound
        manifest["criterion"] = record
    # the records' files and sha256 (manifest.RECORDS), as install writes them: inside the id
    manifest["environment"] = {"platform": platform_id, "lock_digest": lock_digest, "device": device,
                               **{name: RECORD_FILES[name] for name in ("inventory", "system", *(records or {}))},
                               **{f"{name}_sha256": digest for name, digest in (records or {}).items()}}
    # when it was made (UTC): the lineage a verify shows, and how a rollback to an older reference is seen
    created = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    manifest["provenance"] = {**git_revision(project.root), "previous_id": previous or "", "created": created}
    manifest["id"] = identity(manifest)
    return manifest


def npy_shape(path: Path) -> list[int]:
    """The shape in a .npy header (read without numpy, which the orchestrator does not have)."""
    import ast

    raw = path.read_bytes()[:4096]
    if raw[:6] != b"\x93NUMPY":
        raise ManifestError(f"{path.name} is not a .npy file")
    size = 2 if raw[6] == 1 else 4
    length = int.from_bytes(raw[8 : 8 + size], "little")
    header = ast.literal_eval(raw[8 + size : 8 + size + length].decode("latin1"))
    return [int(n) for n in header["shape"]]


def source_record(src: Source) -> dict[str, Any]:
    """What the manifest says of a source beyond its declaration: where it comes from (nothing secret), the command
    that fetches it, and who may read it (the variable's NAME, never its value)."""
    record: dict[str, Any] = {"provenance": src.provenance(), "fetch": src.fetch_command()}
    access = src.access()
    if access is not None:
        record["access"] = access
    return record
