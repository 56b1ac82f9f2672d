"""The content-addressed reference: what must be reproduced, declared before any comparison.

``dossier/reference/manifest.toml`` (written with tomlkit) is generic over the declared application: the entry and
criterion, the code files' fingerprints, the parameters, the sample's fingerprint, the weights (exact version, wheel
hashes, file digests) when declared, each output with its kind, dtype, tolerance, justification, shape and file
digests, the criterion's result on the reference, and the environment the outputs came from. Its id is the digest of
all of that except ``[provenance]`` (commit, dirty flag, previous id): committing the reference changes the commit,
and must not change what the reference IS.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from kernodeck import dossier, outdir
from kernodeck import lock as locking
from kernodeck._fs import sha256_file, sha256_text, write_atomic
from kernodeck._proc import log
from kernodeck.errors import KernodeckError, ManifestError
from kernodeck.lock import lockfile
from kernodeck.project import application
from kernodeck.project.application import Application, Kind
from kernodeck.project.config import Project
from kernodeck.project.platforms import Platform
from kernodeck.verify.report import Report, Status, Step

FORMAT = 2
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

    def run_config(self, project: Project, declared: Application | None = None) -> dict[str, Any]:
        """What the in-env steps need from the reference (paths relative to the project root).

        ``reference.code``: the fingerprint each declared code file must have (:func:`code_expected`);
        ``criterion.margin``: the reference's recorded margin (the flip bound is derived again in the env from it).
        """
        app = self.manifest["application"]
        weights = self.manifest.get("weights")
        outputs = self.manifest["outputs"]
        margin = (self.manifest.get("criterion") or {}).get("margin")
        numeric = isinstance(margin, int | float) and not isinstance(margin, bool)
        return {
            "criterion": {"margin": margin if numeric else None},
            "application": {
                "entry": _target(app["entry"]),
                "criterion": _target(app["criterion"]) if app.get("criterion") else None,
                "sample": self.manifest["data"]["sample"],
                "sample_sha256": self.manifest["data"]["sha256"],
                "params": app.get("params", {}),
                "weights": {k: weights[k] for k in ("package", "module", "subdir", "files")} if weights else None,
                "outputs": {name: _declared(rec) for name, rec in outputs.items()},
            },
            "reference": {
                "dir": os.path.relpath(self.folder, project.root),
                "code": code_expected(self.manifest, declared),
                "outputs": {
                    name: {k: rec[k] for k in ("file", "sha256", "ids", "ids_sha256", "shape")}
                    for name, rec in outputs.items()
                },
            },
        }


def code_expected(manifest: dict[str, Any], declared: Application | None) -> dict[str, str]:
    """Each code file and the sha256 it must have: the reference's fingerprints, and "" (matches no file) for a file
    declared now (entry, criterion, ``code``) that the reference did not fingerprint."""
    recorded = manifest["application"].get("code") or {}
    expected = {str(f): str(d) for f, d in recorded.items()} if isinstance(recorded, dict) else {}
    for rel in declared.code if declared is not None else ():
        expected.setdefault(rel, "")
    return expected


def _target(text: str) -> dict[str, str]:
    file, _, function = text.partition(":")
    return {"file": file, "function": function}


_OUTPUT_FILES = ("file", "sha256", "ids", "ids_sha256", "shape")


def _declared(record: dict[str, Any]) -> dict[str, Any]:
    """An output's declaration as the manifest recorded it (kind, dtype, tolerance, justification)."""
    return {k: v for k, v in record.items() if k not in _OUTPUT_FILES}


def table_differences(declared: dict[str, Any], recorded: dict[str, Any], derived: frozenset[str]) -> list[str]:
    """Where a recorded copy differs from its declaration: ``key: recorded -> declared``, generic over the keys.

    Keys compare with ``-`` and ``_`` as one (pyproject spells ``cosine-min``, the manifest ``cosine_min``); keys in
    ``derived`` are written by Kernodeck from the others (a justification) and are not part of the declaration.
    """
    want = {k.replace("-", "_"): v for k, v in declared.items()}
    have = {k.replace("-", "_"): v for k, v in recorded.items() if k.replace("-", "_") not in derived}
    return [
        f"{k}: {have.get(k, '(missing)')!r} -> declared {want.get(k, '(not declared)')!r}"
        for k in sorted(set(want) | set(have))
        if want.get(k) != have.get(k)
    ]


def declaration_differences(manifest: dict[str, Any], app: Application) -> list[str]:
    """Where the reference's recorded copy differs from what pyproject declares now (the declaration: the contract)."""
    recorded = {name: _declared(rec) for name, rec in manifest["outputs"].items()}
    out = []
    for name in sorted(set(recorded) | set(app.outputs)):
        if name not in recorded or name not in app.outputs:
            out.append(f"output {name}: {'not in the reference' if name not in recorded else 'no longer declared'}")
            continue
        found = table_differences(app.outputs[name].declared(), recorded[name], frozenset())
        out += [f"outputs.{name}.{d}" for d in found]
    declared_app = {
        "entry": str(app.entry),
        "criterion": str(app.criterion) if app.criterion else "",
        "params": app.params,
    }
    rec_app = {k: v for k, v in manifest["application"].items() if k != "code"}
    out += [f"application.{d}" for d in table_differences(declared_app, rec_app, frozenset())]
    found = table_differences({"sample": app.sample}, {"sample": manifest["data"]["sample"]}, frozenset())
    out += [f"data.{d}" for d in found]
    return out


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
    if manifest.get("format") != FORMAT:
        raise ManifestError(f"{where}: format {manifest.get('format')!r}, this Kernodeck reads format {FORMAT}")
    for table in ("application", "data", "outputs", "environment"):
        if not isinstance(manifest.get(table), dict):
            raise ManifestError(f"{where}: missing [{table}] table (truncated?)")
    for name, rec in manifest["outputs"].items():
        missing = [k for k in (*_OUTPUT_FILES, "kind", "dtype") if k not in rec]
        if missing:
            raise ManifestError(f"{where}: [outputs.{name}] lacks {', '.join(missing)} (truncated?)")
    if "weights" in manifest:
        check_weights(manifest["weights"], where)
    recorded, actual = manifest.get("id"), identity(manifest)
    if recorded != actual:
        raise ManifestError(f"{where}: recorded id {recorded} does not match its content ({actual}): edited by hand?")
    # The sample and the expected outputs are checked against these fingerprints INSIDE the env, by the data-loading
    # and reference steps, so that a failure there is attributed to its layer.
    return Reference(folder, manifest)


def recorded_id(project: Project) -> str | None:
    """The id a manifest records, even one this version cannot use (an older format): the new one's previous id."""
    try:
        value = tomllib.loads((project.reference / "manifest.toml").read_text(encoding="utf-8")).get("id")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    return value if isinstance(value, str) else None


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
    """Where it applies (a criterion judging nearest neighbours of a cosine output, with its smallest margin), refuse
    a max-abs loose enough to flip a nearest neighbour: its bound on any cosine must stay below half that margin."""
    name, margin = criterion.get("neighbours_of"), criterion.get("margin")
    if not name or margin is None or name not in app.outputs or app.outputs[name].kind is not Kind.COSINE:
        return None
    max_abs = app.outputs[name].tolerance["max-abs"]
    dim = int(math.prod(shapes[name][1:])) if len(shapes[name]) > 1 else 1
    bound = tolerance_bound(max_abs, dim)
    if not (bound < float(margin) / 2):  # a NaN margin (edited in) is refused, never a pass
        raise ManifestError(
            f"declared max-abs {max_abs} of {name} allows cosine changes up to {bound:.3g}, not below half the "
            f"reference's smallest nearest-neighbour margin ({float(margin):.3g}): such a tolerance could flip a "
            "nearest neighbour",
            tip=f"lower max-abs in [tool.kernodeck.application.outputs.{name}], then: nox -s reference -- --new",
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
) -> dict[str, Any]:
    """The new reference's manifest, from the declaration and the reference run's outputs (in ``outputs``).

    ``weights``: {"version", "wheel_sha256", "files"} when the application declares weights."""
    app = application.load(project.root)
    sample = project.root / app.sample
    items = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines() if line.strip()]
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
            "code": code_fingerprint(project, app.code),
        },
        "data": {"sample": app.sample, "sha256": sha256_file(sample), "items": len(items)},
    }
    if app.weights is not None:
        if weights is None:
            raise ManifestError(f"the reference run recorded no weights for {app.weights.package}")
        manifest["weights"] = {
            **app.weights.as_config(),
            "version": weights["version"],
            "wheel_sha256": weights["wheel_sha256"],
            "files": weights["files"],
        }
        check_weights(manifest["weights"], "the new reference")
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
    manifest["environment"] = {
        "platform": platform_id,
        "lock_digest": lock_digest,
        "device": device,
        "inventory": "inventory.txt",
        "system": "system.json",
    }
    manifest["provenance"] = {**git_revision(project.root), "previous_id": previous or ""}
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
    """What differs between two manifests, by section: ``application: params.batch-size, code`` (leaf paths)."""
    out = []
    for key in sorted(set(old) | set(new)):
        if key in ("id", "provenance") or old.get(key) == new.get(key):
            continue
        sub_old, sub_new = old.get(key), new.get(key)
        if isinstance(sub_old, dict) and isinstance(sub_new, dict):
            out.append(f"{key}: {', '.join(_leaf_changes(sub_old, sub_new))}")
        else:
            out.append(key)
    return out


def _leaf_changes(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    found: list[str] = []
    for k in sorted(set(old) | set(new)):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            found.extend(_leaf_changes(a, b, f"{prefix}{k}."))
        else:
            found.append(f"{prefix}{k}")
    return found


GENERATED = ("manifest.toml", "inventory.txt", "system.json")


def _output_files(manifest: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(file, its sha256 in the manifest) for each expected output and its ids (format 1: embeddings and ids)."""
    raw = manifest.get("outputs")
    outputs: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if manifest.get("format") == 1:
        return [(str(outputs.get(k, f"{k}?")), outputs.get(f"{k}_sha256")) for k in ("embeddings", "ids")]
    files: list[tuple[str, str | None]] = []
    for rec in outputs.values():
        if isinstance(rec, dict):
            files += [(str(rec.get("file", "?")), rec.get("sha256")), (str(rec.get("ids", "?")), rec.get("ids_sha256"))]
    return files


def generated_files(folder: Path) -> tuple[str, ...]:
    """The files of the reference in ``folder`` that Kernodeck wrote: its manifest's, and the fixed ones."""
    try:
        manifest = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        manifest = {}
    names = [*GENERATED, "embeddings.npy", "ids.json"] if not manifest else [*GENERATED]
    names += [name for name, _ in _output_files(manifest)]
    return tuple(dict.fromkeys(n for n in names if n and "/" not in n))


def inconsistency(folder: Path) -> str:
    """Why ``folder``'s files do not match its own manifest ('' when they do): what a history entry must satisfy."""
    try:
        manifest = tomllib.loads((folder / "manifest.toml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return f"manifest.toml unreadable ({exc})"
    if manifest.get("id") != identity(manifest):
        return "manifest.toml's id does not match its content"
    files = _output_files(manifest)
    if not files:
        return "the manifest names no outputs"
    for name, digest in files:
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if sha256_file(path) != digest:
            return f"{name} does not match the manifest's digest"
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
    generated = generated_files(folder)  # what the previous reference's manifest names (Kernodeck wrote them)
    # no marker, no guard: the reference is the project's folder; its other files are carried over just below
    stage = outdir.Staged.begin(folder, kind="")
    staging = stage.path
    try:
        if folder.is_dir():
            shutil.copytree(
                folder,
                staging,
                dirs_exist_ok=True,
                ignore=lambda where, names: [n for n in names if n in generated] if Path(where) == folder else [],
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
                for name in generated:
                    if (folder / name).exists():
                        shutil.copy2(folder / name, keep / name)
        for rec in manifest["outputs"].values():
            write_atomic(staging / rec["file"], (outputs / rec["file"]).read_bytes())
            write_atomic(staging / rec["ids"], (outputs / rec["ids"]).read_text(encoding="utf-8"))
        write_atomic(staging / "inventory.txt", inventory)
        write_atomic(staging / "system.json", json.dumps(system, indent=2, default=str) + "\n")
        write_atomic(staging / "manifest.toml", render(manifest))
        if review is not None:
            review(staging)
        stage.commit()
    except BaseException:
        stage.abandon()
        raise


def current(project: Project, *, new: bool) -> Reference | None:
    """The reference a new one would replace: none, or an unusable one (logged), or, only when asked (``new``), the
    current one; making a new identity is never implicit."""
    if not (project.reference / "manifest.toml").exists():
        return None
    try:
        old = load(project)
    except ManifestError as exc:
        log(f"kernodeck: the current reference is unusable ({exc}); a new one replaces it")
        return None
    if not new:
        raise ManifestError(f"a reference exists ({old.id}); a new identity is made only when asked",
                            tip="nox -s reference -- --new")
    return old


@dataclass(frozen=True)
class Created:
    """What ``create`` did: ``changes`` is empty for a first reference; ``unchanged`` when nothing was written."""

    new_id: str
    old_id: str | None
    unchanged: bool
    changes: tuple[str, ...]

    def lines(self) -> list[str]:
        """What ``reference`` prints: the identity made (or kept) and what changed from the previous one."""
        if self.unchanged:
            return [f"reference unchanged: {self.new_id} (same content; nothing written)"]
        if self.old_id is not None:
            return [f"reference: {self.old_id} -> {self.new_id}", *(f"  changed: {c}" for c in self.changes)]
        return [f"reference: new {self.new_id}"]


def _weights_record(
    project: Project, plat: Platform, app: Application, steps: dict[str, Step]
) -> dict[str, Any] | None:
    """The declared weights as the lock pins them (exact version, wheel hashes) and as the run fingerprinted them."""
    if app.weights is None:
        return None
    lock = lockfile.read(locking.lock_path(project, plat))
    pin = next((p for p in lock.pins if p.name == canonicalize_name(app.weights.package)), None)
    if pin is None:
        raise ManifestError(f"the lock does not pin {app.weights.package}: weights need an exact version and hash")
    return {"version": pin.version, "wheel_sha256": list(pin.hashes),
            "files": steps["application"].details.get("weights_fingerprint", {})}


def create(project: Project, plat: Platform, report: Report, folder: Path, old: Reference | None) -> Created:
    """The new reference from a reference-mode run (``report``, its dossier ``folder``), written whole by ``install``
    when its identity differs from ``old``'s; a failed run writes nothing."""
    if report.status is not Status.PASSED:
        failure = report.first_failure()
        tip = failure.details.get("tip") if failure is not None else None
        raise KernodeckError(
            "the reference run failed"
            + (f" at {failure.name}: {' '.join(failure.error.split())}" if failure is not None else "")
            + "; nothing was written to the reference",
            tip=tip if isinstance(tip, str) and tip else f"read {folder / 'report.md'}")
    steps = {s.name: s for s in report.steps}
    app = application.load(project.root)
    weights = _weights_record(project, plat, app, steps)
    criterion = steps["criterion"].details if "criterion" in steps and steps["criterion"].details else None
    manifest = build_manifest(
        project, outputs=folder / "outputs", criterion=criterion, weights=weights, platform_id=plat.id,
        lock_digest="sha256:" + sha256_file(locking.lock_path(project, plat)),
        device=str(steps["backend"].details.get("device", "cpu")),
        previous=old.id if old else recorded_id(project))
    if old is not None and old.id == manifest["id"]:
        return Created(new_id=old.id, old_id=old.id, unchanged=True, changes=())
    system = json.loads((folder / "system.json").read_text(encoding="utf-8"))
    inventory_text = (folder / "inventory.txt").read_text(encoding="utf-8")
    install(project, manifest, folder / "outputs", inventory_text, system,
            review=lambda staged: dossier.review_folder(staged, project.root))
    return Created(new_id=manifest["id"], old_id=old.id if old else None, unchanged=False,
                   changes=tuple(changes(old.manifest, manifest)) if old is not None else ())
